"""`invoke ci-costs`: each CI image's cost, added up from what the test processes wrote, for README's table. The
records are written out by hand here: two workers, one of which built a stage another selection reuses."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from ascend_images.cli.cicosts import add_up, costs_table, record
from ascend_images.errors import SelectionError
from tests.unit.helpers import ROOT

NONE = ["ns/torch-npu:a2", "ns/torch-npu:a3"]


def write_records(results):
    gw0 = {"builds": [
        {"selection": 0, "images": NONE, "stages": [
            {"tag": "ns/base", "kind": "base", "status": "built", "seconds": 200.0},
            {"tag": "ns/torch-npu:a2", "kind": "torch", "status": "built", "seconds": 60.0},
            {"tag": "ns/torch-npu:a3", "kind": "torch", "status": "built", "seconds": 40.0}]},
        {"selection": 1, "images": ["ns/vllm:x"], "stages": [
            {"tag": "ns/base", "kind": "base", "status": "reused", "seconds": 0.5},
            {"tag": "ns/vllm:x", "kind": "vllm", "status": "built", "seconds": 300.0}]}], "checks": {}}
    # the other worker's image group built its own selection again: it waited on the claim and reused every stage
    gw1 = {"builds": [{"selection": 1, "images": ["ns/vllm:x"], "stages": [
        {"tag": "ns/vllm:x", "kind": "vllm", "status": "reused", "seconds": 250.0}]}], "checks": {}}
    main = {"builds": [], "checks": {"image:ns/torch-npu:a2": 30.0, "image:ns/torch-npu:a3": 35.0,
                                     "image:ns/vllm:x": 90.0, "tests.unit.test_x": 12.5}}
    for worker, data in (("gw0", gw0), ("gw1", gw1), ("main", main)):
        (results / worker).mkdir(parents=True)
        (results / worker / "ci-costs.json").write_text(json.dumps(data))


def test_each_selection_costs_what_was_first_built_for_it_and_its_checks(tmp_path):
    write_records(tmp_path)
    assert add_up(tmp_path) == {
        "rows": [{"selection": 0, "images": NONE, "build_s": 300.0, "checks_s": 65.0},
                 {"selection": 1, "images": ["ns/vllm:x"], "build_s": 300.0, "checks_s": 90.0}],
        "other_checks_s": 12.5}


def test_the_table_shows_both_runs_and_the_budget(tmp_path):
    write_records(tmp_path)
    record("cold", 2400, tmp_path, tmp_path / "ci-costs.json", lambda line: None)
    record("warm", 700, tmp_path, tmp_path / "ci-costs.json", lambda line: None)
    table = costs_table(tmp_path)
    assert "| `torch-npu:a2`<br>`torch-npu:a3` | 5 min 00 s / 1 min 05 s | 5 min 00 s / 1 min 05 s |" in table
    assert "- cold run: **40 min 00 s** of `.ci/run` (budget 40 min)" in table
    assert "- warm run: **11 min 40 s** of `.ci/run` (budget 15 min)" in table


def test_no_records_is_said_and_a_wrong_run_refused(tmp_path):
    with pytest.raises(SelectionError, match="no \\*/ci-costs.json"):
        add_up(tmp_path)
    result = subprocess.run([sys.executable, "-m", "invoke", "ci-costs", "--run", "tepid", "--seconds", "10",
                             "--results", str(tmp_path)], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert result.returncode == 2 and "--run 'tepid': expected one of cold, warm" in result.stderr


def test_a_run_is_recorded_with_the_commit_of_the_checkout_that_ran_it(tmp_path):
    """CI's run is a fresh clone: its results are recorded here with the clone's commit, not this checkout's."""
    clone = tmp_path / "clone"
    clone.mkdir()
    git = ["git", "-C", str(clone), "-c", "user.name=t", "-c", "user.email=t@example.invalid"]
    subprocess.run([*git, "init", "-q"], check=True)
    subprocess.run([*git, "commit", "-q", "--allow-empty", "-m", "the run's commit"], check=True)
    head = subprocess.run([*git, "rev-parse", "HEAD"], capture_output=True, text=True, check=True).stdout.strip()
    write_records(clone / "build" / "test")
    record("warm", 700, clone / "build" / "test", tmp_path / "ci-costs.json", lambda line: None)
    assert json.loads((tmp_path / "ci-costs.json").read_text())["warm"]["commit"] == head
