"""The test doubles themselves, on this host (no Docker): they must say what upstream says, and images
built from them must carry the test-double label."""

from __future__ import annotations

import ctypes
import hashlib
import json
import os
import platform
import shutil
import subprocess
import zipfile
from pathlib import Path

import pytest
import yaml

from ascend_images.cli.build import build_selection
from ascend_images.cli.options import InputFlags, Selection, SourceFlags
from ascend_images.stages.names import TEST_DOUBLE_LABEL
from ascend_images.stages.plan import PlanOptions, make_plan
from ascend_images.stages.render import Renderer
from tests.conftest import ROOT
from tests.fixtures.cann_stubs.stub_source import (
    DRV_INTERNAL_ERROR,
    MARKER,
    RETURNS_POINTER,
    library_sources,
    load_symbols,
)
from tests.fixtures.fake_cann.make_packages import MARKER_FILE, load_facts, write_packages
from tests.fixtures.fake_sgl_kernel_npu.make_zips import write_zips
from tests.fixtures.fake_sglang_tag.make_archive import default_versions, write_archive
from tests.fixtures.fake_triton_ascend.make_wheel import write_wheels
from tests.image.test_cann_golden import golden_env

HOST_ARCH = platform.machine()
NEWEST_CANN = "9.1.0"  # the newest CANN the stubs know (symbols.json since): its stubs export every recorded symbol


@pytest.fixture(scope="module")
def stub_dir(tmp_path_factory) -> Path:
    if shutil.which("cc") is None:
        if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
            pytest.fail("CI=true but there is no C compiler (scripts/setup-host.sh installs gcc)")
        pytest.skip("no C compiler")
    out = tmp_path_factory.mktemp("stubs")
    for soname, source in library_sources(NEWEST_CANN).items():
        (out / f"{soname}.c").write_text(source)
        subprocess.run(["cc", "-shared", "-fPIC", "-o", str(out / soname), str(out / f"{soname}.c"),
                        f"-Wl,-soname,{soname}"], check=True)
    return out


def test_every_needed_soname_has_a_stub_with_its_symbols(stub_dir):
    facts = load_symbols()
    needed = {s for imp in facts["importers"] for s in imp["cann_needed"]}
    later = {s for extra in facts["since"].values() for s in extra}  # libraries only newer CANN has
    assert needed == set(facts["libraries"]) | later and {"libascendcl.so", "libhccl.so", "libatb.so"} <= needed
    for soname, entry in facts["libraries"].items():
        out = subprocess.run(["readelf", "-W", "-d", "--dyn-syms", str(stub_dir / soname)], check=True,
                             capture_output=True, text=True).stdout
        assert f"Library soname: [{soname}]" in out
        for name in entry["functions"] + entry["objects"] + entry["tls"]:
            assert f" {name}\n" in out or out.rstrip().endswith(f" {name}"), f"{soname} lacks {name}"


def test_stubs_of_a_cann_export_only_what_the_wheels_made_for_it_import():
    # vllm-ascend 0.18.0 and torch_npu 2.9.0 (made for CANN 8.5.1, compat.md) import calls the 8.5.0 wheels do
    # not; their BIND_NOW libraries fail to load on older stubs, as on an older real CANN. One such symbol, read
    # by hand from the wheel (readelf --dyn-syms vllm_ascend/_cann_ops_custom/.../op_api/lib/libcust_opapi.so):
    only_new = "NnopbaseAddDynamicInput"
    assert only_new not in library_sources("8.5.0")["libopapi.so"]
    assert only_new not in library_sources("8.3.RC1")["libopapi.so"]
    assert f'__asm__("{only_new}")' in library_sources("8.5.1")["libopapi.so"]
    assert library_sources("8.5.0") == library_sources("8.3.RC2")  # nothing else is version-bound


def test_stubs_of_cann_9_1_0_export_what_torch_npu_2_10_imports():
    # torch_npu 2.10.0.post4 is made for CANN 9.1.0 (PT); read by hand from the wheel: its lib/libtorch_npu.so
    # imports aclrtCreateEventExWithFlag (readelf --dyn-syms, UND), which torch_npu 2.9.0's libraries do not
    only_9_1 = "aclrtCreateEventExWithFlag"
    assert only_9_1 not in library_sources("8.5.1")["libascendcl.so"]
    assert f'__asm__("{only_9_1}")' in library_sources("9.1.0")["libascendcl.so"]
    # vllm-ascend 0.23.0's libraries NEED sonames older CANN's stubs do not have at all
    assert "libopapi_math.so" not in library_sources("8.5.1") and "libopapi_math.so" in library_sources("9.1.0")


