"""Each tuned variable is baked in the first stage that ships its reader, and only for the versions that read it
(issue 62). The expected sets are written out by hand from the upstream files tests/fixtures/env_readers/readers.yaml
names (torch_npu's library, vllm_ascend/envs.py and vllm/envs.py at each release, sglang/srt/environ.py, CANN's
documentation), never computed from matrix.yaml."""

from __future__ import annotations

import json

import pytest

from ascend_images.errors import MatrixError
from ascend_images.stages.envreaders import Shipped, shipped_env, stage_defaults, unread_env, user_env_warnings
from ascend_images.stages.kinds import KINDS, image_env_of

from .helpers import variant
from .inprocess import run_invoke

CANN_READS = {"ASCEND_GLOBAL_LOG_LEVEL", "ASCEND_MAX_OP_CACHE_SIZE", "ASCEND_SLOG_PRINT_TO_STDOUT",
              "ASDOPS_LOG_LEVEL", "ATB_LOG_LEVEL", "HCCL_OP_EXPANSION_MODE"}
TORCH_NPU_READS = {"ACL_OP_COMPILER_CACHE_DIR", "ACL_OP_COMPILER_CACHE_MODE", "ASCEND_LAUNCH_BLOCKING",
                   "COMBINED_ENABLE", "CPU_AFFINITY_CONF", "HCCL_CONNECT_TIMEOUT", "HCCL_DETERMINISTIC",
                   "HCCL_EXEC_TIMEOUT", "MULTI_STREAM_MEMORY_REUSE", "PYTORCH_NPU_ALLOC_CONF", "TASK_QUEUE_ENABLE"}


def test_each_variable_lands_in_the_first_stage_that_ships_its_reader(tmp_path):
    v = variant(tmp_path, backend="vllm", release="cann9.1.0-pt2.10.0")
    cann, _ = stage_defaults(v, KINDS["cann"].env, None)
    assert set(cann) == CANN_READS
    torch, own = stage_defaults(v, KINDS["torch"].env, KINDS["cann"].env)
    assert set(own) == TORCH_NPU_READS | {"OMP_NUM_THREADS"}  # libgomp in torch's wheel reads OMP_NUM_THREADS
    assert set(torch) == CANN_READS | TORCH_NPU_READS | {"OMP_NUM_THREADS"}
    _, own = stage_defaults(v, KINDS["vllm"].env, KINDS["torch"].env)
    # vLLM-Ascend 0.23.0 reads FLASHCOMM1 and SOC_VERSION; vLLM 0.23.0 the Ray variable; graph mode wants queue 1
    assert set(own) == {"LD_PRELOAD", "RAY_EXPERIMENTAL_NOSET_ASCEND_RT_VISIBLE_DEVICES", "SOC_VERSION",
                        "TASK_QUEUE_ENABLE", "VLLM_ASCEND_ENABLE_FLASHCOMM1"}
    assert own["TASK_QUEUE_ENABLE"].value == "1" and own["SOC_VERSION"].value == "ascend910_9391"


