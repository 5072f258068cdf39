"""Expectations written out by hand, per stage kind, for every image CI builds: the values come from the reference
documents and the upstream facts per version in tests/fixtures/release_facts.yaml, not from matrix.yaml or the code
that renders the images, so a precedence or derivation bug (a layer applied in the wrong order, a default dropped, a
label taken from the wrong stage, a release paired with another CANN) fails here even where the suite's other checks,
which read the matrix, agree with it. An image is keyed by its kind and the versions its tag names, never by a
release's name: moving a default needs the new version's facts in the facts file, and no test edited.

Read from the image's config (what every process inherits), no container needed."""

from __future__ import annotations

import re

import pytest
import yaml

from tests.conftest import ROOT, TEST_ARCH, TEST_NAMESPACE

pytestmark = [pytest.mark.docker, pytest.mark.slow]

COMMON = {  # ref000 (ROLL's guide), the layer every image carries (each read by torch_npu's library or CANN)
    "HCCL_CONNECT_TIMEOUT": "3600", "HCCL_EXEC_TIMEOUT": "3600", "HCCL_DETERMINISTIC": "false",
    "HCCL_OP_EXPANSION_MODE": "AIV",
    "PYTORCH_NPU_ALLOC_CONF": "expandable_segments:True", "MULTI_STREAM_MEMORY_REUSE": "1",
    "TASK_QUEUE_ENABLE": "2", "COMBINED_ENABLE": "1", "CPU_AFFINITY_CONF": "2", "OMP_NUM_THREADS": "1",
    "ACL_OP_COMPILER_CACHE_MODE": "enable", "ACL_OP_COMPILER_CACHE_DIR": "/tmp/npu_cache",
    "ASCEND_MAX_OP_CACHE_SIZE": "5000",
}
# what no image bakes: ref000's NPU_MEMORY_FRACTION is MindIE's (MindIE-LLM's config reads it; no file of torch_npu,
# vLLM, vLLM-Ascend or SGLang names it); what a vLLM-Ascend version leaves unread is its facts' `absent`
UNREAD = ["NPU_MEMORY_FRACTION"]
# ref000's vLLM-Ascend variables: the vllm backend's layer, in no image of another backend
VLLM_ONLY = ["VLLM_USE_V1", "VLLM_ASCEND_ENABLE_FLASHCOMM", "VLLM_ASCEND_ENABLE_FLASHCOMM1",
             "VLLM_ASCEND_ENABLE_DENSE_OPTIMIZE", "VLLM_ASCEND_ENABLE_PREFETCH_MLP"]
PRODUCTION = {"ASCEND_GLOBAL_LOG_LEVEL": "3", "ASDOPS_LOG_LEVEL": "ERROR", "ATB_LOG_LEVEL": "ERROR",
              "ASCEND_SLOG_PRINT_TO_STDOUT": "0", "ASCEND_LAUNCH_BLOCKING": "0"}  # ref000
DEBUG = {"ASCEND_GLOBAL_LOG_LEVEL": "0", "ASDOPS_LOG_LEVEL": "INFO", "ATB_LOG_LEVEL": "INFO",
         "ASCEND_SLOG_PRINT_TO_STDOUT": "1", "ASCEND_LAUNCH_BLOCKING": "1"}  # ref000, for debugging
JEMALLOC = f"/usr/lib/{TEST_ARCH}-linux-gnu/libjemalloc.so.2"  # ref004 2.1
TCMALLOC = f"/usr/lib/{TEST_ARCH}-linux-gnu/libtcmalloc.so.4"  # ref004 2.2; Debian libgoogle-perftools4
# compat.md Devices; the 950: vLLM-Ascend v0.23.0's Dockerfile.a5 and installation.md ("Atlas 950DT")
SOC_VERSION = {"a2": "ascend910b1", "a3": "ascend910_9391", "a5": "ascend950dt_9582"}
# the control nodes beside /dev/davinciN the preflight looks for: ref004's passthrough for A2 and A3; the 950 has no
# devmm_svm (Ascend/mind-cluster ascend-docker-runtime process.go, ascend910A5ManagerDevices)
CONTROL_NODES = {"a2": "davinci_manager devmm_svm hisi_hdc", "a3": "davinci_manager devmm_svm hisi_hdc",
                 "a5": "davinci_manager hisi_hdc"}
