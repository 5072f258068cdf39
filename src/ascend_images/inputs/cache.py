"""`invoke fetch`: download every file a selection needs into a local cache, verified.

A sha256 that upstream publishes (matrix.yaml, a backend lock, --checksums) is enforced. For files
with none (Huawei's CANN packages, GitHub release zips), the first download is trusted and its sha256
recorded in the checksums file beside matrix.yaml (reviewable in a diff, committed, used by CI); any
later download or cached copy that differs is refused with both hashes.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TextIO

from ascend_images.errors import SelectionError
from ascend_images.inputs.artifacts import Wanted, variant_wanted
from ascend_images.inputs.checksums import checksums_path, record_checksum, recorded_checksums
from ascend_images.inputs.download import DownloadError, Policy, Request, commit, fetch_file, sha256_file
from ascend_images.matrix.model import Matrix, Variant

Out = Callable[[str], None]


def default_cache() -> Path:
    override = os.environ.get("ASCEND_IMAGES_CACHE")
    return Path(override) if override else Path.home() / ".cache" / "ascend-images" / "downloads"


@dataclass
class FetchResult:
    file: str
    path: Path
    sha256: str
    status: str  # cached | downloaded | trusted-on-first-use


def wanted_for(variants: list[Variant], cann: bool = True) -> list[Wanted]:
    seen: dict[str, Wanted] = {}
    for v in variants:
        for w in variant_wanted(v, cann=cann):
            seen.setdefault(w.file, w)
    return list(seen.values())


def fetch_all(matrix: Matrix, wanted: list[Wanted], cache: Path, out: Out, *, checksums: dict[str, str] | None = None,
              policy: Policy | None = None, stream: TextIO | None = None) -> list[FetchResult]:
    """Download (or find in the cache) each file; a failure stops at once with nothing left under a final name."""
    record_file = checksums_path(matrix)
    recorded = recorded_checksums(matrix)
    given = checksums or {}
    results = []
    for w in wanted:
        published = given.get(w.file) or w.sha256
        trusted = recorded.get(w.file)
        expected = published or trusted
        origin = ("published" if published else f"recorded on first use in {record_file.name}") if expected else ""
        target = cache / w.file
        if target.is_file():
            got = sha256_file(target)
            if expected and got != expected:
                raise SelectionError(f"{target}: sha256 {got}, but {expected} is expected ({origin}); "
                                     "delete it and fetch again, or review the checksum")
            status = "cached"
        else:
            if not w.url:
                raise SelectionError(f"{w.file}: no download URL in matrix.yaml; put the file in {cache}")
            out(f"fetch {w.file} <- {w.url}")
            try:
                partial, got = fetch_file(Request(w.url, w.file, expected, w.headers), cache, policy=policy,
                                          stream=stream, log=out)
            except DownloadError as exc:
                if expected and "sha256" in str(exc):
                    raise DownloadError(f"{exc}. The expected sha256 was {origin}: the file upstream changed; "
                                        "refused") from None
                raise
            commit(partial, cache, w.file)
            status = "downloaded"
        if not expected:
            record_checksum(record_file, w.file, got, w.url)
            recorded[w.file] = got
            status = "trusted-on-first-use"
            out(f"TRUST ON FIRST USE: {w.file} has no published sha256; recorded {got} in {record_file} "
                "(review it in the diff and commit it)")
        out(f"{status:>20}  {w.file}  {got[:16]}")
        results.append(FetchResult(w.file, cache / w.file, got, status))
    return results
