"""ruff on the code and hadolint on every rendered Dockerfile of every release are part of the tests."""

import shutil
import subprocess
import sys

import pytest

from ascend_images.flags import Selection, env_flag
from ascend_images.lint import lint

from .helpers import ROOT


def test_ruff_clean():
    result = subprocess.run([sys.executable, "-m", "ruff", "check", "src", "tests", "tasks.py"], cwd=ROOT,
                            capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.skipif(shutil.which("hadolint") is None and not env_flag("CI"), reason="hadolint not installed")
def test_hadolint_has_no_error_on_any_rendered_dockerfile(tmp_path):
    lines: list[str] = []
    status = lint(Selection(str(ROOT / "matrix.yaml")), lines.append, tmp_path, ruff=False)
    summary = next(line for line in lines if line.startswith("hadolint:"))
    assert status == 0, "\n".join(lines)
    assert summary.startswith("hadolint: 0 errors")
    rendered = list((tmp_path / "lint").rglob("Dockerfile"))
    assert len(rendered) > 300
