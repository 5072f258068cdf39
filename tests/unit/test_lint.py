"""ruff on the code, hadolint on every rendered Dockerfile of every release and the manual's mkdocs build are part
of the tests."""

import io
import os
import re
import shutil
import subprocess
import sys
import time

import pytest

from ascend_images.cli.options import env_flag
from ascend_images.console import Steps
from ascend_images.tools import which

from .helpers import ROOT


def test_ruff_clean():
    result = subprocess.run([sys.executable, "-m", "ruff", "check", "src", "dev", "tests", "tasks.py"], cwd=ROOT,
                            capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.skipif(which("hadolint") is None and not env_flag("CI"), reason="hadolint not installed")
def test_lint_says_what_it_does_and_counts_hadolints_warnings(tmp_path):
    """`ascend-images lint --verbose` as a user runs it (not a terminal here: plain lines): a line per step with its
    time on stderr; on stdout each linter's verdict, hadolint's warnings in full and their count at the end."""
    result = subprocess.run([sys.executable, "-m", "ascend_images.cli", "lint", "--verbose", "--work-dir",
                             str(tmp_path)], cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT / "src")},
                            capture_output=True, text=True, timeout=900)
    assert result.returncode == 0, result.stdout + result.stderr
    steps = result.stderr.splitlines()
    assert [line.split(":")[0].split(" (")[0] for line in steps] == [
        "ruff", "lint-imports", "render every variant", "hadolint", "rendered/", "actionlint", "zizmor", "mkdocs"]
    assert all(re.search(r" \((\d+m\d\ds|\d+\.\ds)\)$", line) for line in steps), steps
    summary = next(line for line in result.stdout.splitlines() if line.startswith("hadolint:"))
    assert summary.startswith("hadolint: 0 errors, ")
    warnings = int(re.search(r"(\d+) warnings", summary)[1])
    shown = [line for line in result.stdout.splitlines() if re.search(r"DL\d{4} (warning|info|style):", line)]
    assert len(shown) == warnings
    assert result.stdout.splitlines()[-1].startswith("lint: passed in ")
    assert result.stdout.splitlines()[-1].endswith(f"; {warnings} hadolint warnings/infos")
    assert len(list((tmp_path / "lint").rglob("Dockerfile"))) > 300


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


@pytest.mark.parametrize(("stream", "voice", "live"), [(Terminal, {}, True), (io.StringIO, {}, False),
                                                       (Terminal, {"quiet": True}, False)])
def test_a_step_is_a_live_line_on_a_terminal_and_a_plain_one_elsewhere(stream, voice, live):
    from ascend_images import console

    out = stream()
    console.configure(**voice)
    try:
        steps = Steps(stream=out)
        with steps.step("hadolint (3 Dockerfiles)"):
            time.sleep(0.3)
    finally:
        console.configure()
    text = out.getvalue()
    if voice.get("quiet"):
        assert text == ""
        return
    assert text.endswith("hadolint (3 Dockerfiles) (0.3s)\n"), repr(text)
    assert ("\x1b[" in text and "0:00:00" in text) is live, repr(text)  # rich's spinner line, with elapsed time
    assert text.count("\n") == (2 if live else 1)


def _tree_with(tmp_path, module: str, line: str):
    """A copy of the package with one import line added to `module` (a path under src/ascend_images)."""
    src = tmp_path / "src"
    shutil.copytree(ROOT / "src" / "ascend_images", src / "ascend_images",
                    ignore=shutil.ignore_patterns("__pycache__"))
    target = src / "ascend_images" / module
    target.write_text(line + "\n" + target.read_text())
    return src


def test_the_wings_import_contract_holds_on_the_tree():
    from ascend_images.cli.lint import lint_imports

    lines: list[str] = []
    assert lint_imports(lines.append) == 0, "\n".join(lines)
    assert lines == ["lint-imports: contracts kept"]


