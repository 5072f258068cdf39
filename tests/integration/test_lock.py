"""`invoke lock` for real: uv resolves against PyPI for aarch64 / Python 3.11 from this x86_64 host."""

from __future__ import annotations

import subprocess
import sys

import pytest

from ascend_images.inputs.lockfile import parse_lock
from ascend_images.inputs.lockgen import LockMaker
from ascend_images.inputs.lockspec import check_lock, lock_path, lock_spec
from ascend_images.matrix.model import load_matrix
from ascend_images.matrix.selection import select
from tests.conftest import ROOT
from tests.fixtures.matrices import matrix_copy

pytestmark = pytest.mark.network


def test_lock_resolves_for_the_target_platform(tmp_path, work_dir):
    matrix = load_matrix(ROOT / "matrix.yaml")
    (v,) = select(matrix, device="a3", backend="vllm", release="cann8.5.0-pt2.8.0", arch="aarch64")
    spec = lock_spec(v, "backend")
    lines: list[str] = []
    path = LockMaker(lines.append, work_dir / "cache" / "sdists").make(spec, tmp_path / "locks")
    lock = parse_lock(path)
    check_lock(spec, lock)
    committed = parse_lock(lock_path(ROOT / "locks", spec))
    # transitive versions may move as PyPI publishes; what the release pins may not
    for name in ("torch", "torch-npu", "vllm-ascend", "triton-ascend", "numpy"):
        assert lock.pins[name] == committed.pins[name], name
    assert lock.source_sdist == committed.source_sdist  # PyPI's sdist and its sha256
    assert "arctic-inference" in lock.from_source and "nanobind" in lock.build_requirements
    # resolved for aarch64: aarch64-only wheels' packages are present, x86-only ones are not
    assert not [n for n in lock.pins if n.startswith("nvidia-")]
    assert any("has no aarch64-manylinux_2_35 wheel" in line for line in lines)
    # each pin names the file the target installs, by the sha256 PyPI publishes: the committed lock's, where the
    # version is the committed one (the file of a version never changes)
    assert {n: h for n, h in lock.hashes.items() if committed.pins.get(n) == lock.pins[n]} == {
        n: committed.hashes[n] for n in lock.hashes if committed.pins.get(n) == lock.pins[n]}


def _invoke(*args: str, cwd=ROOT) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "invoke", *args], cwd=cwd, capture_output=True, text=True)


def test_lock_check_passes_here_and_fails_on_a_changed_pin(tmp_path):
    ok = _invoke("lock", "--check", "--arch", "aarch64", "--release", "cann8.5.0-pt2.8.0")
    assert ok.returncode == 0, ok.stdout + ok.stderr
    assert "5 of 5 locks fresh" in ok.stdout  # base, torch, vllm, sglang, and verl's over sglang
    def other_vllm_ascend(data: dict) -> None:
        data["releases"]["cann8.5.0-pt2.8.0"]["backends"]["vllm"]["vllm_ascend"] = "0.13.0rc3"

    matrix_copy(tmp_path, other_vllm_ascend, locks=True)
    stale = _invoke("lock", "--check", "--arch", "aarch64", "--release", "cann8.5.0-pt2.8.0",
                    "--matrix", str(tmp_path / "matrix.yaml"))
    assert stale.returncode == 1
    assert "vllm-aarch64.txt is stale" in stale.stdout and "4 of 5 locks fresh" in stale.stdout


def test_an_override_settles_upstreams_contradiction_and_nothing_else(tmp_path, work_dir):
    """vLLM 0.18.0 wants opencv-python-headless>=4.13.0, vllm-ascend 0.18.0 pins <=4.11.0.86 (their PyPI metadata):
    without the release's override uv finds no lock; with it, opencv is vllm-ascend's and everything else resolves.
    arctic-inference (no aarch64 wheel) pins protobuf==5.29.5 to build; without build isolation the runtime's
    protobuf (vLLM: >=5.29.6) wins, and the lock says so."""
    from dataclasses import replace

    from ascend_images.inputs.lockfile import LockError

    matrix = load_matrix(ROOT / "matrix.yaml")
    (v,) = select(matrix, device="a3", backend="vllm", release="cann8.5.1-vllm0.18.0", arch="aarch64")
    spec = lock_spec(v, "backend")
    assert spec.overrides == ("opencv-python-headless==4.11.0.86",)
    cache = work_dir / "cache" / "sdists"
    with pytest.raises(LockError, match=r"(?s)uv could not resolve.*opencv-python-headless>=4.13.0"):
        LockMaker(lambda _: None, cache).make(replace(spec, overrides=()), tmp_path / "without")
    lines: list[str] = []
    lock = parse_lock(LockMaker(lines.append, cache).make(spec, tmp_path / "with"))
    check_lock(spec, lock)
    assert lock.pins["opencv-python-headless"] == "4.11.0.86" and lock.pins["numpy"].startswith("1.")
    assert lock.overrides == ("opencv-python-headless==4.11.0.86",)
    assert "protobuf==5.29.5(arctic-inference)" in lock.header["build-pins-relaxed"]
    assert lock.pins["protobuf"] != "5.29.5"
    assert any("protobuf==5.29.5 yields to the runtime's protobuf==" in line for line in lines)


