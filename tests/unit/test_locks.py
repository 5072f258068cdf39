"""Locks, every layer (base, torch, backend, framework): committed locks match the matrix, each pin names the sha256
of the one file the target installs; a stale, missing or tampered lock is refused with the command that fixes it
(the sdists a lock builds from: test_lock_sdists.py)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from ascend_images.inputs.lockfile import LockError, parse_lock, parse_lock_text
from ascend_images.inputs.lockgen import write_lock
from ascend_images.inputs.lockspec import check_lock, load_lock, lock_path, lock_spec, locks_dir, variant_layers
from ascend_images.inputs.pypi import IndexFile, target_file
from ascend_images.inputs.sources import ArtifactSource, CannSource, Sources
from ascend_images.matrix.model import load_matrix
from ascend_images.matrix.selection import all_variants
from ascend_images.stages.plan import PlanOptions, make_plan
from ascend_images.stages.render import Renderer
from tests.unit.helpers import ROOT, variant

# the locks a default build and CI need, for the arch most Ascend hosts run
REQUIRED = [
    ("cann8.5.0-pt2.8.0", "vllm", "aarch64"),
    ("cann8.5.0-pt2.8.0", "sglang", "aarch64"),
    ("cann8.3.rc1-sglang0.5.8", "sglang", "aarch64"),
    ("cann8.3.rc2-vllm0.11.0", "vllm", "aarch64"),
    ("cann8.5.1-vllm0.18.0", "vllm", "aarch64"),
]


def test_every_committed_lock_matches_the_matrix():
    """Each committed lock is some variant's lock of some layer, and fresh; the required ones exist."""
    matrix = load_matrix(ROOT / "matrix.yaml")
    root = locks_dir(matrix)
    expected = {}
    for v in all_variants(matrix):
        for layer in variant_layers(v):
            if v.release.blocked or (layer != "base" and v.arch_spec.unlocked):
                continue
            expected.setdefault(lock_path(root, lock_spec(v, layer, root)), (v, layer))
    committed = sorted(root.rglob("*.txt"))
    assert committed, "no locks committed"
    for path in committed:
        assert path in expected, f"{path} belongs to no variant's layer of the matrix"
        v, layer = expected[path]
        check_lock(lock_spec(v, layer, root), parse_lock(path))
    for release, backend, arch in REQUIRED:
        v = next(v for v in all_variants(matrix) if (v.release_name, v.backend, v.arch) == (release, backend, arch))
        for layer in variant_layers(v):
            assert lock_path(root, lock_spec(v, layer, root)).is_file(), f"missing: {layer} of {release}"


def test_a_lock_is_named_in_one_place():
    matrix = load_matrix(ROOT / "matrix.yaml")
    v = next(v for v in all_variants(matrix) if v.framework == "verl" and v.backend == "vllm" and v.arch == "aarch64")
    root = locks_dir(matrix)
    names = [lock_path(root, lock_spec(v, layer, root)).relative_to(root).as_posix() for layer in variant_layers(v)]
    assert names == ["base/base-py3.11-aarch64.txt", "cann9.1.0-pt2.10.0/torch-aarch64.txt",
                     "cann9.1.0-pt2.10.0/vllm-aarch64.txt", "cann9.1.0-pt2.10.0/vllm-verl-aarch64.txt"]


def test_every_pin_names_the_file_to_install_but_those_pypi_lacks():
    """Format 2: each pin carries the sha256 of its target file (what the wheel store and uv --require-hashes key
    on); a package off PyPI (triton-ascend from Huawei's mirror) is pinned in the header and pins.yaml instead."""
    lock = parse_lock(ROOT / "locks" / "cann9.1.0-pt2.10.0" / "vllm-aarch64.txt")
    assert set(lock.hashes) == set(lock.pins) - {"triton-ascend"}
    assert all(len(h) == 64 for h in lock.hashes.values())
    # the torch wheel the lock names is the aarch64 cp311 one (torch 2.10.0 publishes no sdist)
    assert lock.pins["torch"] == "2.10.0" and lock.hashes["torch"] == parse_lock(
        ROOT / "locks" / "cann9.1.0-pt2.10.0" / "torch-aarch64.txt").hashes["torch"]
    # a package with no aarch64 wheel is pinned by its sdist's sha256 (PyPI's arctic_inference-0.1.1.tar.gz)
    assert "arctic-inference" in lock.from_source and len(lock.hashes["arctic-inference"]) == 64


