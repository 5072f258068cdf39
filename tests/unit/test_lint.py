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


def _tree_with(tmp_path, module: str, line: str):
    """A copy of the package with one import line added to `module` (a path under src/ascend_images)."""
    src = tmp_path / "src"
    shutil.copytree(ROOT / "src" / "ascend_images", src / "ascend_images",
                    ignore=shutil.ignore_patterns("__pycache__"))
    target = src / "ascend_images" / module
    target.write_text(line + "\n" + target.read_text())
    return src


def test_the_wings_import_contract_holds_on_the_tree():
    from ascend_images.lint import lint_imports

    lines: list[str] = []
    assert lint_imports(lines.append) == 0, "\n".join(lines)
    assert lines == ["lint-imports: contracts kept"]


@pytest.mark.parametrize(("module", "line", "says"), [
    # the ground floor reaching up to the builder
    ("matrix/versions.py", "import ascend_images.builder.claims",
     "ascend_images.matrix.versions -> ascend_images.builder"),
    # one ground-floor wing into its independent sibling
    ("runtime/junit.py", "import ascend_images.matrix.versions", "ascend_images.runtime.junit -> ascend_images.matrix"),
    # a wing importing the task layer
    ("stages/names.py", "import ascend_images.flags", "ascend_images.stages.names -> ascend_images.flags"),
])
def test_the_contract_fails_on_a_planted_import(tmp_path, module, line, says):
    from ascend_images.lint import lint_imports

    lines: list[str] = []
    assert lint_imports(lines.append, _tree_with(tmp_path, module, line)) != 0
    assert lines[0] == "lint-imports: CONTRACT BROKEN"
    assert says in "\n".join(lines)
