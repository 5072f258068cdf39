"""One Python process per image loads the whole stack, with torch's device-backend autoload on (as users run it):
torch and torch_npu, the backend's NPU code and entry points, the framework's modules, and SGLang's server. A torch
import takes most of a minute under emulation, so the checks that need one (test_image, test_cann_golden,
test_framework) read their part of this one process's report: each part its result or its traceback."""

from __future__ import annotations

import json
import shlex

# The framework modules, written out by hand from upstream, not from matrix.yaml.
# verl: its NPU patch (imported by verl only when an NPU is present, so named here), MindSpeed's adaptor (verl's
# MindSpeed engine swallows its ImportError, so it is named too: imported before Megatron, as verl's engine package
# does), the megatron.core modules verl's Megatron engine and utilities import at their top (verl 0.9.1, MindSpeed
# core_r0.16.0, Megatron core), the engine itself, and TransferQueue (verl's default v1 trainer imports it)
FRAMEWORK_MODULES = {
    "verl": ["verl", "verl.models.transformers.npu_patch", "mindspeed.megatron_adaptor", "megatron.core",
             "megatron.core.parallel_state", "megatron.core.tensor_parallel", "megatron.core.pipeline_parallel",
             "megatron.core.distributed", "megatron.core.optimizer", "megatron.core.transformer",
             "megatron.core.models.gpt.gpt_model", "megatron.core.dist_checkpointing.mapping",
             "verl.workers.engine.megatron.transformer_impl", "transfer_queue", "mbridge"],
    # ROLL v0.3.0: its NPU platform and the scheduler and cluster modules a training job starts from, and the datasets
    # its pin holds at 3.1.0 (over the backend's dill, fsspec and numpy: the pins its lock moves)
    "roll": ["roll.platforms", "roll.platforms.npu", "roll.distributed.scheduler.initialize",
             "roll.distributed.executor.cluster", "datasets"],
    "none": [],
}

# What torch_npu.npu.get_soc_version() answers on each device's chip, one value per device, written out by hand from
# vLLM-Ascend's own start-up check (vllm_ascend/utils.py check_ascend_device_type at v0.23.0 = 5cb98caa: 220-225 A2,
# 250-255 A3, 200-205 310P, 260 A5), never from matrix.yaml
CHIP_SOC = {"a2": 220, "a3": 250, "a5": 260}

