"""RL framework images (--framework verl|roll): which pairs the matrix allows and why not, the framework's env layer,
its tag, and its lock over the backend's. Expected names and values are written out by hand from verl's and ROLL's
Ascend documents (install_guidance.rst, ref002, ROLL's ascend_usage.md), not read from matrix.yaml."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from ascend_images.errors import SelectionError
from ascend_images.inputs.lockfile import LockError, parse_lock_text
from ascend_images.inputs.lockspec import check_lock, load_lock, lock_path, lock_spec, locks_dir
from ascend_images.matrix.envs import effective_env
from ascend_images.matrix.model import load_matrix
from ascend_images.matrix.selection import select
from ascend_images.stages.names import image_tag
from tests.unit.helpers import ROOT


def invoke(*argv: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "invoke", *argv], cwd=ROOT, capture_output=True, text=True,
                          timeout=120)


@pytest.fixture(scope="module")
def matrix():
    return load_matrix(ROOT / "matrix.yaml")


def test_verl_defaults_to_the_stacks_its_guide_documents(matrix):
    """verl's guide: SGLang 0.5.10 on CANN 8.5.0 with torch 2.8.0, and vLLM-Ascend 0.23.0 on CANN 9.1.0."""
    (sglang,) = select(matrix, device="a3", backend="sglang", framework="verl")
    (vllm,) = select(matrix, device="a3", backend="vllm", framework="verl")
    assert (sglang.release.cann, sglang.backend_pins.sglang, sglang.torch) == ("8.5.0", "0.5.10", "2.8.0")
    assert (vllm.release.cann, vllm.backend_pins.vllm_ascend, vllm.torch_npu) == ("9.1.0", "0.23.0", "2.10.0.post4")
    assert image_tag(sglang) == "ascend-images/verl:0.9.1-sglang0.5.10-cann8.5.0-a3-debian12-py3.11-arm64"
    assert image_tag(vllm) == "ascend-images/verl:0.9.1-vllm0.23.0-cann9.1.0-a3-debian12-py3.11-arm64"
    # no framework: the backend's own default, as before
    (plain,) = select(matrix, device="a3", backend="sglang")
    assert plain.framework == "none" and plain.release_name == matrix.spec.defaults.release["a3"]["sglang"]


def test_roll_defaults_to_the_stack_its_image_builds(matrix):
    """ROLL's docker/Dockerfile.A3 (8eb27cc2): CANN 9.1.0, vLLM 0.23.0 and vLLM-Ascend 0.23.0 with torch_npu
    2.10.0.post4."""
    (v,) = select(matrix, device="a3", backend="vllm", framework="roll")
    assert (v.release.cann, v.backend_pins.vllm, v.backend_pins.vllm_ascend, v.torch_npu) == \
        ("9.1.0", "0.23.0", "0.23.0", "2.10.0.post4")
    assert image_tag(v) == "ascend-images/roll:0.3.0-vllm0.23.0-cann9.1.0-a3-debian12-py3.11-arm64"


# What ROLL's image moves of the vLLM-Ascend set, written out from its requirements_common.txt (numpy<2.0a0,
# datasets==3.1.0 and what datasets 3.1.0 requires: dill<0.3.9, fsspec<=2024.9.0) and Dockerfile.A3:58
# (transformers==4.57.6, which requires huggingface-hub<1.0), against the backend's versions in its lock
ROLL_MOVES = {"numpy": ("2.3.5", "1."), "dill": ("0.4.1", "0.3.8"), "fsspec": ("2026.9.0", "2024.9.0"),
              "transformers": ("5.5.4", "4.57.6"), "huggingface-hub": ("1.33.0", "0.")}


