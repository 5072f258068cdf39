"""`bench`: build and start-up figures of a selection, measured in one run (the bench wing does the measuring)."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

from ascend_images.cli.build import base_images
from ascend_images.cli.options import (
    InputFlags,
    Selection,
    SourceFlags,
    env_flag,
    output_path,
    read_only_needs_a_cache,
    whole_number,
)
from ascend_images.cli.taskdef import INPUTS, SELECTION, SOURCES, run_body, task
from ascend_images.console import Steps
from ascend_images.errors import SelectionError
from ascend_images.matrix.rules import enforce
from ascend_images.matrix.selection import parse_env_overrides
from ascend_images.stages.contexts import INSTALLER_OS
from ascend_images.stages.plan import host_arch

Out = Callable[[str], None]


@task(groups=(SELECTION, SOURCES.without("cache_dir", "state_dir"), INPUTS),
      defaults={"device": "a3", "backend": "vllm,sglang", "release": "cann8.5.0-pt2.8.0"},
      help={"json": "where to write the JSON report (default: the project's build/bench.json)",
            "release": "default cann8.5.0-pt2.8.0: a release with both backends, so they share base, CANN and torch",
            "namespace": "repository namespace of the bench's tags (default ascend-images-bench)",
            "work_dir": "where contexts, logs and reports go (default: the project's build/)",
            "runs": "start-up timing runs, a number (median; default 7)",
            "quick": "derive each-variant-alone times from the cold build's stage times instead of rebuilding",
            "stage_cache": "REGISTRY/NAMESPACE: the cold build pushes its stages there and the fleet figure is "
                           "measured (a second, empty engine builds the selection pulling them); or set "
                           "ASCEND_IMAGES_STAGE_CACHE",
            "stage_cache_read_only": "with --stage-cache: the cold build pushes nothing; the fleet build pulls what "
                                     "the cache already holds",
            "fleet_engine": "DOCKER_HOST of an existing, empty engine for the fleet build (default: a scratch "
                            "dockerd started and removed here, which needs root)",
            "only": "these phases only, comma-separated: cold, rebuild, warm, fleet, pull, alone, noop, "
                    "incremental, sizes, startup, install (default: all; rebuild, warm, fleet, alone and noop need "
                    "cold; fleet and pull need --stage-cache)"})
def bench(c, sel, sources, inputs, namespace="ascend-images-bench", work_dir=None, json=None, runs="7", quick=False,
          stage_cache=None, stage_cache_read_only=False, fleet_engine=None, only=None):
    """Measure cold, rebuild-to-same-digest, warm and fleet builds, gzip and zstd pulls, no-op and incremental builds,
    sizes, dive efficiency and start-up cost."""
    stage_cache = stage_cache or env_flag("ASCEND_IMAGES_STAGE_CACHE")
    run_body(read_only_needs_a_cache, stage_cache, stage_cache_read_only)
    run_body(inputs.check)
    run_body(bench_selection, sel, sources, inputs, print,
             json_path=run_body(output_path, "--json", json, "build/bench.json", "file-to-write"),
             work_dir=run_body(output_path, "--work-dir", work_dir, "build"), namespace=namespace,
             runs=run_body(whole_number, "--runs", runs, 1), measure_alone=not quick,
             stage_cache=stage_cache, stage_cache_read_only=stage_cache_read_only, fleet_engine=fleet_engine,
             phases=run_body(bench_phases, only))


def bench_phases(only: str | None) -> tuple[str, ...]:
    """--only's phases in the bench's order, checked: each one known, and the cold build there for those measured
    against it."""
    from dev.bench.run import NEEDS_COLD, PHASES

    if only is None:
        return PHASES
    asked = [p.strip() for p in only.split(",")]
    for phase in asked:
        if phase not in PHASES:
            raise SelectionError(f"--only {only!r}: {phase!r} is not a phase; the phases: {', '.join(PHASES)}")
    for phase in asked:
        if phase in NEEDS_COLD and "cold" not in asked:
            raise SelectionError(f"--only {only!r}: {phase} is measured against the cold build; add it: "
                                 f"--only cold,{only}")
    return tuple(p for p in PHASES if p in asked)


def bench_selection(sel: Selection, flags: SourceFlags, input_flags: InputFlags, out: Out, *, json_path: Path,
          work_dir: Path = Path("build"), namespace: str = "ascend-images-bench", runs: int = 7,
          measure_alone: bool = True, stage_cache: str | None = None, stage_cache_read_only: bool = False,
          fleet_engine: str | None = None, phases: tuple[str, ...] | None = None) -> dict:
    """`invoke bench`; with a stage cache, the cold build pushes there and the fleet build (a second, empty engine:
    a scratch dockerd here, or `fleet_engine`) is measured pulling from it."""
    from ascend_images.builder.build import BuildSettings, source_date
    from ascend_images.builder.engine import connect, image_exists
    from dev.bench.run import PHASES, phase_steps, run_bench, table
    from dev.bench.setup import BenchSetup

    matrix = sel.load()
    variants = sel.variants(matrix)
    phases = phases or PHASES
    steps = Steps("bench", phase_steps(phases))
    enforce(variants, warn=steps.warn)
    client = connect()
    # every selection flag, so an overlay (profile, allocator, --env) over shared stages can be measured too
    selection = {"device": sel.device, "backend": sel.backend, "release": sel.release, "os": sel.os,
                 "arch": sel.arch, "python": sel.python, "profile": sel.profile,
                 "env": parse_env_overrides(sel.env), "allocator": sel.allocator}
    bases = base_images(variants, None, lambda ref: image_exists(client, ref))
    settings = BuildSettings(flags.sources(matrix), input_flags.inputs(flags.index_credentials()), work_dir,
                             source_date=source_date(matrix), wheel_store=flags.store_root(),
                             installer_base=bases.get((INSTALLER_OS, host_arch())))
    setup = BenchSetup(client, settings, Path(sel.matrix_path), selection, bases, namespace, out,
                       stage_cache=stage_cache, stage_cache_read_only=stage_cache_read_only, fleet_engine=fleet_engine,
                       steps=steps)
    report = run_bench(setup, runs=runs, measure_alone=measure_alone, phases=phases)
    json_path.parent.mkdir(parents=True, exist_ok=True)
    json_path.write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    out("")
    out(table(report))
    out(f"\nJSON: {json_path}")
    return report
