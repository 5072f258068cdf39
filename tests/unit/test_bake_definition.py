"""The bake definition every build runs (DESIGN 23, 25, 27): what BuildKit is given is the same under every
namespace (the namespace is only the tags' variable), the parent of a stage is its parent's target, and the
variables turn on what a user's CI needs (a registry, a push, a registry cache), read back by buildx's own parser
(`docker buildx bake --print`, which needs no engine). Expected values are written out by hand."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from ascend_images.inputs.sources import ArtifactSource, CannSource, Sources
from ascend_images.matrix.selection import select
from ascend_images.stages.bake import bake_file, render_plan
from ascend_images.stages.plan import PlanOptions, make_plan
from tests.conftest import IN_CI, ROOT

SOURCES = Sources(CannSource("url", strict=False), ArtifactSource(strict=False))
TORCH_A3 = "torch-npu--2_10_0_post4-cann9_1_0-a3-debian12-py3_11-arm64"
CANN_A3 = "cann--9_1_0-a3-debian12-py3_11-arm64"


def rendered(matrix, directory: Path, namespace: str) -> tuple[dict[str, bytes], dict]:
    variants = select(matrix, device="a3", backend="vllm", release="cann9.1.0-pt2.10.0", profile="debug",
                      arch="aarch64")
    plan = make_plan(variants, PlanOptions(SOURCES.cann, namespace))
    stages = render_plan(plan, SOURCES, directory)
    files = {p.relative_to(directory).as_posix(): p.read_bytes() for p in sorted(directory.rglob("*")) if p.is_file()}
    return files, bake_file(plan, {slug: s.record for slug, s in stages.items()}, 1795824000,
                            "2026-11-28T00:00:00Z", "debian:12")


def test_two_namespaces_give_byte_for_byte_the_same_contexts_and_definition(matrix, tmp_path):
    one, one_definition = rendered(matrix, tmp_path / "one", "team-one")
    two, two_definition = rendered(matrix, tmp_path / "two", "registry.example.com:5000/team-two")
    assert sorted(one) == sorted(two)
    assert [name for name in one if one[name] != two[name]] == []
    assert one_definition == two_definition
    # and neither namespace is written anywhere BuildKit reads: no label, no FROM names it
    for name, data in one.items():
        assert b"team-one" not in data, name
    assert "team-one" not in json.dumps(one_definition)


def test_a_stage_names_its_parent_by_the_default_namespace_and_bake_gives_it_the_parents_target(matrix, tmp_path):
    files, definition = rendered(matrix, tmp_path, "team")
    dockerfile = files["torch-npu--2.10.0.post4-cann9.1.0-a3-debian12-py3.11-arm64/Dockerfile"].decode()
    assert "FROM ascend-images/cann:9.1.0-a3-debian12-py3.11-arm64\n" in dockerfile
    assert 'io.ascend-images.parent="cann:9.1.0-a3-debian12-py3.11-arm64"' in dockerfile
    assert "org.opencontainers.image.base.name" not in dockerfile
    contexts = definition["target"][TORCH_A3]["contexts"]
    assert contexts["ascend-images/cann:9.1.0-a3-debian12-py3.11-arm64"] == f"target:{CANN_A3}"
    assert definition["target"][TORCH_A3]["tags"] == [
        "${NAMESPACE}/torch-npu:2.10.0.post4-cann9.1.0-a3-debian12-py3.11-arm64"]


def test_the_first_stage_has_no_parent_label(matrix, tmp_path):
    files, _ = rendered(matrix, tmp_path, "team")
    assert b"io.ascend-images.parent" not in files["base--debian12-py3.11-arm64/Dockerfile"]


@pytest.fixture(scope="module")
def buildx() -> str:
    found = shutil.which("docker")
    if found is None or subprocess.run([found, "buildx", "version"], capture_output=True).returncode != 0:
        if IN_CI:
            pytest.fail("CI=true but docker buildx is not installed (scripts/setup-host.sh installs it)")
        pytest.skip("docker buildx is not installed")
    return found


def printed(buildx: str, target: str, **variables: str) -> dict:
    """The committed definition as buildx reads it, with the variables given as a user's CI gives them."""
    env = {k: v for k, v in os.environ.items() if k not in ("NAMESPACE", "PUSH", "CACHE", "CACHE_READ_ONLY")}
    result = subprocess.run([buildx, "buildx", "bake", "-f", "rendered/docker-bake.json", "--print", target],
                            cwd=ROOT, capture_output=True, text=True, env={**env, **variables}, check=True)
    return json.loads(result.stdout)["target"][target]


