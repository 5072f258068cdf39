"""An image names no namespace (DESIGN 27), so reuse across names and equal digests agree: one chain built under two
namespaces is one set of images, the same digests, no label naming either namespace; and each namespace's
publication names its base as the registry it is published to has it (an annotation of the OCI index, where the
name is known). On the code before this decision (5fd61b3) each check failed: the second namespace was handed the
first one's images, whose base.name label named the first namespace, and the published list carried no annotation.

The chain is the x86_64 test release's (native, torch's metadata-only double): what is checked is naming, not
torch. `invoke rebuild`'s report under the name it was given: tests/unit/test_rebuild.py, and on CI's SGLang chain
in test_reproducible.py."""

from __future__ import annotations

import subprocess
import sys

import pytest

from ascend_images.cli.options import Selection
from ascend_images.cli.release import publish_selection
from ascend_images.release.registry import OCI_INDEX, RegistryClient
from tests.conftest import ROOT, X86_RELEASE, remove_tags, with_own_cann_stages

pytestmark = [pytest.mark.docker, pytest.mark.registry, pytest.mark.slow]
NAMESPACES = ("ascend-images-ns-one", "registry.example.com:5000/ascend-images-ns-two")
# written out by hand: the test release's chain on A2, x86_64
STAGES = ("base:debian12-py3.11-amd64", "cann-install:8.5.0-a2-debian12-py3.11-amd64",
          "cann:8.5.0-a2-debian12-py3.11-amd64", "torch-npu:2.13.0-cann8.5.0-a2-debian12-py3.11-amd64")


@pytest.fixture(scope="module")
def two_namespaces(docker_client, x86_light_matrix, fake_cann_both, light_wheelhouse, build_secrets, os_image_amd64,
                   tmp_path_factory):
    """The chain built under each namespace, the first from nothing (a CANN referer of its own), the second after
    it; returns the matrix they were built from."""
    directory = tmp_path_factory.mktemp("namespaces")
    matrix = with_own_cann_stages(x86_light_matrix, directory / "matrix")
    for namespace in NAMESPACES:
        argv = [sys.executable, "-m", "invoke", "build", "--matrix", str(matrix), "--device", "a2", "--backend",
                "none", "--release", X86_RELEASE, "--arch", "x86_64", "--cann-dir", str(fake_cann_both),
                "--wheelhouse", str(light_wheelhouse), "--ca-bundle", str(build_secrets["ca"]),
                "--namespace", namespace, "--work-dir", str(directory / "work")]
        done = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=1800)
        assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    yield matrix
    for namespace in NAMESPACES:
        remove_tags(docker_client, f"{namespace}/", force=True)


def test_a_chain_under_two_namespaces_is_one_set_of_images_naming_neither(docker_client, two_namespaces):
    one, two = NAMESPACES
    for stage in STAGES:
        first, second = (docker_client.api.inspect_image(f"{ns}/{stage}") for ns in NAMESPACES)
        assert first["Id"] == second["Id"], stage
        labels = first["Config"]["Labels"]
        assert not [k for k, v in labels.items() if one in v or "ns-two" in v], labels
        assert "org.opencontainers.image.base.name" not in labels
    # each stage's parent, in its own namespace's terms
    top = docker_client.api.inspect_image(f"{two}/{STAGES[-1]}")["Config"]["Labels"]
    assert top["io.ascend-images.parent"] == STAGES[-2]


def test_each_namespace_publishes_its_base_under_its_own_name(docker_client, two_namespaces, registry):
    client = RegistryClient(registry.host)
    cann = docker_client.api.inspect_image(f"{NAMESPACES[0]}/{STAGES[-2]}")["Id"]
    for local, team in zip(NAMESPACES, ("team-one", "team-two"), strict=True):
        target = f"{registry.namespace}/{team}"
        sel = Selection(matrix=str(two_namespaces), device="a2", backend="none", release=X86_RELEASE, arch="x86_64")
        publish_selection(sel, [].append, registry=target, namespace=local, allow_test_double=True,
                          report_path=registry.root / f"{team}.json")
        repo = f"{target.split('/', 1)[1]}/torch-npu"
        index = client.manifest(repo, "2.13.0-cann8.5.0-a2-debian12-py3.11")
        assert index is not None and index.media_type == OCI_INDEX
        (entry,) = index.body["manifests"]
        assert entry["annotations"] == {
            "org.opencontainers.image.base.name": f"{target}/cann:8.5.0-a2-debian12-py3.11-amd64",
            "org.opencontainers.image.base.digest": cann}
