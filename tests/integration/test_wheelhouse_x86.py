"""A two-arch variant from a test matrix (torch_npu 2.13.0): on x86_64 torch 2.13.0's CPU wheel comes from
a local wheelhouse (pip's find-links folder on this machine) served by the loopback server, since PyTorch's
CPU index, which the real matrix uses on x86_64, is not reachable here. The aarch64 half only has to be a
second platform of the same variant: PyPI's aarch64 torch 2.13.0 would pull about 4 GB of CUDA libraries,
so the wheelhouse offers a metadata-only test double of it (`2.13.0+testdouble`, which pip prefers), while
torch_npu still comes from PyPI. Then the variant is published as one manifest list with both platforms."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ascend_images.cli.build import build_selection
from ascend_images.cli.options import InputFlags, Selection, SourceFlags
from ascend_images.cli.release import publish_selection
from tests.conftest import TEST_NAMESPACE, TORCH_WHEEL

# x86_64 images are not published yet (no x86_64 lock: matrix.yaml arches.x86_64); the two-arch list is proven nightly
pytestmark = [pytest.mark.docker, pytest.mark.slow, pytest.mark.full]


@pytest.fixture(scope="module")
def two_arch_build(docker_client, x86_matrix, wheelhouse, build_secrets, work_dir, os_image, os_image_amd64,
                   fake_cann_both):
    cann = fake_cann_both
    sel = Selection(matrix=str(x86_matrix), device="a3", backend="none", release="test-wheelhouse",
                        arch="x86_64,aarch64")
    lines: list[str] = []
    plan, results = build_selection(
        sel, SourceFlags(cann_dir=str(cann), torch_index_url=""),
        InputFlags(wheelhouse=str(wheelhouse), ca_bundle=str(build_secrets["ca"])), lines.append,
        work_dir=work_dir, namespace=TEST_NAMESPACE)
    return sel, plan, results


def test_each_arch_has_its_torch_and_x86_64_took_it_from_the_wheelhouse(docker_client, two_arch_build, wheelhouse):
    _, plan, _ = two_arch_build
    code = ("import importlib.metadata as m, json; "
            "print(json.dumps({p: m.version(p) for p in ('torch', 'torch-npu')}))")
    seen = {}
    for variant, top in plan.tops.items():
        out = docker_client.containers.run(top.tag, ["python", "-c", code], entrypoint=[], remove=True)
        seen[variant.arch] = json.loads(out)
        assert docker_client.images.get(top.tag).attrs["Architecture"] == variant.arch_spec.debian_arch
    assert seen == {"x86_64": {"torch": "2.13.0+cpu", "torch-npu": "2.13.0"},
                    "aarch64": {"torch": "2.13.0+testdouble", "torch-npu": "2.13.0"}}
    # x86_64's torch is the wheelhouse's file: its lock pins that file's sha256, and uv installs only a file that
    # hashes to it (--require-hashes, from the wheel store the wheelhouse filled)
    from ascend_images.inputs.download import sha256_file
    from ascend_images.inputs.lockfile import parse_lock_text

    x86 = next(top.tag for v, top in plan.tops.items() if v.arch == "x86_64")
    text = docker_client.containers.run(x86, ["cat", "/etc/ascend-images/locks/torch-x86_64.txt"], entrypoint=[],
                                        remove=True).decode()
    lock = parse_lock_text(text, Path("torch-x86_64.txt"))
    assert lock.pins["torch"] == "2.13.0+cpu"
    assert lock.hashes["torch"] == sha256_file(wheelhouse / TORCH_WHEEL)


def test_two_arch_variant_publishes_one_list_with_both_platforms(docker_client, two_arch_build, registry):
    """The CI flow: each arch's runner pushes its own tag (--only arch), then a merge job writes the list."""
    from dataclasses import replace

    from ascend_images.release.publish import PublishError
    from ascend_images.release.registry import RegistryClient

    sel, _, _ = two_arch_build
    lines: list[str] = []
    kwargs = {"registry": registry.namespace, "namespace": TEST_NAMESPACE,
              "report_path": registry.root / "report.json", "allow_test_double": True}
    publish_selection(replace(sel, arch="x86_64"), lines.append, only="arch", **kwargs)
    with pytest.raises(PublishError, match=r"(?s)per-arch images missing from the registry.*arm64"):
        publish_selection(sel, lines.append, only="lists", **kwargs)  # never a list with a platform missing
    publish_selection(replace(sel, arch="aarch64"), lines.append, only="arch", **kwargs)
    report = publish_selection(sel, lines.append, only="lists", **kwargs)
    (list_ref,) = [r for r in report["tags"] if r.endswith("-py3.11")]
    repo, tag = list_ref.split("/", 1)[1].rsplit(":", 1)
    listed = RegistryClient(registry.host).manifest(repo, tag)
    platforms = {m["platform"]["architecture"]: m["digest"] for m in listed.body["manifests"]}
    client = RegistryClient(registry.host)
    assert platforms == {arch: client.manifest(repo, f"{tag}-{arch}").digest for arch in ("amd64", "arm64")}
    assert not any(":latest-" in r for r in report["tags"])  # a test release is nobody's default
