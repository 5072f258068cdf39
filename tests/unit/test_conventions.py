"""Small conventions of a command-line tool (issue 54, item 6): XDG_CACHE_HOME honoured where our caches are; the
project found by a marker of its own, not any matrix.yaml above the working directory; --ca-bundle read as PEM or
refused naming the file; no terminal codes for TERM=dumb or off a terminal, progress through rich; `--list`
descriptions never cut mid-sentence; errors naming the flag the user typed; set-up's link to the command never
taken from another checkout without a word."""

from __future__ import annotations

import shutil

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
