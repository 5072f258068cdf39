"""What only a framework image (verl, ROLL over a backend) has: its lock installed exactly, and the modules its
Ascend documents use importing with torch's device-backend autoload on, as users run them. The module lists are
written out by hand from upstream (verl 0.9.1's code, MindSpeed core_r0.16.0, Megatron core, ROLL v0.3.0: what they
import at their top and what verl's engines need), not from matrix.yaml."""

from __future__ import annotations

import json
import shlex

import pytest

from tests.image.test_image import NO_COMPILE_POOL, installed

pytestmark = [pytest.mark.docker, pytest.mark.slow, pytest.mark.framework_image]

# verl: its NPU patch (imported by verl only when an NPU is present, so named here), MindSpeed's adaptor (verl's
# MindSpeed engine swallows its ImportError, so it is named too: imported before Megatron, as verl's engine package
# does), the megatron.core modules verl's Megatron engine and utilities import at their top, the engine itself, and
# TransferQueue (verl's default v1 trainer imports it)
MODULES = {
    "verl": ["verl", "verl.models.transformers.npu_patch", "mindspeed.megatron_adaptor", "megatron.core",
             "megatron.core.parallel_state", "megatron.core.tensor_parallel", "megatron.core.pipeline_parallel",
             "megatron.core.distributed", "megatron.core.optimizer", "megatron.core.transformer",
             "megatron.core.models.gpt.gpt_model", "megatron.core.dist_checkpointing.mapping",
             "verl.workers.engine.megatron.transformer_impl", "transfer_queue", "mbridge"],
    # ROLL: its NPU platform and the scheduler and cluster modules a training job starts from, and the datasets
    # its pin holds at 3.1.0 (over the backend's dill, fsspec and numpy: the pins its lock moves)
    "roll": ["roll.platforms", "roll.platforms.npu", "roll.distributed.scheduler.initialize",
             "roll.distributed.executor.cluster", "datasets"],
}
PROBE = """
import importlib, json, sys, traceback
out = {"imported": [], "errors": {}}
for name in sys.argv[2:]:
    try:
        importlib.import_module(name)
        out["imported"].append(name)
    except BaseException:
        out["errors"][name] = traceback.format_exc()[-2500:]
try:
    if sys.argv[1] == "verl":
        import verl.workers.engine as engine
        out["engines"] = {n: getattr(engine, n, None) is not None
                          for n in ("FSDPEngineWithLMHead", "MegatronEngineWithLMHead", "MindspeedEngineWithLMHead")}
    elif sys.argv[1] == "roll":
        from roll.platforms import current_platform
        out["platform"] = [type(current_platform).__name__, current_platform.device_type]
        import datasets, numpy, ray, transformers
        out["versions"] = {"ray": ray.__version__, "datasets": datasets.__version__, "numpy": numpy.__version__,
                           "transformers": transformers.__version__}
except BaseException:
    out["errors"]["probe"] = traceback.format_exc()[-2500:]
print(json.dumps(out))
"""


@pytest.fixture(scope="module")
def framework_stack(host, variant) -> dict:
    names = " ".join(MODULES[variant.framework])
    result = host.run(f"{NO_COMPILE_POOL} python -c {shlex.quote(PROBE)} {variant.framework} {names}")
    assert result.rc == 0, f"exit {result.rc}\n{result.stdout}\n{result.stderr[-3000:]}"
    return json.loads(result.stdout.strip().splitlines()[-1])


def test_framework_installs_exactly_its_lock(host, variant, image_locks):
    """Every package of the framework's lock at its locked version, and the backend's below it untouched but for
    what the framework lock moves (an override matrix.yaml explains)."""
    lock, backend = image_locks["framework"], image_locks["backend"]
    have = installed(host)
    assert len(lock.pins) > 20
    assert {n: (v, have.get(n)) for n, v in lock.pins.items() if have.get(n) != v} == {}
    moved = {n for n in lock.pins if n in backend.pins}
    assert {n: (v, have.get(n)) for n, v in backend.pins.items() if n not in moved and have.get(n) != v} == {}
    assert lock.header["framework"] == f"{variant.framework}=={variant.framework_pins.version}"


def test_framework_modules_import(framework_stack, variant):
    assert framework_stack["errors"] == {}, "\n".join(framework_stack["errors"].values())
    assert framework_stack["imported"] == MODULES[variant.framework]
    if variant.framework == "verl":
        # each engine verl would choose on NPU exists: FSDP, Megatron, and MindSpeed's (which needs the adaptor)
        assert framework_stack["engines"] == {"FSDPEngineWithLMHead": True, "MegatronEngineWithLMHead": True,
                                              "MindspeedEngineWithLMHead": True}
    else:
        # ROLL picks its NPU platform as soon as torch_npu imports, device or not (roll/platforms/__init__.py)
        assert framework_stack["platform"] == ["NpuPlatform", "npu"]
        # ROLL's pins as its image installs them, written out from its requirements_common.txt (lines 1, 2, 6) and
        # docker/Dockerfile.A3:58 at 8eb27cc2: they win over vLLM-Ascend's where they differ
        versions = framework_stack["versions"]
        assert versions["ray"] == "2.48.0" and versions["datasets"] == "3.1.0"
        assert versions["numpy"].startswith("1.") and versions["transformers"] == "4.57.6", versions


def test_framework_archives_are_installed(host, variant):
    """The git archives (MindSpeed, ROLL) are installed as the distributions and versions upstream's setup.py says."""
    have = installed(host)
    want = {a.name: a.version for a in variant.framework_pins.archives}
    assert {n: have.get(n) for n in want} == want
