"""Backend locks: committed locks match the matrix; a stale, missing or tampered lock is refused with
the command that fixes it; sdist requirements are read the way the backends' builds read them."""

from __future__ import annotations

import io
import shutil
import tarfile
from pathlib import Path

import pytest
import yaml

from ascend_images.inputs.frameworklock import check_framework_lock, framework_lock_spec
from ascend_images.inputs.lockfile import LockError, check_lock, load_lock, lock_spec, lock_specs, locks_dir, parse_lock
from ascend_images.inputs.lockgen import sdist_build_requirements, tree_requirements, without_held, write_lock
from ascend_images.inputs.pypi import IndexFile, has_wheel
from ascend_images.inputs.sources import ArtifactSource, CannSource, Sources
from ascend_images.matrix.model import all_variants, load_matrix
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
    matrix = load_matrix(ROOT / "matrix.yaml")
    root = locks_dir(matrix)
    specs = {(s.release, s.backend, s.arch): s for s in lock_specs(matrix, all_variants(matrix))}
    committed = sorted(root.glob("*/*.txt"))
    assert committed, "no locks committed"
    # a framework's lock (<backend>-<framework>-<arch>.txt) is checked against its spec, the backend lock included
    frameworks = {(v.release_name, f"{v.backend}-{v.framework}", v.arch): v for v in all_variants(matrix)
                  if v.framework != "none"}
    for path in committed:
        key = (path.parent.name, *path.stem.rsplit("-", 1))
        if key in frameworks:
            check_framework_lock(framework_lock_spec(frameworks[key]), parse_lock(path))
            continue
        assert key in specs, f"{path} belongs to no (release, backend[-framework], arch) of the matrix"
        check_lock(specs[key], parse_lock(path))
    for key in REQUIRED:
        assert specs[key].path(root).is_file(), f"missing lock: {specs[key].command}"


def test_locks_hold_the_release_torch_pair_and_no_cuda():
    matrix = load_matrix(ROOT / "matrix.yaml")
    for v in all_variants(matrix):
        if v.backend == "none" or v.arch != "aarch64" or v.release.blocked:
            continue
        lock = load_lock(v)
        assert lock.pins["torch"] == v.torch and lock.pins["torch-npu"] == v.torch_npu
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
    with pytest.raises(LockError, match=r"vllm-aarch64.txt is stale.*triton-ascend==3.2.1.*"
                                        r"invoke lock --release cann8.5.0-pt2.8.0 --backend vllm --arch aarch64"):
        load_lock(v)


def test_missing_lock_names_the_command(tmp_path):
    v = variant(tmp_path, lambda d: None, backend="sglang", release="cann8.5.0-pt2.8.0", arch="aarch64")
    with pytest.raises(LockError, match=r"no lock for cann8.5.0-pt2.8.0/sglang/aarch64.*invoke lock --release"):
        load_lock(v)


def test_x86_lock_missing_mentions_the_torch_index(tmp_path):
    v = variant(tmp_path, lambda d: None, backend="vllm", release="cann8.5.0-pt2.8.0", arch="x86_64")
    with pytest.raises(LockError, match=r"needs the torch index https://download.pytorch.org/whl/cpu"):
        load_lock(v)


def test_a_hand_edited_torch_pin_is_refused(tmp_path):
    v = variant(tmp_path, lambda d: None, backend="vllm", release="cann8.5.0-pt2.8.0", arch="aarch64")
    _copy_locks(tmp_path)
    path = tmp_path / "locks" / "cann8.5.0-pt2.8.0" / "vllm-aarch64.txt"
    path.write_text(path.read_text().replace("\ntorch==2.8.0 ", "\ntorch==2.9.0 "))
    with pytest.raises(LockError, match=r"pins torch==2.9.0, the release needs 2.8.0"):
        load_lock(v)


def test_write_lock_leaves_nothing_when_the_lock_fails_its_check(tmp_path):
    v = variant(tmp_path, lambda d: None, backend="vllm", release="cann8.5.0-pt2.8.0", arch="aarch64")
    spec = lock_spec(v)
    good = (ROOT / "locks" / "cann8.5.0-pt2.8.0" / "vllm-aarch64.txt").read_text()
    with pytest.raises(LockError):
        write_lock(spec, tmp_path / "locks", good.replace("torch-npu==2.8.0.post2", "torch-npu==2.8.0"))
    assert not list((tmp_path / "locks").rglob("*.txt*"))
    assert write_lock(spec, tmp_path / "locks", good).read_text() == good


