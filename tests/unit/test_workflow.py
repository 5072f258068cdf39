"""The GitHub Actions workflow: actionlint passes, and the job matrices it builds from `invoke
ci-matrix` carry every key the jobs read."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys

import pytest
import yaml

from ascend_images.tools import which
from tests.unit.helpers import ROOT

WORKFLOW = ROOT / ".github" / "workflows" / "images.yml"


def _load() -> dict:
    doc = yaml.safe_load(WORKFLOW.read_text())
    # YAML 1.1 reads the bare key `on` as True
    doc["on"] = doc.pop(True, doc.get("on"))
    return doc


def _ci_matrix(*args: str) -> dict:
    result = subprocess.run([sys.executable, "-m", "invoke", "ci-matrix", *args], cwd=ROOT,
                            capture_output=True, text=True, check=True)
    return json.loads(result.stdout)


def test_actionlint_passes():
    actionlint = which("actionlint")
    if actionlint is None:
        if os.environ.get("CI") == "true":
            pytest.fail("actionlint is not installed (pip install -e '.[lint]')")
        pytest.skip("actionlint is not installed")
    result = subprocess.run([actionlint, "-no-color", str(WORKFLOW)], cwd=ROOT, capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr


def _matrix_keys(job: dict) -> set[str]:
    text = json.dumps(job)
    return set(re.findall(r"matrix\.([a-z_]+)", text))


@pytest.mark.parametrize(("job", "args", "output"), [("build", (), "builds"), ("merge", ("--lists",), "lists")])
def test_job_matrix_comes_from_ci_matrix_and_has_every_key_the_job_reads(job, args, output):
    workflow = _load()
    plan_steps = " ".join(step.get("run", "") for step in workflow["jobs"]["plan"]["steps"])
    assert f"{output}=$(invoke ci-matrix{' ' + ' '.join(args) if args else ''})" in plan_steps
    spec = workflow["jobs"][job]
    assert spec["strategy"]["matrix"] == f"${{{{ fromJSON(needs.plan.outputs.{output}) }}}}"
    entries = _ci_matrix(*args)["include"]
    assert entries
    used = _matrix_keys(spec)
    for entry in entries:
        assert used <= set(entry), f"{job} reads matrix.{used - set(entry)}, absent from {entry}"
        assert all(isinstance(v, str) for v in entry.values())


def test_build_runs_on_native_runners_and_npu_gates_the_merge():
    workflow = _load()
    entries = _ci_matrix()["include"]
    runners = {e["arch"]: e["runner"] for e in entries}
    assert runners.get("aarch64") == "ubuntu-24.04-arm"
    assert runners.get("x86_64", "ubuntu-24.04") == "ubuntu-24.04"
    jobs = workflow["jobs"]
    assert jobs["build"]["runs-on"] == "${{ matrix.runner }}"
    assert "ascend-npu" in jobs["npu"]["runs-on"]
    assert "tests/npu" in " ".join(s.get("run", "") for s in jobs["npu"]["steps"])
    assert set(jobs["merge"]["needs"]) >= {"build", "npu"}
    assert "needs.npu.result == 'success' || needs.npu.result == 'skipped'" in jobs["merge"]["if"]
    push = [s for s in jobs["build"]["steps"] if "invoke publish" in s.get("run", "")]
    assert push and "--only arch" in push[0]["run"]
    merge = [s for s in jobs["merge"]["steps"] if "invoke publish" in s.get("run", "")]
    assert merge and "--only lists" in merge[0]["run"]
    for step in jobs["build"]["steps"]:
        run = step.get("run", "")
        if "invoke build" in run:  # downloads verified against the committed pins.yaml, nothing else
            assert "--fetch" in run and "--checksums" not in run, step["name"]
        if run.startswith("invoke test"):  # the same sources as the build, so the same cache keys
            assert "--checksums" not in run, step["name"]
    assert "CANN_SHA256SUMS" not in str(workflow)  # pins.yaml replaced the repository variable
    assert workflow["on"]["pull_request"] is None  # pull requests build and test, never publish
    assert "github.event_name != 'pull_request'" in workflow["env"]["PUBLISH"]


def _zizmor(path) -> subprocess.CompletedProcess:
    zizmor = which("zizmor")
    if zizmor is None:
        if os.environ.get("CI") == "true":
            pytest.fail("zizmor is not installed (pip install -e '.[lint]')")
        pytest.skip("zizmor is not installed")
    return subprocess.run([zizmor, "--offline", "--min-severity", "medium", "--format", "plain", str(path)],
                          cwd=ROOT, capture_output=True, text=True)


def test_zizmor_finds_nothing_of_medium_severity_or_above():
    result = _zizmor(WORKFLOW)
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.parametrize(("what", "old", "new"), [
    ("an action by tag", "actions/checkout@fbc6f3992d24b796d5a048ff273f7fcc4a7b6c09  # v5.1.0", "actions/checkout@v5"),
    ("a matrix value expanded in a script", '--device "$DEVICE"', '--device "${{ matrix.device }}"'),
    ("checkouts that keep their token (the default)", "        with:\n          persist-credentials: false\n", ""),
])
def test_zizmor_catches_a_reintroduced_finding(tmp_path, what, old, new):
    text = WORKFLOW.read_text()
    assert old in text, what
    broken = tmp_path / "images.yml"
    broken.write_text(text.replace(old, new))
    assert _zizmor(broken).returncode != 0, what


def test_every_action_is_pinned_to_a_commit_with_its_version():
    uses = re.findall(r"uses: (\S+)(.*)", WORKFLOW.read_text())
    assert uses
    for ref, comment in uses:
        assert re.fullmatch(r"[\w.-]+/[\w.-]+@[0-9a-f]{40}", ref), ref
        assert re.fullmatch(r"\s+# v\d+\.\d+\.\d+", comment), (ref, comment)


def test_the_npu_job_ends_with_the_gate():
    steps = _load()["jobs"]["npu"]["steps"]
    assert "invoke npu-gate" in steps[-1]["run"]
    assert "--junitxml" in steps[-2]["run"] and "runs.tsv" in steps[-2]["run"]
