import json
import urllib.error

import pytest

from ascend_images.matrix.selection import select
from ascend_images.release.publish import PublishError, Target, group_variants
from ascend_images.release.registry import Manifest, RegistryError, image_index, retry


def test_retry_transient_then_success():
    calls, sleeps = [], []

    def flaky():
        calls.append(1)
        if len(calls) < 3:
            raise urllib.error.URLError(ConnectionRefusedError(111, "Connection refused"))
        return "ok"

    assert retry("read x", flaky, sleeps.append) == "ok"
    assert sleeps == [0.5, 1.0]


def test_retry_gives_up_with_a_clear_error():
    sleeps = []

    def down():
        raise RegistryError("HTTP 503", 503, transient=True)

    with pytest.raises(RegistryError, match="write r:t: still failing after 6 attempts: HTTP 503"):
        retry("write r:t", down, sleeps.append)
    assert sleeps == [0.5, 1.0, 2.0, 4.0, 8.0]


@pytest.mark.parametrize("status", [400, 401, 403, 404])
def test_definitive_answers_are_not_retried(status):
    sleeps = []

    def refuse():
        raise RegistryError(f"HTTP {status}", status, transient=False)

    with pytest.raises(RegistryError, match=f"HTTP {status}"):
        retry("read", refuse, sleeps.append)
    assert sleeps == []


def test_target_parse():
    assert Target.parse("127.0.0.1:5000/ascend/images") == Target("127.0.0.1:5000", "ascend/images")
    assert Target.parse("registry.example.com").repo("sglang") == "sglang"
    with pytest.raises(PublishError, match="expected HOST\\[:PORT\\]/NAMESPACE"):
        Target.parse("bad host/ns")
    with pytest.raises(PublishError):
        Target.parse("")


def a3_default_tag(matrix, backend: str) -> str:
    """The list tag of the A3 default of `backend`, written out by hand from its release's versions (moving a default
    changes no test)."""
    release = matrix.spec.releases[matrix.spec.defaults.release["a3"][backend]]
    version = release.backends.vllm.vllm_ascend if backend == "vllm" else release.torch_npu
    return f"{version}-cann{release.cann.lower()}-a3-debian12-py3.11"


def test_group_variants_one_list_per_variant_across_arches(matrix):
    variants = select(matrix, device="a2,a3", backend="none", arch="x86_64,aarch64")
    groups = group_variants(variants, "ascend-images", Target("reg:5000", "ns"))
    assert len(groups) == 2
    a3 = next(g for g in groups if "-a3-" in g.list_tag)
    assert a3.repo == "ns/torch-npu"
    # A3's training base: the default's torch_npu on its CANN
    tag = a3_default_tag(matrix, "none")
    assert a3.list_tag == tag
    assert {a: i.tag for a, i in a3.images.items()} == {"amd64": f"{tag}-amd64", "arm64": f"{tag}-arm64"}
    assert a3.images["arm64"].platform == {"architecture": "arm64", "os": "linux", "variant": "v8"}
    assert a3.alias == "latest-a3-none"  # the default release for (a3, none)


def test_non_default_release_gets_no_alias(matrix):
    variants = select(matrix, device="a2", backend="none", release="cann8.3.rc1-sglang0.5.8")
    (group,) = group_variants(variants, "ascend-images", Target("reg", ""))
    assert group.alias is None


@pytest.mark.parametrize("choice", [{"profile": "debug"}, {"allocator": "tcmalloc"}, {"env": {"A": "1"}}])
def test_a_chosen_setting_gets_its_own_list_and_no_alias(matrix, choice):
    """`latest-a3-vllm` must stay the image a user gets without choosing: an overlay never takes the alias."""
    (v,) = select(matrix, device="a3", backend="vllm", **choice)
    (group,) = group_variants([v], "ascend-images", Target("reg", "ns"))
    assert group.alias is None
    suffix = {"profile": "-debug", "allocator": "-tcmalloc", "env": "-env"}[next(iter(choice))]
    tag = a3_default_tag(matrix, "vllm")
    assert group.list_tag.startswith(f"{tag}{suffix}"), group.list_tag
    assert group.images["arm64"].tag.endswith("-arm64" + group.list_tag.removeprefix(tag)), group.images["arm64"].tag


def test_image_index_references_children_by_digest_with_their_annotations():
    child = Manifest("sha256:" + "a" * 64, "application/vnd.oci.image.manifest.v1+json", 1234, {})
    base = {"org.opencontainers.image.base.name": "reg/ns/torch-npu:x-arm64"}
    doc = json.loads(image_index([(child, {"architecture": "arm64", "os": "linux", "variant": "v8"}, base),
                                  (child, {"architecture": "amd64", "os": "linux"}, {})]))
    assert doc["mediaType"] == "application/vnd.oci.image.index.v1+json"
    assert doc["manifests"] == [{"mediaType": child.media_type, "size": 1234, "digest": child.digest,
                                 "platform": {"architecture": "arm64", "os": "linux", "variant": "v8"},
                                 "annotations": {"org.opencontainers.image.base.name": "reg/ns/torch-npu:x-arm64"}},
                                {"mediaType": child.media_type, "size": 1234, "digest": child.digest,
                                 "platform": {"architecture": "amd64", "os": "linux"}}]


def test_ci_matrix_is_a_strategy_matrix():
    from ascend_images.cli.options import Selection
    from ascend_images.release.workflow import ci_matrix

    from .helpers import ROOT

    out = ci_matrix(Selection(str(ROOT / "matrix.yaml")).load())
    assert out["include"] and all({"device", "backend", "release", "os", "arch", "runner"} <= set(e)
                                  for e in out["include"])
    # aarch64 only until x86_64's locks are made (matrix.yaml arches.x86_64.unlocked): a native arm runner each
    assert {e["runner"] for e in out["include"]} == {"ubuntu-24.04-arm"}
