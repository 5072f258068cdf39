"""The CI run builds each changed image beside ci.test in a bake of its own, while the engine's disk keeps the tests'
room (cli/imagetest.py): it stops before an image that would not fit, names what it left, and records which it built,
which tested_variants then reads. The figures are written out by hand; the disk and the builds are stand-ins."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from types import SimpleNamespace

import pytest

import ascend_images.cli.doubles as doubles
import ascend_images.cli.imagetest as imagetest
from ascend_images.matrix.model import load_matrix
from ascend_images.matrix.selection import ci_variants
from ascend_images.stages.drift import committed_variants
from tests.conftest import ROOT

GB = 1024**3
CHANGED = [SimpleNamespace(name=n) for n in ("one/a2", "two/a3", "three/a5")]


@pytest.fixture
def run(monkeypatch, tmp_path):
    """build_ci_images over a copy of the matrix, with `free` (GB, or None: a remote engine) read before and after
    each changed image's bake; returns (lines, bakes)."""
    shutil.copy(ROOT / "matrix.yaml", tmp_path / "matrix.yaml")
    bakes: list = []
    monkeypatch.setattr(doubles, "ci_build", lambda root: SimpleNamespace(
        inputs=SimpleNamespace(check=lambda: None), sources=None, namespace="ascend-images-test"))
    monkeypatch.setattr(doubles, "changed_images", lambda matrix, arch, root: list(CHANGED))
    monkeypatch.delenv("ASCEND_IMAGES_CI_CHANGED_ROOM_GB", raising=False)

    def go(free: list[float | None]) -> tuple[list[str], list]:
        readings = iter(free)
        monkeypatch.setattr(imagetest, "_engine_disk", lambda: lambda: (lambda gb: None if gb is None else int(
            gb * GB))(next(readings)))
        monkeypatch.setattr(imagetest, "build_selection", lambda sel, sources, inputs, out, **kw: bakes.append(
            [v.name for v in kw["only"]] if kw.get("only") is not None else kw["ci"]) or ("plan", []))
        lines: list[str] = []
        imagetest.build_ci_images(lines.append, root=tmp_path)
        return lines, bakes

    return go


def record(root: Path) -> dict:
    return json.loads((root / doubles.CHANGED_BUILD_RECORD).read_text())


def test_with_room_each_changed_image_is_a_bake_of_its_own_after_ci_test(run, tmp_path):
    lines, bakes = run([80, 72, 70, 62, 60, 52])
    assert bakes == ["test", ["one/a2"], ["two/a3"], ["three/a5"]]
    assert record(tmp_path) == {"built": ["one/a2", "two/a3", "three/a5"], "left": []}
    assert not any("neither built nor checked" in line for line in lines)


def test_the_run_stops_before_an_image_the_disk_cannot_hold_and_names_the_rest(run, tmp_path):
    # 40 free: 30 for the tests + 5 a first image: built; it took 8 (32 left), so the next wants 30 + 8 = 38
    lines, bakes = run([40, 32, 32])
    assert bakes == ["test", ["one/a2"]]
    assert record(tmp_path) == {"built": ["one/a2"], "left": ["two/a3", "three/a5"]}
    (said,) = [line for line in lines if "neither built nor checked" in line]
    assert said.startswith("2 changed image(s) neither built nor checked in this run: the engine's disk has 32.0 GB "
                           "free, and the next image takes about 8.0 GB beside the tests' 30 GB")
    assert said.endswith(": two/a3, three/a5")


def test_a_first_image_is_refused_under_the_tests_room_and_one_image(run, tmp_path):
    _, bakes = run([34.9])
    assert bakes == ["test"]
    assert record(tmp_path) == {"built": [], "left": ["one/a2", "two/a3", "three/a5"]}


def test_an_engine_elsewhere_builds_them_all(run, tmp_path):
    _, bakes = run([None] * 6)
    assert bakes == ["test", ["one/a2"], ["two/a3"], ["three/a5"]]


def test_the_record_decides_which_changed_images_are_tested(monkeypatch, tmp_path):
    matrix = load_matrix(ROOT / "matrix.yaml")
    committed = [v for v in committed_variants(matrix) if v not in ci_variants(matrix, "test")][:3]
    monkeypatch.setattr(doubles, "changed_images", lambda matrix, arch, root: committed)
    ci = ci_variants(matrix, "test")
    assert doubles.tested_variants(matrix, root=tmp_path) == ci + committed  # no record: every changed image
    doubles.write_changed_build(doubles.ChangedBuild((committed[1].name,), (committed[0].name, committed[2].name)),
                                tmp_path)
    assert doubles.tested_variants(matrix, root=tmp_path) == [*ci, committed[1]]