def test_a_pin_without_its_hash_is_refused(tmp_path):
    v = variant(tmp_path, lambda d: None, backend="vllm", release="cann9.1.0-pt2.10.0", arch="aarch64")
    _copy_locks(tmp_path)
    path = tmp_path / "locks" / "cann9.1.0-pt2.10.0" / "vllm-aarch64.txt"
    text = path.read_text()
    line = next(line for line in text.splitlines() if line.startswith("aiohttp=="))
    path.write_text(text.replace(line, line.split(" --hash")[0]))
    with pytest.raises(LockError, match=r"aiohttp pinned with no sha256 of the file to install"):
        load_lock(v)


def test_a_layer_over_another_moves_none_of_its_pins(tmp_path):
    """The torch lock is made over the base lock: a pin of the base it moves (without an override) is refused."""
    v = variant(tmp_path, lambda d: None, backend="none", release="cann9.1.0-pt2.10.0", arch="aarch64")
    _copy_locks(tmp_path)
    path = tmp_path / "locks" / "cann9.1.0-pt2.10.0" / "torch-aarch64.txt"
    path.write_text(path.read_text() + "numpy==2.3.5 --hash=sha256:" + "0" * 64 + "\n")
    with pytest.raises(LockError, match=r"pins numpy==2.3.5 over the base lock's numpy==1.26.4: a lock moves a pin "
                                        r"below it only where matrix.yaml overrides it"):
        load_lock(v, "torch")


def test_a_lock_made_over_a_changed_one_is_stale(tmp_path):
    v = variant(tmp_path, lambda d: None, backend="none", release="cann9.1.0-pt2.10.0", arch="aarch64")
    _copy_locks(tmp_path)
    base = tmp_path / "locks" / "base" / "base-py3.11-aarch64.txt"
    base.write_text(base.read_text() + "# an edit\n")
    with pytest.raises(LockError, match=r"torch-aarch64.txt is stale: the base lock it was resolved over changed"):
        load_lock(v, "torch")


@pytest.mark.parametrize(("files", "expected"), [
    # the newest glibc first, as pip and uv choose
    (["torch-2.10.0-cp311-cp311-manylinux_2_28_aarch64.whl", "torch-2.10.0-cp311-cp311-manylinux_2_17_aarch64.whl"],
     "torch-2.10.0-cp311-cp311-manylinux_2_28_aarch64.whl"),
    # the interpreter's own ABI before abi3 before pure Python
    (["x-1.0-py3-none-any.whl", "x-1.0-cp39-abi3-manylinux_2_17_aarch64.whl"],
     "x-1.0-cp39-abi3-manylinux_2_17_aarch64.whl"),
    (["x-1.0-cp39-abi3-manylinux_2_28_aarch64.whl", "x-1.0-cp311-cp311-manylinux_2_17_aarch64.whl"],
     "x-1.0-cp311-cp311-manylinux_2_17_aarch64.whl"),
    # no wheel for a glibc newer than the floor (2.35), nor for another arch or Python
    (["x-1.0-cp311-cp311-manylinux_2_39_aarch64.whl", "x-1.0-cp311-cp311-manylinux_2_17_x86_64.whl",
      "x-1.0-cp312-cp312-manylinux_2_17_aarch64.whl"], None),
])
def test_the_target_file_is_the_wheel_pip_and_uv_prefer(files, expected):
    project, version = files[0].split("-")[:2]
    found = target_file([IndexFile(f, f"https://example/{f}", "0" * 64) for f in files], project, version, "aarch64",
                        "cp311")
    assert (found.file if found else None) == expected


def test_a_hash_on_its_own_line_is_read_as_pip_writes_it():
    lock = parse_lock_text("a==1.0 \\\n    --hash=sha256:" + "a" * 64 + "\nb==2.0\n", Path("x.txt"))
    assert lock.hashes == {"a": "a" * 64} and lock.pins == {"a": "1.0", "b": "2.0"}