STACK_PROBE = """
import importlib, importlib.metadata as m, json, runpy, sys, traceback
backend, framework, socs, image_modules, modules = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4], sys.argv[5:]
out = {}
try:
    import torch, torch_npu
    out["torch"] = [torch.__version__, torch_npu.__version__, torch.npu.is_available(), torch.npu.device_count()]
    out["cxx11_abi"] = int(torch.compiled_with_cxx11_abi())
except BaseException:
    out["torch_error"] = traceback.format_exc()[-3000:]
try:
    if backend == "vllm":
        # vLLM resolves its platform from the `vllm.platform_plugins` entry points: ours must name Ascend's
        ep = [e for e in m.entry_points(group="vllm.platform_plugins") if e.name == "ascend"][0]
        import vllm, vllm_ascend, vllm_ascend.platform
        out["backend"] = [ep.value, ep.load()(), vllm_ascend.platform.NPUPlatform.device_name]
        # vLLM-Ascend's own check at start-up (its NPUWorker calls it): the device its build records against the
        # chip's, with only the chip's answer stubbed: the image's device's chip first, then another device's
        import torch_npu, vllm_ascend.utils as ascend_utils
        asked, checked = torch_npu.npu.get_soc_version, {}
        out.setdefault("device_checks", {})["vllm-ascend"] = checked
        for soc in socs.split(","):
            torch_npu.npu.get_soc_version = lambda soc=int(soc): soc
            try:
                ascend_utils.check_ascend_device_type()
                checked[soc] = f"passed: {ascend_utils.get_ascend_device_type().name}"
            except BaseException as exc:
                checked[soc] = f"{type(exc).__name__}: {exc}"
        torch_npu.npu.get_soc_version = asked
        # what upstream's image installs beside vLLM-Ascend for run time (the modules given), importable with it
        found = out["image_packages"] = {}
        for name in image_modules.split(","):
            try:
                importlib.import_module(name)
                found[name] = "imported"
            except BaseException:
                found[name] = traceback.format_exc()[-1500:]
    elif backend == "sglang":
        ep = [e for e in m.entry_points(group="console_scripts") if e.name == "sglang"][0]
        ep.load()
        import sgl_kernel_npu, deep_ep, torch_memory_saver
        from sglang.srt.utils import is_npu
        try:  # SGLang's NPU path: it finds torch_npu, then refuses to go on without a visible NPU
            said = f"is_npu() = {is_npu()}"
        except RuntimeError as exc:
            said = str(exc)
        out["backend"] = [ep.value, sgl_kernel_npu.__name__, said]
except BaseException:
    out["backend_error"] = traceback.format_exc()[-3000:]
if framework != "none":
    found = out["framework"] = {"imported": [], "errors": {}}
    for name in modules:
        try:
            importlib.import_module(name)
            found["imported"].append(name)
        except BaseException:
            found["errors"][name] = traceback.format_exc()[-2500:]
    try:
        if framework == "verl":
            import verl.workers.engine as engine
            names = ("FSDPEngineWithLMHead", "MegatronEngineWithLMHead", "MindspeedEngineWithLMHead")
            found["engines"] = {n: getattr(engine, n, None) is not None for n in names}
        elif framework == "roll":
            from roll.platforms import current_platform
            found["platform"] = [type(current_platform).__name__, current_platform.device_type]
            import datasets, numpy, ray, transformers
            found["versions"] = {"ray": ray.__version__, "datasets": datasets.__version__,
                                 "numpy": numpy.__version__, "transformers": transformers.__version__}
    except BaseException:
        found["errors"]["probe"] = traceback.format_exc()[-2500:]
if backend == "sglang":
    # last, as it leaves the process half started: the server as `python -m sglang.launch_server --help` starts it,
    # in this process (a second emulated Python would import torch again). What it raised, as Python prints it.
    sys.argv = ["sglang.launch_server", "--help"]
    try:
        runpy.run_module("sglang.launch_server", run_name="__main__", alter_sys=True)
        out["server"] = "returned"
    except SystemExit as exc:
        out["server"] = f"SystemExit: {exc.code}"
    except BaseException:
        out["server"] = traceback.format_exc()[-6000:]
print(json.dumps(out))
"""

# importing SGLang warms up torch inductor's pool of compile workers: two more Pythons importing torch, which
# under emulation costs minutes and checks nothing here
NO_COMPILE_POOL = "env TORCHINDUCTOR_COMPILE_THREADS=1"


# The module each package upstream's vLLM-Ascend image installs beside it provides (VA Dockerfile*:25-54 at v0.23.0:
# ray, modelscope, vllm[audio]), written out by hand from the packages; Mooncake's engine is checked by its libraries
# (test_device_build.py), as it needs CANN libraries the CANN test double does not carry
IMAGE_PACKAGE_MODULES = {"ray": "ray", "modelscope": "modelscope", "av": "av", "soundfile": "soundfile",
                         "mistral-common": "mistral_common.audio"}


def chip_socs(device: str) -> str:
    """The SOC numbers the device checks stub the chip's answer with: the device's own, then another device's."""
    other = next(d for d in CHIP_SOC if d != device)
    return f"{CHIP_SOC[device]},{CHIP_SOC[other]}"


def probe_stack(host, backend: str, framework: str, device: str) -> dict:
    modules = " ".join(FRAMEWORK_MODULES[framework])
    result = host.run(f"{NO_COMPILE_POOL} python -c {shlex.quote(STACK_PROBE)} {backend} {framework} "
                      f"{chip_socs(device)} {','.join(IMAGE_PACKAGE_MODULES.values())} {modules}")
    assert result.rc == 0, f"exit {result.rc}\n{result.stdout}\n{result.stderr[-3000:]}"
    return json.loads(result.stdout.strip().splitlines()[-1])
