"""`invoke bench`'s fleet figure: a second, empty engine's build of the selection with the stage cache warm, as a
fraction of the cold build. The second engine is a scratch dockerd on this host, or `--fleet-engine` (another
machine's, or one started by hand); it gets only the selection's OS images (inputs, like the CANN packages), so
what it does not pull it must build. Target: transfer only (nothing built), at most 10% of the cold build."""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import docker

from ascend_images.errors import AscendImagesError, Interrupted, SelectionError
from ascend_images.stages.names import check_namespace
from ascend_images.stages.plan import BuildPlan
from dev.bench.setup import BenchSetup
from dev.scratch_engine import ScratchEngine, ScratchEngineError, load_image, missing_requirement

FLEET_FRACTION_MAX = 0.10
# bench's build of a plan: (setup, plan, cold=, cache=) -> (seconds, results)
Build = Callable[..., tuple[float, list[Any]]]


def check_fleet(setup: BenchSetup) -> None:
    """What would stop the fleet phase, found before the cold build's half hour rather than after it."""
    if setup.stage_cache is None:
        if setup.fleet_engine:
            raise SelectionError("--fleet-engine is where the fleet build runs, which needs --stage-cache "
                                 "REGISTRY/NAMESPACE (or ASCEND_IMAGES_STAGE_CACHE) to pull from")
        return
    check_namespace(setup.stage_cache, "--stage-cache")
    sources = setup.settings.sources
    doubles = [what for what, used in (("CANN packages", sources.cann.test_double),
                                       ("artifacts", sources.artifacts.test_double)) if used]
    if doubles and not setup.stage_cache_read_only and "test-double" not in setup.stage_cache:
        raise SelectionError(f"the {' and '.join(doubles)} are test doubles: their stages go only to a stage cache "
                             f"named as such, so nothing would reach {setup.stage_cache} and the fleet build would "
                             f"build everything; name one with test-double in it, e.g. "
                             f"{setup.stage_cache}-test-double")
    if setup.fleet_engine:
        try:
            _engine_client(setup.fleet_engine).ping()
        except docker.errors.DockerException as exc:
            raise SelectionError(f"--fleet-engine {setup.fleet_engine}: no Docker engine answers there "
                                 f"({str(exc).strip()[:200]})") from None
        return
    problem = missing_requirement()
    if problem:
        raise ScratchEngineError(f"{problem}: the fleet figure (--stage-cache) starts one; run as root, or name an "
                                 "empty engine elsewhere with --fleet-engine DOCKER_HOST")


@contextlib.contextmanager
def _builds_on(host: str) -> Iterator[None]:
    """buildx builds on the engine DOCKER_HOST names (or DOCKER_CONTEXT), whatever client the builder inspects with:
    without this the fleet's stages were built on the bench's own engine, every step cached there, and then looked for
    on the fleet engine ("No such image")."""
    saved = {name: os.environ.pop(name, None) for name in ("DOCKER_HOST", "DOCKER_CONTEXT")}
    os.environ["DOCKER_HOST"] = host
    try:
        yield
    finally:
        os.environ.pop("DOCKER_HOST", None)
        os.environ.update({name: value for name, value in saved.items() if value is not None})


def _engine_client(host: str) -> docker.DockerClient:
    return docker.DockerClient(base_url=host, timeout=600)


def fleet_inputs(plan: BuildPlan, installer_base: str | None = None) -> list[str]:
    """The images the plan starts FROM (the OS images, and the one its native stages start FROM): inputs of a build,
    like the CANN packages, not stages."""
    return sorted({s.parent_ref for s in plan.stages if s.parent is None} | ({installer_base} if installer_base
                                                                            else set()))


def _clear_engine(client: docker.DockerClient, setup: BenchSetup, plan: BuildPlan, before: set[str]) -> None:
    """Leave a --fleet-engine as it was: what the phase put there (an image it did not have, under a stage's tag, a
    stage-cache tag or an input's ref) goes, newest first; whatever else it holds stays."""
    ours = {s.tag for s in plan.stages} | set(fleet_inputs(plan, setup.settings.installer_base))
    for image in sorted(client.api.images(), key=lambda i: i.get("Created", 0), reverse=True):
        if image["Id"] in before:
            continue
        for ref in image.get("RepoTags") or []:
            if ref in ours or ref.startswith(f"{setup.stage_cache}/"):
                with contextlib.suppress(docker.errors.APIError):
                    client.api.remove_image(ref)


