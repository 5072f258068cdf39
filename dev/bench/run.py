"""`invoke bench`: cold, shared, no-op and incremental build times, sizes, dive efficiency and start-up cost,
measured in one run on one machine. Targets are reported, never asserted: a miss is a finding.

Cold builds use `nocache` (BuildKit's cache ignored), so the user's images and caches are left as they are.

With a stage cache (`--stage-cache REGISTRY/NAMESPACE`) the cold build of the selection pushes its stages there (it is
the only build of the bench that uses the cache: the others would push forced rebuilds, or add lookups to the no-op
figure), and the fleet figure is measured: a second, empty engine (a scratch dockerd on this host, or `--fleet-engine`)
given only the selection's OS images builds the same plan with the cache warm, as another machine of a fleet would.
Target: transfer only (nothing built), at most 10% of the cold build.

The cold build also starts from an empty wheel store of the bench's own, so it counts the downloads (each file once,
however many stages take it). The install phase measures one backend stage's install step five ways on its lock
(bench/install.py). `--only` runs some phases; those measured against the cold build need it.
"""

from __future__ import annotations

import contextlib
import json
import platform
import shutil
import statistics
import subprocess
import tempfile
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import docker
import yaml

from ascend_images.builder.build import Builder, StageResult
from ascend_images.matrix.model import Variant, load_matrix
from ascend_images.matrix.selection import select
from ascend_images.stages.plan import BuildPlan, PlanOptions, make_plan
from ascend_images.tools import which
from dev.bench.fleet import FLEET_FRACTION_MAX, check_fleet, fleet_row, fleet_verdict, measure_fleet
from dev.bench.install import NATIVE_FRACTION_MAX, measure_import, measure_install
from dev.bench.setup import BenchSetup

Out = Callable[[str], None]
TARGETS = {
    "noop_fraction_max": 0.03,
    "shared_speedup_min": 1.8,
    "dive_efficiency_min": 0.98,
    "startup_overhead_ms_max": 30.0,
    "fleet_fraction_max": FLEET_FRACTION_MAX,
    "native_install_fraction_max": NATIVE_FRACTION_MAX,
}
PHASES = ("cold", "rebuild", "warm", "fleet", "pull", "alone", "noop", "incremental", "sizes", "startup", "install")
NEEDS_COLD = ("rebuild", "warm", "fleet", "alone", "noop")  # measured against the cold build


def phase_steps(phases: tuple[str, ...]) -> int:
    """How many steps the progress shows: one per phase, and the warm build that stands in for a cold one."""
    return len(phases) + ("cold" not in phases)


def _plan(setup: BenchSetup, matrix_path: Path | None = None, namespace: str | None = None,
          **overrides: Any) -> tuple[BuildPlan, list[Variant]]:
    matrix = load_matrix(matrix_path or setup.matrix_path)
    variants = select(matrix, **{**setup.selection, **overrides})
    options = PlanOptions(setup.settings.sources.cann, namespace or setup.namespace, setup.base_images)
    return make_plan(variants, options), variants


def alone_namespace(namespace: str) -> str:
    """Where each variant is built alone. Under the selection's own tags, a forced rebuild of a shared stage would
    move that tag to a new image, so the next plan's other children would have a new parent, new cache keys,
    and be rebuilt by the no-op measurement."""
    return f"{namespace}-alone"


def matrix_with_env_default(matrix_path: Path, directory: Path, device: str, name: str, value: str) -> Path:
    """`directory`/matrix.yaml: the matrix with one device env default changed, as one CANN reads, so that every
    image of the device is affected from its cann stage up. What a matrix finds beside itself (locks/, the checksums
    file) stays what the real one finds."""
    data = yaml.safe_load(matrix_path.read_text())
    reader = {"cann": "runtime", "source": "bench: a device default CANN reads, changed"}
    data["env"]["device"].setdefault(device, {})[name] = {"value": value, "source": "bench", "reader": reader}
    changed = directory / "matrix.yaml"
    changed.write_text(yaml.safe_dump(data, sort_keys=False))
    for entry in matrix_path.resolve().parent.iterdir():
        if entry.name != "matrix.yaml":
            (directory / entry.name).symlink_to(entry)
    return changed


def _remove_stage_images(client: docker.DockerClient, plan: BuildPlan) -> None:
    """The alone builds' images, top stage first so each one's parent is untagged and childless when it goes."""
    for stage in reversed(plan.stages):
        with contextlib.suppress(docker.errors.APIError):  # kept: another image still builds on it
            client.api.remove_image(stage.tag)