def test_stub_calls_fail_like_a_host_without_an_npu(stub_dir):
    acl = ctypes.CDLL(str(stub_dir / "libascendcl.so"))
    count = ctypes.c_uint32(7)
    assert acl.aclrtGetDeviceCount(ctypes.byref(count)) == DRV_INTERNAL_ERROR
    assert count.value == 7  # nothing written: callers must not read a count
    assert (ctypes.c_char * 64).in_dll(acl, MARKER).value.startswith(b"ascend-images test double")
    # a handle written through an argument: the call fails with the error code
    stream = ctypes.c_void_p(1234)
    assert acl.aclrtCreateStream(ctypes.byref(stream)) == DRV_INTERNAL_ERROR and stream.value == 1234
    # AscendCL's aclCreate* return the object: NULL is their failure
    create = acl.aclCreateDataBuffer
    create.restype = ctypes.c_void_p
    assert RETURNS_POINTER.match("aclCreateDataBuffer") and create(None, 0) is None


@pytest.mark.parametrize("version", ["8.3.RC1", "8.5.0"])
def test_fake_toolkit_and_nnal_set_exactly_the_official_env(tmp_path, version):
    """Installed on this host (its own arch), the fake's env scripts yield the official image's ENV block."""
    facts = load_facts()[version]
    pkgs = tmp_path / "pkgs"
    write_packages(pkgs, cann=[version], chips=["a3"], arches=[HOST_ARCH])
    files = {p.name: p for p in pkgs.iterdir()}
    assert MARKER_FILE in files
    toolkit = files[facts["packages"]["toolkit"].format(arch=HOST_ARCH)]
    ops = files[facts["packages"]["ops"]["a3"].format(arch=HOST_ARCH)]
    nnal = files[facts["packages"]["nnal"].format(arch=HOST_ARCH)]
    root = tmp_path / "Ascend"
    for package in (toolkit, ops):
        subprocess.run([str(package), "--quiet", "--install", "--install-for-all", f"--install-path={root}"],
                       check=True)
    env = {"PATH": os.environ["PATH"], "ASCEND_TOOLKIT_HOME": "x"}
    subprocess.run([str(nnal), "--quiet", "--install", f"--install-path={root}"], check=True, env=env)
    abi = next(line for line in facts["env"]["nnal"] if line.startswith("ATB_HOME_PATH="))[-1]
    script = (f"source {root}/ascend-toolkit/set_env.sh && source {root}/nnal/atb/set_env.sh --cxx_abi={abi} "
              "&& /usr/bin/env -0")
    # from an empty environment (PATH too), as the official ENV lines are expanded
    out = subprocess.run(["/usr/bin/env", "-i", "PATH=", "/bin/bash", "--noprofile", "--norc", "-c", script],
                         check=True, capture_output=True, text=True).stdout
    seen = dict(item.split("=", 1) for item in out.split("\0") if "=" in item)
    want = golden_env(facts["env"]["toolkit"] + facts["env"]["nnal"])
    for name, value in want.items():
        assert seen.get(name) == value, name  # the official image's value, to the byte
    kernel = facts["layout"]["home"].replace("/usr/local/Ascend", str(root))
    assert (Path(kernel) / "opp/built-in/op_impl/ai_core/tbe/kernel" / facts["kernel_dirs"]["a3"]).is_dir()
    assert (Path(kernel) / "lib64" / "libascendcl.so").is_file()


def test_fake_kernel_zip_has_the_release_name_and_three_wheels(tmp_path):
    (path,) = [p for p in write_zips(tmp_path, arches=["aarch64"])
               if p.name == "sgl-kernel-npu-2026.02.01-torch2.8.0-py311-cann8.5.0-a3-aarch64.zip"]
    names = sorted(zipfile.ZipFile(path).namelist())
    assert names == ["deep_ep-1.0.0-cp311-cp311-linux_aarch64.whl",
                     "sgl_kernel_npu-2026.02.01-cp311-cp311-linux_aarch64.whl",
                     "torch_memory_saver-0.0.8-cp311-cp311-linux_aarch64.whl"]


