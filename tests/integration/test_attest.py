"""What a published image holds, readable from the registry: `invoke publish` attaches each per-arch image's SBOM
(CycloneDX 1.6) and provenance (in-toto, SLSA v1) as OCI referrers; they are read back here with oras (oras-py),
not with this project's code, and checked against the image with other tools (`pip list`, `dpkg-query`) and
against CycloneDX's schema. `invoke verify` fails on a test double and on an image with one package replaced."""

from __future__ import annotations

import json
import re
import subprocess
import sys

import pytest

from ascend_images.cli.options import Selection
from ascend_images.cli.release import publish_selection, verify_image
from tests.conftest import ROOT, TEST_ARCH, TEST_NAMESPACE, remove_tags
from tests.fixtures.buildkit import build_image
from tests.image.conftest import ci_image_tags

pytestmark = [pytest.mark.docker, pytest.mark.registry, pytest.mark.slow]
OCI_INDEX = "application/vnd.oci.image.index.v1+json"
OCI_MANIFEST = "application/vnd.oci.image.manifest.v1+json"


def oras_documents(host: str, repo: str, digest: str) -> dict[str, tuple[dict, bytes]]:
    """artifactType -> (its manifest, its document), found through the referrers tag schema with oras-py."""
    import oras.container
    import oras.provider

    registry = oras.provider.Registry(host, insecure=True)
    index = registry.get_manifest(oras.container.Container(f"{host}/{repo}:{digest.replace(':', '-')}"),
                                  allowed_media_type=[OCI_INDEX])
    out = {}
    for descriptor in index["manifests"]:
        manifest = registry.get_manifest(oras.container.Container(f"{host}/{repo}@{descriptor['digest']}"),
                                         allowed_media_type=[OCI_MANIFEST])
        blob = registry.get_blob(oras.container.Container(f"{host}/{repo}"), manifest["layers"][0]["digest"])
        out[descriptor["artifactType"]] = (manifest, blob.content)
    return out


def in_container(docker_client, image: str, command: str) -> str:
    return docker_client.containers.run(image, ["sh", "-c", command], entrypoint=[], remove=True,
                                        network_disabled=True).decode()


