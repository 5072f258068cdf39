"""BuildKit's cache records read from `docker buildx du --format json` (builder/records.py) and pruned by id. The
lines are buildx 0.29.1's, copied from this project's engine; the expected values are written out by hand."""

from __future__ import annotations

import datetime as dt

from ascend_images.builder import records

LINES = "\n".join([
    '{"CreatedAt":"2026-12-05 23:05:47.056768961 +0000 UTC","Description":"local source for artifacts",'
    '"ID":"0pdt9dw14ibcsh4j2y88qjo9e","LastUsedAt":"15 minutes ago","Mutable":true,"Parents":null,'
    '"Reclaimable":true,"Shared":false,"Size":"4.096kB","Type":"source.local","UsageCount":3}',
    '{"CreatedAt":"2026-12-05 23:46:36.094256096 +0000 UTC","Description":"[stage-3 7/8] COPY",'
    '"ID":"kj44li3q884va8ovoh1ksfqoq","LastUsedAt":"1 second ago","Mutable":false,'
    '"Parents":["z5kb70992q6p1k9z1wh1mawr5"],"Reclaimable":true,"Shared":false,"Size":"34.8kB","Type":"regular",'
    '"UsageCount":1}',
    '{"CreatedAt":"2026-12-05 23:46:36.063694617 +0000 UTC","Description":"mount / from exec",'
    '"ID":"z5kb70992q6p1k9z1wh1mawr5","LastUsedAt":"1 second ago","Mutable":false,"Parents":null,'
    '"Reclaimable":true,"Shared":false,"Size":"2.317MB","Type":"regular","UsageCount":1}',
    '{"CreatedAt":"2026-12-05 23:47:00.5 +0000 UTC","Description":"cached mount /root/.cache",'
    '"ID":"pbqqxcfmto98fhh18waf3gn8f","LastUsedAt":"now","Mutable":true,"Parents":null,"Reclaimable":true,'
    '"Shared":false,"Size":"1GB","Type":"exec.cachemount","UsageCount":4}',
    "",
])


def test_records_are_read_with_their_time_to_the_microsecond():
    seen = []
    found = records.cache_records(lambda argv: seen.append(list(argv)) or LINES)
    assert seen == [["du", "--format", "json"]]
    assert [(r.id, r.type, r.parents) for r in found] == [
        ("0pdt9dw14ibcsh4j2y88qjo9e", "source.local", ()),
        ("kj44li3q884va8ovoh1ksfqoq", "regular", ("z5kb70992q6p1k9z1wh1mawr5",)),
        ("z5kb70992q6p1k9z1wh1mawr5", "regular", ()),
        ("pbqqxcfmto98fhh18waf3gn8f", "exec.cachemount", ())]
    assert found[0].created == dt.datetime(2026, 12, 5, 23, 5, 47, 56768, tzinfo=dt.UTC)
    assert found[3].created == dt.datetime(2026, 12, 5, 23, 47, 0, 500000, tzinfo=dt.UTC)


def test_what_was_made_since_is_pruned_children_first_and_cache_mounts_kept():
    found = records.cache_records(lambda argv: LINES)
    since = dt.datetime(2026, 12, 5, 23, 46, tzinfo=dt.UTC)
    chosen = records.made_since(found, since)
    assert [r.id for r in chosen] == ["kj44li3q884va8ovoh1ksfqoq", "z5kb70992q6p1k9z1wh1mawr5"]
    seen = []
    records.prune(chosen, lambda argv: seen.append(list(argv)) or "")
    assert seen == [["prune", "--force", "--filter", "id=kj44li3q884va8ovoh1ksfqoq"],
                    ["prune", "--force", "--filter", "id=z5kb70992q6p1k9z1wh1mawr5"]]