@pytest.mark.parametrize(("module", "line", "says"), [
    # the ground floor reaching up to the builder
    ("matrix/versions.py", "import ascend_images.builder.claims",
     "ascend_images.matrix.versions -> ascend_images.builder"),
    # one ground-floor wing into its independent sibling
    ("runtime/junit.py", "import ascend_images.matrix.versions", "ascend_images.runtime.junit -> ascend_images.matrix"),
    # a wing importing the command line
    ("stages/names.py", "import ascend_images.cli.options", "ascend_images.stages.names -> ascend_images.cli"),
    # the top-level modules are ordered too: the console below every wing
    ("console.py", "import ascend_images.inputs.pins", "ascend_images.console -> ascend_images.inputs"),
    ("errors.py", "import ascend_images.console", "ascend_images.errors -> ascend_images.console"),
])
def test_the_contract_fails_on_a_planted_import(tmp_path, module, line, says):
    from ascend_images.cli.lint import lint_imports

    lines: list[str] = []
    assert lint_imports(lines.append, _tree_with(tmp_path, module, line)) != 0
    assert lines[0] == "lint-imports: CONTRACT BROKEN"
    assert says in "\n".join(lines)


def _manual_copy(tmp_path):
    """mkdocs.yml and docs/ copied: a tree lint_docs builds like the checkout's."""
    root = tmp_path / "tree"
    root.mkdir()
    shutil.copy(ROOT / "mkdocs.yml", root / "mkdocs.yml")
    shutil.copytree(ROOT / "docs", root / "docs")
    return root


@pytest.mark.skipif(which("mkdocs") is None and not env_flag("CI"), reason="mkdocs not installed")
def test_the_manual_builds_strict_on_the_tree(tmp_path):
    from ascend_images.cli.lint import lint_docs

    lines: list[str] = []
    assert lint_docs(lines.append, tmp_path / "site", root=ROOT) == 0, "\n".join(lines)
    assert lines == [f"mkdocs: built ({tmp_path / 'site'})"]
    assert (tmp_path / "site" / "locks" / "index.html").is_file()
    # nothing in the site is fetched when it is read: no highlight.js or font from a CDN
    assert not [p for p in (tmp_path / "site").rglob("*.html") if "cdnjs.cloudflare.com" in p.read_text()]


@pytest.mark.skipif(which("mkdocs") is None and not env_flag("CI"), reason="mkdocs not installed")
@pytest.mark.parametrize(("page", "old", "new", "says"), [
    # a link to a page that is not there
    ("design.md", "[Locks](locks.md)", "[Locks](lockz.md)",
     "Doc file 'design.md' contains a link 'lockz.md', but the target is not found among documentation files."),
    # a link to an anchor the page does not have (a heading renamed, say)
    ("building.md", "(design.md#the-engine)", "(design.md#design-notes-the-engine)",
     "Doc file 'building.md' contains a link 'design.md#design-notes-the-engine', but the doc "
     "'design.md' does not contain an anchor '#design-notes-the-engine'."),
    # a page left out of the nav
    ("orphan.md", None, "# An orphan\n", "are not included in the \"nav\" configuration:\n  - orphan.md"),
])
def test_a_broken_manual_fails_lint_and_passes_once_mended(tmp_path, page, old, new, says):
    from ascend_images.cli.lint import lint_docs

    root = _manual_copy(tmp_path)
    target = root / "docs" / page
    before = target.read_text(encoding="utf-8") if target.exists() else None
    target.write_text(new if old is None else before.replace(old, new), encoding="utf-8")
    assert old is None or before.count(old) == 1, old
    lines: list[str] = []
    assert lint_docs(lines.append, tmp_path / "site", root=root) != 0
    assert lines[0] == f"mkdocs: FINDINGS ({tmp_path / 'site'})"
    assert says in "\n".join(lines[1:])
    # mended, the same build passes
    if before is None:
        target.unlink()
    else:
        target.write_text(before, encoding="utf-8")
    lines.clear()
    assert lint_docs(lines.append, tmp_path / "site", root=root) == 0, "\n".join(lines)