def measure_fleet(setup: BenchSetup, plan: BuildPlan, cold: float, build: Build) -> dict[str, Any]:
    """The fleet phase's part of the report. Without a stage cache nothing is measured (every figure None). An error
    on the way (the engine, a load, the build) is recorded as `fleet_error`, not raised: the other figures of the
    bench still come; Ctrl-C still stops it. The scratch engine is stopped and removed whatever happens."""
    out = setup.out
    part: dict[str, Any] = {"stage_cache": setup.stage_cache, "fleet_engine": None, "fleet_inputs": [],
                            "fleet_seconds": None, "fleet_fraction": None, "fleet_statuses": None, "fleet_error": None}
    if not setup.stage_cache:
        return part
    inputs = fleet_inputs(plan, setup.settings.installer_base)
    part["fleet_inputs"] = inputs
    engine = None
    client = None
    before: set[str] = set()
    try:
        if setup.fleet_engine:
            host = part["fleet_engine"] = setup.fleet_engine
        else:
            work = setup.settings.work_dir.absolute() / "bench"
            work.mkdir(parents=True, exist_ok=True)
            # the root short (containerd's sockets live below it), the images beside the bench's other files
            engine = ScratchEngine(Path(tempfile.mkdtemp(prefix="ai-fleet-")),
                                   data_root=Path(tempfile.mkdtemp(prefix="fleet-engine-", dir=work)))
            out(f"  starting a scratch engine (dockerd) at {engine.host}, data root {engine.data_root}")
            engine.start()
            host = engine.host
            part["fleet_engine"] = "scratch dockerd on this host"
        client = _engine_client(host)
        before = {i["Id"] for i in client.api.images(all=True)}
        present = [i for i in client.api.images() if not set(i.get("RepoTags") or []) & set(inputs)]
        if present:
            out(f"  warning: the fleet engine already holds {len(present)} image(s); a stage it has is reused, not "
                "pulled, so the figure is not all transfer")
        for ref in inputs:  # not timed: inputs, not stages
            here = bool(client.api.images(name=ref))
            out(f"  {'already there' if here else 'loading'}: {ref} (an input, not timed)")
            if not here:
                load_image(ref, host)
        out(f"  building the selection there with the stage cache {setup.stage_cache}")
        with _builds_on(host):
            seconds, results = build(setup, plan, cold=False, cache=True)
        statuses = {status: sum(r.status == status for r in results) for status in ("built", "cached")}
        part.update(fleet_seconds=round(seconds, 1), fleet_fraction=round(seconds / cold, 4) if cold else None,
                    fleet_statuses=statuses)
        share = f" ({part['fleet_fraction']:.2%} of cold)" if part["fleet_fraction"] is not None else ""
        out(f"  {seconds:.0f}s{share}: " + ", ".join(f"{n} {status}" for status, n in statuses.items()))
    except Interrupted:
        raise
    except (AscendImagesError, docker.errors.DockerException, OSError, subprocess.SubprocessError) as exc:
        error = (str(exc) if not isinstance(exc, docker.errors.APIError) else exc.explanation or str(exc)).strip()
        if isinstance(exc, docker.errors.DockerException):
            error = f"the fleet engine {part['fleet_engine'] or ''}: {error}"
        part["fleet_error"] = error.splitlines()[0] if error else type(exc).__name__
        out(f"  fleet build failed: {error or type(exc).__name__}")
    finally:
        if engine is not None:
            out("  stopping and removing the scratch engine")
            engine.stop()
        elif client is not None:
            with contextlib.suppress(docker.errors.DockerException):
                _clear_engine(client, setup, plan, before)
    return part


def fleet_verdict(report: dict[str, Any]) -> bool | None:
    """None without a stage cache; met only when the second engine built nothing and took at most 10% of cold."""
    if not report.get("stage_cache"):
        return None
    fraction, statuses = report.get("fleet_fraction"), report.get("fleet_statuses") or {}
    if report.get("fleet_error") or fraction is None:
        return False
    limit = report["targets"].get("fleet_fraction_max", FLEET_FRACTION_MAX)
    return statuses.get("built", 0) == 0 and fraction <= limit


def fleet_row(report: dict[str, Any]) -> str:
    if not report.get("stage_cache"):
        return "not measured (needs --stage-cache)"
    if report.get("fleet_error"):
        return f"failed: {report['fleet_error']} (target <= 10% of cold, nothing built)"
    statuses = report.get("fleet_statuses") or {}
    counts = ", ".join(f"{statuses.get(s, 0)} {s}" for s in ("cached", "built"))
    return f"{report['fleet_seconds']} s = {report['fleet_fraction']:.2%} of cold: {counts} " \
           "(target <= 10%, nothing built)"


def pull_figures(setup: BenchSetup, tags: list[str]) -> dict[str, dict[str, float]]:
    """Each image pushed to the stage cache's registry with gzip layers (the engine's push) and with zstd layers
    (BuildKit's, release/publish.py), then each pulled into a second, empty engine, timed: what a cluster node pays
    to start the image. Compressed sizes are the manifests' layer sizes."""
    import time

    from ascend_images.release.publish import push_recompressed

    assert setup.stage_cache is not None
    figures: dict[str, dict[str, float]] = {}
    engine = ScratchEngine(Path(tempfile.mkdtemp(prefix="ai-pull-")))
    engine.start()
    try:
        for tag in tags:
            name = tag.rsplit("/", 1)[-1].replace(":", "-")
            refs = {kind: f"{setup.stage_cache}/bench-pull:{name}-{kind}" for kind in ("gzip", "zstd")}
            repo, _, gzip_tag = refs["gzip"].rpartition(":")
            setup.client.api.tag(tag, repo, gzip_tag, force=True)
            for line in setup.client.api.push(repo, tag=gzip_tag, stream=True, decode=True):
                if "error" in line:
                    raise AscendImagesError(f"push {refs['gzip']}: {line['error']}")
            push_recompressed(setup.client, tag, refs["zstd"], "zstd", None)
            row: dict[str, float] = {}
            for kind, ref in refs.items():
                sizes = subprocess.run(["docker", "buildx", "imagetools", "inspect", "--raw", ref],
                                       capture_output=True, text=True, check=True).stdout
                row[f"{kind}_mb"] = round(sum(layer["size"] for layer in json.loads(sizes)["layers"]) / 1e6, 1)
                started = time.monotonic()
                engine.docker("pull", "-q", ref)
                row[f"{kind}_s"] = round(time.monotonic() - started, 1)
                engine.docker("rmi", ref)
                setup.out(f"  {ref}: {row[f'{kind}_mb']} MB, pulled in {row[f'{kind}_s']} s")
            figures[tag] = row
    finally:
        engine.stop()
    return figures