def _render_backend(v, strict: bool):
    sources = Sources(CannSource("url", strict=False), ArtifactSource(strict=strict))
    plan = make_plan([v], PlanOptions(sources.cann))
    (stage,) = [s for s in plan.stages if s.kind == v.backend]
    return Renderer().context(stage, sources)


def test_build_render_refuses_a_stale_lock_and_preview_says_why(tmp_path):
    def bump(data):
        data["releases"]["cann8.5.0-pt2.8.0"]["backends"]["vllm"]["vllm_ascend"] = "0.13.0rc3"

    v = variant(tmp_path, bump, backend="vllm", release="cann8.5.0-pt2.8.0", arch="aarch64")
    _copy_locks(tmp_path)
    with pytest.raises(LockError, match="is stale"):
        _render_backend(v, strict=True)
    ctx, files = _render_backend(v, strict=False)
    assert files["backend-lock.txt"].startswith(b"# LOCK MISSING OR STALE")
    assert ctx["lock"]["sdist"]["sha256"] == "sha256-missing"


def test_rendered_vllm_stage_installs_the_lock_then_the_sdist(tmp_path):
    v = variant(tmp_path, None, backend="vllm", release="cann8.5.0-pt2.8.0", arch="aarch64")
    ctx, files = _render_backend(v, strict=True)
    lock = parse_lock(ROOT / "locks" / "cann8.5.0-pt2.8.0" / "vllm-aarch64.txt")
    assert files["backend-lock.txt"] == lock.text.encode()
    assert ctx["lock"]["sdist"]["file"] == "vllm-0.13.0.tar.gz"
    assert ctx["lock"]["sdist"]["url"].startswith("https://files.pythonhosted.org/")
    assert "arctic-inference" in ctx["lock"]["from_source"]  # no aarch64 wheel: built in the image


OVERRIDDEN = "cann8.5.1-vllm0.18.0"


def test_dropping_an_override_makes_the_lock_stale(tmp_path):
    def drop(data):
        data["releases"][OVERRIDDEN]["backends"]["vllm"].pop("overrides")

    v = variant(tmp_path, drop, backend="vllm", release=OVERRIDDEN, arch="aarch64")
    _copy_locks(tmp_path)
    with pytest.raises(LockError, match=rf"vllm-aarch64.txt is stale.*invoke lock --release {OVERRIDDEN}"):
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


def test_only_a_stage_whose_lock_overrides_a_pin_gets_the_waiving_pip_check(tmp_path):
    v = variant(tmp_path, None, backend="vllm", release=OVERRIDDEN, arch="aarch64")
    ctx, files = _render_backend(v, strict=True)
    assert ctx["lock"]["overrides"] == ["opencv-python-headless==4.11.0.86"]
    assert files["pip-check"] == (ROOT / "images" / "common" / "backend" / "pip-check").read_bytes()
    old = variant(tmp_path, None, backend="vllm", release="cann8.5.0-pt2.8.0", arch="aarch64")
    old_ctx, old_files = _render_backend(old, strict=True)
    assert "pip-check" not in old_files and old_ctx["lock"]["overrides"] == []


def test_the_matrix_says_what_a_lock_builds_from_sdists(tmp_path):
    def undeclared(data):
        data["releases"]["cann8.5.0-pt2.8.0"]["backends"]["vllm"].pop("from_sdist")

    v = variant(tmp_path / "a", undeclared, backend="vllm", release="cann8.5.0-pt2.8.0", arch="aarch64")
    _copy_locks(tmp_path / "a")
    with pytest.raises(LockError, match=r"builds arctic-inference from sdists on aarch64, and matrix.yaml does not "
                                        r"say so: add releases.cann8.5.0-pt2.8.0.backends.vllm.from_sdist.aarch64: "
                                        r"\[arctic-inference\]"):
        load_lock(v)

    def wrong(data):
        data["releases"]["cann8.5.0-pt2.8.0"]["backends"]["sglang"]["from_sdist"] = {"aarch64": ["pyyaml"]}

    v = variant(tmp_path / "b", wrong, backend="sglang", release="cann8.5.0-pt2.8.0", arch="aarch64")
    _copy_locks(tmp_path / "b")
    with pytest.raises(LockError, match=r"sglang-aarch64.txt builds nothing from sdists on aarch64, matrix.yaml "
                                        r"releases.cann8.5.0-pt2.8.0.backends.sglang.from_sdist.aarch64 says pyyaml"):
        load_lock(v)


