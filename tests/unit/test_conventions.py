"""Small conventions of a command-line tool (issue 54, item 6): XDG_CACHE_HOME honoured where our caches are; the
project found by a marker of its own, not any matrix.yaml above the working directory; --ca-bundle read as PEM or
refused naming the file; no terminal codes for TERM=dumb or off a terminal, progress through rich; `--list`
descriptions never cut mid-sentence; errors naming the flag the user typed; set-up's link to the command never
taken from another checkout without a word."""

from __future__ import annotations

import os
import pty
import select
import shutil
import subprocess
import time
from pathlib import Path

import pytest

from tests.unit.inprocess import PROGRAMS

from .helpers import ROOT


# --- the project's own marker --------------------------------------------------------------------------------------
def test_a_foreign_matrix_yaml_above_is_passed_over_and_named(tmp_path, monkeypatch):
    """A matrix.yaml of somebody else's in a parent directory is not the project; the checkout is, and a note says
    which matrix.yaml was passed over and how to use it."""
    foreign = tmp_path / "their-repo"
    (foreign / "sub").mkdir(parents=True)
    (foreign / "matrix.yaml").write_text("releases: {}\n")  # not ours: no pyproject.toml naming ascend-images
    monkeypatch.delenv("ASCEND_IMAGES_PROJECT", raising=False)
    monkeypatch.chdir(foreign / "sub")
    code, out, err = PROGRAMS["ascend-images"](["env", "--device", "a3", "--json"])
    assert code == 0, err
    assert f"note: {foreign / 'matrix.yaml'} is not an ascend-images checkout's" in err
    assert f"--matrix {foreign / 'matrix.yaml'} uses that matrix" in err
    assert '"variant": "cann9.1.0-pt2.10.0/a3/none' in out  # the checkout's matrix, not the foreign one


def test_a_checkout_is_found_by_its_pyproject(tmp_path, monkeypatch):
    from ascend_images.cli.project import find_root

    checkout = tmp_path / "checkout"
    (checkout / "deep").mkdir(parents=True)
    shutil.copy(ROOT / "matrix.yaml", checkout / "matrix.yaml")
    (checkout / "pyproject.toml").write_text('[project]\nname = "ascend-images"\n')
    (checkout / "deep" / "matrix.yaml").write_text("x: 1\n")  # a foreign one nearer: passed over
    monkeypatch.delenv("ASCEND_IMAGES_PROJECT", raising=False)
    assert find_root(cwd=checkout / "deep", installed_from=tmp_path / "none") == checkout


# --- set-up's link to the command ----------------------------------------------------------------------------------
LINK_SCRIPT = ROOT / "scripts" / "link-command.sh"


@pytest.fixture
def linked(tmp_path) -> tuple[Path, Path, Path]:
    """/usr/local/bin/ascend-images as another checkout left it, in a directory of the test's own."""
    bin_dir, other, mine = tmp_path / "bin", tmp_path / "other" / "ascend-images", tmp_path / "mine" / "ascend-images"
    bin_dir.mkdir()
    (bin_dir / "ascend-images").symlink_to(other)
    return bin_dir / "ascend-images", other, mine


def link(link_path: Path, target: Path, *argv: str, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", str(LINK_SCRIPT), str(target), *argv], stdin=subprocess.DEVNULL,
                          env={"PATH": os.environ["PATH"], "ASCEND_IMAGES_LINK": str(link_path), **env},
                          capture_output=True, text=True, timeout=60)


def test_set_up_says_when_it_takes_the_command_from_another_checkout(linked):
    link_path, other, mine = linked
    result = link(link_path, mine)
    assert result.returncode == 0 and os.readlink(link_path) == str(mine)
    assert result.stderr == f"setup: {link_path} ran {other}; it runs {mine} now (--force or " \
                            "ASCEND_IMAGES_FORCE_LINK=1: without a word)\n"


@pytest.mark.parametrize(("argv", "env"), [(["--force"], {}), ([], {"ASCEND_IMAGES_FORCE_LINK": "1"})])
def test_force_takes_it_quietly(linked, argv, env):
    link_path, _, mine = linked
    result = link(link_path, mine, *argv, **env)
    assert (result.returncode, result.stderr) == (0, "") and os.readlink(link_path) == str(mine)


def test_a_first_link_or_the_same_one_is_made_quietly(tmp_path):
    link_path, mine = tmp_path / "ascend-images", tmp_path / "mine" / "ascend-images"
    for _ in range(2):
        result = link(link_path, mine)
        assert (result.returncode, result.stderr) == (0, "") and os.readlink(link_path) == str(mine)


@pytest.mark.parametrize(("answer", "taken"), [("n", False), ("y", True), ("", False)])
def test_on_a_terminal_it_asks(linked, answer, taken):
    link_path, other, mine = linked
    primary, secondary = pty.openpty()
    process = subprocess.Popen(["bash", str(LINK_SCRIPT), str(mine)], stdin=secondary, stdout=secondary,
                               stderr=secondary, env={"PATH": os.environ["PATH"], "ASCEND_IMAGES_LINK": str(link_path)})
    os.close(secondary)
    said = b""
    deadline = time.monotonic() + 30
    while b"[y/N]" not in said and time.monotonic() < deadline:
        if select.select([primary], [], [], 1)[0]:
            said += os.read(primary, 1024)
    os.write(primary, answer.encode() + b"\n")
    assert process.wait(timeout=30) == 0
    os.close(primary)
    assert f"setup: {link_path} runs {other} (another checkout); run {mine} instead? [y/N]".encode() in said
    assert os.readlink(link_path) == str(mine if taken else other)
