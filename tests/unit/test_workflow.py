"""The GitHub Actions workflow: actionlint passes, and the job matrices it builds from `invoke
ci-matrix` carry every key the jobs read."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys

import pytest
import yaml

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
    actionlint = shutil.which("actionlint")
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
        if step.get("run", "").startswith(("invoke build", "invoke test")):
            assert "--checksums build/cann.sha256" in step["run"], step["name"]  # same content keys in both
    assert workflow["on"]["pull_request"] is None  # pull requests build and test, never publish
    assert "github.event_name != 'pull_request'" in workflow["env"]["PUBLISH"]
