"""`invoke ci-costs`: each CI image's cost, added up from what the test processes wrote, for README's table. The
records are written out by hand here: two workers, one of which built a stage another selection reuses."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from ascend_images.errors import SelectionError
from dev.cicosts import add_up, costs_table, record
from tests.fixtures.matrices import matrix_copy
from tests.unit.helpers import ROOT

A2 = "ns/torch-npu:2.10.0.post4-cann9.1.0-a2-debian12-py3.11-arm64"
A3 = "ns/torch-npu:2.10.0.post4-cann9.1.0-a3-debian12-py3.11-arm64"
VLLM = "ns/vllm-ascend:0.23.0-cann9.1.0-a3-debian12-py3.11-arm64"
CANN_A3 = "ns/cann:9.1.0-a3-debian12-py3.11-arm64"


@pytest.fixture
def matrix(tmp_path):
    """The matrix with a ci.test of two entries of the test's own: the training base of both devices, then A3's vLLM
    over it."""
    def two_entries(data: dict) -> None:
        data["ci"]["test"] = [
            {"device": "a2,a3", "backend": "none", "release": "cann9.1.0-pt2.10.0", "arches": ["aarch64"], "why": "x"},
            {"device": "a3", "backend": "vllm", "release": "cann9.1.0-pt2.10.0", "arches": ["aarch64"], "why": "y"}]

    return matrix_copy(tmp_path / "matrix", two_entries)


def write_records(results):
    """The bake's report (each stage once, parents first) and the session's checks, written out by hand: the base
    and A3's CANN built for the first entry, which the second's vLLM stage is over."""
    stage = lambda tag, status, seconds: {"tag": tag, "kind": "x", "status": status, "image_id": "", "seconds": seconds,  # noqa: E731
                                          "log": None, "context": ""}
    report = {"stages": [stage("ns/base:debian12-py3.11-arm64", "built", 200.0),
                         stage("ns/cann-install:9.1.0-a2-debian12-py3.11-arm64", "cached", 1.0),
                         stage("ns/cann:9.1.0-a2-debian12-py3.11-arm64", "cached", 1.0),
                         stage(A2, "built", 60.0),
                         stage("ns/cann-install:9.1.0-a3-debian12-py3.11-arm64", "built", 20.0),
                         stage(CANN_A3, "built", 5.0), stage(A3, "built", 40.0), stage(VLLM, "built", 300.0)]}
    checks = {"checks": {f"image:{A2.rsplit(':', 1)[1]}": 30.0, f"image:{A3.rsplit(':', 1)[1]}": 35.0,
                         f"image:{VLLM.rsplit(':', 1)[1]}": 90.0, "tests/unit/test_x.py": 12.5}}
    for where, data in (("ci/build-report.json", report), ("main/ci-costs.json", checks)):
        (results / where).parent.mkdir(parents=True, exist_ok=True)
        (results / where).write_text(json.dumps(data))


def test_each_entry_costs_what_was_first_built_for_it_and_its_checks(tmp_path, matrix):
    write_records(tmp_path)
    assert add_up(tmp_path, matrix) == {
        "rows": [{"selection": 0, "images": [A2, A3], "build_s": 325.0, "checks_s": 65.0},
                 {"selection": 1, "images": [VLLM], "build_s": 300.0, "checks_s": 90.0}],
        "other_checks_s": 12.5}


def test_the_table_shows_both_runs(tmp_path, matrix):
    write_records(tmp_path)
    record("cold", 1800, tmp_path, tmp_path / "ci-costs.json", lambda line: None, matrix)
    record("warm", 600, tmp_path, tmp_path / "ci-costs.json", lambda line: None, matrix)
    table = costs_table(tmp_path / "ci-costs.json")
    assert "| `torch-npu:2.10.0.post4-cann9.1.0-a2-debian12-py3.11-arm64`<br>" in table
    assert "| 5 min 25 s / 1 min 05 s | 5 min 25 s / 1 min 05 s |" in table
    assert "- cold run: **30 min 00 s** of `.ci/run`, commit " in table
    assert "- warm run: **10 min 00 s** of `.ci/run`, commit " in table


def test_runs_of_other_images_get_rows_of_their_own(tmp_path):
    """A cold run recorded before a default moved and a device was added, a warm run after: each figure stays on the
    images it was measured on (written out by hand: the record's shape, not `record`'s output)."""
    old, new, a5 = ("ns/sglang:0.5.17-cann9.0.0-a3-debian12-py3.11-arm64",
                    "ns/sglang:0.5.20-cann9.0.0-a3-debian12-py3.11-arm64",
                    "ns/vllm-ascend:0.23.0-cann9.1.0-a5-debian12-py3.11-arm64")
    run = lambda rows, wall: {"commit": "c" * 40, "date": "2026-12-02", "wall_s": wall, "other_checks_s": 60.0,  # noqa: E731
                              "rows": [{"selection": i, "images": images, "build_s": b, "checks_s": c}
                                       for i, (images, b, c) in enumerate(rows)]}
    (tmp_path / "ci-costs.json").write_text(json.dumps({
        "cold": run([([A2, A3], 120.0, 60.0), ([old], 300.0, 90.0)], 1800),
        "warm": run([([A2, A3], 0.0, 30.0), ([new], 0.0, 45.0), ([a5], 240.0, 50.0)], 600)}))
    lines = costs_table(tmp_path / "ci-costs.json").splitlines()
    assert "| `sglang:0.5.17-cann9.0.0-a3-debian12-py3.11-arm64` | 5 min 00 s / 1 min 30 s | - |" in lines
    assert "| `sglang:0.5.20-cann9.0.0-a3-debian12-py3.11-arm64` | - | 0 min 00 s / 0 min 45 s |" in lines
    assert "| `vllm-ascend:0.23.0-cann9.1.0-a5-debian12-py3.11-arm64` | - | 4 min 00 s / 0 min 50 s |" in lines
    assert sum(line.startswith("| `torch-npu:") for line in lines) == 1


def test_no_records_is_said_and_a_wrong_run_refused(tmp_path):
    with pytest.raises(SelectionError, match="build-report.json: missing; run README's test command first"):
        add_up(tmp_path)
    result = subprocess.run([sys.executable, "-m", "invoke", "ci-costs", "--run", "tepid", "--seconds", "10",
                             "--results", str(tmp_path)], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert result.returncode == 2 and "--run 'tepid': expected one of cold, warm" in result.stderr


def test_a_run_is_recorded_with_the_commit_of_the_checkout_that_ran_it(tmp_path, matrix):
    """CI's run is a fresh clone: its results are recorded here with the clone's commit, not this checkout's."""
    clone = tmp_path / "clone"
    clone.mkdir()
    git = ["git", "-C", str(clone), "-c", "user.name=t", "-c", "user.email=t@example.invalid"]
    subprocess.run([*git, "init", "-q"], check=True)
    subprocess.run([*git, "commit", "-q", "--allow-empty", "-m", "the run's commit"], check=True)
    head = subprocess.run([*git, "rev-parse", "HEAD"], capture_output=True, text=True, check=True).stdout.strip()
    write_records(clone / "build" / "test")
    record("warm", 700, clone / "build" / "test", tmp_path / "ci-costs.json", lambda line: None,
           matrix_copy(tmp_path / "m", lambda data: data["ci"].update(test=data["ci"]["test"][:1])))
    assert json.loads((tmp_path / "ci-costs.json").read_text())["warm"]["commit"] == head