def test_locks_hold_the_release_torch_pair_and_no_cuda():
    matrix = load_matrix(ROOT / "matrix.yaml")
    for v in all_variants(matrix):
        if v.backend == "none" or v.arch != "aarch64" or v.release.blocked:
            continue
        lock = load_lock(v)
        assert lock.pins["torch"] == v.torch and lock.pins["torch-npu"] == v.torch_npu
        torch = load_lock(v, "torch")
        assert torch.pins["torch"] == v.torch and torch.pins["torch-npu"] == v.torch_npu
        assert not [n for n in lock.pins if n.startswith(("nvidia-", "cuda-", "flashinfer", "xformers"))]
        assert v.backend_pins is not None
        if v.backend == "vllm":
            assert lock.pins["vllm-ascend"] == v.backend_pins.vllm_ascend
            assert "vllm" not in lock.pins  # built from its sdist, never PyPI's CUDA wheel


def _copy_locks(tmp_path: Path) -> None:
    shutil.copytree(ROOT / "locks", tmp_path / "locks")


def test_changing_a_pin_makes_the_lock_stale(tmp_path):
    def bump(data):
        data["releases"]["cann8.5.0-pt2.8.0"]["backends"]["vllm"]["triton_ascend"] = "3.2.1"

    v = variant(tmp_path, bump, backend="vllm", release="cann8.5.0-pt2.8.0", arch="aarch64")
    _copy_locks(tmp_path)
    with pytest.raises(LockError, match=r"vllm-aarch64.txt is stale.*triton-ascend==3.2.1.*invoke lock --layer "
                                        r"backend --release cann8.5.0-pt2.8.0 --backend vllm --arch aarch64"):
        load_lock(v)


def test_missing_lock_names_the_command(tmp_path):
    v = variant(tmp_path, lambda d: None, backend="sglang", release="cann8.5.0-pt2.8.0", arch="aarch64")
    with pytest.raises(LockError, match=r"no lock for cann8.5.0-pt2.8.0/sglang/aarch64.*invoke lock --layer backend "
                                        r"--release"):
        load_lock(v)


def test_x86_locks_are_not_made_and_the_matrix_says_why(tmp_path):
    v = variant(tmp_path, lambda d: None, backend="none", release="cann8.5.0-pt2.8.0", arch="x86_64")
    _copy_locks(tmp_path)
    with pytest.raises(LockError, match=r"cann8.5.0-pt2.8.0/torch/x86_64 has no lock, and matrix.yaml says why: "
                                        r"arches.x86_64.unlocked: x86_64's torch is the CPU build on PyTorch's CPU"):
        load_lock(v, "torch")


def test_x86_lock_missing_mentions_the_torch_index(tmp_path):
    def locked(data):
        data["arches"]["x86_64"].pop("unlocked")

    v = variant(tmp_path, locked, backend="none", release="cann8.5.0-pt2.8.0", arch="x86_64")
    _copy_locks(tmp_path)
    with pytest.raises(LockError, match=r"needs the torch index https://download.pytorch.org/whl/cpu"):
        load_lock(v, "torch")


def test_a_hand_edited_torch_pin_is_refused(tmp_path):
    v = variant(tmp_path, lambda d: None, backend="vllm", release="cann8.5.0-pt2.8.0", arch="aarch64")
    _copy_locks(tmp_path)
    path = tmp_path / "locks" / "cann8.5.0-pt2.8.0" / "vllm-aarch64.txt"
    path.write_text(path.read_text().replace("\ntorch==2.8.0 --hash", "\ntorch==2.9.0 --hash"))
    with pytest.raises(LockError, match=r"pins torch==2.9.0, the release needs 2.8.0"):
        load_lock(v)


def test_write_lock_leaves_nothing_when_the_lock_fails_its_check(tmp_path):
    v = variant(tmp_path, lambda d: None, backend="vllm", release="cann8.5.0-pt2.8.0", arch="aarch64")
    _copy_locks(tmp_path)
    spec = lock_spec(v, "backend")
    good = (ROOT / "locks" / "cann8.5.0-pt2.8.0" / "vllm-aarch64.txt").read_text()
    shutil.rmtree(tmp_path / "locks" / "cann8.5.0-pt2.8.0")
    with pytest.raises(LockError):
        write_lock(spec, tmp_path / "locks", good.replace("torch-npu==2.8.0.post2", "torch-npu==2.8.0"))
    assert not list((tmp_path / "locks" / "cann8.5.0-pt2.8.0").rglob("*.txt*")) if (
        tmp_path / "locks" / "cann8.5.0-pt2.8.0").exists() else True
    assert write_lock(spec, tmp_path / "locks", good).read_text() == good


