"""Build a plan on a Docker engine, each stage by BuildKit (builder/buildx.py: one `docker buildx build` per stage, its
native stages inside it).

For each stage, parents first: render its context, compute its content key (rendered context + parent image id +
platform + what else the build is given: the native stages' base image, SOURCE_DATE_EPOCH, the labels), reuse an
image already carrying that key, or build it and tag it only once the build has succeeded, so a failed stage never
gets a tag. The docker SDK does the rest: inspect, tag, pull, the stage cache.
"""

from __future__ import annotations

import datetime as dt
import functools
import hashlib
import json
import re
import threading
import time
from collections.abc import Callable
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

import docker

from ascend_images.builder import buildx
from ascend_images.builder.claims import claim, claims_dir
from ascend_images.builder.engine import containerd_store, disk_full
from ascend_images.builder.progress import StageProgress, fmt_seconds, printer
from ascend_images.builder.stagecache import StageCache
from ascend_images.builder.stageinputs import stage_inputs
from ascend_images.checkout import SourceDate, definition_revision, source_date_epoch
from ascend_images.console import note
from ascend_images.errors import BuildError, Interrupted
from ascend_images.inputs.download import with_login
from ascend_images.inputs.pypi import PYPI_SIMPLE
from ascend_images.inputs.sources import BuildInputs, Sources
from ascend_images.inputs.wheelstore import WheelStore, default_store, stored_files
from ascend_images.matrix.model import Matrix
from ascend_images.stages.kinds import KINDS
from ascend_images.stages.names import CONTENT_KEY_LABEL, TEST_DOUBLE_LABEL
from ascend_images.stages.plan import BuildPlan
from ascend_images.stages.render import Renderer
from ascend_images.stages.stage import Stage

# v3: built by BuildKit, with SOURCE_DATE_EPOCH, the labels and the native stages' base in the key
KEY_VERSION = "ascend-images-content-key-v3"
INSTALLER_ARG = "INSTALLER_BASE"  # the image the native stages start FROM (the build host's own arch)


@dataclass(frozen=True)
class BuildSettings:
    sources: Sources
    inputs: BuildInputs = field(default_factory=BuildInputs)
    work_dir: Path = Path("build")
    force: bool = False  # rebuild even when an image carries the content key
    nocache: bool = False  # and ignore Docker's layer cache too (a truly cold build, for benchmarks)
    # stages built at once: siblings (vllm and sglang on one torch, A2 and A3 on one base) need not wait for each
    # other; an emulated build is one busy core, so 2 halves a cold multi-variant build on a 2-core host
    jobs: int = 1
    # SOURCE_DATE_EPOCH and org.opencontainers.image.revision: the last change to what the images are made from
    source_date: SourceDate = field(default_factory=SourceDate)
    stage_cache: str | None = None  # REGISTRY/NAMESPACE: look stages up there by key, push them after (stagecache)
    stage_cache_read_only: bool = False
    # every locked file by its sha256, filled before a stage that installs from it builds; the stage gets its own
    # files of it as the named build context `wheels`
    wheel_store: Path = field(default_factory=default_store)
    installer_base: str | None = None  # INSTALLER_BASE: None for the Dockerfiles' default (the matrix's OS image)


@dataclass
class StageResult:
    tag: str
    kind: str
    status: str  # built | reused (an image of its content key) | cached (every step from a cache, none run)
    image_id: str
    content_key: str
    seconds: float
    log: str | None
    context: str
    wheels_wanted: int = 0  # files the stage took from the wheel store
    wheels_downloaded: int = 0  # of those, fetched from an index for it (the rest were stored already)


def content_key(context_dir: Path, parent: str, platform: str, namespace: str, given: tuple[str, ...] = ()) -> str:
    """A stage's identity: its context and its parent (an image from outside the plan by its id, a stage of the plan
    by its content key), never its name. The context names the parent by tag (FROM, the base.name label), and the
    tag carries the namespace; `parent` already says which image that is, so each `<namespace>/<stage repo>:` is
    hashed as one placeholder, and a selection built under another namespace (or pulled from another machine) has
    the same keys. A parent of the plan goes in by its key, not its id: its image names its own parent by tag in the
    base.name label, so its id differs from one namespace to another, and every key above it would too."""
    names = [f"{namespace}/{row.repo}:".encode() for row in KINDS.values() if row.repo]
    digest = hashlib.sha256()
    for part in (KEY_VERSION, parent, platform, *given):  # given: what else the build is given (build_given)
        digest.update(part.encode() + b"\0")
    for path in sorted(p for p in context_dir.rglob("*") if p.is_file()):
        rel = path.relative_to(context_dir).as_posix()
        digest.update(f"{rel}\0{path.stat().st_mode & 0o777:o}\0".encode())
        data = path.read_bytes()
        for name in names:
            data = data.replace(name, b"<namespace>/" + name[len(namespace) + 1:])
        digest.update(data)
        digest.update(b"\0")
    return digest.hexdigest()


