"""Checks only a real Ascend host can run, inside the image, through `invoke run`'s passthrough.

    pytest tests/npu --image REF            # on a host with /dev/davinci*
    ASCEND_TEST_DEVICES=0-1                 # which NPUs (default: 0-1 if present, else 0)
    ASCEND_TEST_MODEL=/models/Qwen2.5-0.5B  # optional: the image's backend serves it (mounted read-only, -v),
                                            # asked for a completion through a published port (-p)

Skipped cleanly anywhere without /dev/davinci0.
"""

from __future__ import annotations

import io
import json
import os
import socket
import textwrap
import time
import urllib.error
import urllib.request
import uuid
from pathlib import Path

import pytest

from ascend_images.runtime.run import RunSpec, check_host, check_spec, run_container
from ascend_images.runtime.runflags import parse_devices, parse_publish, parse_volume

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


def passthrough(client, image: str) -> dict:
    """What `invoke run` passes for the image's device (its label): the 950's control nodes have no devmm_svm, and
    its UB devices and files go in where the host has them (matrix.yaml devices.<d>)."""
    from ascend_images.matrix.model import load_matrix

    device = (client.images.get(image).labels or {}).get("io.ascend-images.device")
    spec = load_matrix(Path(__file__).resolve().parents[2] / "matrix.yaml").spec.devices.get(device)
    if spec is None:
        return {}
    return {"device": device, "min_devices": spec.min_devices, "control_nodes": tuple(spec.control_nodes),
            "optional_nodes": tuple(spec.optional_nodes), "device_mounts": tuple(spec.optional_mounts)}


def in_image(client, image: str, script: str, *, driver_mounts: str = "auto",
             env: dict | None = None) -> tuple[int, str]:
    spec = RunSpec(image, ("bash", "-c", script), devices(), driver_mounts=driver_mounts, ipc_host=True,
                   env={"ASCEND_PREFLIGHT": "strict", **(env or {})}, **passthrough(client, image))
    check_host(spec)
    out = io.StringIO()
    return run_container(client, spec, out), out.getvalue()


def test_the_950s_ub_devices_reach_the_container(docker_client, npu_image):
    """On a 950 host with the UB protocol, /dev/ummu and /dev/uburma are passed and seen inside (URMA needs them)."""
    if passthrough(docker_client, npu_image).get("device") != "a5":
        pytest.skip("not a 950 image")
    if not (Path("/dev/ummu").exists() and Path("/dev/uburma").exists()):
        pytest.skip("this 950 host has no UB devices (/dev/ummu, /dev/uburma)")
    code, out = in_image(docker_client, npu_image, "ls -d /dev/ummu /dev/uburma && test ! -e /dev/devmm_svm && echo ok")
    assert code == 0 and out.strip().endswith("ok"), out


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


def image_backend(client, image: str) -> str:
    return (client.images.get(image).labels or {}).get("io.ascend-images.backend", "none")


def test_vllm_ascends_device_check_passes_on_the_real_chip(docker_client, npu_image):
    """What the image tests prove with the chip's answer stubbed, on the chip itself: the build's recorded device is
    the one torch_npu reads from the hardware (vLLM-Ascend's NPUWorker makes this check at start-up)."""
    if image_backend(docker_client, npu_image) != "vllm":
        pytest.skip("not an image over vLLM-Ascend")
    probe = ("import torch_npu, vllm_ascend.utils as u; u.check_ascend_device_type(); "
             "print(torch_npu.npu.get_soc_version(), u.get_ascend_device_type().name)")
    code, out = in_image(docker_client, npu_image, f"python -c '{probe}'")
    assert code == 0, out


def test_mooncakes_engine_imports_with_the_real_cann(docker_client, npu_image):
    """CANN's LLM-DataDist and metadef libraries, which the CANN test double lacks, resolve with the real toolkit."""
    code, out = in_image(docker_client, npu_image, "pip show mooncake-transfer-engine-npu >/dev/null 2>&1 || "
                         "{ echo no-mooncake; exit 0; }; python -c 'import mooncake.engine; print(\"ok\")'")
    if out.strip().endswith("no-mooncake"):
        pytest.skip("the image does not install Mooncake")
    assert code == 0 and out.strip().endswith("ok"), out


SERVED = "tiny"  # --served-model-name of both servers
SERVE_WAIT = 900  # seconds: loading weights and compiling graphs on the NPU


