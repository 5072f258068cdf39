"""`invoke verify`'s findings and the SBOM's licence summary, on documents written out by hand (no engine, no
registry); the documents' making and their round trip through a registry are in tests/integration/test_attest.py."""

from __future__ import annotations

import json
import subprocess

import pytest

from ascend_images.inputs.pins import Pin
from ascend_images.release.attest import Attestations, AttestError, findings, split_reference
from ascend_images.release.referrers import tag_schema_tag
from ascend_images.release.sbom import license_summary
from tests.conftest import ROOT

HEAD = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "HEAD"], capture_output=True, text=True).stdout.strip()
ZIP = "sgl-kernel-npu-2026.7.27-torch2.10.0-py311-cann9.0.0-a3-aarch64.zip"


def docs(*, double: str = "", six: str = "1.17.0", zip_sha: str = "a" * 64, commit: str = HEAD,
         top: str = "1" * 64, recompressed: str = "") -> Attestations:
    labels = {"io.ascend-images.release": "rel", "io.ascend-images.backend": "sglang",
              "io.ascend-images.arch": "aarch64", "io.ascend-images.python-version": "3.11"}
    props = [{"name": f"ascend-images:label:{k}", "value": v} for k, v in labels.items()]
    if double:
        props.append({"name": "ascend-images:test-double", "value": double})
    sbom = {"metadata": {"component": {"properties": props}}, "components": [
        {"type": "library", "name": "six", "version": six, "purl": f"pkg:pypi/six@{six}"},
        {"type": "library", "name": "torch", "version": "2.10.0+cpu", "purl": "pkg:pypi/torch@2.10.0%2Bcpu"},
        {"type": "library", "name": "bash", "version": "5.2", "purl": "pkg:deb/debian/bash@5.2"},
        {"type": "file", "name": ZIP, "hashes": [{"alg": "SHA-256", "content": zip_sha}]},
    ]}
    byproducts = [{"name": "recompressed-from", "digest": {"sha256": recompressed}}] if recompressed else []
    statement = {"subject": [{"name": "reg/ns/sglang", "digest": {"sha256": "1" * 64}}],
                 "predicate": {"runDetails": {"builder": {"version": {"commit": commit}}, "byproducts": byproducts},
                               "buildDefinition": {"resolvedDependencies": [
                                   {"name": "stage:sglang", "digest": {"sha256": top}}]}}}
    return Attestations("img", "engine", sbom, statement)


@pytest.fixture
def locks(tmp_path):
    """Every layer's lock of the image, where the checkout keeps them: base, torch, backend."""
    (tmp_path / "rel").mkdir()
    (tmp_path / "base").mkdir()
    (tmp_path / "base" / "base-py3.11-aarch64.txt").write_text("# format: 2\n")
    (tmp_path / "rel" / "torch-aarch64.txt").write_text("# format: 2\ntorch==2.10.0\n")
    (tmp_path / "rel" / "sglang-aarch64.txt").write_text("# format: 2\nsix==1.17.0\ntorch==2.10.0\n")
    return tmp_path


PINS = {ZIP: Pin(ZIP, "https://example.invalid/z.zip", 1, "a" * 64)}


def test_an_image_as_this_checkout_publishes_it_has_no_finding(locks):
    assert findings(docs(), locks_dir=locks, pins=PINS, checkout=ROOT) == []
    # pushed with zstd layers: another manifest of the same image, which the provenance names as its source
    assert findings(docs(top="2" * 64, recompressed="2" * 64), locks_dir=locks, pins=PINS, checkout=ROOT) == []


@pytest.mark.parametrize(("broken", "pins", "says"), [
    (dict(double="cann,sgl-kernel-npu"), PINS, "test double: built from cann,sgl-kernel-npu test doubles"),
    (dict(six="1.16.0"), PINS, "lock: six==1.17.0 is locked, the SBOM has six 1.16.0"),
    (dict(zip_sha="b" * 64), PINS, f"download: {ZIP} has sha256 {'b' * 64}, pins.yaml pins {'a' * 64}"),
    ({}, {}, f"download: {ZIP} (sha256 {'a' * 64}) has no pin in pins.yaml"),
    (dict(commit="0" * 40), PINS, f"provenance: built from commit {'0' * 40}, which is not in this checkout's history"),
    (dict(top="2" * 64), PINS, f"provenance: its top stage is sha256:{'2' * 64}, not the image it describes"),
    (dict(top="2" * 64, recompressed="3" * 64), PINS, f"provenance: its top stage is sha256:{'2' * 64}, not"),
])
def test_each_purpose_broken_document_is_one_finding(locks, broken, pins, says):
    found = findings(docs(**broken), locks_dir=locks, pins=pins, checkout=ROOT)
    assert len(found) == 1 and found[0].startswith(says), found