def _render_backend(v, strict: bool, cann: CannSource | None = None):
    sources = Sources(cann or CannSource("url", strict=False), ArtifactSource(strict=strict))
    plan = make_plan([v], PlanOptions(sources.cann))
    (stage,) = [s for s in plan.stages if s.kind == v.backend]
    return Renderer().record(stage, sources)


def test_build_render_refuses_a_stale_lock_and_preview_says_why(tmp_path):
    def bump(data):
        data["releases"]["cann8.5.0-pt2.8.0"]["backends"]["vllm"]["vllm_ascend"] = "0.13.0rc3"

    v = variant(tmp_path, bump, backend="vllm", release="cann8.5.0-pt2.8.0", arch="aarch64")
    _copy_locks(tmp_path)
    with pytest.raises(LockError, match="is stale"):
        _render_backend(v, strict=True)
    record = _render_backend(v, strict=False)
    ctx, files = record.template, record.files
    assert files["locks/LOCK-MISSING"].startswith(b"locks/cann8.5.0-pt2.8.0/vllm-aarch64.txt is stale") or \
        b"is stale" in files["locks/LOCK-MISSING"]
    assert "is stale" in ctx["lock"]["missing"]


def test_rendered_vllm_stage_installs_what_the_torch_image_lacks_and_builds_the_sdists(tmp_path):
    """Only the lock's pins the image below lacks are installed; what it has at another version is removed first;
    vLLM's sdist and arctic-inference's (no aarch64 wheel) are built on the target, from the wheel store. (A2: PyPI's
    vllm-ascend wheel is its build.)"""
    v = variant(tmp_path, None, backend="vllm", release="cann8.5.0-pt2.8.0", arch="aarch64", device="a2")
    record = _render_backend(v, strict=True)
    ctx, files = record.template, record.files
    lock = parse_lock(ROOT / "locks" / "cann8.5.0-pt2.8.0" / "vllm-aarch64.txt")
    torch = parse_lock(ROOT / "locks" / "cann8.5.0-pt2.8.0" / "torch-aarch64.txt")
    base = parse_lock(ROOT / "locks" / "base" / "base-py3.11-aarch64.txt")
    assert files["locks/vllm-aarch64.txt"] == lock.text.encode()
    below = {**base.pins, **torch.pins}
    install = files["install.txt"].decode().splitlines()
    names = {line.split("==")[0] for line in install}
    assert "torch" not in names and "torch-npu" not in names  # the torch image has them, at the same versions
    off = {f.name for f in lock.off_pypi}  # none here: PyPI has this release's triton-ascend 3.2.0
    assert names == {n for n, ver in lock.pins.items() if below.get(n) != ver} - off - {"arctic-inference"}
    assert all(f" --hash=sha256:{lock.hashes[line.split('==')[0]]}" in line for line in install)
    assert ctx["packages"]["replaces"] == sorted(n for n, ver in lock.pins.items() if n in below and below[n] != ver)
    built = [b["what"] for b in ctx["packages"]["target_builds"]]
    assert built == ["arctic-inference 0.1.1 (no aarch64 wheel)", "vLLM 0.13.0 from its sdist"]
    assert ctx["packages"]["target_builds"][1]["spec"].endswith("#" + lock.source_sdist[2])


# vllm_ascend-0.23.0.tar.gz's sha256 on PyPI's simple index (December 2026), and its wheel's, written out by hand
VLLM_ASCEND_SDIST = "a58db76eaffcf328b13b315a0db3a57d381a8947d01057ddcefe4ad02372b242"
VLLM_ASCEND_A2_WHEEL = "cdf79713e6b77cf0a357ed5f99ad4864bbb7790d2903dd81aac5c760f6e86ce6"


