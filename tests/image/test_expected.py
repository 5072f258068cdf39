"""Expectations written out by hand, one image per backend and the debug overlay: the values come from the
reference documents and compat.md, not from matrix.yaml or the code that renders the images, so a precedence or
derivation bug (a layer applied in the wrong order, a default dropped, a label taken from the wrong stage) fails
here even where the suite's other checks, which read the matrix, agree with it.

Read from the image's config (what every process inherits), no container needed."""

from __future__ import annotations

import pytest

from tests.conftest import TEST_ARCH, TEST_DOCKER_ARCH, TEST_NAMESPACE

pytestmark = [pytest.mark.docker, pytest.mark.slow]

ARCH = TEST_DOCKER_ARCH
COMMON = {  # ref000 (ROLL's guide), the layer every image carries (each read by torch_npu's library or CANN)
    "HCCL_CONNECT_TIMEOUT": "3600", "HCCL_EXEC_TIMEOUT": "3600", "HCCL_DETERMINISTIC": "false",
    "HCCL_OP_EXPANSION_MODE": "AIV",
    "PYTORCH_NPU_ALLOC_CONF": "expandable_segments:True", "MULTI_STREAM_MEMORY_REUSE": "1",
    "TASK_QUEUE_ENABLE": "2", "COMBINED_ENABLE": "1", "CPU_AFFINITY_CONF": "2", "OMP_NUM_THREADS": "1",
    "ACL_OP_COMPILER_CACHE_MODE": "enable", "ACL_OP_COMPILER_CACHE_DIR": "/tmp/npu_cache",
    "ASCEND_MAX_OP_CACHE_SIZE": "5000",
}
# what no image bakes: ref000's NPU_MEMORY_FRACTION is MindIE's (MindIE-LLM's config reads it; no file of torch_npu,
# vLLM, vLLM-Ascend or SGLang names it); vLLM 0.23.0 has no VLLM_USE_V1 (V0 removed in 0.13.0); vLLM-Ascend 0.23.0's
# envs.py reads neither FLASHCOMM (renamed FLASHCOMM1), DENSE_OPTIMIZE (PR 5272) nor PREFETCH_MLP (additional_config)
UNREAD = ["NPU_MEMORY_FRACTION", "VLLM_USE_V1", "VLLM_ASCEND_ENABLE_FLASHCOMM", "VLLM_ASCEND_ENABLE_DENSE_OPTIMIZE",
          "VLLM_ASCEND_ENABLE_PREFETCH_MLP"]
# vllm_ascend/envs.py 0.23.0: FlashComm under its 0.11.0 name, and SOC_VERSION for A3 (compat.md Devices;
# vllm-ascend's Dockerfile.a3), which only vLLM-Ascend reads; ref000: graph mode wants task queue level 1; vLLM 0.23.0
# (vllm/platforms) and vLLM-Ascend 0.23.0 (platform.py) leave ASCEND_RT_VISIBLE_DEVICES to Ray with the Ray variable
VLLM_0230 = {"TASK_QUEUE_ENABLE": "1", "VLLM_ASCEND_ENABLE_FLASHCOMM1": "1", "SOC_VERSION": "ascend910_9391",
             "RAY_EXPERIMENTAL_NOSET_ASCEND_RT_VISIBLE_DEVICES": "1"}
PRODUCTION = {"ASCEND_GLOBAL_LOG_LEVEL": "3", "ASDOPS_LOG_LEVEL": "ERROR", "ATB_LOG_LEVEL": "ERROR",
              "ASCEND_SLOG_PRINT_TO_STDOUT": "0", "ASCEND_LAUNCH_BLOCKING": "0"}  # ref000
DEBUG = {"ASCEND_GLOBAL_LOG_LEVEL": "0", "ASDOPS_LOG_LEVEL": "INFO", "ATB_LOG_LEVEL": "INFO",
         "ASCEND_SLOG_PRINT_TO_STDOUT": "1", "ASCEND_LAUNCH_BLOCKING": "1"}  # ref000, for debugging