def _build(setup: BenchSetup, plan: BuildPlan, *, cold: bool, cache: bool = False, wheel_store: Path | None = None,
           counts: dict[str, int] | None = None) -> tuple[float, list[StageResult]]:
    """Build `plan` on the engine DOCKER_HOST names, with the stage cache only when `cache`, and the wheel store at
    `wheel_store` when given. `cold`: BuildKit's cache ignored. `counts` gets the wheel store's files the build took
    and downloaded."""
    settings = replace(setup.settings, nocache=cold, stage_cache=setup.stage_cache if cache else None,
                       stage_cache_read_only=setup.stage_cache_read_only,
                       wheel_store=wheel_store or setup.settings.wheel_store)
    # the builder's own lines (stage, step, heartbeat, log path), indented under the bench's phase: a cold build
    # of two emulated backends runs for half an hour
    builder = Builder(settings, out=lambda line: setup.out(f"    {line}"))
    started = time.monotonic()
    with builder.workspace(plan) as workspace:
        results = builder.build(workspace)
    if counts is not None:
        counts.update(wanted=workspace.wanted, downloaded=workspace.downloaded)
    return time.monotonic() - started, results


def _image_size(client: docker.DockerClient, ref: str) -> int:
    return int(client.api.inspect_image(ref)["Size"])


def _dive(ref: str, work: Path) -> float | None:
    dive = which("dive")
    if dive is None:
        return None
    report = work / f"dive-{ref.replace('/', '_').replace(':', '_')}.json"
    subprocess.run([dive, ref, "-j", str(report)], capture_output=True, timeout=900, check=False)
    if not report.exists():
        return None
    return float(json.loads(report.read_text())["image"]["efficiencyScore"])


def _startup_ms(client: docker.DockerClient, ref: str, runs: int) -> float:
    times = []
    for _ in range(runs):
        started = time.monotonic()
        subprocess.run(["docker", "run", "--rm", ref, "true"], capture_output=True, check=True)
        times.append((time.monotonic() - started) * 1000)
    return statistics.median(times)