def entries(printed_list: list) -> list[dict[str, str]]:
    """An output or cache list as `bake --print` gives it, each entry as its attributes: buildx from 0.18 prints an
    entry as an object, older ones as the `type=...,key=value` string the definition holds."""
    return [entry if isinstance(entry, dict) else dict(part.split("=", 1) for part in entry.split(","))
            for entry in printed_list]


def attributes(text: str) -> list[dict[str, str]]:
    return entries([text])


def test_tags_follow_the_namespace_variable_and_push_pushes(buildx):
    target = printed(buildx, CANN_A3, NAMESPACE="registry.example.com:5000/team", PUSH="true")
    assert target["tags"] == ["registry.example.com:5000/team/cann:9.1.0-a3-debian12-py3.11-arm64"]
    assert entries(target["output"]) == attributes("type=image,oci-mediatypes=true,push=true")
    default = printed(buildx, CANN_A3)
    assert default["tags"] == ["ascend-images/cann:9.1.0-a3-debian12-py3.11-arm64"]
    assert entries(default["output"]) == attributes("type=image,oci-mediatypes=true,push=false")


def test_the_registry_cache_is_off_unless_named_and_read_only_writes_nothing(buildx):
    assert "cache-from" not in printed(buildx, CANN_A3) and "cache-to" not in printed(buildx, CANN_A3)
    both = printed(buildx, CANN_A3, CACHE="registry.example.com/cache")
    ref = f"registry.example.com/cache/{CANN_A3}:buildcache"
    assert entries(both["cache-from"]) == attributes(f"type=registry,ref={ref}")
    assert entries(both["cache-to"]) == attributes(f"type=registry,ref={ref},mode=max,oci-mediatypes=true,"
                                                   "image-manifest=true,ignore-error=true")
    read_only = printed(buildx, CANN_A3, CACHE="registry.example.com/cache", CACHE_READ_ONLY="true")
    assert entries(read_only["cache-from"]) == attributes(f"type=registry,ref={ref}")
    assert "cache-to" not in read_only


def test_the_committed_file_groups_what_ci_tests_and_publishes(matrix):
    definition = json.loads((ROOT / "rendered" / "docker-bake.json").read_text())
    # written out by hand from matrix.yaml's ci section's intent: the test set holds the overlay and the old layout,
    # the publish set holds neither
    overlay = "torch-npu--2_10_0_post4-cann9_1_0-a3-debian12-py3_11-arm64-debug-tcmalloc-env455b65e5"
    old_layout = "torch-npu--2_7_1_post2-cann8_3_rc1-a2-debian12-py3_11-arm64"
    assert {overlay, old_layout} <= set(definition["group"]["ci-test"]["targets"])
    assert not {overlay, old_layout} & set(definition["group"]["ci-publish"]["targets"])
    for group in definition["group"].values():
        assert set(group["targets"]) <= set(definition["target"])


def test_a_build_on_the_hosts_network_grants_it_as_buildx_asks():
    """The definition's targets take NETWORK from it (bake reads `network` from JSON from buildx 0.17); buildx grants
    the host's network only with --allow, which `invoke build` passes where it asks for it, and only there."""
    from ascend_images.builder.bake import BakeCommand

    def argv(network: str) -> list[str]:
        return BakeCommand((Path("d.json"),), ("t",), {"NETWORK": network}, Path("m.json")).argv()

    assert argv("host")[-3:] == ["--allow", "network.host", "t"]
    assert "--allow" not in argv("default")
    target = json.loads((ROOT / "rendered" / "docker-bake.json").read_text())["target"][CANN_A3]
    assert target["network"] == "${NETWORK}"