# per stage kind, what every image of it is, whatever its version: the stage, the backend, the allocator it preloads
# (ref004 2.1: jemalloc for serving), what was made from test doubles, and what its kind never bakes
KINDS = {
    "torch-npu": {"stage": "torch", "backend": "none", "test-double": None,
                  "absent": ["LD_PRELOAD", "HCCL_HOST_SOCKET_PORT_RANGE", "SOC_VERSION", *VLLM_ONLY]},
    "vllm-ascend": {"stage": "vllm", "backend": "vllm", "allocator": "jemalloc", "test-double": "cann,off-pypi-wheels",
                    "absent": ["HCCL_HOST_SOCKET_PORT_RANGE", "SGLANG_DEEPEP_BF16_DISPATCH"]},
    # not SGLang's Ray variable: Ray reads it (ray/_private/accelerators/npu.py), and the SGLang image ships no Ray
    "sglang": {"stage": "sglang", "backend": "sglang", "allocator": "jemalloc",
               "test-double": "cann,sgl-kernel-npu,off-pypi-wheels",
               "absent": ["RAY_EXPERIMENTAL_NOSET_ASCEND_RT_VISIBLE_DEVICES", "SOC_VERSION", *VLLM_ONLY]},
    "verl": {"stage": "framework", "allocator": "jemalloc", "test-double": "cann,off-pypi-wheels,framework-archives"},
    "roll": {"stage": "framework", "allocator": "jemalloc", "test-double": "cann,off-pypi-wheels,framework-archives"},
}
# the CI selection's overlay (matrix.yaml ci.test: the debug profile, an --env value at build time and an allocator the
# backend does not preload), by the suffix its tag carries
OVERLAYS = {"debug-tcmalloc-env455b65e5": {"env": {**DEBUG, "OMP_NUM_THREADS": "8", "LD_PRELOAD": TCMALLOC},
                                           "labels": {"stage": "overlay", "allocator": "tcmalloc", "profile": "debug",
                                                      "user-env": '{"OMP_NUM_THREADS": "8"}'}}}
FACTS_FILE = "tests/fixtures/release_facts.yaml"
FACTS = yaml.safe_load((ROOT / FACTS_FILE).read_text(encoding="utf-8"))
TAG = re.compile(r"(?P<kind>[a-z-]+):(?P<version>[^-]+)-(?:(?P<backend>vllm|sglang)(?P<backend_version>[^-]+)-)?"
                 r"cann(?P<cann>[^-]+)-(?P<device>a2|a3|a5)-(?P<os>[a-z0-9.]+)-py(?P<python>[0-9.]+)-(?P<arch>[a-z0-9_]+)"
                 r"(?:-(?P<overlay>.+))?")


def fact(kind: str, version: str) -> dict:
    """The facts of `kind` at `version`, matched as CANN's tags spell it (8.3.rc1 for 8.3.RC1)."""
    for key, value in FACTS.get(kind, {}).items():
        if str(key).lower() == version.lower():
            return value
    pytest.fail(f"{FACTS_FILE} has no {kind}.{version!r}: the selection builds {kind} {version}; add its upstream "
                "facts there, with their sources (the key is the version)", pytrace=False)


