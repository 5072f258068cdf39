from pathlib import Path

import pytest

from ascend_images.errors import MatrixError, SelectionError
from ascend_images.matrix.model import load_matrix
from ascend_images.matrix.selection import all_variants, parse_env_overrides, select
from tests.fixtures.matrices import matrix_copy

ROOT = Path(__file__).resolve().parents[2]


def _write(tmp_path: Path, mutate) -> Path:
    return matrix_copy(tmp_path, mutate)


def test_repo_matrix_loads_with_every_release(matrix):
    assert {"a2", "a3"} <= set(matrix.spec.devices)
    assert {"8.3.RC1", "8.5.0", "9.1.0"} <= set(matrix.spec.cann.releases)
    assert {"ubuntu22.04", "openeuler24.03", "debian12"} <= set(matrix.spec.os)
    assert len(all_variants(matrix)) > 100


def test_reference_002_combination_is_a_release(matrix):
    rel = matrix.spec.releases["cann8.3.rc1-sglang0.5.8"]
    assert rel.cann == "8.3.RC1"
    assert rel.torch_npu == "2.7.1.post2"
    assert matrix.spec.torch.pairs[rel.torch_npu].torch == "2.7.1"
    assert rel.backends.sglang.sglang == "0.5.8"
    assert rel.hdk_floor == "25.3.RC1"


def test_every_fact_names_a_source(matrix):
    for name, rel in matrix.spec.releases.items():
        assert rel.source, name
    for layer in [matrix.spec.env.common, *matrix.spec.env.device.values(), *matrix.spec.env.backend.values(),
                  *matrix.spec.env.profile.values()]:
        for key, entry in layer.items():
            assert entry.source.strip(), key


def test_misspelt_key_names_path_and_suggests(tmp_path):
    def mutate(d):
        d["devices"]["a3"]["soc_verison"] = d["devices"]["a3"].pop("soc_version")

    with pytest.raises(MatrixError) as err:
        load_matrix(_write(tmp_path, mutate))
    text = str(err.value)
    assert "devices.a3.soc_verison: unknown key 'soc_verison'; did you mean 'soc_version'?" in text
    assert "devices.a3.soc_version: required key is missing" in text


def test_wrong_type_is_reported_with_value(tmp_path):
    def mutate(d):
        d["devices"]["a2"]["min_devices"] = "many"

    with pytest.raises(MatrixError, match=r"devices\.a2\.min_devices: .*integer.*'many'"):
        load_matrix(_write(tmp_path, mutate))


def test_dangling_reference_lists_valid_values(tmp_path):
    def mutate(d):
        d["releases"]["cann8.5.0-pt2.8.0"]["cann"] = "8.5.7"

    pattern = r"releases\.cann8\.5\.0-pt2\.8\.0\.cann: unknown CANN version '8\.5\.7'.*Valid: "
    with pytest.raises(MatrixError, match=pattern):
        load_matrix(_write(tmp_path, mutate))


def test_profiles_must_set_the_same_variables(tmp_path):
    def mutate(d):
        del d["env"]["profile"]["production"]["ASCEND_LAUNCH_BLOCKING"]

    with pytest.raises(MatrixError, match="env.profile.production: missing ASCEND_LAUNCH_BLOCKING"):
        load_matrix(_write(tmp_path, mutate))


def test_bad_cann_version_key(tmp_path):
    def mutate(d):
        d["cann"]["releases"]["8.x"] = d["cann"]["releases"]["8.5.0"]

    with pytest.raises(MatrixError, match="not a CANN/HDK version"):
        load_matrix(_write(tmp_path, mutate))


def test_missing_file_and_bad_yaml(tmp_path):
    with pytest.raises(MatrixError, match="file not found"):
        load_matrix(tmp_path / "nope.yaml")
    bad = tmp_path / "bad.yaml"
    bad.write_text("devices: [unclosed")
    with pytest.raises(MatrixError, match="not valid YAML"):
        load_matrix(bad)


def test_default_release_per_device_and_backend(matrix):
    (v,) = select(matrix, device="a3", backend="sglang")
    assert v.release_name == matrix.spec.defaults.release["a3"]["sglang"]
    assert v.backend_pins is not None and v.backend_pins.sglang


def test_comma_lists_expand(matrix):
    vs = select(matrix, device="a2,a3", backend="none", arch="x86_64,aarch64")
    assert {(v.device, v.arch) for v in vs} == {("a2", "x86_64"), ("a2", "aarch64"), ("a3", "x86_64"),
                                                ("a3", "aarch64")}


@pytest.mark.parametrize(
    "kwargs,message",
    [
        ({"device": "a4"}, "unknown device 'a4' (from --device). Valid: a2, a3, a5"),
        ({"backend": "vlm"}, "unknown backend 'vlm' (from --backend); did you mean 'vllm'? Valid: none, sglang, vllm"),
        ({"release": "nope"}, "unknown release 'nope' (from --release)"),
        ({"os": "ubuntu24.04"}, "unknown os 'ubuntu24.04' (from --os); did you mean 'ubuntu22.04'?"),
        ({"arch": "arm64"}, "unknown arch 'arm64' (from --arch)"),
        ({"backend": "vllm", "release": "cann8.3.rc1-sglang0.5.8"},
         "release 'cann8.3.rc1-sglang0.5.8' has no backend 'vllm'"),
        ({"python": "bisheng", "release": "cann9.1.0-pt2.10.0"},
         "is not tested with python 'bisheng'"),
    ],
)
def test_selection_errors(matrix, kwargs, message):
    with pytest.raises(SelectionError) as err:
        select(matrix, **kwargs)
    assert message in str(err.value)


def test_env_overrides_parse_and_reject():
    assert parse_env_overrides(["A=1", "B_2=x=y"]) == {"A": "1", "B_2": "x=y"}
    with pytest.raises(SelectionError, match="expected KEY=VALUE"):
        parse_env_overrides(["NOVALUE"])
    with pytest.raises(SelectionError, match="not a valid variable name"):
        parse_env_overrides(["1BAD=x"])


def test_package_files_8_3_vs_8_5(matrix):
    (v83,) = select(matrix, device="a2", release="cann8.3.rc1-sglang0.5.8", arch="aarch64")
    (v85,) = select(matrix, device="a3", release="cann8.5.0-pt2.8.0", arch="x86_64")
    assert v83.package_files() == {
        "toolkit": "Ascend-cann-toolkit_8.3.RC1_linux-aarch64.run",
        "ops": "Ascend-cann-kernels-910b_8.3.RC1_linux-aarch64.run",
        "nnal": "Ascend-cann-nnal_8.3.RC1_linux-aarch64.run",
    }
    assert v85.package_files()["ops"] == "Ascend-cann-A3-ops_8.5.0_linux-x86_64.run"
    assert v83.cann_home == "/usr/local/Ascend/ascend-toolkit/latest"
    assert v85.cann_home == "/usr/local/Ascend/cann-8.5.0"
    assert "/usr/local/Ascend/cann-8.5.0/share/info/ascendnpu-ir/bin/set_env.sh" in v85.env_scripts
    assert "/usr/local/Ascend/nnal/atb/set_env.sh --cxx_abi=1" in v85.env_scripts
    assert not any("ascendnpu-ir" in s for s in v83.env_scripts)