def test_images_built_from_doubles_carry_the_label(tmp_path):
    """Every stage from CANN down names the doubles below it; the base (no CANN) does not."""
    # the A3 SGLang default, and what upstream pairs with its version (tests/fixtures/release_facts.yaml)
    (version,) = default_versions()
    facts = yaml.safe_load((ROOT / "tests" / "fixtures" / "release_facts.yaml").read_text())
    sglang = facts["sglang"][version]
    cann, tag, torch = sglang["cann"], sglang["sgl_kernel_npu"], facts["torch-npu"][sglang["torch_npu"]]["torch"]
    write_packages(tmp_path / "cann", cann=[cann], chips=["a3"], arches=["aarch64"])
    write_zips(tmp_path / "artifacts", arches=["aarch64"])
    write_wheels(tmp_path / "artifacts", arches=["aarch64"])
    write_archive(tmp_path / "artifacts", version)
    sel = Selection(matrix=str(ROOT / "matrix.yaml"), device="a3", backend="sglang", arch="aarch64")
    flags = SourceFlags(cann_dir=str(tmp_path / "cann"), artifacts_dir=str(tmp_path / "artifacts"),
                            cache_dir=str(tmp_path / "cache"))
    matrix = sel.load()
    sources = flags.sources(matrix)
    plan = make_plan(sel.variants(matrix), PlanOptions(sources.cann, "ascend-images-test"))
    records = {s.kind: Renderer().record(s, sources) for s in plan.stages}
    contexts = {kind: record.labels for kind, record in records.items()}
    labels = {kind: own.get(TEST_DOUBLE_LABEL) for kind, own in contexts.items()}
    assert labels == {"base": None, "cann-install": "cann", "cann": "cann", "torch": "cann",
                      "sglang": "cann,sgl-kernel-npu,off-pypi-wheels"}
    # what each stage installed from downloads PyPI does not carry, by sha256 of the files on disk (publish checks
    # these against pins.yaml): CANN's three packages on cann-install; the zip, wheel and tag archive on sglang
    def on_disk(directory: str, *names: str) -> dict[str, str]:
        return {n: hashlib.sha256((tmp_path / directory / n).read_bytes()).hexdigest() for n in names}

    # the label names each file's sha256 build arg, whose default the Dockerfile declares: the build expands it
    def expanded(kind: str, label: str) -> dict[str, str]:
        args = records[kind].download_args
        return {file: args[arg.removeprefix("${").removesuffix("}")] for file, arg in json.loads(label).items()}

    downloads = {kind: expanded(kind, own[f"io.ascend-images.downloads.{kind}"]) for kind, own in contexts.items()
                 if f"io.ascend-images.downloads.{kind}" in own}
    assert downloads == {
        "cann-install": on_disk("cann", f"Ascend-cann-toolkit_{cann}_linux-aarch64.run",
                                f"Ascend-cann-A3-ops_{cann}_linux-aarch64.run",
                                f"Ascend-cann-nnal_{cann}_linux-aarch64.run"),
        "sglang": on_disk("artifacts", f"sgl-kernel-npu-{tag}-torch{torch}-py311-cann{cann}-a3-aarch64.zip",
                          f"triton_ascend-{sglang['triton_ascend']}-cp311-cp311-manylinux_2_27_aarch64."
                          "manylinux_2_28_aarch64.whl", f"sglang-v{version}.tar.gz"),
    }
    # the same packages without the marker file: a real CANN directory, no label
    (tmp_path / "cann" / MARKER_FILE).unlink()
    real = SourceFlags(cann_dir=str(tmp_path / "cann")).sources(matrix)
    stage = next(s for s in plan.stages if s.kind == "cann-install")
    assert TEST_DOUBLE_LABEL not in Renderer().record(stage, real).labels


def test_building_doubles_under_the_default_namespace_is_refused(tmp_path):
    from ascend_images.errors import SelectionError

    write_packages(tmp_path, cann=["9.1.0"], chips=["a3"], arches=["aarch64"])
    sel = Selection(matrix=str(ROOT / "matrix.yaml"), device="a3", backend="none", arch="aarch64")
    with pytest.raises(SelectionError, match="test doubles.*--namespace ascend-images-demo"):
        build_selection(sel, SourceFlags(cann_dir=str(tmp_path)), InputFlags(), print)