def serve_command(backend: str, model_dir: str) -> list[str]:
    """The backend's own OpenAI-compatible server on port 8000, the model mounted at model_dir."""
    if backend == "vllm":
        return ["vllm", "serve", model_dir, "--host", "0.0.0.0", "--port", "8000", "--max-model-len", "512",
                "--served-model-name", SERVED]
    return ["python", "-m", "sglang.launch_server", "--model-path", model_dir, "--host", "0.0.0.0", "--port", "8000",
            "--attention-backend", "ascend", "--served-model-name", SERVED]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def test_tiny_generation(docker_client, npu_image):
    """ASCEND_TEST_MODEL mounted read-only (-v), the backend's server started detached with a published port (-p),
    as `invoke run ... --detach -v MODEL:/models/NAME:ro -p 127.0.0.1:PORT:8000 -- <launch line>` starts it;
    then a completion asked over HTTP from the host."""
    model = os.environ.get("ASCEND_TEST_MODEL")
    if not model:
        pytest.skip("set ASCEND_TEST_MODEL to a small model directory")
    backend = docker_client.images.get(npu_image).labels.get("io.ascend-images.backend")
    if backend not in ("vllm", "sglang"):
        pytest.skip(f"backend {backend!r} serves nothing")
    host_dir = Path(model).resolve()
    model_dir = f"/models/{host_dir.name}"
    port = free_port()
    name = f"ascend-images-npu-serve-{uuid.uuid4().hex[:8]}"
    spec = RunSpec(npu_image, tuple(serve_command(backend, model_dir)), devices(), ipc_host=True, name=name,
                   **passthrough(docker_client, npu_image),
                   env={"ASCEND_PREFLIGHT": "strict"}, volumes=(parse_volume(f"{host_dir}:{model_dir}:ro"),),
                   ports=(parse_publish(f"127.0.0.1:{port}:8000"),), detach=True)
    check_spec(spec)
    check_host(spec)
    try:
        assert run_container(docker_client, spec, io.StringIO()) == 0
        container = docker_client.containers.get(name)
        assert next(m for m in container.attrs["Mounts"] if m["Destination"] == model_dir)["RW"] is False
        base = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + SERVE_WAIT
        while True:
            try:
                with urllib.request.urlopen(f"{base}/v1/models", timeout=10) as response:
                    if SERVED in response.read().decode():
                        break
            except (urllib.error.URLError, ConnectionError, TimeoutError):
                pass
            container.reload()
            logs = container.logs(tail=200).decode(errors="replace")
            assert container.status == "running", f"the server stopped ({container.status}):\n{logs}"
            assert time.monotonic() < deadline, f"no answer on {base}/v1/models within {SERVE_WAIT} s:\n{logs}"
            time.sleep(5)
        request = urllib.request.Request(
            f"{base}/v1/completions", headers={"Content-Type": "application/json"},
            data=json.dumps({"model": SERVED, "prompt": "Hello", "max_tokens": 8, "temperature": 0}).encode())
        with urllib.request.urlopen(request, timeout=300) as response:
            answer = json.loads(response.read())
        assert answer["choices"][0]["text"].strip(), answer
    finally:
        for leftover in docker_client.containers.list(all=True, filters={"name": name}):
            leftover.remove(force=True)


# A GRPO step with verl (its quick start's trainer and keys: verl docs/ascend_tutorial quick_start.rst and
# tests/special_npu/quick_start/*.sh at main 1dda039b): two prompts of a gsm8k-style parquet written in the
# container, the rollout on the image's backend, one training step. Needs a small causal LM (ASCEND_TEST_MODEL).
GRPO_DATA = """
import pandas as pd
rows = [{"data_source": "openai/gsm8k", "prompt": [{"role": "user", "content": q}], "ability": "math",
         "reward_model": {"style": "rule", "ground_truth": a}, "extra_info": {"split": "train", "index": i}}
        for i, (q, a) in enumerate([("What is 2 + 3? Answer after ####.", "5"),
                                    ("What is 4 * 2? Answer after ####.", "8")])]
pd.DataFrame(rows).to_parquet("/tmp/grpo.parquet")
"""