def test_publish_attaches_sbom_and_provenance_that_oras_reads_back(docker_client, ci_build, registry, build_secrets,
                                                                   tmp_path):
    from cyclonedx.schema import SchemaVersion
    from cyclonedx.validation.json import JsonStrictValidator

    sel = Selection(matrix=str(ROOT / "matrix.yaml"), arch=TEST_ARCH, device="a3", backend="none")
    report = publish_selection(sel, [].append, registry=registry.namespace, namespace=TEST_NAMESPACE,
                         report_path=tmp_path / "report.json", allow_test_double=True)
    ((ref, attached),) = report["attestations"].items()
    digest = report["tags"][ref]
    repo, tag = ref.split("/", 1)[1].rsplit(":", 1)
    documents = oras_documents(registry.host, repo, digest)
    assert set(documents) == {"application/vnd.cyclonedx+json", "application/vnd.in-toto+json"}
    for kind, (manifest, _) in documents.items():
        assert manifest["subject"]["digest"] == digest and manifest["artifactType"] == kind
    sbom_text, provenance_text = (documents[k][1].decode() for k in ("application/vnd.cyclonedx+json",
                                                                      "application/vnd.in-toto+json"))
    assert JsonStrictValidator(SchemaVersion.V1_6).validate_str(sbom_text) is None  # CycloneDX's own schema
    sbom, statement = json.loads(sbom_text), json.loads(provenance_text)

    # the SBOM against the image, by other tools than the one that made it
    local = f"{TEST_NAMESPACE}/{repo.split('/', 1)[1]}:{tag}"
    pip = json.loads(in_container(docker_client, local, "pip list --format json 2>/dev/null"))
    dpkg = in_container(docker_client, local, "dpkg-query -W -f '${Package} ${Version} ${db:Status-Abbrev}\\n'")
    components = sbom["components"]
    python = {(c["name"], c["version"]) for c in components
              if c.get("purl", "").startswith(("pkg:pypi/", "pkg:generic/"))}
    assert python == {(re.sub(r"[-_.]+", "-", p["name"]).lower(), p["version"]) for p in pip}
    deb = {(c["name"], c["version"]) for c in components if c.get("purl", "").startswith("pkg:deb/")}
    assert deb == {tuple(line.split()[:2]) for line in dpkg.splitlines() if line.split()[2:] == ["ii"]}
    cann = {(c["name"], c["version"]) for c in components if c["type"] == "framework"}
    assert cann == {("Ascend-cann-toolkit", "9.1.0"), ("Ascend-cann-ops-ascend910_93", "9.1.0"),
                    ("Ascend-cann-atb", "9.1.0")}  # toolkit, A3 operators, NNAL's ATB (CCI: CANN 9.1.0, A3)
    files = {c["name"]: c for c in components if c["type"] == "file"}
    assert set(files) == {"Ascend-cann-toolkit_9.1.0_linux-aarch64.run", "Ascend-cann-A3-ops_9.1.0_linux-aarch64.run",
                          "Ascend-cann-nnal_9.1.0_linux-aarch64.run"}
    assert all({"name": "ascend-images:test-double", "value": "cann"} in f["properties"] for f in files.values())

    # provenance: the subject, the chain's stages by their digests as the engine has them, no credential anywhere
    assert statement["_type"] == "https://in-toto.io/Statement/v1"
    assert statement["predicateType"] == "https://slsa.dev/provenance/v1"
    # in-toto's own bindings parse both strictly: a misspelt or unknown field is refused
    from google.protobuf import json_format
    from in_toto_attestation.predicates.provenance.v1 import provenance_pb2
    from in_toto_attestation.v1 import statement_pb2

    json_format.ParseDict(statement, statement_pb2.Statement())
    json_format.ParseDict(statement["predicate"], provenance_pb2.Provenance())
    assert statement["subject"][0]["digest"]["sha256"] == digest.removeprefix("sha256:")
    stages = [d for d in statement["predicate"]["buildDefinition"]["resolvedDependencies"]
              if d["name"].startswith("stage:")]
    assert [d["name"] for d in stages] == ["stage:torch", "stage:cann", "stage:cann-install", "stage:base"]
    for stage in stages:
        image = docker_client.api.inspect_image(stage["uri"])
        assert f"sha256:{stage['digest']['sha256']}" == image["Id"], stage["uri"]
        assert stage["annotations"]["created"] == image["Config"]["Labels"]["org.opencontainers.image.created"]
    assert stages[0]["digest"]["sha256"] == digest.removeprefix("sha256:")  # the top stage is the image published
    assert build_secrets["marker"] not in sbom_text + provenance_text  # the build's CA bundle and netrc markers

    # read back by the task from the registry: a test double, so verify fails and says so
    published = f"{registry.host}/{ref.split('/', 1)[1]}"
    verify = subprocess.run([sys.executable, "-m", "invoke", "verify", published], cwd=ROOT, capture_output=True,
                            text=True, timeout=300)
    assert verify.returncode == 1, verify.stdout + verify.stderr
    assert "FAIL  test double: built from cann test doubles" in verify.stdout
    assert "read from the registry" in verify.stdout
    # publishing again attaches nothing twice
    again = publish_selection(sel, [].append, registry=registry.namespace, namespace=TEST_NAMESPACE,
                        report_path=tmp_path / "again.json", allow_test_double=True)
    assert again["attestations"][ref] == attached
    assert len(oras_documents(registry.host, repo, digest)) == 2


def test_verify_names_a_replaced_package(docker_client, ci_build, tmp_path):
    """CI's SGLang image with one locked package's installed version changed (six 1.17.0, as its lock pins it, made
    to say 1.16.0): verify names that package, and on the image as built it names no package."""
    (image,) = [t for t in ci_image_tags() if "/sglang:" in t]
    tag = "ascend-images-replaced/sglang:latest"
    dockerfile = (f"FROM {image}\nRUN sed -i 's/^Version: 1.17.0$/Version: 1.16.0/' "
                  "/usr/local/python/lib/python3.11/site-packages/six-1.17.0.dist-info/METADATA\n")
    build_image(tag, dockerfile)
    try:
        lines: list[str] = []
        assert verify_image(tag, lines.append) == 1
        assert "FAIL  lock: six==1.17.0 is locked, the SBOM has six 1.16.0" in lines, lines
        built: list[str] = []
        verify_image(image, built.append)
        assert not [line for line in built if line.startswith("FAIL  lock:")], built
        assert "FAIL  test double: built from cann,sgl-kernel-npu,off-pypi-wheels test doubles, never to be used" \
            in built
    finally:
        remove_tags(docker_client, "ascend-images-replaced/")
