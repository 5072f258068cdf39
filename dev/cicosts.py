"""`invoke ci-costs`, a maintainers' task: what each CI image cost a run of README's test command, recorded in
dev/ci-costs.json, with its table in dev/ci-costs.md.
The CI build's report (build/test/ci/build-report.json: each stage's status and time in the one bake) and the test
session's record of each image's checks (build/test/main/ci-costs.json) are added up per entry of matrix.yaml's
ci.test, cold (an empty engine) or warm (the engine and its BuildKit cache holding the images), beside the run's
wall time `.ci/run` printed."""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ascend_images.checkout import ROOT as PROJECT_ROOT
from ascend_images.checkout import revision
from ascend_images.cli.options import checked_path, whole_number
from ascend_images.cli.project import project_path
from ascend_images.cli.taskdef import run_body, task
from ascend_images.errors import SelectionError

Out = Callable[[str], None]
RUNS = ("cold", "warm")
RECORD = "dev/ci-costs.json"


def add_up(results: Path, matrix_path: Path | None = None) -> dict[str, Any]:
    """Per entry of ci.test (in its order): its images, the seconds of the stages built in the bake first for it,
    its checks; and the checks of every other test."""
    from ascend_images.inputs.sources import CannSource
    from ascend_images.matrix.model import load_matrix
    from ascend_images.matrix.selection import ci_entries
    from ascend_images.stages.plan import PlanOptions, make_plan

    report_path, checks_path = results / "ci" / "build-report.json", results / "main" / "ci-costs.json"
    for path in (report_path, checks_path):
        if not path.is_file():
            raise SelectionError(f"{path}: missing; run README's test command first (its build writes the report, "
                                 "its test session the checks)")
    stages = {stage["tag"]: stage for stage in json.loads(report_path.read_text(encoding="utf-8"))["stages"]}
    checks: dict[str, float] = json.loads(checks_path.read_text(encoding="utf-8"))["checks"]
    namespace = next(iter(stages)).rsplit("/", 1)[0]
    arch = {"arm64": "aarch64", "amd64": "x86_64"}[next(iter(stages)).rsplit("-", 1)[-1]]
    matrix = load_matrix(matrix_path or PROJECT_ROOT / "matrix.yaml")
    seen: set[str] = set()
    rows = []
    for index, variants in enumerate(ci_entries(matrix, "test", arch)):
        plan = make_plan(variants, PlanOptions(CannSource("url", strict=False), namespace))
        images = [plan.top(v).tag for v in variants]
        built = 0.0
        for stage in plan.stages:  # parents first: a stage shared with an entry before is that entry's
            found = stages.get(stage.tag)
            if found and stage.tag not in seen and found["status"] == "built":
                built += found["seconds"]
            seen.add(stage.tag)
        units = {f"image:{image.rsplit(':', 1)[1]}" for image in images}
        rows.append({"selection": index, "images": images, "build_s": round(built, 1),
                     "checks_s": round(sum(s for unit, s in checks.items() if unit in units), 1)})
    imaged = {f"image:{i.rsplit(':', 1)[1]}" for row in rows for i in row["images"]}
    return {"rows": rows, "other_checks_s": round(sum(s for unit, s in checks.items() if unit not in imaged), 1)}


@task(name="ci-costs", help={"run": "cold (the run started from an empty engine) or warm (the engine held the images)",
                             "seconds": "the run's wall time, as .ci/run printed it ([ci] pytest exit N after Ss)",
                             "results": "where the test session wrote its ci-costs.json files (default build/test)",
                             "file": f"the record to update (default: the project's {RECORD}); its table is "
                                     "written beside it (.md)"})
def ci_costs(c, run, seconds, results=None, file=None):
    """Record what each CI image cost a run of README's test command, and write the table of the runs recorded."""
    run_body(checked_run, run)
    wall = run_body(whole_number, "--seconds", seconds, 1, 90 * 60 * 10)
    source = run_body(checked_path, "--results", project_path(results, "build/test"), "dir")
    path = Path(project_path(file, RECORD))
    run_body(record, run, wall, source, path, print)
    path.with_suffix(".md").write_text(f"# What each CI image cost\n\n{costs_table(path)}\n", encoding="utf-8")


def checked_run(run: str) -> str:
    if run not in RUNS:
        raise SelectionError(f"--run {run!r}: expected one of {', '.join(RUNS)}")
    return run


def record(run: str, wall: int, results: Path, path: Path, out: Out, matrix_path: Path | None = None) -> dict[str, Any]:
    data = json.loads(path.read_text(encoding="utf-8")) if path.is_file() else {}
    # the commit that ran: the checkout the results are in (another clone's, when CI's run is recorded here)
    data[run] = {"commit": revision(results) or revision(), "date": dt.date.today().isoformat(), "wall_s": wall,
                 **add_up(results, matrix_path)}
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(json.dumps(data, indent=1) + "\n", encoding="utf-8")
    tmp.replace(path)
    out(f"{path}: {run} run recorded ({wall // 60} min {wall % 60} s, {len(data[run]['rows'])} CI selections)")
    return data


def _minutes(seconds: float) -> str:
    return f"{int(seconds // 60)} min {int(seconds % 60):02d} s"


def costs_table(path: Path = PROJECT_ROOT / RECORD) -> str:
    """The table of the CI images and what each cost the recorded cold and warm runs."""
    if not path.is_file():
        return "No CI run recorded yet (`invoke ci-costs --run cold --seconds N` after one)."
    data = json.loads(path.read_text(encoding="utf-8"))
    runs = [r for r in RUNS if r in data]
    head = " | ".join(f"{r}: built / checks" for r in runs)
    lines = [f"| CI images | {head} |", "|---|" + "---|" * len(runs)]
    # a row per set of images, as each run named them: two runs of different commits may have built different
    # releases (a default moved, a device added), and a figure belongs only to the images it was measured on
    rows: dict[tuple[str, ...], dict[str, dict]] = {}
    for r in runs:
        for row in data[r]["rows"]:
            rows.setdefault(tuple(i.split("/", 1)[-1] for i in row["images"]), {})[r] = row
    for images, measured in rows.items():
        cells = [f"{_minutes(measured[r]['build_s'])} / {_minutes(measured[r]['checks_s'])}" if r in measured
                 else "-" for r in runs]
        lines.append(f"| {'<br>'.join(f'`{i}`' for i in images)} | {' | '.join(cells)} |")
    lines.append("| every other test (no image of its own; run beside the builds on the other workers) | "
                 + " | ".join(f"- / {_minutes(data[r]['other_checks_s'])}" for r in runs) + " |")
    lines.append("")
    for r in runs:
        run = data[r]
        lines.append(f"- {r} run: **{_minutes(run['wall_s'])}** of `.ci/run`, commit {run['commit'][:12]}, "
                     f"{run['date']}")
    return "\n".join(lines)
