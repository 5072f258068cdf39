from ascend_images.matrix.envs import baked_env, effective_env

from .helpers import variant


def test_layers_in_order_with_provenance(tmp_path):
    v = variant(tmp_path, backend="vllm", release="cann8.5.0-pt2.8.0", profile="debug", env={"OMP_NUM_THREADS": "8"})
    env = effective_env(v)
    assert env["HCCL_OP_EXPANSION_MODE"].layer == "common"
    assert env["SOC_VERSION"].value == "ascend910_9391" and env["SOC_VERSION"].layer == "device:a3"
    # backend overrides common, and says what it overrode
    assert env["TASK_QUEUE_ENABLE"].value == "1"
    assert env["TASK_QUEUE_ENABLE"].overrides == (("common", "2"),)
    assert env["ASCEND_GLOBAL_LOG_LEVEL"].value == "0" and env["ASCEND_GLOBAL_LOG_LEVEL"].layer == "profile:debug"
    assert env["OMP_NUM_THREADS"].value == "8" and env["OMP_NUM_THREADS"].layer == "user"
    assert env["OMP_NUM_THREADS"].source == "--env"
    assert "ref000" in env["HCCL_CONNECT_TIMEOUT"].source


def test_user_env_beats_profile(tmp_path):
    v = variant(tmp_path, profile="debug", env={"ASCEND_GLOBAL_LOG_LEVEL": "2"})
    e = effective_env(v)["ASCEND_GLOBAL_LOG_LEVEL"]
    assert e.value == "2"
    assert e.overrides == (("profile:debug", "0"),)


def test_sglang_required_variables(tmp_path):
    env = effective_env(variant(tmp_path, backend="sglang"))
    for name, value in {
        "HCCL_HOST_SOCKET_PORT_RANGE": "60000-60050",
        "HCCL_NPU_SOCKET_PORT_RANGE": "61000-61050",
        "SGLANG_DEEPEP_BF16_DISPATCH": "1",
    }.items():
        assert env[name].value == value and env[name].source == "ref002"


def test_baked_env_uses_default_profile_and_no_user_env(tmp_path):
    v = variant(tmp_path, profile="debug", env={"X_USER": "1"})
    baked = baked_env(v, backend=False)
    assert baked["ASCEND_GLOBAL_LOG_LEVEL"].value == "3"
    assert "X_USER" not in baked