def run_bench(setup: BenchSetup, *, runs: int = 7, incremental_env: tuple[str, str, str] | None = None,
              measure_alone: bool = True, phases: tuple[str, ...] = PHASES) -> dict[str, Any]:
    out = setup.out
    if "fleet" in phases:
        check_fleet(setup)
    work = setup.settings.work_dir / "bench"
    work.mkdir(parents=True, exist_ok=True)
    plan, variants = _plan(setup)
    report: dict[str, Any] = {
        "machine": {"platform": platform.platform(), "cpus": _cpus(), "python": platform.python_version(),
                    "engine": setup.client.version().get("Version")},
        "selection": setup.selection, "variants": [v.name for v in variants], "targets": TARGETS,
        "phases": list(phases),
    }

    if "cold" in phases:
        pushing = f", pushing to the stage cache {setup.stage_cache}" if setup.stage_cache and \
            not setup.stage_cache_read_only else ""
        setup.steps.begin(f"cold build of the selection ({len(plan.stages)} stages{pushing}, an empty wheel store)")
        store = work / "wheel-store"
        shutil.rmtree(store, ignore_errors=True)
        counts: dict[str, int] = {}
        cold, cold_results = _build(setup, plan, cold=True, cache=True, wheel_store=store, counts=counts)
        report["cold_seconds"] = round(cold, 1)
        report["stages"] = [{"tag": r.tag, "kind": r.kind, "seconds": round(r.seconds, 1)} for r in cold_results]
        report["downloads"] = downloads(counts, len(plan.stages), store)
        out(f"  {cold:.0f}s; {downloads_row(report['downloads'])}")
    else:
        setup.steps.begin(f"build of the selection ({len(plan.stages)} stages; what the engine holds is reused)")
        seconds, cold_results = _build(setup, plan, cold=False)
        out(f"  {seconds:.0f}s")

    if "rebuild" in phases:
        setup.steps.begin("rebuild from nothing (BuildKit's cache ignored): the same digest for every stage?")
        seconds, again = _build(setup, plan, cold=True)
        report.update(rebuild_figures(cold_results, again, seconds))
        out(f"  {seconds:.0f}s; " + ("every stage the same digest" if report["rebuild_same"] else
                                     f"DIFFERENT: {', '.join(report['rebuild_different'])}"))

    if "warm" in phases:
        setup.steps.begin("warm build: every stage made again by BuildKit from its cache")
        seconds, _ = _build(setup, plan, cold=False)
        report["warm_seconds"] = round(seconds, 1)
        report["warm_fraction"] = round(seconds / cold, 4) if cold else None
        out(f"  {seconds:.0f}s ({report['warm_fraction']:.2%} of cold)" if cold else f"  {seconds:.0f}s")

    if "fleet" in phases:
        if setup.stage_cache:
            setup.steps.begin("fleet: a second, empty engine builds the selection with the stage cache warm")
        else:
            setup.steps.begin("fleet: skipped (needs --stage-cache)")
        report.update(measure_fleet(setup, plan, cold, _build))

    if "pull" in phases:
        if setup.stage_cache:
            setup.steps.begin("pull of the selection's images into an empty engine, gzip against zstd layers")
            report["pull"] = measure_pulls(setup, [plan.top(v).tag for v in variants])
        else:
            setup.steps.begin("pull: skipped (needs --stage-cache: its registry)")

    if "alone" in phases:
        setup.steps.begin("each variant alone, from nothing")
        report.update(_alone(setup, variants, cold, cold_results, measure_alone))

    if "noop" in phases:
        setup.steps.begin("no-op rebuild")
        noop, noop_results = _build(setup, plan, cold=False)
        report["noop_seconds"] = round(noop, 2)
        report["noop_fraction"] = round(noop / cold, 4) if cold else None
        report["noop_rebuilt"] = [r.tag for r in noop_results if r.status == "built"]
        out(f"  {noop:.1f}s ({report['noop_fraction']:.2%} of cold), rebuilt: {report['noop_rebuilt'] or 'nothing'}")

    if "incremental" in phases:
        setup.steps.begin("incremental rebuild after one env default changes")
        report["incremental"] = _incremental(setup, plan, variants, incremental_env)

    if "sizes" in phases:
        setup.steps.begin("sizes and dive efficiency")
        report.update(_sizes(setup, plan, variants, work))

    if "startup" in phases:
        setup.steps.begin(f"start-up: docker run IMAGE true, median of {runs}")
        base_ref = next(s.parent_ref for s in plan.stages if s.parent is None)
        base_ms = _startup_ms(setup.client, base_ref, runs)
        startup = {tag: round(_startup_ms(setup.client, tag, runs), 1)
                   for tag in {plan.top(v).tag for v in variants}}
        report["startup_ms"] = {"os_image": {base_ref: round(base_ms, 1)}, "images": startup,
                                "overhead_ms": {t: round(ms - base_ms, 1) for t, ms in startup.items()}}

    if "install" in phases:
        stage = next((s for s in plan.stages if s.kind in ("vllm", "sglang") and s.lock_layer), None)
        if stage is None:
            setup.steps.begin("install step: skipped (the selection has no backend stage)")
        else:
            setup.steps.begin(f"install step of {stage.tag}, five ways on its lock; first import with and without "
                              f".pyc")
            tool = Builder(setup.settings, out=lambda line: setup.out(f"    {line}")).native_tool(
                stage, f"{setup.namespace}/native-tool:{stage.variant.arch_spec.docker_platform.split('/')[1]}")
            report["install"] = measure_install(setup.client, setup.settings.inputs, _store(setup), stage, tool,
                                                work, out)
            torch = next(s for s in stage.chain() if s.kind == "torch")
            report["import"] = measure_import(setup.client, torch.tag, work, min(runs, 3), out)
    report["verdicts"] = verdicts(report)
    setup.steps.end()
    return report


def rebuild_figures(first: list[StageResult], again: list[StageResult], seconds: float) -> dict[str, Any]:
    """A rebuild from nothing against the cold build: its time, and whether every stage has the same digest."""
    before = {r.tag: r.image_id for r in first}
    different = [r.tag for r in again if before.get(r.tag) != r.image_id]
    return {"rebuild_seconds": round(seconds, 1), "rebuild_same": not different, "rebuild_different": different}


def measure_pulls(setup: BenchSetup, tags: list[str]) -> dict[str, Any]:
    """Each image pushed to the stage cache's registry twice, its layers gzip (as the engine holds them) and zstd,
    then pulled into an empty engine (a scratch dockerd) one after the other: seconds and compressed bytes each."""
    from dev.bench.fleet import pull_figures

    return pull_figures(setup, tags)


