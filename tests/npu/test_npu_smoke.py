"""Checks only a real Ascend host can run, inside the image, through `invoke run`'s passthrough.

    pytest tests/npu --image REF            # on a host with /dev/davinci*
    ASCEND_TEST_DEVICES=0-1                 # which NPUs (default: 0-1 if present, else 0)
    ASCEND_TEST_MODEL=/models/Qwen2.5-0.5B  # optional: a tiny generation with the image's backend

Skipped cleanly anywhere without /dev/davinci0.
"""

from __future__ import annotations

import io
import os
import textwrap
from pathlib import Path

import pytest

from ascend_images.runtime.run import RunSpec, check_host, parse_devices, run_container

pytestmark = [
    pytest.mark.npu,
    pytest.mark.skipif(not Path("/dev/davinci0").exists(), reason="no Ascend NPU on this host (/dev/davinci0)"),
]


def devices() -> tuple[int, ...]:
    default = "0-1" if Path("/dev/davinci1").exists() else "0"
    return tuple(parse_devices(os.environ.get("ASCEND_TEST_DEVICES", default)))


@pytest.fixture(scope="module")
def npu_image(request):
    images = request.config.getoption("--image")
    if not images:
        pytest.skip("pass --image REF: the image to smoke-test on this NPU host")
    return images[0]


def in_image(client, image: str, script: str, *, driver_mounts: str = "auto",
             env: dict | None = None) -> tuple[int, str]:
    spec = RunSpec(image, ("bash", "-c", script), devices(), driver_mounts=driver_mounts, ipc_host=True,
                   env={"ASCEND_PREFLIGHT": "strict", **(env or {})})
    check_host(spec)
    out = io.StringIO()
    return run_container(client, spec, out), out.getvalue()


def test_npu_smi(docker_client, npu_image):
    code, out = in_image(docker_client, npu_image, "npu-smi info")
    assert code == 0 and "NPU" in out, out


def test_torch_npu_sees_devices(docker_client, npu_image):
    probe = "import torch, torch_npu; print(torch.npu.is_available(), torch.npu.device_count())"
    code, out = in_image(docker_client, npu_image, f"python -c '{probe}'")
    assert code == 0, out
    assert out.strip().splitlines()[-1] == f"True {len(devices())}"


def test_matmul_on_npu(docker_client, npu_image):
    script = ("python -c 'import torch, torch_npu; a = torch.ones(256, 256).npu(); "
              "b = (a @ a).cpu(); print(float(b[0, 0]))'")
    code, out = in_image(docker_client, npu_image, script)
    assert code == 0 and out.strip().splitlines()[-1] == "256.0", out


def test_hccl_all_reduce(docker_client, npu_image):
    if len(devices()) < 2:
        pytest.skip("needs 2 devices (ASCEND_TEST_DEVICES=0-1)")
    program = textwrap.dedent("""
        import os, torch, torch_npu, torch.distributed as dist
        dist.init_process_group("hccl")
        rank = dist.get_rank()
        torch.npu.set_device(rank)
        t = torch.ones(4).npu() * (rank + 1)
        dist.all_reduce(t)
        print("allreduce", rank, float(t[0]))
    """)
    script = f"cat > /tmp/ar.py <<'PY'\n{program}\nPY\ntorchrun --nproc_per_node 2 /tmp/ar.py"
    code, out = in_image(docker_client, npu_image, script, driver_mounts="full")
    assert code == 0, out
    assert "allreduce 0 3.0" in out and "allreduce 1 3.0" in out


def test_tiny_generation(docker_client, npu_image):
    model = os.environ.get("ASCEND_TEST_MODEL")
    if not model:
        pytest.skip("set ASCEND_TEST_MODEL to a small model directory")
    backend = docker_client.images.get(npu_image).labels.get("io.ascend-images.backend")
    if backend == "vllm":
        code_py = (f"from vllm import LLM, SamplingParams; llm = LLM({model!r}, max_model_len=512); "
                   "print(llm.generate(['Hello'], SamplingParams(max_tokens=8))[0].outputs[0].text)")
    elif backend == "sglang":
        code_py = (f"import sglang as sgl; e = sgl.Engine(model_path={model!r}, attention_backend='ascend'); "
                   "print(e.generate('Hello', {'max_new_tokens': 8})['text'])")
    else:
        pytest.skip(f"backend {backend!r} serves nothing")
    code, out = in_image(docker_client, npu_image, f"python -c {code_py!r}")
    assert code == 0 and out.strip(), out
