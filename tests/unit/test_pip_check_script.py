"""The backend stages' `pip check` with a lock's overrides (images/common/backend/pip-check), run for real:
a venv whose installed metadata holds one conflict, checked by the script with and without the override
that explains it."""

from __future__ import annotations

import os
import subprocess
import sys
import venv
from pathlib import Path

import pytest

from tests.conftest import ROOT

SCRIPT = ROOT / "images" / "common" / "backend" / "pip-check"


def _dist(site: Path, name: str, version: str, requires: list[str]) -> None:
    info = site / f"{name.replace('-', '_')}-{version}.dist-info"
    info.mkdir()
    meta = ["Metadata-Version: 2.1", f"Name: {name}", f"Version: {version}", *(f"Requires-Dist: {r}" for r in requires)]
    (info / "METADATA").write_text("\n".join(meta) + "\n")
    (info / "INSTALLER").write_text("pip\n")
    (info / "RECORD").write_text("")


@pytest.fixture(scope="module")
def python(tmp_path_factory) -> Path:
    """A venv with vLLM 0.18.0's and vllm-ascend 0.18.0's opencv requirements (written out by hand from their
    metadata) and the opencv vllm-ascend pins."""
    root = tmp_path_factory.mktemp("venv")
    venv.create(root, with_pip=True)
    site = next((root / "lib").glob("python3.*/site-packages"))
    _dist(site, "vllm", "0.18.0", ["opencv-python-headless>=4.13.0"])
    _dist(site, "vllm-ascend", "0.18.0", ["opencv-python-headless<=4.11.0.86"])
    _dist(site, "opencv-python-headless", "4.11.0.86", [])
    return root / "bin" / "python"


# the venv stands for an image's: a PYTHONPATH at this checkout's src/ (how tests run a worktree) would add the
# ascend_images.egg-info an editable install leaves there to what its pip check sees
VENV_ENV = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}


def _run(python: Path, *overrides: str) -> subprocess.CompletedProcess:
    return subprocess.run([str(python), str(SCRIPT), *overrides], capture_output=True, text=True, env=VENV_ENV)


def test_plain_pip_check_sees_the_conflict(python):
    result = subprocess.run([str(python), "-m", "pip", "check"], capture_output=True, text=True, env=VENV_ENV)
    assert result.returncode == 1
    assert "vllm 0.18.0 has requirement opencv-python-headless>=4.13.0, but you have opencv-python-headless " \
           "4.11.0.86." in result.stdout


def test_the_override_that_causes_it_waives_it(python):
    result = _run(python, "opencv-python-headless==4.11.0.86")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "waived (lock override opencv-python-headless==4.11.0.86): vllm 0.18.0 has requirement" in result.stdout


@pytest.mark.parametrize("overrides", [(), ("opencv-python-headless==4.12.0.88",), ("numpy==1.26.4",)])
def test_no_override_or_another_one_waives_nothing(python, overrides):
    result = _run(python, *overrides)
    assert result.returncode == 1
    assert "vllm 0.18.0 has requirement opencv-python-headless>=4.13.0" in result.stderr


def test_a_second_conflict_is_not_waived_with_the_first(python, tmp_path):
    site = next((python.parent.parent / "lib").glob("python3.*/site-packages"))
    _dist(site, "sglang", "0.5.10", ["torch==2.8.0"])
    try:
        result = _run(python, "opencv-python-headless==4.11.0.86")
        assert result.returncode == 1
        assert "sglang 0.5.10 requires torch, which is not installed." in result.stderr
        assert "opencv" not in result.stderr
    finally:
        import shutil

        shutil.rmtree(site / "sglang-0.5.10.dist-info")


def test_a_malformed_override_is_a_usage_error(python):
    result = _run(python, "opencv-python-headless>=4")
    assert result.returncode == 2 and "expected NAME==VERSION" in result.stderr


def test_the_script_is_stdlib_only():
    """It runs in the image's venv before anything but the lock is installed: stdlib imports only."""
    imports = [line.split()[1] for line in SCRIPT.read_text().splitlines() if line.startswith(("import ", "from "))]
    assert set(imports) <= set(sys.stdlib_module_names)


@pytest.fixture(scope="module")
def no_deps_python(tmp_path_factory) -> Path:
    """vllm-ascend pinning triton-ascend 3.2.2, installed --no-deps with a requirement of its own left out (a
    made-up one: PyPI's triton-ascend 3.2.0 declares none, so the double must), and a second, unrelated gap. One venv
    for the module (ensurepip takes seconds): its checks only read it."""
    root = tmp_path_factory.mktemp("no-deps") / "venv"
    venv.create(root, with_pip=True)
    site = next((root / "lib").glob("python3.*/site-packages"))
    _dist(site, "vllm-ascend", "0.23.0", ["triton-ascend==3.2.2"])
    _dist(site, "triton-ascend", "3.2.2", ["ascend-compiler>=1.0", "numpy>=2"])
    _dist(site, "numpy", "1.26.4", [])
    return root / "bin" / "python"


def test_what_a_no_deps_package_requires_is_waived_for_it_alone(no_deps_python):
    plain = subprocess.run([str(no_deps_python), "-m", "pip", "check"], capture_output=True, text=True,
                           env=VENV_ENV)
    assert "triton-ascend 3.2.2 requires ascend-compiler, which is not installed." in plain.stdout
    assert "triton-ascend 3.2.2 has requirement numpy>=2, but you have numpy 1.26.4." in plain.stdout
    result = _run(no_deps_python, "--no-deps", "triton-ascend==3.2.2")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "waived (installed --no-deps as upstream does: triton-ascend==3.2.2): triton-ascend 3.2.2 requires " \
           "ascend-compiler, which is not installed." in result.stdout
    assert "has requirement numpy>=2" in result.stdout


@pytest.mark.parametrize("args", [(), ("--no-deps", "triton-ascend==3.2.1"), ("--no-deps", "vllm-ascend==0.23.0"),
                                  ("triton-ascend==3.2.2",)])
def test_another_version_package_or_an_override_waives_nothing_of_it(no_deps_python, args):
    result = _run(no_deps_python, *args)
    assert result.returncode == 1
    assert "triton-ascend 3.2.2 requires ascend-compiler" in result.stderr