def test_sdist_from_artifacts_dir_must_match_the_lock(tmp_path):
    v = variant(tmp_path, None, backend="vllm", release="cann8.5.0-pt2.8.0", arch="aarch64")
    artifacts = tmp_path / "artifacts"
    artifacts.mkdir()
    (artifacts / "vllm-0.13.0.tar.gz").write_bytes(b"not the sdist PyPI published")
    sources = Sources(CannSource("url", strict=False), ArtifactSource(artifacts))
    plan = make_plan([v], PlanOptions(sources.cann))
    (stage,) = [s for s in plan.stages if s.kind == "vllm"]
    with pytest.raises(LockError, match=r"vllm-0.13.0.tar.gz: sha256 [0-9a-f]{64}, but .* pins 4ad43db45fef"):
        Renderer().context(stage, sources)


def _sdist(tmp_path: Path, root: str, files: dict[str, str]) -> Path:
    path = tmp_path / f"{root}.tar.gz"
    with tarfile.open(path, "w:gz") as tar:
        for name, text in files.items():
            data = text.encode()
            info = tarfile.TarInfo(f"{root}/{name}")
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return path


def test_vllm_requirements_are_common_txt_and_build_system_without_torch(tmp_path):
    from ascend_images.inputs.lockfile import SourcePackage

    sdist = _sdist(tmp_path, "vllm-9.9.9", {
        "pyproject.toml": '[build-system]\nrequires = ["cmake>=3.26", "torch == 2.9.0", "setuptools-scm>=8"]\n',
        "requirements/common.txt": (
            "regex # fast\n# comment\nnumpy\n-r other.txt\nllguidance >= 1.3; platform_machine == 'aarch64'\n"
        ),
    })
    runtime, build = tree_requirements(SourcePackage("vllm", "9.9.9"), sdist)
    assert runtime == ["regex", "numpy", "llguidance >= 1.3; platform_machine == 'aarch64'"]
    assert without_held(build) == ["cmake>=3.26", "setuptools-scm>=8"]


def test_sglang_requirements_expand_self_referencing_extras(tmp_path):
    from ascend_images.inputs.lockfile import SourcePackage

    sdist = _sdist(tmp_path, "sglang-0.5.8", {
        "pyproject_other.toml": (
            '[build-system]\nrequires = ["setuptools>=61"]\n[project]\nname = "sglang"\ndependencies = ["aiohttp"]\n'
            '[project.optional-dependencies]\nruntime_common = ["fastapi", "sglang[tracing]"]\n'
            'tracing = ["opentelemetry-api"]\nsrt_npu = ["sglang[runtime_common]"]\n'
        ),
    })
    runtime, build = tree_requirements(SourcePackage("sglang", "0.5.8", "pyproject_other.toml"), sdist)
    assert runtime == ["aiohttp", "fastapi", "opentelemetry-api"]
    assert build == ["setuptools>=61"]
    with pytest.raises(LockError, match="has no pyproject_npu.toml"):
        tree_requirements(SourcePackage("sglang", "0.5.8", "pyproject_npu.toml"), sdist)


def test_sdist_without_pyproject_gets_setuptools_defaults(tmp_path):
    sdist = _sdist(tmp_path, "old-1.0", {"setup.py": "from setuptools import setup\nsetup()\n"})
    assert sdist_build_requirements(sdist) == ["setuptools>=40.8.0", "wheel"]


