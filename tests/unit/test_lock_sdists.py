"""Sdists a lock builds from: what the matrix says a lock builds from sdists, an sdist from the artifacts directory
checked against its lock, the requirements read the way the backends' builds read them, and the committed dependency
list of a tree PyPI does not carry."""

from __future__ import annotations

import io
import tarfile
from pathlib import Path

import pytest
import yaml

from ascend_images.inputs.lockfile import LockError
from ascend_images.inputs.lockspec import load_lock
from ascend_images.inputs.pypi import IndexFile, has_wheel
from ascend_images.inputs.sources import ArtifactSource, CannSource, Sources
from ascend_images.inputs.sourcetree import SourcePackage, sdist_build_requirements, tree_requirements, without_held
from ascend_images.stages.plan import PlanOptions, make_plan
from ascend_images.stages.render import Renderer
from tests.unit.helpers import variant
from tests.unit.test_locks import _copy_locks


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
        Renderer().record(stage, sources)


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
    from ascend_images.inputs.upstream import read_listed_requirements

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
    from ascend_images.inputs.sourcetree import first_difference

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
