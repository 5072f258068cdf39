"""The NPU gate never passes empty: no image, no report, all skipped, or a failure closes it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ascend_images.release.npugate import NpuGateError, check_npu_gate
from ascend_images.release.workflow import npu_gate

REF = "ghcr.io/o/vllm-ascend:0.13.0-cann8.5.0-a3-debian12-py3.11-arm64@sha256:" + "a" * 64


def junit(tmp_path: Path, name: str, cases: list[str]) -> Path:
    body = {"pass": "", "skip": "<skipped message='no /dev/davinci*'/>", "fail": "<failure message='x'/>"}
    xml = "".join(f"<testcase classname='t' name='t{i}'>{body[c]}</testcase>" for i, c in enumerate(cases))
    path = tmp_path / name
    path.write_text(f"<testsuites><testsuite name='pytest'>{xml}</testsuite></testsuites>")
    return path


def test_passes_only_when_tests_passed(tmp_path):
    line = check_npu_gate([REF], {REF: junit(tmp_path, "1.xml", ["pass", "pass", "skip"])})
    assert line == f"{REF}: 2 passed, 0 failed, 1 skipped"


@pytest.mark.parametrize(("cases", "says"), [
    (["skip", "skip"], "every test skipped"),
    ([], "no tests ran"),
    (["pass", "fail"], r"1 NPU test\(s\) failed"),
])
def test_closed_when_nothing_proved(tmp_path, cases, says):
    with pytest.raises(NpuGateError, match=says):
        check_npu_gate([REF], {REF: junit(tmp_path, "1.xml", cases)})


def test_closed_without_images_or_reports(tmp_path):
    with pytest.raises(NpuGateError, match="no pushed aarch64 image"):
        check_npu_gate([], {})
    with pytest.raises(NpuGateError, match="no test report"):
        check_npu_gate([REF], {})


def test_task_reads_publish_reports_and_runs(tmp_path):
    tag, digest = REF.split("@")
    report = tmp_path / "publish.json"
    report.write_text(json.dumps({"tags": {tag: digest, tag.replace("-arm64", "-amd64"): "sha256:" + "b" * 64}}))
    runs = tmp_path / "runs.tsv"
    runs.write_text(f"{REF}\t{junit(tmp_path, '1.xml', ['pass'])}\n")
    assert "1 passed" in npu_gate([report], runs)  # the amd64 ref is not an NPU target
    runs.write_text("")
    with pytest.raises(NpuGateError, match="no test report"):
        npu_gate([report], runs)