def test_roll_lock_names_each_backend_pin_it_moves_with_its_source(matrix):
    (v,) = select(matrix, device="a3", backend="vllm", framework="roll", arch="aarch64")
    lock = load_lock(v, "framework")
    moved = {line.split()[2]: line.split()[3:6] for line in lock.text.splitlines() if line.startswith("# moved: ")}
    for name, (old, new) in ROLL_MOVES.items():
        assert name in moved, f"{name} moves and the header does not say so: {sorted(moved)}"
        assert moved[name][0] == old and moved[name][1] == "->" and moved[name][2].startswith(new), moved[name]
    sources = [line for line in lock.text.splitlines() if line.startswith("# moved: ")]
    assert all("ROLL" in line or "PyPI" in line for line in sources), sources
    # every pin the lock holds at another version than the backend's is named: nothing moves unsaid
    backend = load_lock(v, "backend")
    unsaid = sorted(n for n, ver in lock.pins.items()
                    if n in backend.pins and backend.pins[n] != ver and n not in moved)
    assert unsaid == []
    # the loggers ROLL leaves unpinned get a version, and the line says how it was chosen
    (unpinned,) = [line for line in lock.text.splitlines() if line.startswith("# unpinned-upstream: ")]
    assert all(f" {name}==" in unpinned for name in ("swanlab", "wandb", "trackio"))
    # ray[cgraph]'s CUDA part left out; ray itself is the backend's now (upstream's vLLM-Ascend image installs it)
    assert "cupy-cuda12x" not in lock.pins and backend.pins["ray"] == "2.48.0" and "ray" not in lock.pins


@pytest.mark.parametrize(("argv", "says"), [
    (["--backend", "none", "--framework", "verl"],
     ["--framework verl with --backend none: not supported", "cann9.1.0-pt2.10.0/vllm", "cann8.5.0-pt2.8.0/sglang"]),
    (["--backend", "sglang", "--framework", "roll"],
     ["--framework roll with --backend sglang: not supported", "vLLM-Ascend only"]),
    (["--backend", "sglang", "--framework", "verl", "--release", "cann9.0.0-sglang0.5.17"],
     ["release 'cann9.0.0-sglang0.5.17' pins no verl version", "cann8.5.0-pt2.8.0/sglang"]),
    (["--backend", "vllm", "--framework", "verll"], ["unknown framework 'verll'", "did you mean 'verl'", "roll"]),
])
def test_unsupported_pairs_are_refused_with_why_and_what_works(argv, says):
    result = invoke("env", "--device", "a3", *argv)
    assert result.returncode == 2, result.stdout + result.stderr
    for text in says:
        assert text in result.stderr, result.stderr


def test_framework_layer_sits_on_the_backend_under_the_profile(matrix):
    (v,) = select(matrix, device="a3", backend="vllm", framework="verl", profile="debug", env={"RAY_DEDUP_LOGS": "1"})
    env = effective_env(v)
    # ref002 / verl's multi-machine practice, over the common layer's silence and the vLLM layer
    assert (env["HCCL_HOST_SOCKET_PORT_RANGE"].value, env["HCCL_HOST_SOCKET_PORT_RANGE"].layer) == \
        ("60000-60050", "framework:verl")
    assert (env["HYDRA_FULL_ERROR"].value, env["TRANSFORMERS_VERBOSITY"].value) == ("1", "error")
    assert env["VLLM_USE_V1"].layer == "backend:vllm" and env["TASK_QUEUE_ENABLE"].value == "1"
    assert env["ASCEND_GLOBAL_LOG_LEVEL"].layer == "profile:debug"  # the profile stays above the framework
    assert (env["RAY_DEDUP_LOGS"].value, env["RAY_DEDUP_LOGS"].layer) == ("1", "user")  # and --env above all
    (plain,) = select(matrix, device="a3", backend="vllm")
    assert "HYDRA_FULL_ERROR" not in effective_env(plain)


def test_env_shows_the_framework_layer_with_its_sources():
    result = invoke("env", "--device", "a3", "--backend", "sglang", "--framework", "verl")
    assert result.returncode == 0, result.stderr
    line = next(ln for ln in result.stdout.splitlines() if ln.startswith("HYDRA_FULL_ERROR "))
    assert "framework:verl" in line and "multi-machine_task_startup_practice.rst" in line


def test_committed_framework_locks_are_fresh_and_hold_verl(matrix):
    for backend in ("vllm", "sglang"):
        (v,) = select(matrix, device="a3", backend=backend, framework="verl")
        lock = load_lock(v, "framework")
        # verl --no-deps from PyPI (its guide), megatron-core 0.16.1 (= Megatron-LM core_r0.16.0's code), mbridge 0.15.1
        assert (lock.pins["verl"], lock.pins["megatron-core"], lock.pins["mbridge"]) == ("0.9.1", "0.16.1", "0.15.1")
        assert lock.no_deps == {"verl": "0.9.1", "mindspeed": "0.16.0"}
        assert not [n for n in lock.pins if n.startswith(("nvidia-", "cuda-", "flashinfer"))]