def test_verl_grpo_step(docker_client, npu_image):
    model = os.environ.get("ASCEND_TEST_MODEL")
    labels = docker_client.images.get(npu_image).labels
    if labels.get("io.ascend-images.framework") != "verl":
        pytest.skip("not a verl image")
    if not model:
        pytest.skip("set ASCEND_TEST_MODEL to a small model directory")
    host_dir = Path(model).resolve()
    model_dir = f"/models/{host_dir.name}"
    n = len(devices())
    args = " ".join([
        "algorithm.adv_estimator=grpo", "data.train_files=/tmp/grpo.parquet", "data.val_files=/tmp/grpo.parquet",
        "data.train_batch_size=2", "data.max_prompt_length=64", "data.max_response_length=16",
        f"actor_rollout_ref.model.path={model_dir}", "actor_rollout_ref.actor.ppo_mini_batch_size=2",
        "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=1",
        f"actor_rollout_ref.rollout.name={labels['io.ascend-images.backend']}", "actor_rollout_ref.rollout.n=2",
        "actor_rollout_ref.rollout.tensor_model_parallel_size=1",
        "actor_rollout_ref.rollout.gpu_memory_utilization=0.4",
        "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=1",
        "actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu=1", f"trainer.n_gpus_per_node={n}",
        "trainer.nnodes=1", "trainer.total_training_steps=1", "trainer.device=npu", "trainer.logger=console",
        "trainer.val_before_train=False", "trainer.save_freq=-1", "trainer.test_freq=-1"])
    script = f"python3 -c {json.dumps(GRPO_DATA)} && python3 -m verl.trainer.main_ppo {args}"
    spec = RunSpec(npu_image, ("bash", "-c", script), devices(), ipc_host=True, **passthrough(docker_client, npu_image),
                   env={"ASCEND_PREFLIGHT": "strict"}, volumes=(parse_volume(f"{host_dir}:{model_dir}:ro"),))
    check_host(spec)
    out = io.StringIO()
    code = run_container(docker_client, spec, out)
    assert code == 0 and "step:1" in out.getvalue(), out.getvalue()[-5000:]


# --- ROLL (an image with io.ascend-images.framework=roll), from a checkout of ROLL's tree on the host ---------------
#   ROLL_SOURCE=/src/ROLL   # alibaba/ROLL at v0.3.0 or main 8eb27cc2: its examples/ and data/ (mounted read-only, -v)
# The configuration is built as ROLL's examples/start_rlvr_pipeline.py builds it (hydra compose of the YAML, then
# dacite's from_dict into roll.pipeline.rlvr.rlvr_config.RLVRConfig), from its Ascend example
# examples/ascend_examples/qwen3_8b_rlvr_fsdp2.yaml (FSDP2 training, vLLM rollouts, hf_infer reference).
ROLL_CONFIG = """
import json, os, sys, tempfile
from dacite import from_dict
from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf

os.chdir(tempfile.mkdtemp())  # the config writes ./output/logs
with initialize_config_dir(config_dir="/roll/examples/ascend_examples", version_base=None, job_name="app"):
    cfg = compose(config_name="qwen3_8b_rlvr_fsdp2", overrides=sys.argv[1:])
from roll.pipeline.rlvr.rlvr_config import RLVRConfig
conf = from_dict(data_class=RLVRConfig, data=OmegaConf.to_container(cfg, resolve=True))
print(json.dumps({"train": conf.actor_train.strategy_args.strategy_name,
                  "infer": conf.actor_infer.strategy_args.strategy_name, "devices": conf.num_gpus_per_node}))
if os.environ.get("ROLL_RUN") == "1":  # one RLVR step, as start_rlvr_pipeline.py runs it
    from roll.distributed.scheduler.initialize import init
    from roll.pipeline.rlvr.rlvr_pipeline import RLVRPipeline
    init()
    RLVRPipeline(pipeline_config=conf).run()
    print("roll-step-done")
"""


def roll_source(docker_client, npu_image) -> Path:
    if docker_client.images.get(npu_image).labels.get("io.ascend-images.framework") != "roll":
        pytest.skip("not a ROLL image")
    source = os.environ.get("ROLL_SOURCE")
    if not source:
        pytest.skip("set ROLL_SOURCE to a checkout of ROLL's tree (v0.3.0 or main 8eb27cc2)")
    return Path(source).resolve()


