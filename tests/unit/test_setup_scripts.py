"""Set-up's own pins: the uv that scripts/setup-venv.sh installs into the venv is the one matrix.yaml pins for the
builds (one uv version on a host, each wheel by the sha256 PyPI published)."""

from __future__ import annotations

import re

from ascend_images.matrix.model import load_matrix
from tests.conftest import ROOT


def uv_requirement(text: str) -> tuple[str, set[str]]:
    joined = text.replace("\\\n", " ")
    (line,) = [line for line in joined.splitlines() if line.strip() and not line.startswith("#")]
    version = re.match(r"uv==(\S+)", line.strip())
    assert version, line
    return version.group(1), set(re.findall(r"--hash=sha256:([0-9a-f]{64})", line))


def test_setup_installs_the_uv_matrix_yaml_pins():
    uv = load_matrix(ROOT / "matrix.yaml").spec.tools["uv"]
    version, hashes = uv_requirement((ROOT / "scripts" / "uv-requirements.txt").read_text())
    assert (version, hashes) == (uv.version, {f.sha256 for f in uv.files.values()})


def test_a_pin_that_drifted_is_seen():
    text = (ROOT / "scripts" / "uv-requirements.txt").read_text()
    uv = load_matrix(ROOT / "matrix.yaml").spec.tools["uv"]
    assert uv_requirement(text.replace(uv.version, "0.0.1"))[0] != uv.version
    first = next(iter(uv.files.values())).sha256
    assert uv_requirement(text.replace(first, "0" * 64))[1] != {f.sha256 for f in uv.files.values()}