@pytest.mark.parametrize(("device", "soc"), [("a3", "ascend910_9391"), ("a5", "ascend950dt_9582")])
def test_a3_and_the_950_build_vllm_ascend_for_their_chip_and_a2_takes_pypis_wheel(tmp_path, device, soc):
    """The wheel PyPI carries is A2's build: A3 and the 950 build the sdist the lock names in the image, with the
    chip's SOC_VERSION (upstream's Dockerfile.a3 and Dockerfile.a5) and the kernels on, as a build arg; the wheel is
    not installed there."""
    v = variant(tmp_path, None, backend="vllm", release="cann9.1.0-pt2.10.0", arch="aarch64", device=device)
    record = _render_backend(v, strict=False)
    ctx, files = record.template, record.files
    install = files["install.txt"].decode()
    assert "vllm-ascend==" not in install and VLLM_ASCEND_A2_WHEEL not in install
    (build,) = [b for b in ctx["packages"]["target_builds"] if b["what"].startswith("vllm-ascend")]
    assert build["what"] == (f"vllm-ascend 0.23.0 for {device} from its sdist (SOC_VERSION={soc}, "
                             "COMPILE_CUSTOM_KERNELS=${COMPILE_CUSTOM_KERNELS})")
    assert build["spec"].endswith(f"#{VLLM_ASCEND_SDIST}") and build["env"][0] == f"SOC_VERSION={soc}"
    assert build["args"] == ["COMPILE_CUSTOM_KERNELS"] and record.switches == {"COMPILE_CUSTOM_KERNELS": "1"}
    assert f"vllm-ascend==0.23.0 --hash=sha256:{VLLM_ASCEND_SDIST}" in record.wanted
    assert VLLM_ASCEND_SDIST in record.contexts["wheels"]
    # the build requirements the sdist's setup.py and its kernels' CMake need, from the lock, hashed
    assert any(r.startswith("pybind11==") for r in files["build-requirements.txt"].decode().splitlines())
    a2 = variant(tmp_path / "a2", None, backend="vllm", release="cann9.1.0-pt2.10.0", arch="aarch64", device="a2")
    record = _render_backend(a2, strict=False)
    assert f"vllm-ascend==0.23.0 --hash=sha256:{VLLM_ASCEND_A2_WHEEL}" in record.files["install.txt"].decode()
    assert not [b for b in record.template["packages"]["target_builds"] if b["what"].startswith("vllm-ascend")]
    assert record.switches == {}


def test_the_device_build_compiles_no_kernel_where_the_cann_is_a_test_double(tmp_path):
    """The CANN test double has no compiler: the same build runs with the kernels off (a build arg), so upstream's
    setup.py still writes the device's record; the image carries the test-double label."""
    from tests.fixtures.fake_cann.make_packages import write_packages

    write_packages(tmp_path / "cann", arches=["aarch64"])
    v = variant(tmp_path, None, backend="vllm", release="cann9.1.0-pt2.10.0", arch="aarch64", device="a3")
    record = _render_backend(v, strict=False, cann=CannSource("local", tmp_path / "cann", strict=False))
    assert record.switches == {"COMPILE_CUSTOM_KERNELS": "0"}
    assert "cann" in record.labels["io.ascend-images.test-double"].split(",")


OVERRIDDEN = "cann8.5.1-vllm0.18.0"


def test_dropping_an_override_makes_the_lock_stale(tmp_path):
    def drop(data):
        data["releases"][OVERRIDDEN]["backends"]["vllm"].pop("overrides")

    v = variant(tmp_path, drop, backend="vllm", release=OVERRIDDEN, arch="aarch64")
    _copy_locks(tmp_path)
    with pytest.raises(LockError, match=rf"vllm-aarch64.txt is stale.*lock --layer backend --release {OVERRIDDEN}"):
        load_lock(v)


def test_a_lock_that_does_not_hold_the_override_is_refused(tmp_path):
    v = variant(tmp_path, lambda d: None, backend="vllm", release=OVERRIDDEN, arch="aarch64")
    _copy_locks(tmp_path)
    path = tmp_path / "locks" / OVERRIDDEN / "vllm-aarch64.txt"
    path.write_text(path.read_text().replace("\nopencv-python-headless==4.11.0.86 ",
                                             "\nopencv-python-headless==4.13.0.90 "))
    with pytest.raises(LockError, match=r"pins opencv-python-headless==4.13.0.90, the release overrides it to "
                                        r"4.11.0.86"):
        load_lock(v)


def test_an_override_must_pin_one_exact_version(tmp_path):
    from ascend_images.errors import MatrixError

    def loose(data):
        data["releases"][OVERRIDDEN]["backends"]["vllm"]["overrides"][0]["requirement"] = "opencv-python-headless<5"

    with pytest.raises(MatrixError, match=r"vllm.overrides.0.requirement: .*NAME==VERSION, "
                                          r"got 'opencv-python-headless<5'"):
        variant(tmp_path, loose, backend="vllm", release=OVERRIDDEN, arch="aarch64")