@pytest.mark.parametrize(("release", "baked", "not_baked"), [
    # vllm_ascend/envs.py 0.11.0: FLASHCOMM1 and its old name, DENSE_OPTIMIZE, PREFETCH_MLP; vllm 0.11.0: VLLM_USE_V1
    ("cann8.3.rc2-vllm0.11.0", {"VLLM_USE_V1", "VLLM_ASCEND_ENABLE_FLASHCOMM", "VLLM_ASCEND_ENABLE_FLASHCOMM1",
                                "VLLM_ASCEND_ENABLE_DENSE_OPTIMIZE", "VLLM_ASCEND_ENABLE_PREFETCH_MLP"},
     {"RAY_EXPERIMENTAL_NOSET_ASCEND_RT_VISIBLE_DEVICES"}),
    # 0.18.0: FLASHCOMM1 and the fallback; PREFETCH_MLP moved to additional_config
    ("cann8.5.1-vllm0.18.0", {"VLLM_ASCEND_ENABLE_FLASHCOMM", "VLLM_ASCEND_ENABLE_FLASHCOMM1",
                              "RAY_EXPERIMENTAL_NOSET_ASCEND_RT_VISIBLE_DEVICES"},
     {"VLLM_USE_V1", "VLLM_ASCEND_ENABLE_DENSE_OPTIMIZE", "VLLM_ASCEND_ENABLE_PREFETCH_MLP"}),
    # 0.23.0: FLASHCOMM1 only
    ("cann9.1.0-pt2.10.0", {"VLLM_ASCEND_ENABLE_FLASHCOMM1"},
     {"VLLM_USE_V1", "VLLM_ASCEND_ENABLE_FLASHCOMM", "VLLM_ASCEND_ENABLE_DENSE_OPTIMIZE",
      "VLLM_ASCEND_ENABLE_PREFETCH_MLP"}),
])
def test_vllm_variables_follow_the_versions_that_read_them(tmp_path, release, baked, not_baked):
    env = shipped_env(variant(tmp_path, backend="vllm", release=release, device="a2"), KINDS["vllm"].env)
    assert baked <= set(env) and not (not_baked & set(env)), sorted(env)


def test_what_nothing_in_the_image_reads_is_never_baked_and_says_why(tmp_path):
    sglang = variant(tmp_path, backend="sglang", release="cann9.0.0-sglang0.5.17")
    env = shipped_env(sglang, KINDS["sglang"].env)
    # MindIE's; Ray's (the SGLang image ships no Ray); vLLM-Ascend's build setting
    assert {"NPU_MEMORY_FRACTION", "RAY_EXPERIMENTAL_NOSET_ASCEND_RT_VISIBLE_DEVICES", "SOC_VERSION"}.isdisjoint(env)
    assert env["SGLANG_DEEPEP_BF16_DISPATCH"].value == "1"  # sglang/srt/environ.py 0.5.17
    vllm = variant(tmp_path, backend="vllm", release="cann9.1.0-pt2.10.0")
    unread = unread_env(vllm, image_env_of(vllm))
    assert set(unread) == {"NPU_MEMORY_FRACTION", "VLLM_USE_V1", "VLLM_ASCEND_ENABLE_FLASHCOMM",
                           "VLLM_ASCEND_ENABLE_DENSE_OPTIMIZE", "VLLM_ASCEND_ENABLE_PREFETCH_MLP"}
    assert "MindIE" in unread["NPU_MEMORY_FRACTION"].why
    assert unread["VLLM_USE_V1"].why == "read by vllm <0.13; this image has vllm 0.23.0"
    assert unread["VLLM_ASCEND_ENABLE_FLASHCOMM"].instead == "VLLM_ASCEND_ENABLE_FLASHCOMM1"


def test_a_framework_layer_bakes_what_its_lock_ships(tmp_path):
    """verl's lock brings Ray, hydra-core and transformers: what they read joins in the framework stage."""
    v = variant(tmp_path, backend="vllm", framework="verl", release="cann9.1.0-pt2.10.0")
    _, own = stage_defaults(v, KINDS["framework"].env, KINDS["vllm"].env)
    assert set(own) == {"HCCL_ASYNC_ERROR_HANDLING", "HCCL_HOST_SOCKET_PORT_RANGE", "HCCL_NPU_SOCKET_PORT_RANGE",
                        "HYDRA_FULL_ERROR", "RAY_DEDUP_LOGS", "TRANSFORMERS_VERBOSITY",
                        "VLLM_ASCEND_ENABLE_MATMUL_ALLREDUCE"}


@pytest.mark.parametrize(("version", "versions", "reads"), [
    ("0.23.0", "", True), ("0.23.0", "<0.23", False), ("0.18.0", "<0.23", True),
    ("0.26.0rc1", ">=0.11,<0.30.0rc2", True), ("0.30.0rc2", ">=0.11,<0.30.0rc2", False),
    ("0.26.0rc1", ">=0.11,<0.26.0rc1", False), ("0.23.0", ">=0.11,<0.26.0rc1", True),
])
def test_a_package_reader_reads_in_its_range_prereleases_too(version, versions, reads):
    shipped = Shipped({"vllm-ascend": version}, cann=True)
    assert shipped.reads({"package": "vllm_ascend", "versions": versions, "source": "x"}) is reads
    assert shipped.reads({"package": "sglang", "source": "x"}) is False
    assert Shipped({}, cann=False).reads({"cann": "hccl", "source": "x"}) is False