def _alone(setup: BenchSetup, variants: list[Variant], cold: float, cold_results: list[StageResult],
           measure_alone: bool) -> dict[str, Any]:
    alone = []
    for v in variants:
        where = {"device": v.device, "backend": v.backend, "arch": v.arch, "os": v.os, "release": v.release_name}
        if measure_alone:
            single, _ = _plan(setup, namespace=alone_namespace(setup.namespace), **where)
            seconds, _ = _build(setup, single, cold=True)
            _remove_stage_images(setup.client, single)
        else:  # the same work as its chain's stages in the cold build
            single, _ = _plan(setup, **where)
            seconds = sum(r.seconds for r in cold_results if r.tag in {s.tag for s in single.stages})
        alone.append(round(seconds, 1))
        setup.out(f"  {v.name}: {seconds:.0f}s")
    return {"alone_seconds": alone, "alone_measured": measure_alone,
            "shared_speedup": round(sum(alone) / cold, 2) if cold else None}


def _incremental(setup: BenchSetup, plan: BuildPlan, variants: list[Variant],
                 incremental_env: tuple[str, str, str] | None) -> dict[str, Any]:
    device, name, value = incremental_env or (variants[-1].device, "SOC_VERSION",
                                              variants[-1].device_spec.soc_version + "x")
    with tempfile.TemporaryDirectory() as tmp:
        changed = matrix_with_env_default(setup.matrix_path, Path(tmp), device, name, value)
        changed_plan, _ = _plan(setup, matrix_path=changed)
        seconds, results = _build(setup, changed_plan, cold=False)
    rebuilt = [r.tag for r in results if r.status == "built"]
    expected = [s.tag for s in changed_plan.stages
                if any(st.kind == "cann" and st.variant.device == device for st in s.chain())]
    only_affected = sorted(rebuilt) == sorted(expected)
    setup.out(f"  {seconds:.0f}s, rebuilt {len(rebuilt)} stage(s), only the affected: {only_affected}")
    # put the real images back under their tags
    _build(setup, plan, cold=False)
    return {"change": f"env.device.{device}.{name}={value}", "seconds": round(seconds, 1),
            "rebuilt": rebuilt, "expected": expected, "only_affected": only_affected}


def _sizes(setup: BenchSetup, plan: BuildPlan, variants: list[Variant], work: Path) -> dict[str, Any]:
    sizes = {}
    for stage in plan.stages:
        below = stage.parent.tag if stage.parent else stage.parent_ref
        own = _image_size(setup.client, stage.tag) - _image_size(setup.client, below)
        sizes[stage.tag] = {"image_mb": round(_image_size(setup.client, stage.tag) / 1e6, 1),
                            "own_layers_mb": round(own / 1e6, 1)}
    dive = {plan.top(v).tag: _dive(plan.top(v).tag, work) for v in variants}
    for tag, score in dive.items():
        setup.out(f"  {tag}: {sizes[tag]['image_mb']} MB, dive efficiency {score}")
    return {"sizes": sizes, "dive": dive}


def _store(setup: BenchSetup):
    from ascend_images.inputs.wheelstore import WheelStore

    return WheelStore(setup.settings.wheel_store, out=setup.out)


def downloads(counts: dict[str, int], stages: int, store: Path) -> dict[str, Any]:
    """What the stages took from the wheel store against what was fetched: with each file fetched once, the
    downloads equal the distinct files stored, and fall short of the stages' sum when stages share files."""
    stored = sum(1 for p in store.iterdir() if p.is_dir() and not p.name.startswith(".")) if store.is_dir() else 0
    fetched = counts.get("downloaded", 0)
    return {"stages": stages, "wanted_total": counts.get("wanted", 0), "downloaded": fetched,
            "distinct_stored": stored, "each_once": fetched == stored}


def downloads_row(d: dict[str, Any]) -> str:
    return (f"{d['downloaded']} files downloaded for {d['wanted_total']} taken by {d['stages']} stages "
            f"({d['distinct_stored']} distinct, each fetched {'once' if d['each_once'] else 'MORE THAN ONCE'})")


def verdicts(report: dict[str, Any]) -> dict[str, bool | None]:
    """Each target met (True), missed (False) or not measured in this run (None)."""
    t = report["targets"]
    dive = [s for s in report.get("dive", {}).values() if s is not None]
    noop, speedup = report.get("noop_fraction"), report.get("shared_speedup")
    overheads = report.get("startup_ms", {}).get("overhead_ms", {}).values()
    install = report.get("install")
    return {
        "noop_within_3pct": None if "noop_seconds" not in report else noop is not None
        and noop <= t["noop_fraction_max"],
        "incremental_only_affected": report["incremental"]["only_affected"] if "incremental" in report else None,
        "shared_at_least_1_8x": None if "alone_seconds" not in report else speedup is not None
        and speedup >= t["shared_speedup_min"],
        "dive_at_least_0_98": (min(dive) >= t["dive_efficiency_min"]) if dive else None,
        "startup_within_30ms": max(overheads) <= t["startup_overhead_ms_max"] if overheads else None,
        "fleet_within_10pct": fleet_verdict(report),
        "install_within_0_25_of_pip": None if install is None
        else install["native_fraction_of_pip"] <= t["native_install_fraction_max"],
        "each_wheel_downloaded_once": report["downloads"]["each_once"] if "downloads" in report else None,
        "rebuild_same_digest": report.get("rebuild_same"),
    }


