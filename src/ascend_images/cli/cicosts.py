"""`invoke ci-costs`: what each CI image cost a run of README's test command, recorded in `ci-costs.json` for the
generated table of docs/tests.md (issue: CI inside its budget; `invoke readme` writes it wherever its markers are).
The test session writes, per process, the stages it built for each CI selection and the time of each image's checks
(build/test/<worker>/ci-costs.json); this adds them up per CI image, cold (an empty engine) or warm (the engine
holding the images), beside the run's wall time `.ci/run` printed."""

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
BUDGET_MINUTES = {"cold": 40, "warm": 15}  # CI's budget for a run (issue 52; its hard limit is 90)


def _checks(checks: dict[str, float], image: str) -> float:
    """An image's checks: its xdist group `image:<tag>` (the tag with or without the test namespace)."""
    short = image.split("/", 1)[-1]
    return sum(s for group, s in checks.items() if group in (f"image:{image}", f"image:{short}"))


def add_up(results: Path) -> dict[str, Any]:
    """Per CI selection (in CI's order): its images, the seconds of the stages first built for it, its checks."""
    records = [json.loads(p.read_text(encoding="utf-8")) for p in sorted(results.glob("*/ci-costs.json"))]
    if not records:
        raise SelectionError(f"{results}: no */ci-costs.json; run README's test command first (they are written at "
                             "the end of a pytest session)")
    builds = sorted((b for r in records for b in r["builds"]), key=lambda b: b["selection"])
    checks: dict[str, float] = {}
    for record in records:
        for group, seconds in record["checks"].items():
            checks[group] = checks.get(group, 0.0) + seconds
    seen: set[str] = set()
    rows: dict[int, dict[str, Any]] = {}
    for build in builds:
        row = rows.setdefault(build["selection"], {"selection": build["selection"], "images": build["images"],
                                                   "build_s": 0.0, "checks_s": 0.0})
        for stage in build["stages"]:
            if stage["status"] == "built" and stage["tag"] not in seen:
                seen.add(stage["tag"])
                row["build_s"] += stage["seconds"]
    for row in rows.values():
        row["build_s"] = round(row["build_s"], 1)
        row["checks_s"] = round(sum(_checks(checks, image) for image in row["images"]), 1)
    imaged = {f"image:{i}" for row in rows.values() for i in row["images"]} | \
             {f"image:{i.split('/', 1)[-1]}" for row in rows.values() for i in row["images"]}
    other = round(sum(s for group, s in checks.items() if group not in imaged), 1)
    return {"rows": [rows[k] for k in sorted(rows)], "other_checks_s": other}


@task(name="ci-costs", help={"run": "cold (the run started from an empty engine) or warm (the engine held the images)",
                             "seconds": "the run's wall time, as .ci/run printed it ([ci] pytest exit N after Ss)",
                             "results": "where the test session wrote its ci-costs.json files (default build/test)",
                             "file": "the record to update (default: the project's ci-costs.json)"})
def ci_costs(c, run, seconds, results=None, file=None):
    """Record what each CI image cost a run of README's test command, for docs/tests.md's table (`invoke readme`)."""
    run_body(checked_run, run)
    wall = run_body(whole_number, "--seconds", seconds, 1, 90 * 60 * 10)
    source = run_body(checked_path, "--results", project_path(results, "build/test"), "dir")
    run_body(record, run, wall, source, Path(project_path(file, "ci-costs.json")), print)


def checked_run(run: str) -> str:
    if run not in RUNS:
        raise SelectionError(f"--run {run!r}: expected one of {', '.join(RUNS)}")
    return run


def record(run: str, wall: int, results: Path, path: Path, out: Out) -> dict[str, Any]:
    data = json.loads(path.read_text(encoding="utf-8")) if path.is_file() else {}
    # the commit that ran: the checkout the results are in (another clone's, when CI's run is recorded here)
    data[run] = {"commit": revision(results) or revision(), "date": dt.date.today().isoformat(), "wall_s": wall,
                 **add_up(results)}
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(json.dumps(data, indent=1) + "\n", encoding="utf-8")
    tmp.replace(path)
    out(f"{path}: {run} run recorded ({wall // 60} min {wall % 60} s, {len(data[run]['rows'])} CI selections)")
    return data


def _minutes(seconds: float) -> str:
    return f"{int(seconds // 60)} min {int(seconds % 60):02d} s"


def costs_table(root: Path = PROJECT_ROOT) -> str:
    """The table of the CI images (docs/tests.md) and what each cost the recorded cold and warm runs."""
    path = root / "ci-costs.json"
    if not path.is_file():
        return "No CI run recorded yet (`invoke ci-costs --run cold --seconds N` after one)."
    data = json.loads(path.read_text(encoding="utf-8"))
    runs = [r for r in RUNS if r in data]
    head = " | ".join(f"{r}: built / checks" for r in runs)
    lines = [f"| CI images | {head} |", "|---|" + "---|" * len(runs)]
    by_selection = {row["selection"]: row for row in data[runs[0]]["rows"]}
    for selection, row in by_selection.items():
        images = "<br>".join(f"`{i.split('/', 1)[-1]}`" for i in row["images"])
        cells = []
        for r in runs:
            other = next((x for x in data[r]["rows"] if x["selection"] == selection), None)
            cells.append(f"{_minutes(other['build_s'])} / {_minutes(other['checks_s'])}" if other else "-")
        lines.append(f"| {images} | {' | '.join(cells)} |")
    lines.append("| every other test (no image of its own; run beside the builds on the other workers) | "
                 + " | ".join(f"- / {_minutes(data[r]['other_checks_s'])}" for r in runs) + " |")
    lines.append("")
    for r in runs:
        run = data[r]
        lines.append(f"- {r} run: **{_minutes(run['wall_s'])}** of `.ci/run` (budget {BUDGET_MINUTES[r]} min), "
                     f"commit {run['commit'][:12]}, {run['date']}")
    return "\n".join(lines)