def run_roll(docker_client, npu_image, source: Path, overrides: list[str], env: dict, extra_volumes=()):
    script = f"python3 -c {json.dumps(ROLL_CONFIG)} " + " ".join(json.dumps(o) for o in overrides)
    spec = RunSpec(npu_image, ("bash", "-c", script), devices(), ipc_host=True, **passthrough(docker_client, npu_image),
                   env={"ASCEND_PREFLIGHT": "strict", **env},
                   volumes=(parse_volume(f"{source}:/roll:ro"), *extra_volumes))
    check_host(spec)
    out = io.StringIO()
    return run_container(docker_client, spec, out), out.getvalue()


def test_roll_builds_its_ascend_example_configuration(docker_client, npu_image):
    """ROLL's own configuration code on the NPU platform: with devices visible, num_gpus_per_node is the YAML's."""
    code, out = run_roll(docker_client, npu_image, roll_source(docker_client, npu_image), [], {})
    assert code == 0, out[-5000:]
    said = json.loads([line for line in out.splitlines() if line.startswith("{")][-1])
    assert said == {"train": "fsdp2_train", "infer": "vllm", "devices": 16}, said


def test_roll_rlvr_step(docker_client, npu_image):
    """One RLVR step of the example on a tiny model: every role on the visible NPUs, two prompts of ROLL's math data,
    two samples each, the math rule reward."""
    source = roll_source(docker_client, npu_image)
    model = os.environ.get("ASCEND_TEST_MODEL")
    if not model:
        pytest.skip("set ASCEND_TEST_MODEL to a small model directory")
    host_dir = Path(model).resolve()
    model_dir = f"/models/{host_dir.name}"
    n = len(devices())
    on_all = f"list(range(0,{n}))"
    overrides = [
        f"pretrain={model_dir}", f"reward_pretrain={model_dir}", "max_steps=1", "save_steps=1000", "eval_steps=1000",
        "~validation", "rollout_batch_size=2", "num_return_sequences_in_group=2", "prompt_length=128",
        "response_length=32", f"num_gpus_per_node={n}", f"actor_train.device_mapping={on_all}",
        f"actor_infer.device_mapping={on_all}", f"reference.device_mapping={on_all}",
        "actor_train.training_args.gradient_accumulation_steps=1",
        f"actor_train.strategy_args.strategy_config.fsdp_size={n}",
        "actor_train.data_args.file_name=[/roll/data/math_deepmath_deal.jsonl]",
        "actor_infer.strategy_args.strategy_config.max_model_len=512",
        "actor_infer.strategy_args.strategy_config.gpu_memory_utilization=0.4", "rewards.math_rule.world_size=1",
    ]
    code, out = run_roll(docker_client, npu_image, source, overrides, {"ROLL_RUN": "1"},
                         (parse_volume(f"{host_dir}:{model_dir}:ro"),))
    assert code == 0 and "roll-step-done" in out, out[-5000:]


def test_cann_reads_the_variables_baked_for_it(docker_client, npu_image):
    """Each tuned variable the image bakes for a CANN component (tests/fixtures/env_readers/readers.yaml, from CANN's
    documentation; a test double off an NPU host) is named in the strings of the real CANN's libraries: HCCL's,
    ACL's, the log module's under $ASCEND_HOME_PATH/lib64, ATB's under $ATB_HOME_PATH/lib."""
    import yaml

    from tests.conftest import ROOT

    readers = yaml.safe_load((ROOT / "tests/fixtures/env_readers/readers.yaml").read_text())["readers"]
    code, out = in_image(docker_client, npu_image, "cat /etc/ascend-images/env.json")
    assert code == 0, out
    variables = json.loads(out[out.index("{"):])["variables"]
    names = sorted(n for n, e in variables.items() if "cann" in readers.get(n, {})
                   and not e["layer"].startswith(("cann:", "user")))
    assert names, "no variable for a CANN component in env.json"
    patterns = " ".join(f"-e {n}" for n in names)
    script = (f'grep -rhoaw {patterns} "$ASCEND_HOME_PATH/lib64" "${{ATB_HOME_PATH:-/nonexistent}}/lib" 2>/dev/null '
              "| sort -u")
    code, out = in_image(docker_client, npu_image, script)
    found = set(out.split())
    assert not set(names) - found, (f"{sorted(set(names) - found)}: baked for CANN in {npu_image}, and no library "
                                    "of its CANN names them")
