"""`ascend-images`, the project's own command (issue 37, DESIGN 18), run as a user runs it: its version line, the
nearest names for a mistyped task or flag (in `invoke` too), the same tasks as `invoke`, --quiet and --verbose, and
the script a fresh `pip install -e .` makes."""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

from ascend_images.checkout import describe as git_commit

from .helpers import ROOT

ENV = {**os.environ, "PYTHONPATH": str(ROOT / "src")}  # this tree's package, whichever one pip installed


def ascend_images(*args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "ascend_images.cli", *args], cwd=cwd, env=ENV, capture_output=True,
                          text=True, timeout=120)


def invoke(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "invoke", *args], cwd=ROOT, env=ENV, capture_output=True, text=True,
                          timeout=120)


def test_version_names_the_project_commit_and_matrix():
    result = ascend_images("--version")
    assert result.returncode == 0, result.stderr
    found = re.fullmatch(r"ascend-images (\S+) \(commit (\S+), matrix.yaml sha256:([0-9a-f]{12})\)\n", result.stdout)
    assert found, result.stdout
    assert found[1] == "0.1.0"
    head = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"], capture_output=True, text=True)
    assert found[2].removesuffix("-dirty") == head.stdout.strip()
    assert found[3] == hashlib.sha256((ROOT / "matrix.yaml").read_bytes()).hexdigest()[:12]


def test_commit_is_dirty_only_with_changed_tracked_files_and_unknown_outside_git(tmp_path):
    assert git_commit(tmp_path) == "unknown"
    git = ["git", "-C", str(tmp_path), "-c", "user.name=t", "-c", "user.email=t@example.invalid"]
    subprocess.run([*git, "init", "-q"], check=True)
    (tmp_path / "matrix.yaml").write_text("a: 1\n")
    subprocess.run([*git, "add", "matrix.yaml"], check=True)
    subprocess.run([*git, "commit", "-q", "-m", "one"], check=True)
    head = subprocess.run([*git, "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
    (tmp_path / "untracked.txt").write_text("x")
    assert git_commit(tmp_path) == head
    (tmp_path / "matrix.yaml").write_text("a: 2\n")
    assert git_commit(tmp_path) == f"{head}-dirty"


def test_a_copy_without_its_checkout_says_how_to_install(tmp_path):
    """What a non-editable install looks like: the package with no images/ two levels up. --version still answers;
    everything else is refused at the start, in one line saying how to install."""
    shutil.copytree(ROOT / "src" / "ascend_images", tmp_path / "site" / "ascend_images",
                    ignore=shutil.ignore_patterns("__pycache__"))
    env = {**os.environ, "PYTHONPATH": str(tmp_path / "site")}
    result = subprocess.run([sys.executable, "-m", "ascend_images.cli", "--list"], cwd=tmp_path, env=env,
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 2
    assert result.stderr.count("\n") == 1 and result.stderr.startswith("error: this copy of ascend-images was "
                                                                        "installed without its checkout")
    assert "pip install -e ." in result.stderr and "Traceback" not in result.stderr
    version = subprocess.run([sys.executable, "-m", "ascend_images.cli", "--version"], cwd=tmp_path, env=env,
                             capture_output=True, text=True, timeout=60)
    assert version.returncode == 0 and version.stdout.startswith("ascend-images 0.1.0 (installed without its "
                                                                 "checkout)"), version.stdout + version.stderr


def test_the_same_tasks_as_invoke_but_the_maintainers():
    ours = json.loads(ascend_images("--list", "--list-format=json").stdout)
    theirs = json.loads(invoke("--list", "--list-format=json").stdout)
    # a checkout's invoke adds dev/'s tasks, written out here; the installed command has none of them
    assert sorted(t["name"] for t in theirs["tasks"]) == sorted([t["name"] for t in ours["tasks"]] + ["bench",
                                                                                                      "ci-costs"])
    assert len(ours["tasks"]) > 15


@pytest.mark.parametrize("command", [ascend_images, invoke], ids=["ascend-images", "invoke"])
@pytest.mark.parametrize(("argv", "words"), [
    (["biuld"], "error: no task named 'biuld'; did you mean build or rebuild?"),
    (["--help", "rendr"], "error: no task named 'rendr'; did you mean render?"),
    (["build", "--devcie", "a3"], "error: build has no flag --devcie; did you mean --device"),
    (["render", "--chekc"], "error: render has no flag --chekc; did you mean --check or --checksums"),
    (["xyzzy"], "error: no task named 'xyzzy' ("),
])
def test_a_mistyped_name_gets_the_nearest(command, argv, words):
    result = command(*argv)
    assert result.returncode == 2, result.stdout + result.stderr  # usage errors exit 2, as value errors do
    assert result.stderr.startswith(words), result.stderr
    assert "No idea what" not in result.stderr and result.stdout == ""


@pytest.mark.parametrize("command", [ascend_images, invoke], ids=["ascend-images", "invoke"])
def test_quiet_keeps_the_result_and_drops_the_notes(command):
    argv = ["run", "--print", "--format", "docker", "--device", "a2", "-e", "X=a b"]
    loud, quiet = command(*argv), command(*argv, "-q")
    assert loud.returncode == quiet.returncode == 0, loud.stderr + quiet.stderr
    assert loud.stderr.startswith("note: --env selects the overlay image")
    assert quiet.stderr == "" and quiet.stdout == loud.stdout


def test_quiet_and_verbose_contradict():
    result = ascend_images("env", "--quiet", "--verbose")
    assert result.returncode == 2
    assert result.stderr == "error: --quiet and --verbose contradict each other: pass one of them\n"


def test_a_fresh_editable_install_makes_the_script(tmp_path):
    """`pip install -e .` into an empty venv (its dependencies from this interpreter's site-packages), then the
    installed script itself, run from outside the checkout."""
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=120)
    # this interpreter's packages (the set-up's venv: --system-site-packages would reach past it to the system's),
    # as a path line: the checkout's own editable install there is not read, so the one made below is what runs
    (site,) = (venv / "lib").glob("python3.*/site-packages")
    (site / "dependencies.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    installed = subprocess.run([str(venv / "bin" / "pip"), "install", "-q", "--no-deps", "-e", str(ROOT)],
                               capture_output=True, text=True, timeout=300)
    assert installed.returncode == 0, installed.stdout + installed.stderr
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    found = subprocess.run([str(venv / "bin" / "python"), "-c", "import ascend_images.checkout as c; print(c.ROOT)"],
                           cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60)
    assert found.stdout.strip() == str(ROOT), found.stderr  # this checkout, not another install's
    result = subprocess.run([str(venv / "bin" / "ascend-images"), "--version"], cwd=tmp_path, env=env,
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("ascend-images 0.1.0 (commit ")
    result = subprocess.run([str(venv / "bin" / "ascend-images"), "biuld"], cwd=tmp_path, env=env,
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 2 and "did you mean build or rebuild?" in result.stderr