def test_a_stage_whose_lock_overrides_a_pin_waives_exactly_that(tmp_path):
    v = variant(tmp_path, None, backend="vllm", release=OVERRIDDEN, arch="aarch64")
    record = _render_backend(v, strict=True)
    ctx, files = record.template, record.files
    assert ctx["lock"]["overrides"] == ["opencv-python-headless==4.11.0.86"]
    assert files["pip-check"] == (ROOT / "images" / "common" / "backend" / "pip-check").read_bytes()
    old = variant(tmp_path, None, backend="vllm", release="cann8.5.0-pt2.8.0", arch="aarch64")
    assert _render_backend(old, strict=True).template["lock"]["overrides"] == []


# --- `invoke lock --check` tells the truth: what the matrix says cannot or need not be locked is skipped, with why ---
def test_lock_check_passes_on_this_checkout_and_names_what_it_skips(tmp_path):
    from ascend_images.cli.inputs import make_locks
    from ascend_images.cli.options import LockFlags, Selection

    lines: list[str] = []
    code = make_locks(Selection(str(ROOT / "matrix.yaml")), LockFlags(), lines.append, check=True,
                          cache_dir=tmp_path)
    assert code == 0, lines
    assert "skipped locks/cann9.1.0-vllm0.26.0rc1/vllm-aarch64.txt: release blocked: vllm-ascend 0.26.0rc1 pins " \
           "fastapi<0.124.0" in "\n".join(lines)
    assert any(line.startswith("skipped locks/cann9.1.0-pt2.10.0/torch-x86_64.txt: arches.x86_64.unlocked: x86_64's "
                               "torch is the CPU build") for line in lines), lines
    assert {"ok      locks/base/base-py3.11-x86_64.txt", "ok      locks/base/base-py3.11-aarch64.txt"} <= set(lines)
    assert "ok      locks/cann9.1.0-pt2.10.0/vllm-aarch64.txt" in lines


def test_lock_check_fails_on_a_lock_the_matrix_says_exists_and_does_not(tmp_path):
    from ascend_images.cli.inputs import make_locks
    from ascend_images.cli.options import LockFlags, Selection
    from tests.fixtures.matrices import matrix_copy

    path = matrix_copy(tmp_path, locks=True)
    (tmp_path / "locks" / "cann9.0.0-sglang0.5.17" / "sglang-aarch64.txt").unlink()
    lines: list[str] = []
    code = make_locks(Selection(str(path)), LockFlags(), lines.append, check=True, cache_dir=tmp_path)
    assert code == 1
    assert ("FAILED  locks/cann9.0.0-sglang0.5.17/sglang-aarch64.txt: missing: invoke lock --layer backend --release "
            "cann9.0.0-sglang0.5.17 --backend sglang --arch aarch64") in lines


def test_a_plan_reads_each_lock_of_a_variant_once(monkeypatch):
    """A framework image's chain installs four locks, each checked over the one below it; the plan loads them once and
    its stages carry them, so planning and rendering the whole chain reads each file once (every stage read its own
    and those below again: 49 reads for a verl chain)."""
    import ascend_images.inputs.lockspec as lockspec
    from ascend_images.stages.drift import committed_sources

    matrix = load_matrix(ROOT / "matrix.yaml")
    v = next(v for v in all_variants(matrix) if v.framework == "verl" and v.backend == "vllm" and v.arch == "aarch64"
             and not v.release.blocked)
    reads: list[Path] = []
    real = lockspec.parse_lock
    monkeypatch.setattr(lockspec, "parse_lock", lambda path: reads.append(path) or real(path))
    sources = committed_sources(matrix)
    plan = make_plan([v], PlanOptions(sources.cann))
    for stage in plan.stages:
        Renderer().record(stage, sources)
    # the files as lockspec's docstring names them, written out by hand
    release = v.release_name
    assert sorted(p.relative_to(ROOT / "locks").as_posix() for p in reads) == sorted([
        "base/base-py3.11-aarch64.txt", f"{release}/torch-aarch64.txt", f"{release}/vllm-aarch64.txt",
        f"{release}/vllm-verl-aarch64.txt"])