def table(report: dict[str, Any]) -> str:
    rows: list[tuple[str, str]] = []
    if "cold_seconds" in report:
        rows.append(("cold build (selection)", f"{report['cold_seconds']} s"))
        rows.append(("wheel downloads (empty store)", downloads_row(report["downloads"])))
    if "alone_seconds" in report:
        derived = "" if report["alone_measured"] else " (DERIVED from stage times, --quick)"
        rows.append(("each variant alone (sum)", f"{sum(report['alone_seconds']):.1f} s{derived}"))
        rows.append(("shared-stage speed-up", f"{report['shared_speedup']}x (target >= 1.8x)"
                     f"{'' if report['alone_measured'] else ' (DERIVED: from the derived sum above)'}"))
    if "rebuild_seconds" in report:
        rows.append(("rebuild to the same digest", f"{report['rebuild_seconds']} s, "
                     + ("every stage the same" if report["rebuild_same"] else
                        f"DIFFERENT: {', '.join(report['rebuild_different'])}")))
    if "warm_seconds" in report:
        share = f" = {report['warm_fraction']:.2%} of cold" if report.get("warm_fraction") is not None else ""
        rows.append(("warm build (BuildKit's cache)", f"{report['warm_seconds']} s{share}"))
    if "fleet" in report.get("phases", ()):
        rows.append(("fleet build (2nd engine, cache warm)", fleet_row(report)))
    for tag, pull in (report.get("pull") or {}).items():
        rows.append((f"pull {tag.rsplit(':', 1)[-1]}", f"gzip {pull['gzip_s']} s / {pull['gzip_mb']} MB, "
                                                        f"zstd {pull['zstd_s']} s / {pull['zstd_mb']} MB"))
    if "noop_seconds" in report:
        rows.append(("no-op rebuild", f"{report['noop_seconds']} s = {report['noop_fraction']:.2%} of cold "
                                      "(target <= 3%)"))
    if "incremental" in report:
        inc = report["incremental"]
        rows.append(("incremental rebuild", f"{inc['seconds']} s, {len(inc['rebuilt'])} stage(s), only affected: "
                                            f"{inc['only_affected']}"))
    for tag, score in report.get("dive", {}).items():
        rows.append((f"size / dive {tag.rsplit(':', 1)[-1]}", f"{report['sizes'][tag]['image_mb']} MB / {score}"))
    for tag, ms in report.get("startup_ms", {}).get("overhead_ms", {}).items():
        rows.append((f"start-up overhead {tag.rsplit(':', 1)[-1]}", f"{ms} ms (target <= 30 ms)"))
    if "install" in report:
        rows += install_rows(report["install"], report["import"])
    for name, ok in report["verdicts"].items():
        rows.append((f"target {name}", {True: "met", False: "MISSED", None: "not measured"}[ok]))
    width = max(len(r[0]) for r in rows)
    return "\n".join(f"{k:{width}}  {v}" for k, v in rows)


def install_rows(install: dict[str, Any], imports: dict[str, Any]) -> list[tuple[str, str]]:
    pip = install["pip_compile_s"]

    def row(seconds: float) -> str:
        return f"{seconds} s = {seconds / pip:.2f} of pip"

    return [
        (f"install {install['wheels']} wheels: pip, .pyc", f"{pip} s (target arch; the stages before uv)"),
        ("install: pip --no-compile", row(install["pip_no_compile_s"])),
        ("install: uv --compile-bytecode", row(install["uv_target_compile_s"])),
        ("install: uv, no .pyc", row(install["uv_target_s"])),
        ("install: native uv + checked-hash .pyc",
         f"{install['native_install_s']} s + {install['native_bytecode_s']} s = "
         f"{install['native_fraction_of_pip']:.2f} of pip (target <= {install['target_fraction_max']})"),
        ("first import torch, torch_npu", f"{imports['with_pyc_s']} s with .pyc, {imports['without_pyc_s']} s "
                                          "without"),
    ]


def _cpus() -> int:
    import os

    return os.cpu_count() or 0