def test_a_typo_in_env_names_the_nearest_variable_the_image_reads(tmp_path):
    v = variant(tmp_path, backend="vllm", release="cann9.1.0-pt2.10.0",
                env={"VLLM_ASCEND_ENABLE_FLASHCOM1": "1", "HF_TOKEN": "x", "OMP_NUM_THREADS": "4", "VLLM_USE_V1": "1"})
    lines = user_env_warnings([n for n, _ in v.user_env], v, image_env_of(v), v.matrix.spec.env, "IMG")
    assert lines == [
        "warning: --env VLLM_ASCEND_ENABLE_FLASHCOM1: nothing in IMG reads it as far as matrix.yaml knows; did you "
        "mean VLLM_ASCEND_ENABLE_FLASHCOMM1 (vllm-ascend >=0.11,<0.30.0rc2 reads it)?",
        "warning: --env VLLM_USE_V1: nothing in IMG reads it (read by vllm <0.13; this image has vllm 0.23.0)",
    ]
    # an image the matrix did not select (run --image): checked against every variable some image reads
    (line,) = user_env_warnings(["SGLANG_DEEPEP_BF16_DISPATC"], None, None, v.matrix.spec.env, "other:1")
    assert "did you mean SGLANG_DEEPEP_BF16_DISPATCH (sglang reads it)?" in line


def test_invoke_env_shows_each_reader_and_what_is_not_baked():
    code, out, err = run_invoke(["env", "--device", "a3", "--backend", "vllm", "--release", "cann9.1.0-pt2.10.0",
                                 "--json"])
    assert code == 0, err
    (doc,) = json.loads(out)
    flashcomm = doc["variables"]["VLLM_ASCEND_ENABLE_FLASHCOMM1"]["reader"]
    assert flashcomm["package"] == "vllm-ascend" and flashcomm["versions"] == ">=0.11,<0.30.0rc2"
    assert doc["variables"]["HCCL_OP_EXPANSION_MODE"]["reader"]["cann"] == "hccl"
    assert "VLLM_USE_V1" in doc["unread"] and "VLLM_USE_V1" not in doc["variables"]
    code, text, err = run_invoke(["env", "--device", "a3", "--backend", "vllm", "--release", "cann9.1.0-pt2.10.0"])
    assert code == 0, err
    row = next(line for line in text.splitlines() if line.startswith("VLLM_ASCEND_ENABLE_FLASHCOMM1 "))
    assert "vllm-ascend >=0.11,<0.30.0rc2" in row
    assert "#   VLLM_USE_V1=1 (backend:vllm): read by vllm <0.13; this image has vllm 0.23.0" in text


@pytest.mark.parametrize(("reader", "message"), [
    (None, "env.common.HCCL_CONNECT_TIMEOUT.reader: required key is missing"),
    ({"package": "torch-npu", "cann": "hccl", "source": "x"}, "a reader is a package or a CANN component"),
    ({"package": "torch-npu", "versions": "0.11..", "source": "x"}, "versions '0.11..' is no PEP 440 specifier"),
    ({"cann": "hccl", "versions": ">=1", "source": "x"}, "versions is a package's"),
])
def test_a_bad_reader_is_refused_naming_the_key(tmp_path, reader, message):
    def mutate(data: dict) -> None:
        entry = data["env"]["common"]["HCCL_CONNECT_TIMEOUT"]
        if reader is None:
            del entry["reader"]
        else:
            entry["reader"] = reader

    with pytest.raises(MatrixError) as caught:
        variant(tmp_path, mutate, backend="vllm")
    assert message in str(caught.value)