def test_a_locked_package_missing_from_the_sbom_is_named(locks):
    (locks / "rel" / "sglang-aarch64.txt").write_text("six==1.17.0\ntorch==2.10.0\nxgrammar==0.2.1\n")
    assert findings(docs(), locks_dir=locks, pins=PINS, checkout=ROOT) == [
        "lock: xgrammar==0.2.1 is locked, and the SBOM has no xgrammar"]


def test_licences_are_summed_up_as_the_packages_state_them():
    sbom = {"components": [
        {"type": "library", "licenses": [{"expression": "Apache-2.0"}]},
        {"type": "library", "licenses": [{"license": {"name": "GPL-2+"}}, {"license": {"name": "LGPL-2.1+"}}]},
        {"type": "library", "licenses": [{"license": {"name": "GPL-2+"}}]},
        {"type": "library"},
        {"type": "file", "licenses": [{"expression": "MIT"}]},  # a download is not a package: not counted
    ]}
    assert license_summary(sbom) == [("GPL-2+", 2), ("Apache-2.0", 1), ("LGPL-2.1+", 1), ("none stated", 1)]


def test_references_and_the_tag_schema_tag():
    assert split_reference("127.0.0.1:5000/ascend/torch-npu:1.0-arm64") == (
        "127.0.0.1:5000", "ascend/torch-npu", "1.0-arm64")
    assert split_reference("reg.example.com/a/b@sha256:ab") == ("reg.example.com", "a/b", "sha256:ab")
    with pytest.raises(AttestError, match="not a registry reference"):
        split_reference("ascend-images/torch-npu:1.0")  # a local name: made from the engine's image instead
    assert tag_schema_tag("sha256:" + "0f" * 32) == "sha256-" + "0f" * 32


def test_a_framework_images_lock_is_its_backends_with_the_framework_lock_over_it(locks):
    """verl's lock may move a backend pin (an override matrix.yaml explains): a verl image holds the moved version,
    and that is no finding; read as a plain backend image, the same SBOM is one."""
    (locks / "rel" / "sglang-verl-aarch64.txt").write_text("# format: 1\nsix==1.16.0\n")
    moved = docs(six="1.16.0")
    assert findings(moved, locks_dir=locks, pins=PINS, checkout=ROOT) == [
        "lock: six==1.17.0 is locked, the SBOM has six 1.16.0"]
    moved.sbom["metadata"]["component"]["properties"].append(
        {"name": "ascend-images:label:io.ascend-images.framework", "value": "verl"})
    assert findings(moved, locks_dir=locks, pins=PINS, checkout=ROOT) == []


def test_what_pip_installed_from_a_file_is_not_claimed_as_pypis():
    """mindspeed from its git archive, the sgl-kernel-npu zip's wheels: pip's direct_url.json marks them; PyPI's
    package of the same name (PyPI has a `mindspeed` 0.0.1.dev1 by someone else) must not be named."""
    from ascend_images.release.inventory import Inventory, PythonDist
    from ascend_images.release.sbom import build_sbom, sbom_json

    inv = Inventory("img:tag", "sha256:" + "1" * 64, "arm64", {}, {"ID": "debian", "VERSION_ID": "12"},
                    python=[PythonDist("mindspeed", "0.16.0", (), direct=True), PythonDist("verl", "0.9.1", ())])
    purls = {c["name"]: c["purl"] for c in json.loads(sbom_json(build_sbom(inv, {})))["components"]}
    assert purls == {"mindspeed": "pkg:generic/mindspeed@0.16.0", "verl": "pkg:pypi/verl@0.9.1"}


def test_every_layer_the_image_installed_is_read(locks):
    """The base and torch locks are the image's too: a pin of theirs missing from the SBOM is a finding."""
    (locks / "base" / "base-py3.11-aarch64.txt").write_text("# format: 2\npip==26.3\n")
    assert findings(docs(), locks_dir=locks, pins=PINS, checkout=ROOT) == [
        "lock: pip==26.3 is locked, and the SBOM has no pip"]


def test_the_provenance_says_how_the_secrets_reached_the_build_as_the_dockerfiles_do():
    """The provenance's words on credentials are checked against the committed Dockerfiles, not against themselves:
    every secret the build gets is a BuildKit secret mount there, and never a build arg or an ENV."""
    import re

    from ascend_images.release.provenance import SECRETS_STATEMENT

    root = ROOT / "rendered"
    texts = [p.read_text(encoding="utf-8") for p in root.glob("*/Dockerfile")]
    mounted = {m for text in texts for m in re.findall(r"--mount=type=secret,id=([\w-]+)", text)}
    # the secrets a build is given (builder/stageinputs.py secret_documents), written out here
    assert mounted == {"ca", "pip-conf", "netrc", "os-mirror"}, mounted
    assert not [line for text in texts for line in text.splitlines()
                if re.match(r"(ARG|ENV) .*(NETRC|PIP_CONF|CA_BUNDLE|OS_MIRROR)", line)]
    assert "BuildKit secret mounts (type=secret" in SECRETS_STATEMENT and "loopback" not in SECRETS_STATEMENT