@pytest.mark.parametrize(("file", "arch", "expected"), [
    ("vllm_ascend-0.13.0-cp311-cp311-manylinux_2_24_aarch64.whl", "aarch64", True),
    ("vllm_ascend-0.13.0-cp311-cp311-manylinux_2_24_x86_64.whl", "aarch64", False),
    ("vllm_ascend-0.13.0-cp310-cp310-manylinux_2_24_aarch64.whl", "aarch64", False),
    ("vllm_ascend-0.13.0-py3-none-any.whl", "aarch64", True),
    ("vllm_ascend-0.13.0-cp38-abi3-manylinux2014_aarch64.manylinux_2_17_aarch64.whl", "aarch64", True),
    ("vllm_ascend-0.13.0.tar.gz", "aarch64", False),
])
def test_has_wheel_reads_wheel_tags(file, arch, expected):
    files = [IndexFile(file, f"https://example/{file}", "0" * 64)]
    assert has_wheel(files, "vllm-ascend", "0.13.0", arch, "cp311") is expected


# --- the committed dependency list of a tree PyPI does not carry (SGLang 0.5.17's pyproject_npu.toml) ----------------
def _listed(tmp_path, **changes):
    from ascend_images.inputs.lockfile import read_listed_requirements

    doc = {"project": "sglang", "version": "0.5.17",
           "upstream": {"repository": "sgl-project/sglang", "path": "python/pyproject_npu.toml", "commit": "abc123"},
           "dependencies": ["aiohttp", "transformers==5.12.1"], "srt_npu": ["xgrammar==0.2.1"],
           "build-system-requires": ["setuptools>=61.0", "torch==2.10.0"], **changes}
    (tmp_path / "list.yaml").write_text(yaml.safe_dump(doc))
    return read_listed_requirements(tmp_path, "list.yaml", "0.5.17")


def test_a_committed_list_reads_dependencies_and_the_npu_extra(tmp_path):
    listed = _listed(tmp_path)
    assert listed.runtime == ("aiohttp", "transformers==5.12.1", "xgrammar==0.2.1")
    assert listed.build == ("setuptools>=61.0", "torch==2.10.0")
    assert listed.upstream == "sgl-project/sglang python/pyproject_npu.toml at abc123"


@pytest.mark.parametrize(("changes", "says"), [
    ({"version": "0.5.18"}, "lists version 0.5.18, the release pins 0.5.17"),
    ({"dependencies": ["aiohttp>="]}, "is not a requirement"),
    ({"upstream": {"repository": "sgl-project/sglang"}}, "upstream must name repository, path and commit"),
    ({"extra": 1}, "expected exactly the keys"),
])
def test_a_malformed_committed_list_is_refused(tmp_path, changes, says):
    with pytest.raises(LockError, match=says):
        _listed(tmp_path, **changes)


def test_the_committed_list_is_checked_against_the_tree_and_the_first_difference_named(tmp_path):
    from ascend_images.inputs.lockfile import SourcePackage
    from ascend_images.inputs.lockgen import first_difference

    source = SourcePackage("sglang", "0.5.17", "pyproject_npu.toml", listed=_listed(tmp_path))
    same = (["aiohttp", "transformers == 5.12.1", "xgrammar==0.2.1"], ["setuptools>=61.0", "torch==2.10.0"])
    assert first_difference(source, same, "sglang-v0.5.17.tar.gz") is None  # spelling aside, the same requirements
    changed = (["aiohttp", "transformers==5.12.2", "xgrammar==0.2.1"], same[1])
    assert first_difference(source, changed, "sglang-v0.5.17.tar.gz") == (
        "transformers (runtime): list.yaml has 'transformers==5.12.1', pyproject_npu.toml in sglang-v0.5.17.tar.gz "
        "has 'transformers==5.12.2'")
    added = (same[0], [*same[1], "wheel"])
    assert first_difference(source, added, "a.tar.gz") == (
        "wheel (build): list.yaml has 'nothing', pyproject_npu.toml in a.tar.gz has 'wheel'")


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
    assert ("skipped locks/cann9.1.0-pt2.10.0/vllm-x86_64.txt: matrix.yaml locks no x86_64 build of vllm for this "
            "release (releases.cann9.1.0-pt2.10.0.backends.vllm.from_sdist has no x86_64)") in lines
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
    assert ("FAILED  locks/cann9.0.0-sglang0.5.17/sglang-aarch64.txt: missing: invoke lock --release "
            "cann9.0.0-sglang0.5.17 --backend sglang --arch aarch64") in lines