def test_a_framework_lock_resolves_over_its_backends_and_needs_its_overrides(tmp_path, work_dir):
    """verl over vLLM-Ascend 0.23.0, resolved again against PyPI: what the release pins and what the overrides settle
    are the committed lock's, every backend pin is held but the overridden ones; without the TransferQueue override
    (requirements-npu.txt's git branch) uv cannot resolve, and the error says what it resolved over."""
    matrix = load_matrix(ROOT / "matrix.yaml")
    (v,) = select(matrix, device="a3", backend="vllm", framework="verl", arch="aarch64")
    spec = lock_spec(v, "framework")
    lines: list[str] = []
    maker = LockMaker(lines.append, work_dir / "cache" / "sdists")
    lock = parse_lock(maker.make(spec, tmp_path / "locks"))
    check_lock(spec, lock)
    committed = parse_lock(lock_path(ROOT / "locks", spec))
    for name in ("verl", "megatron-core", "mbridge", "transferqueue", "tensordict"):
        assert lock.pins[name] == committed.pins[name], name
    assert not [n for n in lock.pins if n in spec.over.pins and n not in ("numpy", "packaging")]
    assert "antlr4-python3-runtime" in lock.header["from-source"]

    def without_transferqueue(data: dict) -> None:
        overrides = data["releases"]["cann9.1.0-pt2.10.0"]["frameworks"]["verl"]["overrides"]
        data["releases"]["cann9.1.0-pt2.10.0"]["frameworks"]["verl"]["overrides"] = [
            o for o in overrides if not o["requirement"].startswith("TransferQueue")]

    broken = load_matrix(matrix_copy(tmp_path / "broken", without_transferqueue, locks=True))
    (v,) = select(broken, device="a3", backend="vllm", framework="verl", arch="aarch64")
    with pytest.raises(Exception, match=r"uv could not resolve cann9\.1\.0-pt2\.10\.0/vllm\+verl/aarch64 over "
                                        r"vllm-aarch64\.txt"):
        maker.make(lock_spec(v, "framework"), tmp_path / "broken-locks")


def test_a_third_framework_is_data_and_locks_and_renders_through_the_same_path(tmp_path, work_dir):
    """A probe RL framework: a row of matrix.yaml's frameworks, its pins in a release and its env layer, and nothing
    else: no module, no template of its own (the framework kind's reads everything from the matrix and the lock).
    It locks through the one maker over the backend lock, under the one file name, and renders as verl and ROLL do."""
    from ascend_images.inputs.sources import ArtifactSource, CannSource, Sources
    from ascend_images.stages.plan import PlanOptions, make_plan
    from ascend_images.stages.render import Renderer

    def probe(data: dict) -> None:
        data["frameworks"]["probe"] = {"description": "a probe RL framework", "module": "colorama",
                                       "backends": ["vllm"], "source": "this test"}
        data["releases"]["cann9.1.0-pt2.10.0"]["frameworks"]["probe"] = {
            "version": "1.0", "backends": ["vllm"], "packages": ["colorama==0.4.6"], "source": "this test"}
        reader = {"package": "colorama", "source": "this test"}  # what the probe framework ships
        data["env"]["framework"]["probe"] = {"PROBE_RL_LEVEL": {"value": "2", "source": "this test", "reader": reader}}

    matrix = load_matrix(matrix_copy(tmp_path, probe, locks=True))
    (v,) = select(matrix, device="a3", backend="vllm", framework="probe", release="cann9.1.0-pt2.10.0",
                  arch="aarch64")
    spec = lock_spec(v, "framework")
    path = LockMaker(lambda line: None, work_dir / "cache" / "sdists").make(spec, tmp_path / "locks")
    assert path == tmp_path / "locks" / "cann9.1.0-pt2.10.0" / "vllm-probe-aarch64.txt"
    lock = parse_lock(path)
    check_lock(spec, lock)
    assert lock.pins == {"colorama": "0.4.6"} and lock.header["framework"] == "probe==1.0"
    assert lock.header["over"].startswith("vllm-aarch64.txt sha256:")
    stage = make_plan([v], PlanOptions(CannSource("url", strict=False))).top(v)
    assert stage.kind == "framework"
    assert stage.tag == "ascend-images/probe:1.0-vllm0.23.0-cann9.1.0-a3-debian12-py3.11-arm64"
    renderer = Renderer()
    record = renderer.record(stage, Sources(CannSource("url", strict=False), ArtifactSource(strict=False)))
    text, files = renderer.render_text(stage, record), record.files
    assert files["install.txt"].decode() == f"colorama==0.4.6 --hash=sha256:{lock.hashes['colorama']}\n"
    assert "locks/vllm-probe-aarch64.txt" in files and "vllm-probe-aarch64.txt" in text
    assert "PROBE_RL_LEVEL" in text and 'io.ascend-images.framework="probe"' in text
