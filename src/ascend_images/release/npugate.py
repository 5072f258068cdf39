"""The NPU job's verdict: it passes only if it really ran tests on a real NPU.

Every NPU test skips on a host without /dev/davinci*, with fewer devices than it needs, or without a
model; pytest then exits 0 and the merge job would move the aliases onto images no NPU ever ran. So the
gate reads the pushed refs and each run's JUnit report and fails, saying why, when there was nothing to
test, a report is missing, or an image had no test that passed.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from ascend_images.errors import AscendImagesError
from ascend_images.runtime.junit import cases


class NpuGateError(AscendImagesError):
    """The NPU job ran nothing that proves an image works on an NPU."""


@dataclass(frozen=True)
class RunCounts:
    passed: int
    failed: int
    skipped: int


def junit_counts(path: Path) -> RunCounts:
    outcomes = [outcome for _, outcome in cases(path)]
    return RunCounts(outcomes.count("passed"), outcomes.count("failed"), outcomes.count("skipped"))


def check_npu_gate(refs: list[str], reports: dict[str, Path]) -> str:
    """refs: the images pushed for NPU testing; reports: ref -> its JUnit file. Returns the summary line."""
    if not refs:
        raise NpuGateError("no pushed aarch64 image to test: the publish reports list none "
                           "(did the build jobs push? were their reports downloaded?)")
    problems, lines = [], []
    for ref in refs:
        path = reports.get(ref)
        if path is None or not path.is_file():
            problems.append(f"{ref}: no test report (pytest did not run)")
            continue
        counts = junit_counts(path)
        lines.append(f"{ref}: {counts.passed} passed, {counts.failed} failed, {counts.skipped} skipped")
        if counts.failed:
            problems.append(f"{ref}: {counts.failed} NPU test(s) failed")
        elif counts.passed == 0:
            what = "every test skipped" if counts.skipped else "no tests ran"
            problems.append(f"{ref}: {what} (no /dev/davinci*, too few devices, or no model?)")
    if problems:
        raise NpuGateError("the NPU gate is closed:\n" + "\n".join(f"  - {p}" for p in problems))
    return "\n".join(lines)