def expected(name: str) -> dict:
    """What the image `name` (its tag without the namespace) is, from its kind's rules and its versions' facts."""
    tag = TAG.fullmatch(name)
    assert tag, f"{name}: not a tag of the form KIND:VERSION-[BACKEND VERSION-]cannX-DEVICE-OS-pyX-ARCH[-OVERLAY]"
    kind, version, device = tag["kind"], tag["version"], tag["device"]
    rules = KINDS[kind]
    if kind in ("verl", "roll"):
        backend, backend_version = tag["backend"], tag["backend_version"]
        frame = fact(kind, version)
    else:
        backend, backend_version, frame = rules["backend"], version, {"env": {}, "absent": []}
    top = {"vllm": "vllm-ascend", "sglang": "sglang", "none": "torch-npu"}[backend]
    backend_facts = fact(top, backend_version)
    torch_npu = backend_version if top == "torch-npu" else backend_facts["torch_npu"]
    torch = fact("torch-npu", torch_npu)
    cann_version = backend_facts["cann"] if top != "torch-npu" else torch["cann"]
    assert tag["cann"].lower() == str(cann_version).lower(), f"{name}: its tag names CANN {tag['cann']}, " \
        f"but {top} {backend_version} is built on CANN {cann_version} ({FACTS_FILE})"
    cann = fact("cann", str(cann_version))
    env = {**COMMON, **PRODUCTION, **cann.get("env", {}), "ASCEND_HOME_PATH": cann["home"],
           "ASCEND_IMAGES_HDK_FLOOR": str(cann["hdk_floor"]), "ASCEND_IMAGES_CONTROL_NODES": CONTROL_NODES[device],
           **backend_facts.get("env", {}), **frame["env"]}
    labels = {"device": device, "soc-version": SOC_VERSION[device], "cann": str(cann_version),
              "cann-layout": cann["layout"], "hdk-floor": str(cann["hdk_floor"]), "torch": str(torch["torch"]),
              "torch-npu": str(torch_npu), "os": tag["os"], "arch": TEST_ARCH, "python": "system",
              "python-version": tag["python"], "stage": rules["stage"], "backend": backend, "profile": "production"}
    if rules.get("allocator"):
        env["LD_PRELOAD"] = JEMALLOC
        labels["allocator"] = rules["allocator"]
    if rules["test-double"]:
        labels["test-double"] = rules["test-double"]
    if top == "vllm-ascend":  # vLLM-Ascend reads SOC_VERSION when it builds its operators (VA Dockerfile.a3, .a5)
        env["SOC_VERSION"] = SOC_VERSION[device]
        labels |= {"vllm": str(backend_facts["vllm"]), "vllm-ascend": backend_version,
                   "triton-ascend": str(backend_facts["triton_ascend"])}
    elif top == "sglang":
        labels |= {"sglang": backend_version, "sgl-kernel-npu": str(backend_facts["sgl_kernel_npu"])}
    if kind in ("verl", "roll"):
        labels |= {"framework": kind, "framework-version": version}
        labels.pop("profile")
    absent = [*rules.get("absent", []), *frame["absent"], *backend_facts.get("absent", []), *UNREAD]
    if "env" not in cann:
        absent.append("ATB_CXX_ABI")
    if tag["overlay"]:
        overlay = OVERLAYS[tag["overlay"]]
        env |= overlay["env"]
        labels |= overlay["labels"]
        absent.remove("LD_PRELOAD")
    return {"env": env, "absent": [k for k in absent if k not in env],
            "labels": {f"io.ascend-images.{k}": v for k, v in labels.items()}}


def ci_names() -> list[str]:
    from tests.image.conftest import ci_image_tags

    return [t.split("/", 1)[1] for t in ci_image_tags()]


def test_every_kind_ci_builds_has_its_rules_written_out():
    """One image per stage kind and default (matrix.yaml ci.test): each kind's rules are here, and each version's
    facts in the facts file."""
    for name in ci_names():
        assert expected(name)["labels"]


@pytest.mark.parametrize("name", ci_names())
def test_env_and_labels_written_out_by_hand(docker_client, ci_images, name):
    tag = f"{TEST_NAMESPACE}/{name}"
    config = docker_client.api.inspect_image(tag)["Config"]
    env = dict(item.split("=", 1) for item in config["Env"])
    want = expected(name)
    wrong = {k: (env.get(k), v) for k, v in want["env"].items() if env.get(k) != v}
    assert not wrong, f"(have, want): {wrong}"
    assert not [k for k in want["absent"] if k in env]
    labels = config["Labels"]
    wrong = {k: (labels.get(k), v) for k, v in want["labels"].items() if labels.get(k) != v}
    assert not wrong, f"(have, want): {wrong}"