def _framework_lock_copy(tmp_path: Path, matrix, edit) -> tuple:
    (v,) = select(matrix, device="a3", backend="vllm", framework="verl")
    spec = lock_spec(v, "framework")
    path = lock_path(locks_dir(matrix), spec)
    return spec, parse_lock_text(edit(path.read_text(encoding="utf-8")), tmp_path / path.name)


def test_a_framework_lock_that_moves_a_backend_pin_unexplained_is_refused(tmp_path, matrix):
    # the backend lock pins transformers 5.5.4 and no override moves it
    spec, lock = _framework_lock_copy(tmp_path, matrix, lambda t: t + "transformers==4.57.6 --hash=sha256:"
                                      + "0" * 64 + "\n")
    with pytest.raises(LockError, match=r"transformers==4\.57\.6 over the backend lock's transformers==5\.5\.4"):
        check_lock(spec, lock)
    spec, good = _framework_lock_copy(tmp_path, matrix, lambda t: t)
    check_lock(spec, good)


def test_a_framework_lock_over_another_backend_lock_is_stale(tmp_path, matrix):
    from dataclasses import replace

    spec, lock = _framework_lock_copy(tmp_path, matrix, lambda t: t)
    moved = replace(spec, over=replace(spec.over, text=spec.over.text + "# one more line\n"))
    with pytest.raises(LockError, match="stale: the backend lock it was resolved over changed"):
        check_lock(moved, lock)


def test_a_missing_framework_lock_names_the_command(tmp_path, matrix):
    (v,) = select(matrix, device="a3", backend="vllm", framework="verl")
    root = tmp_path / "locks"
    shutil.copytree(locks_dir(matrix), root)
    lock_path(root, lock_spec(v, "framework", root)).unlink()
    with pytest.raises(LockError, match="invoke lock --layer framework --release cann9.1.0-pt2.10.0 --backend vllm "
                                        "--framework verl"):
        load_lock(v, "framework", root)


def test_unknown_framework_in_the_matrix_is_named(tmp_path):
    from tests.unit.helpers import mutated_matrix

    def mutate(doc):
        doc["releases"]["cann9.1.0-pt2.10.0"]["frameworks"]["verll"] = \
            doc["releases"]["cann9.1.0-pt2.10.0"]["frameworks"].pop("verl")

    with pytest.raises(Exception, match=r"releases\.cann9\.1\.0-pt2\.10\.0\.frameworks\.verll: unknown framework"):
        load_matrix(mutated_matrix(tmp_path, mutate))


def test_selection_error_type(matrix):
    with pytest.raises(SelectionError):
        select(matrix, device="a3", backend="none", framework="verl")


def _run_print(*argv: str, **env: str) -> subprocess.CompletedProcess:
    import os

    keep = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT",
                                                              "DASHBOARD_PORT")}
    return subprocess.run([sys.executable, "-m", "invoke", "run", "--device", "a3", "--backend", "vllm",
                           "--framework", "verl", "--devices", "0-15", "--print", *argv], cwd=ROOT,
                          capture_output=True, text=True, timeout=120, env={**keep, **env})


def test_a_multi_node_framework_job_passes_rays_variables_and_asks_for_host_networking():
    # ref000's Ray cluster variables, as a head node of two would export them
    head = {"RANK": "0", "WORLD_SIZE": "2", "MASTER_ADDR": "10.0.0.1", "MASTER_PORT": "6379", "DASHBOARD_PORT": "8265"}
    result = _run_print("--format", "docker", **head)
    assert result.returncode == 0, result.stderr
    for name, value in head.items():
        assert f"-e {name}={value}" in result.stdout, result.stdout
    # the warning on stderr: stdout stays the docker line alone
    assert "forms a Ray cluster" in result.stderr and "--network-host" in result.stderr, result.stderr
    assert "warning" not in result.stdout
    result = _run_print("--format", "k8s", "--network-host", **head)
    assert result.returncode == 0 and "forms a Ray cluster" not in result.stderr, result.stderr
    assert "hostNetwork: true" in result.stdout
    # one node: no cluster to reach
    assert "forms a Ray cluster" not in _run_print("--format", "docker").stderr