def _claim_name(tag: str) -> str:
    return "tag-" + hashlib.sha256(tag.encode()).hexdigest()[:32]


def declared_args(dockerfile: str) -> set[str]:
    return set(re.findall(r"^ARG\s+([A-Za-z_][A-Za-z0-9_]*)", dockerfile, flags=re.MULTILINE))


def source_date(matrix: Matrix) -> SourceDate:
    """What the images of this checkout are of: the matrix release's date (or $SOURCE_DATE_EPOCH) and the last
    revision that changed what images are made from."""
    return SourceDate(definition_revision(), source_date_epoch(matrix.source_date_epoch))


def build_given(args: dict[str, str], labels: dict[str, str], epoch: int | None) -> tuple[str, ...]:
    """What a stage's build is given beside its context and parent, for its content key: the build args (the native
    stages' base by its image id), the labels the builder sets (the content key's own aside) and SOURCE_DATE_EPOCH."""
    return (*(f"arg {k}={v}" for k, v in sorted(args.items())),
            *(f"label {k}={v}" for k, v in sorted(labels.items()) if k != CONTENT_KEY_LABEL),
            f"epoch {epoch}")


class Builder:
    def __init__(self, client: docker.DockerClient, settings: BuildSettings,
                 renderer: Renderer | None = None, out: Callable[[str], None] | None = None):
        self.client = client
        self.settings = settings
        self.renderer = renderer or Renderer()
        self.out = out or printer()
        self.progress: Callable[[str], None] = note  # a stage's step lines: stderr, unlike its outcome
        self.results: dict[str, StageResult] = {}
        stamp = dt.datetime.now().strftime("%Y%m%d-%H%M%S")
        self.log_dir = settings.work_dir / "logs" / stamp
        self.context_dir = settings.work_dir / "contexts"
        # the builds running now (parallel builds), so Ctrl-C in the main thread can cancel them all
        self._running: set[buildx.Running] = set()
        self._lock = threading.Lock()
        self._cancelled = threading.Event()
        self._store_lock = threading.Lock()  # two stages fill the wheel store one at a time
        self.cache = (StageCache(settings.stage_cache, self.out, settings.stage_cache_read_only)
                      if settings.stage_cache else None)
        if settings.jobs > 1:
            plain = self.out

            def out(line: str) -> None:
                with self._lock:
                    plain(line)

            def progress(line: str) -> None:
                with self._lock:
                    note(line)

            self.out, self.progress = out, progress

    @functools.cached_property
    def claims(self) -> Path:
        """Claims are per engine: two engines on one host build independently."""
        return claims_dir(self.client.info().get("ID", "engine"))

    @functools.cached_property
    def reproducible(self) -> bool:
        """The engine keeps images in containerd's store: an image's id there is its manifest digest, which a rebuild
        and a registry show too (DESIGN 24). Other engines (graph drivers) keep the image config's digest as the id and
        compress layers only when they push; they are told once."""
        if containerd_store(self.client):
            return True
        self.out("note: this engine's image store is not containerd's (`features.containerd-snapshotter` in "
                 "/etc/docker/daemon.json): image ids are config digests there, and a registry cache cannot be "
                 "exported; scripts/setup-engine.sh sets an engine up with it")
        return False

    # --- helpers -------------------------------------------------------------------------------
    def _find_by_key(self, key: str, tag: str) -> str | None:
        """An image built for the content key: the one the stage's tag points to if it is (so that forced rebuilds,
        e.g. by the benchmark, never switch a chain to a twin and change its children's keys), else the first by id
        of those carrying the key (BuildKit makes no intermediate images, and a reproducible build makes one image
        of one key). The stage label must be the key's stage's: an image built FROM a stage inherits its labels."""
        tagged = self._inspect(tag)
        if tagged and (tagged["Config"].get("Labels") or {}).get(CONTENT_KEY_LABEL) == key:
            return tagged["Id"]
        found = self.client.api.images(filters={"label": f"{CONTENT_KEY_LABEL}={key}"})
        return min((image["Id"] for image in found), default=None)

    def _tag(self, image_id: str, tag: str) -> None:
        repo, _, name = tag.rpartition(":")
        self.client.api.tag(image_id, repo, name, force=True)

    def _inspect(self, ref: str) -> dict | None:
        try:
            return self.client.api.inspect_image(ref)
        except docker.errors.ImageNotFound:
            return None

    def _image_id(self, ref: str) -> str | None:
        found = self._inspect(ref)
        return found["Id"] if found else None

    def _external_parent(self, stage: Stage, platform: str) -> str:
        """A parent from outside the plan, as content_key takes it: by the content key it carries when it is a stage
        of ours (`run --build` makes an overlay over the image below, and a whole build must find that overlay by the
        key it gives it), else by its image id."""
        ref = stage.parent_ref
        found = self._inspect(ref)
        if found is None:
            self.out(f"pulling {ref} ({platform}) ...")
            try:
                self.client.api.pull(ref, platform=platform)
                found = self.client.api.inspect_image(ref)
            except docker.errors.APIError as exc:
                hint_of = KINDS[stage.kind].missing_parent_hint
                hint = f"\n{hint_of(stage.variant)}" if hint_of else ""
                raise BuildError(f"parent image {ref} is not here and could not be pulled: {exc}{hint}") from None
        key = ((found.get("Config") or {}).get("Labels") or {}).get(CONTENT_KEY_LABEL)
        return f"content-key:{key}" if key else found["Id"]

    def _platform(self, stage: Stage) -> str:
        return stage.variant.arch_spec.docker_platform

    @functools.cached_property
    def store(self) -> WheelStore:
        inputs = self.settings.inputs
        indexes = [] if inputs.pip_offline else [inputs.pip_index_url or PYPI_SIMPLE, *inputs.pip_extra_index_urls]
        return WheelStore(self.settings.wheel_store, indexes, [inputs.wheelhouse] if inputs.wheelhouse else [],
                          offline=inputs.pip_offline, out=self.progress,
                          fetch_hint="invoke fetch ... (the same selection flags) on a connected host")

    def _fill_store(self, label: str, ctx: dict[str, Any]) -> tuple[int, int]:
        """The stage's locked files into the host's wheel store before it builds (a missing one fails here, in
        seconds, not in the build): each file is fetched once per host, whichever stage or release needs it."""
        wanted = stored_files(ctx.get("packages", {}).get("wanted", []))
        if not wanted:
            return 0, 0
        with self._store_lock:
            before = len(self.store.downloaded)
            self.store.ensure(wanted, [with_login(url, self.settings.inputs.index_credentials)
                                       for url in ctx["packages"].get("indexes", [])])
            fetched = len(self.store.downloaded) - before
        self.progress(f"{label} wheel store: {len(wanted)} file(s), {fetched} downloaded now")
        return len(wanted), fetched

    def _args(self, dockerfile: str) -> dict[str, str]:
        """The build args a stage's Dockerfile declares and the builder sets: the native stages' base, when a local
        one is given (else the Dockerfile's default, the matrix's image)."""
        base = self.settings.installer_base
        return {INSTALLER_ARG: base} if base and INSTALLER_ARG in declared_args(dockerfile) else {}

    def _labels(self, key: str) -> dict[str, str]:
        """The labels the builder sets: the content key, and the time and revision the image is of (the last change
        to what images are made from: a rebuild of that revision gives the same image, DESIGN 24)."""
        date = self.settings.source_date
        return {CONTENT_KEY_LABEL: key, "org.opencontainers.image.created": date.iso,
                "org.opencontainers.image.revision": date.revision}

    # --- one stage -----------------------------------------------------------------------------
    def build_stage(self, stage: Stage, index: int, total: int) -> StageResult:
        started = time.monotonic()
        platform = self._platform(stage)
        label = f"[{index}/{total} {stage.kind}]"
        if stage.parent is not None:
            parent = "content-key:" + self.results[stage.parent.tag].content_key
        else:
            parent = self._external_parent(stage, platform)
        # Another process on this host may be building the same stage (same tag: same context directory) or
        # the same content under another tag: claim both, wait for the holder, then reuse what it built.
        with claim(self.claims, _claim_name(stage.tag), f"{label} {stage.tag}", self.out):
            ctx, files = self.renderer.context(stage, self.settings.sources)
            context = self.renderer.write(stage, self.context_dir, ctx, files)
            dockerfile = (context / "Dockerfile").read_text(encoding="utf-8")
            args = self._args(dockerfile)
            given_args = {k: self._image_id(v) or v for k, v in args.items()}
            epoch = self.settings.source_date.epoch
            key = content_key(context, parent, platform, stage.namespace,
                              build_given(given_args, self._labels(""), epoch))
            existing = None if self.settings.force else self._find_by_key(key, stage.tag)
            if existing:
                return self._reuse(label, stage, existing, key, started, context)
            with claim(self.claims, key, f"{label} {stage.tag}", self.out) as waited:
                existing = self._find_by_key(key, stage.tag) if waited and not self.settings.force else None
                if existing:
                    return self._reuse(label, stage, existing, key, started, context)
                wheels = self._fill_store(label, ctx)
                cache = tuple(self.cache.args(stage, ctx["labels"].get(TEST_DOUBLE_LABEL, ""))) if self.cache else ()
                build = buildx.BuildxBuild(context, platform, args=args, labels=self._labels(key),
                                           source_date_epoch=epoch, no_cache=self.settings.nocache, cache=cache)
                result = self._build_claimed(stage, label, index, key, build, dockerfile, ctx, started)
                return replace(result, wheels_wanted=wheels[0], wheels_downloaded=wheels[1])

    def _reuse(self, label: str, stage: Stage, image_id: str, key: str, started: float,
               context: Path) -> StageResult:
        self._tag(image_id, stage.tag)
        self.out(f"{label} {stage.tag}: up to date (content key {key[:12]}), reused")
        return StageResult(stage.tag, stage.kind, "reused", image_id, key, time.monotonic() - started, None,
                           str(context))

    def _build_claimed(self, stage: Stage, label: str, index: int, key: str, build: buildx.BuildxBuild,
                       dockerfile: str, ctx: dict[str, Any], started: float) -> StageResult:
        if self._cancelled.is_set():  # Ctrl-C came while this stage waited for its claim
            raise Interrupted(f"{label} {stage.tag} not started; no tag was set for it")
        log_path = self.log_dir / f"{index:02d}-{stage.slug}.log"
        self.out(f"{label} {stage.tag}: building (log {log_path})")
        running = buildx.Running()
        with self._lock:
            self._running.add(running)
        interrupted = f"{label} {stage.tag} stopped at step {{}} after {{}}; no tag was set for it, the " \
                      f"stages before it are kept and reused next time. Log: {log_path}"
        error = ""
        image_id = ""
        with StageProgress(label, log_path, self.progress) as progress:
            try:
                with stage_inputs(dockerfile, ctx.get("packages", {}).get("wanted", []), self.settings.sources,
                                  self.settings.inputs, self.store, self.settings.work_dir / "inputs") as given:
                    buildx.run(replace(build, contexts=given.contexts, secrets=given.secrets), stage.tag, progress,
                                          running, oci=self.reproducible)
                    image_id = self.client.api.inspect_image(stage.tag)["Id"]
            except KeyboardInterrupt:
                progress.line("INTERRUPTED (Ctrl-C)")
                raise Interrupted(interrupted.format(progress.step or "?", fmt_seconds(progress.elapsed))) from None
            except BuildError as exc:
                error = str(exc)
                progress.line(f"ERROR: {error}")
            finally:
                with self._lock:
                    self._running.discard(running)
            step = progress.step
        if self._cancelled.is_set():
            raise Interrupted(interrupted.format(step or "?", fmt_seconds(progress.elapsed)))
        # ENOSPC inside a RUN step shows only in its output; the step itself just "did not complete successfully"
        if error and disk_full(f"{error}\n{progress.tail()}"):
            error += " (the engine's disk is full: free space with `docker system prune`, then run again)"
        if error:
            raise BuildError(
                f"{label} {stage.tag} failed at step {step or '?'} after {fmt_seconds(progress.elapsed)}: "
                f"{error}\n--- last lines of {log_path} ---\n{progress.tail()}\n--- full log: {log_path}\n"
                f"(no tag was set for {stage.tag})"
            )
        seconds = time.monotonic() - started
        short = image_id.removeprefix("sha256:")[:12]
        if progress.steps_run == 0 and progress.steps_cached:  # every step from a cache: nothing built here
            # BuildKit does not say which of its caches a step came from: an empty engine's can only be the registry's
            where = "a cache (the engine's or the stage cache)" if self.cache is not None else "the engine's cache"
            self.out(f"{label} {stage.tag}: every step from {where}, made in {fmt_seconds(seconds)} ({short})")
            status = "cached"
        else:
            self.out(f"{label} {stage.tag}: built in {fmt_seconds(seconds)} ({short}; {progress.steps_run} step(s) "
                     f"run, {progress.steps_cached} from a cache)")
            status = "built"
        return StageResult(stage.tag, stage.kind, status, image_id, key, seconds, str(log_path), str(build.context))

    def native_tool(self, stage: Stage, name: str) -> str:
        """The `installer` build stage of a locked stage's Dockerfile (its native tool: the build host's Python and uv
        with the install scripts) as an image named `name`, for measuring what it does (bench/install.py)."""
        ctx, files = self.renderer.context(stage, self.settings.sources)
        context = self.renderer.write(stage, self.context_dir, ctx, files)
        dockerfile = (context / "Dockerfile").read_text(encoding="utf-8")
        self._fill_store(f"[native tool of {stage.kind}]", ctx)
        build = buildx.BuildxBuild(context, self._platform(stage), args=self._args(dockerfile),
                                   source_date_epoch=self.settings.source_date.epoch, target="installer")
        log_path = self.log_dir / f"native-tool-{stage.slug}.log"
        with StageProgress(f"[native tool of {stage.kind}]", log_path, self.progress) as progress, \
                stage_inputs(dockerfile, ctx.get("packages", {}).get("wanted", []), self.settings.sources,
                             self.settings.inputs, self.store, self.settings.work_dir / "inputs") as given:
            buildx.run(replace(build, contexts=given.contexts, secrets=given.secrets), name, progress,
                       oci=self.reproducible)
        return name

    # --- a whole plan --------------------------------------------------------------------------
    def build(self, plan: BuildPlan) -> list[StageResult]:
        total = len(plan.stages)
        started = time.monotonic()
        if self.settings.jobs > 1:
            self._build_parallel(plan)
        else:
            for index, stage in enumerate(plan.stages, 1):
                self.results[stage.tag] = self.build_stage(stage, index, total)
        results = [self.results[s.tag] for s in plan.stages]
        built = sum(r.status == "built" for r in results)
        cached = sum(r.status == "cached" for r in results)
        self.out(f"done in {fmt_seconds(time.monotonic() - started)}: {built} built, "
                 f"{total - built - cached} reused, " + (f"{cached} made from cached steps, " if cached else "")
                 + f"{total} stages")
        self._write_report(plan, results)
        return results

    def _build_parallel(self, plan: BuildPlan) -> None:
        """Up to `jobs` stages at once, each as soon as its parent is built. After a failure nothing new starts,
        the running stages finish, and the first error is raised. Ctrl-C cancels every running build (buildx stops
        its build) and raises Interrupted naming them."""
        index = {s.tag: i for i, s in enumerate(plan.stages, 1)}
        total, pending = len(plan.stages), list(plan.stages)
        running: dict[Future[StageResult], Stage] = {}
        errors: list[BaseException] = []
        with ThreadPoolExecutor(max_workers=self.settings.jobs, thread_name_prefix="stage") as pool:
            try:
                while pending or running:
                    for stage in [s for s in pending if not errors]:
                        if len(running) >= self.settings.jobs:
                            break
                        if stage.parent is None or stage.parent.tag in self.results:
                            pending.remove(stage)
                            running[pool.submit(self.build_stage, stage, index[stage.tag], total)] = stage
                    if not running:
                        break
                    done, _ = wait(running, return_when=FIRST_COMPLETED)
                    for future in done:
                        stage = running.pop(future)
                        try:
                            self.results[stage.tag] = future.result()
                        except BaseException as exc:
                            errors.append(exc)
            except KeyboardInterrupt:
                self._cancelled.set()
                with self._lock:
                    for build in list(self._running):
                        build.cancel()
                stopped = [running[f].tag for f in running]
                wait(running)
                raise Interrupted(f"stopped {', '.join(stopped) or 'between stages'}; no tag was set for them, "
                                  f"the stages built before are kept and reused next time. Logs: "
                                  f"{self.log_dir}") from None
        if errors:
            raise errors[0]

    def _write_report(self, plan: BuildPlan, results: list[StageResult]) -> None:
        report = {
            "stages": [asdict(r) for r in results],
            "variants": {v.name: {"image": top.tag, **v.describe()} for v, top in plan.tops.items()},
        }
        path = self.settings.work_dir / "build-report.json"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