JEMALLOC = f"/usr/lib/{TEST_ARCH}-linux-gnu/libjemalloc.so.2"  # ref004 2.1
CANN_850_A3 = {  # compat.md: CANN 8.5.0 (HDK floor 25.5.0, cann-<VER> layout), torch_npu 2.8.0.post2 on torch 2.8.0
    "io.ascend-images.device": "a3", "io.ascend-images.soc-version": "ascend910_9391",
    "io.ascend-images.cann": "8.5.0", "io.ascend-images.cann-layout": "cann-versioned",
    "io.ascend-images.hdk-floor": "25.5.0", "io.ascend-images.torch": "2.8.0",
    "io.ascend-images.torch-npu": "2.8.0.post2", "io.ascend-images.release": "cann8.5.0-pt2.8.0",
    "io.ascend-images.os": "debian12", "io.ascend-images.arch": TEST_ARCH, "io.ascend-images.python": "system",
    "io.ascend-images.python-version": "3.11",
}
# SG: SGLang 0.5.17's NPU image is built on CANN 9.0.0 with torch_npu 2.10.0 (PT: 2.10.0 is CANN 9.0.0's, on torch
# 2.10.0); the CANN 9.0.1 release notes list HDK 25.5.1 as 9.0.0's oldest matched driver; CCI: 9.0.0 keeps the
# cann-<VER> tree and sets no ATB_CXX_ABI (that came with 9.0.1, PR 104)
CANN_900_A3 = {**CANN_850_A3, "io.ascend-images.cann": "9.0.0", "io.ascend-images.hdk-floor": "25.5.1",
               "io.ascend-images.torch": "2.10.0", "io.ascend-images.torch-npu": "2.10.0",
               "io.ascend-images.release": "cann9.0.0-sglang0.5.17"}
# PT: torch_npu 2.10.0.post4 is made for CANN 9.1.0 and pins torch 2.10.0; the CANN 9.1.0 release notes make
# Ascend HDK 25.2.X the oldest compatible driver; CCI: 9.x keeps the cann-<VER> tree and (from 9.0.1) sets
# ATB_CXX_ABI, here the torch wheel's C++11 ABI (1)
CANN_910_A3 = {**CANN_850_A3, "io.ascend-images.cann": "9.1.0", "io.ascend-images.hdk-floor": "25.2.0",
               "io.ascend-images.cann-layout": "cann-versioned-atb-abi", "io.ascend-images.torch": "2.10.0",
               "io.ascend-images.torch-npu": "2.10.0.post4", "io.ascend-images.release": "cann9.1.0-pt2.10.0"}
TAIL = f"cann9.1.0-a3-debian12-py3.11-{ARCH}"
A2_LABELS = {"io.ascend-images.device": "a2", "io.ascend-images.soc-version": "ascend910b1"}
# ref002 (verl's SGLang quickstart): CANN 8.3.RC1 with torch 2.7.1 / torch_npu 2.7.1.post2; MF: CANN 8.3.RC1's
# driver is HDK 25.3.RC1; CCI: up to 8.3 CANN lives under ascend-toolkit/<ver> with a `latest` link
CANN_83_A2 = {**CANN_850_A3, **A2_LABELS, "io.ascend-images.cann": "8.3.RC1",
              "io.ascend-images.cann-layout": "toolkit-latest", "io.ascend-images.hdk-floor": "25.3.RC1",
              "io.ascend-images.torch": "2.7.1", "io.ascend-images.torch-npu": "2.7.1.post2",
              "io.ascend-images.release": "cann8.3.rc1-sglang0.5.8"}
TCMALLOC = f"/usr/lib/{TEST_ARCH}-linux-gnu/libtcmalloc.so.4"  # ref004 2.2; Debian libgoogle-perftools4
VERL = {  # ref002 (3.环境变量与参数); verl multi-machine_task_startup_practice.rst; install_guidance.rst; ref001 (MC2)
    "HCCL_HOST_SOCKET_PORT_RANGE": "60000-60050", "HCCL_NPU_SOCKET_PORT_RANGE": "61000-61050",
    "RAY_EXPERIMENTAL_NOSET_ASCEND_RT_VISIBLE_DEVICES": "1", "HCCL_ASYNC_ERROR_HANDLING": "0", "RAY_DEDUP_LOGS": "0",
    "HYDRA_FULL_ERROR": "1", "TRANSFORMERS_VERBOSITY": "error", "VLLM_ASCEND_ENABLE_MATMUL_ALLREDUCE": "1",
}
# ref000 (Environment Variables Set by ROLL: what roll/platforms/npu.py gives its Ray workers); ROLL's
# docker/Dockerfile.A3:12 at 8eb27cc2 (ENV HCCL_NPU_SOCKET_PORT_RANGE=auto)
ROLL = {
    "RAY_EXPERIMENTAL_NOSET_ASCEND_RT_VISIBLE_DEVICES": "1", "VLLM_ALLOW_INSECURE_SERIALIZATION": "1",
    "RAY_get_check_signal_interval_milliseconds": "1", "RAY_CGRAPH_get_timeout": "600",
    "HCCL_NPU_SOCKET_PORT_RANGE": "auto",
}
EXPECTED = {
    f"torch-npu:2.10.0.post4-cann9.1.0-a3-debian12-py3.11-{ARCH}": {
        "env": {**COMMON, **PRODUCTION, "ATB_CXX_ABI": "1", "ASCEND_IMAGES_HDK_FLOOR": "25.2.0",
                "ASCEND_HOME_PATH": "/usr/local/Ascend/cann-9.1.0"},
        "absent": ["LD_PRELOAD", "HCCL_HOST_SOCKET_PORT_RANGE", "SOC_VERSION", *UNREAD],
        "labels": {**CANN_910_A3, "io.ascend-images.stage": "torch", "io.ascend-images.backend": "none",
                   "io.ascend-images.profile": "production"},
    },
    f"torch-npu:2.10.0.post4-cann9.1.0-a2-debian12-py3.11-{ARCH}": {
        "env": {**COMMON, **PRODUCTION, "ATB_CXX_ABI": "1", "ASCEND_IMAGES_HDK_FLOOR": "25.2.0",
                "ASCEND_HOME_PATH": "/usr/local/Ascend/cann-9.1.0"},
        "absent": ["LD_PRELOAD", "HCCL_HOST_SOCKET_PORT_RANGE", "SOC_VERSION", *UNREAD],
        "labels": {**CANN_910_A3, **A2_LABELS, "io.ascend-images.stage": "torch", "io.ascend-images.backend": "none",
                   "io.ascend-images.profile": "production"},
    },
    f"torch-npu:2.7.1.post2-cann8.3.rc1-a2-debian12-py3.11-{ARCH}": {
        "env": {**COMMON, **PRODUCTION, "ASCEND_HOME_PATH": "/usr/local/Ascend/ascend-toolkit/latest",
                "ASCEND_IMAGES_HDK_FLOOR": "25.3.RC1"},
        "absent": ["LD_PRELOAD", "ATB_CXX_ABI", "SOC_VERSION", *UNREAD],
        "labels": {**CANN_83_A2, "io.ascend-images.stage": "torch", "io.ascend-images.backend": "none",
                   "io.ascend-images.profile": "production"},
    },
    # the debug profile, an --env value at build time and an allocator the backend does not preload: one thin overlay
    f"torch-npu:2.10.0.post4-{TAIL}-debug-tcmalloc-env455b65e5": {
        "env": {**COMMON, **DEBUG, "OMP_NUM_THREADS": "8", "LD_PRELOAD": TCMALLOC, "ATB_CXX_ABI": "1",
                "ASCEND_HOME_PATH": "/usr/local/Ascend/cann-9.1.0"},
        "absent": ["SOC_VERSION", *UNREAD],
        "labels": {**CANN_910_A3, "io.ascend-images.stage": "overlay", "io.ascend-images.backend": "none",
                   "io.ascend-images.allocator": "tcmalloc", "io.ascend-images.profile": "debug",
                   "io.ascend-images.user-env": '{"OMP_NUM_THREADS": "8"}'},
    },
    f"vllm-ascend:0.23.0-cann9.1.0-a3-debian12-py3.11-{ARCH}": {
        # VA: 0.23.0 pins triton-ascend 3.2.2
        "env": {**COMMON, **PRODUCTION, **VLLM_0230, "LD_PRELOAD": JEMALLOC, "ATB_CXX_ABI": "1",
                "ASCEND_HOME_PATH": "/usr/local/Ascend/cann-9.1.0"},
        "absent": ["HCCL_HOST_SOCKET_PORT_RANGE", "SGLANG_DEEPEP_BF16_DISPATCH", *UNREAD],
        "labels": {**CANN_910_A3, "io.ascend-images.stage": "vllm", "io.ascend-images.backend": "vllm",
                   "io.ascend-images.vllm": "0.23.0", "io.ascend-images.vllm-ascend": "0.23.0",
                   "io.ascend-images.triton-ascend": "3.2.2", "io.ascend-images.allocator": "jemalloc",
                   "io.ascend-images.profile": "production",
                   "io.ascend-images.test-double": "cann,off-pypi-wheels"},
    },
    f"sglang:0.5.17-cann9.0.0-a3-debian12-py3.11-{ARCH}": {
        # ref002: SGLang's HCCL port ranges and DeepEP's BF16 dispatch (sglang/srt/environ.py 0.5.17); not its Ray
        # variable: Ray reads it (ray/_private/accelerators/npu.py), and the SGLang image ships no Ray
        "env": {**COMMON, **PRODUCTION, "HCCL_HOST_SOCKET_PORT_RANGE": "60000-60050",
                "HCCL_NPU_SOCKET_PORT_RANGE": "61000-61050",
                "SGLANG_DEEPEP_BF16_DISPATCH": "1", "LD_PRELOAD": JEMALLOC,
                "ASCEND_HOME_PATH": "/usr/local/Ascend/cann-9.0.0"},
        "absent": ["ATB_CXX_ABI", "RAY_EXPERIMENTAL_NOSET_ASCEND_RT_VISIBLE_DEVICES", "SOC_VERSION", *UNREAD],
        "labels": {**CANN_900_A3, "io.ascend-images.stage": "sglang", "io.ascend-images.backend": "sglang",
                   "io.ascend-images.sglang": "0.5.17", "io.ascend-images.sgl-kernel-npu": "2026.7.27",
                   "io.ascend-images.allocator": "jemalloc", "io.ascend-images.profile": "production",
                   "io.ascend-images.test-double": "cann,sgl-kernel-npu,off-pypi-wheels"},
    },
    # verl over vLLM-Ascend 0.23.0 on CANN 9.1.0 (verl's install guide, section 2): vLLM's layer (ref000), then verl's
    f"verl:0.9.1-vllm0.23.0-cann9.1.0-a3-debian12-py3.11-{ARCH}": {
        "env": {**COMMON, **PRODUCTION, **VLLM_0230, **VERL, "LD_PRELOAD": JEMALLOC, "ATB_CXX_ABI": "1",
                "ASCEND_HOME_PATH": "/usr/local/Ascend/cann-9.1.0"},
        "absent": ["SGLANG_DEEPEP_BF16_DISPATCH", "VLLM_ALLOW_INSECURE_SERIALIZATION", *UNREAD],
        "labels": {**CANN_910_A3, "io.ascend-images.stage": "framework", "io.ascend-images.backend": "vllm",
                   "io.ascend-images.vllm-ascend": "0.23.0", "io.ascend-images.framework": "verl",
                   "io.ascend-images.framework-version": "0.9.1", "io.ascend-images.allocator": "jemalloc",
                   "io.ascend-images.test-double": "cann,off-pypi-wheels,framework-archives"},
    },
    # ROLL over vLLM-Ascend 0.23.0 on CANN 9.1.0 (ROLL's docker/Dockerfile.A3): vLLM's layer (ref000), then ROLL's
    f"roll:0.3.0-vllm0.23.0-cann9.1.0-a3-debian12-py3.11-{ARCH}": {
        "env": {**COMMON, **PRODUCTION, **VLLM_0230, **ROLL, "LD_PRELOAD": JEMALLOC, "ATB_CXX_ABI": "1",
                "ASCEND_HOME_PATH": "/usr/local/Ascend/cann-9.1.0"},
        # verl's and SGLang's, not ROLL's
        "absent": ["SGLANG_DEEPEP_BF16_DISPATCH", "HCCL_HOST_SOCKET_PORT_RANGE", "VLLM_ASCEND_ENABLE_MATMUL_ALLREDUCE",
                   "HYDRA_FULL_ERROR", *UNREAD],
        "labels": {**CANN_910_A3, "io.ascend-images.stage": "framework", "io.ascend-images.backend": "vllm",
                   "io.ascend-images.vllm-ascend": "0.23.0", "io.ascend-images.framework": "roll",
                   "io.ascend-images.framework-version": "0.3.0", "io.ascend-images.allocator": "jemalloc",
                   "io.ascend-images.test-double": "cann,off-pypi-wheels,framework-archives"},
    },
}


def test_every_ci_image_has_an_expectation_written_out():
    from tests.image.conftest import ci_image_tags

    assert sorted(t.split("/", 1)[1] for t in ci_image_tags()) == sorted(EXPECTED)


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_env_and_labels_written_out_by_hand(docker_client, ci_images, name):
    tag = f"{TEST_NAMESPACE}/{name}"
    assert tag in ci_images, f"{tag} is not in the CI selection any more: update EXPECTED with the images CI builds"
    config = docker_client.api.inspect_image(tag)["Config"]
    env = dict(item.split("=", 1) for item in config["Env"])
    want = EXPECTED[name]
    wrong = {k: (env.get(k), v) for k, v in want["env"].items() if env.get(k) != v}
    assert not wrong, f"(have, want): {wrong}"
    assert not [k for k in want["absent"] if k in env]
    labels = config["Labels"]
    wrong = {k: (labels.get(k), v) for k, v in want["labels"].items() if labels.get(k) != v}
    assert not wrong, f"(have, want): {wrong}"
