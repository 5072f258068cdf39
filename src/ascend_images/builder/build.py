"""Build a plan on a Docker engine with the SDK's streaming low-level API.

For each stage, parents first: render its context, compute its content key (rendered context +
parent image id + platform), reuse an image already carrying that key, or build it untagged and tag
it only once the build has succeeded, so a failed stage never gets a tag.
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

from ascend_images.builder.buildserver import BuildServer
from ascend_images.builder.claims import claim, claims_dir
from ascend_images.builder.engine import disk_full, drop_build_connection
from ascend_images.builder.native import NativeParts, later_locked_stages
from ascend_images.builder.progress import StageProgress, fmt_seconds, printer
from ascend_images.builder.stagecache import StageCache
from ascend_images.console import note
from ascend_images.errors import BuildError, Interrupted
from ascend_images.inputs.cache import default_built_wheels
from ascend_images.inputs.download import with_login
from ascend_images.inputs.pypi import PYPI_SIMPLE
from ascend_images.inputs.sources import BuildInputs, Sources
from ascend_images.inputs.wheelstore import WheelStore, default_store, stored_files
from ascend_images.stages.envcapture import capture_env
from ascend_images.stages.kinds import KINDS
from ascend_images.stages.names import CONTENT_KEY_LABEL
from ascend_images.stages.plan import BuildPlan
from ascend_images.stages.render import Renderer
from ascend_images.stages.stage import Stage

# v2: the key no longer sees the namespace (a stage's identity is its content and its parent's image id)
KEY_VERSION = "ascend-images-content-key-v2"
# the labels the builder itself adds, each its own LABEL step at the top of a stage image's history
BUILDER_LABELS = (CONTENT_KEY_LABEL, "org.opencontainers.image.created", "org.opencontainers.image.revision")


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
    revision: str = ""  # org.opencontainers.image.revision
    stage_cache: str | None = None  # REGISTRY/NAMESPACE: look stages up there by key, push them after (stagecache)
    stage_cache_read_only: bool = False
    # wheels compiled from locked sdists, kept for every later build (buildserver: /built-wheels/)
    built_wheels: Path = field(default_factory=default_built_wheels)
    # every locked file by its sha256 (buildserver: /wheels/), filled before a stage that installs from it builds
    wheel_store: Path = field(default_factory=default_store)


@dataclass
class StageResult:
    tag: str
    kind: str
    status: str  # built | reused | pulled (from the stage cache)
    image_id: str
    content_key: str
    seconds: float
    log: str | None
    context: str
    wheels_wanted: int = 0  # files the stage took from the wheel store
    wheels_downloaded: int = 0  # of those, fetched from an index for it (the rest were stored already)


def content_key(context_dir: Path, parent_id: str, platform: str, namespace: str, tools: tuple[str, ...] = ()) -> str:
    """A stage's identity: its context and its parent's image id, never its name. The context names the parent by
    tag (FROM, the base.name label), and the tag carries the namespace; the parent's image id already says which
    image that is, so each `<namespace>/<stage repo>:` is hashed as one placeholder, and a selection built under
    another namespace (or pulled from another machine) has the same keys."""
    names = [f"{namespace}/{row.repo}:".encode() for row in KINDS.values() if row.repo]
    digest = hashlib.sha256()
    for part in (KEY_VERSION, parent_id, platform, *tools):  # tools: the installer image that installs its packages
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


def _build_args(context: Path, server: BuildServer, tools: tuple[str, ...]) -> dict[str, str]:
    """The build args a stage's Dockerfile declares: the build server, and the installer its native part starts
    from."""
    args = {"ASCEND_BUILD_SERVER": server.url, **({"INSTALLER": tools[0]} if tools else {})}
    declared = declared_args((context / "Dockerfile").read_text(encoding="utf-8"))
    return {k: v for k, v in args.items() if k in declared}


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
        # parallel builds: the streams being read, so Ctrl-C in the main thread can drop them all
        self._streams: set[Any] = set()
        self._lock = threading.Lock()
        self._cancelled = threading.Event()
        self._store_lock = threading.Lock()  # a stage and a native part ahead fill the wheel store one at a time
        self._stages: list[Stage] = []
        self.native: NativeParts | None = None
        self.cache = (StageCache(settings.stage_cache, client, self.out, settings.stage_cache_read_only)
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

    # --- helpers -------------------------------------------------------------------------------
    def _find_by_key(self, key: str, tag: str) -> str | None:
        """An image built for the content key: the one the stage's tag points to if it is (so that forced
        rebuilds, e.g. by the benchmark, never switch a chain to a twin and change its children's keys), else
        the oldest: a twin made later (a forced build, the benchmark's cold build) must not take the place of the
        image whose children exist, or a build under another name finds the parent but none of its children (it
        happened: after a bench run, the second-namespace build rebuilt A3's chain on the bench's base). Only an
        image whose own build set the key counts: the layers of a child's build that failed or was interrupted
        inherit its parent's labels, key included, and must never stand in for it."""
        try:
            tagged = self.client.api.inspect_image(tag)
            labels = tagged["Config"].get("Labels") or {}
            if labels.get(CONTENT_KEY_LABEL) == key and self._built_for(tagged["Id"], key):
                return tagged["Id"]
        except docker.errors.ImageNotFound:
            pass
        # all=True: a stage image whose tag moved on is "intermediate" to the engine once it has children
        found = self.client.api.images(all=True, filters={"label": f"{CONTENT_KEY_LABEL}={key}"})
        own = [image for image in found if self._built_for(image["Id"], key)]
        # the builder's label steps are layers of their own: only the top one of a build is the stage's image
        below = {image.get("ParentId") for image in own}
        own = [image for image in own if image["Id"] not in below]
        return min(own, key=lambda image: (image.get("Created", 0), image["Id"]))["Id"] if own else None

    def _built_for(self, image_id: str, key: str) -> bool:
        """The builder adds its labels (key, created, revision) as the last steps of a build, one LABEL each: an image
        is the key's own when the key is among the unbroken run of those steps at the top of its history. A layer of
        a child's build inherits the labels but has a step of its own above them (the twin the lookup once took)."""
        for entry in self.client.api.history(image_id):
            step = entry.get("CreatedBy") or ""
            if f"LABEL {CONTENT_KEY_LABEL}={key}" in step:
                return True
            if not any(f"LABEL {name}=" in step for name in BUILDER_LABELS):
                return False
        return False

    def _tag(self, image_id: str, tag: str) -> None:
        repo, _, name = tag.rpartition(":")
        self.client.api.tag(image_id, repo, name, force=True)

    def _external_parent_id(self, stage: Stage, platform: str) -> str:
        ref = stage.parent_ref
        try:
            return self.client.api.inspect_image(ref)["Id"]
        except docker.errors.ImageNotFound:
            pass
        self.out(f"pulling {ref} ({platform}) ...")
        try:
            self.client.api.pull(ref, platform=platform)
            return self.client.api.inspect_image(ref)["Id"]
        except docker.errors.APIError as exc:
            hint_of = KINDS[stage.kind].missing_parent_hint
            hint = f"\n{hint_of(stage.variant)}" if hint_of else ""
            raise BuildError(f"parent image {ref} is not here and could not be pulled: {exc}{hint}") from None

    def _platform(self, stage: Stage) -> str:
        return stage.platform or stage.variant.arch_spec.docker_platform

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

    # --- one stage -----------------------------------------------------------------------------
    def build_stage(self, stage: Stage, index: int, total: int, server: BuildServer) -> StageResult:
        started = time.monotonic()
        platform = self._platform(stage)
        label = f"[{index}/{total} {stage.kind}]"
        if stage.parent is not None:
            parent_id = self.results[stage.parent.tag].image_id
        else:
            parent_id = self._external_parent_id(stage, platform)
        tools = tuple(self.results[need.tag].image_id for need in stage.needs)
        # Another process on this host may be building the same stage (same tag: same context directory) or
        # the same content under another tag: claim both, wait for the holder, then reuse what it built.
        with claim(self.claims, _claim_name(stage.tag), f"{label} {stage.tag}", self.out):
            captured = None
            if KINDS[stage.kind].captures_env:
                captured = capture_env(self.client, parent_id, stage.variant.env_scripts)
            ctx, files = self.renderer.context(stage, self.settings.sources, captured)
            context = self.renderer.write(stage, self.context_dir, ctx, files)
            key = content_key(context, parent_id, platform, stage.namespace, tools)
            existing = None if self.settings.force else self._find_by_key(key, stage.tag)
            if existing:
                return self._reuse(label, stage, existing, key, started, context)
            with claim(self.claims, key, f"{label} {stage.tag}", self.out) as waited:
                existing = self._find_by_key(key, stage.tag) if waited and not self.settings.force else None
                if existing:
                    return self._reuse(label, stage, existing, key, started, context)
                if self.cache is not None and not self.settings.force:
                    pulled = self.cache.pull(stage, key, platform, parent_id, label)
                    if pulled:
                        self._tag(pulled, stage.tag)
                        self.out(f"{label} {stage.tag}: pulled from the stage cache (content key {key[:12]})")
                        return StageResult(stage.tag, stage.kind, "pulled", pulled, key,
                                           time.monotonic() - started, None, str(context))
                if self.native is not None:  # this stage builds: so do the locked ones after it
                    self.native.schedule(later_locked_stages(self._stages, stage))
                    self.native.wait_for(stage)
                wheels = self._fill_store(label, ctx)
                result = self._build_claimed(stage, label, index, key, context, server, started, tools)
                result = replace(result, wheels_wanted=wheels[0], wheels_downloaded=wheels[1])
        if self.cache is not None:
            self.cache.push(stage, key, result.image_id)
        return result

    def _reuse(self, label: str, stage: Stage, image_id: str, key: str, started: float,
               context: Path) -> StageResult:
        self._tag(image_id, stage.tag)
        if self.cache is not None:  # a stage built here before the cache was named goes there too
            self.cache.push(stage, key, image_id)
        self.out(f"{label} {stage.tag}: up to date (content key {key[:12]}), reused")
        return StageResult(stage.tag, stage.kind, "reused", image_id, key, time.monotonic() - started, None,
                           str(context))

    def _build_claimed(self, stage: Stage, label: str, index: int, key: str, context: Path, server: BuildServer,
                       started: float, tools: tuple[str, ...] = ()) -> StageResult:
        if self._cancelled.is_set():  # Ctrl-C came while this stage waited for its claim
            raise Interrupted(f"{label} {stage.tag} not started; no tag was set for it")
        platform = self._platform(stage)
        log_path = self.log_dir / f"{index:02d}-{stage.slug}.log"
        self.out(f"{label} {stage.tag}: building (log {log_path})")
        buildargs = _build_args(context, server, tools)
        labels = {
            CONTENT_KEY_LABEL: key,
            "org.opencontainers.image.created": dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
            "org.opencontainers.image.revision": self.settings.revision,
        }
        image_id = None
        error = None
        with StageProgress(label, log_path, self.progress) as progress:
            # A stage with a native part (the installer's, on the host's own arch) names its target platform in its
            # own FROM lines: the classic builder refuses COPY --from a stage of another platform than the build's
            stream = self.client.api.build(
                path=str(context), rm=True, forcerm=True, pull=False, decode=True, nocache=self.settings.nocache,
                network_mode="host", platform=None if stage.needs else platform, buildargs=buildargs, labels=labels,
            )
            with self._lock:
                self._streams.add(stream)
            interrupted = f"{label} {stage.tag} stopped at step {{}} after {{}}; no tag was set for it, the " \
                          f"stages before it are kept and reused next time. Log: {log_path}"
            try:
                for chunk in stream:
                    if "stream" in chunk:
                        for text in chunk["stream"].splitlines():
                            progress.line(text)
                    if "aux" in chunk and "ID" in chunk["aux"]:
                        image_id = chunk["aux"]["ID"]
                    if "error" in chunk:
                        error = chunk.get("errorDetail", {}).get("message") or chunk["error"]
                        progress.line(f"ERROR: {error}")
            except KeyboardInterrupt:
                # dropping the connection makes the engine cancel the build and remove its container
                stream.close()
                progress.line("INTERRUPTED (Ctrl-C)")
                raise Interrupted(interrupted.format(progress.step or "?", fmt_seconds(progress.elapsed))) from None
            except Exception:
                if not self._cancelled.is_set():
                    raise
                # another thread took Ctrl-C and dropped this stage's connection (parallel builds)
                progress.line("INTERRUPTED (Ctrl-C)")
                raise Interrupted(interrupted.format(progress.step or "?", fmt_seconds(progress.elapsed))) from None
            finally:
                with self._lock:
                    self._streams.discard(stream)
            if self._cancelled.is_set():
                raise Interrupted(interrupted.format(progress.step or "?", fmt_seconds(progress.elapsed)))
            step = progress.step
        # ENOSPC inside a RUN step shows only in its output; the step itself just "returned a non-zero code"
        if error and disk_full(f"{error}\n{progress.tail()}"):
            error += " (the engine's disk is full: free space with `docker system prune`, then run again)"
        if error or not image_id:
            raise BuildError(
                f"{label} {stage.tag} failed at step {step or '?'} after {fmt_seconds(progress.elapsed)}: "
                f"{error or 'the builder returned no image id'}\n"
                f"--- last lines of {log_path} ---\n{progress.tail()}\n--- full log: {log_path}\n"
                f"(no tag was set for {stage.tag})"
            )
        self._tag(image_id, stage.tag)
        seconds = time.monotonic() - started
        self.out(f"{label} {stage.tag}: built in {fmt_seconds(seconds)} ({image_id[7:19]})")
        return StageResult(stage.tag, stage.kind, "built", image_id, key, seconds, str(log_path), str(context))

    # --- a whole plan --------------------------------------------------------------------------
    def build(self, plan: BuildPlan) -> list[StageResult]:
        total = len(plan.stages)
        started = time.monotonic()
        sources = self.settings.sources
        cann_dir = sources.cann.directory if sources.cann.kind == "local" else sources.cann.cache
        artifacts_dir = sources.artifacts.directory or sources.artifacts.cache
        self._stages = list(plan.stages)
        with BuildServer(self.settings.inputs, cann_dir, artifacts_dir,
                         built_wheels=self.settings.built_wheels, wheel_store=self.settings.wheel_store) as server:
            if not (self.settings.force or self.settings.nocache):  # forced or cache-less: every stage anew
                self.native = NativeParts(
                    self.client, functools.partial(self._native_context, server=server),
                    lambda stage: all(need.tag in self.results for need in stage.needs), self._streams, self._lock,
                    self._cancelled, self.log_dir, self.settings.work_dir, self.out)
            try:
                if self.settings.jobs > 1:
                    self._build_parallel(plan, server)
                else:
                    for index, stage in enumerate(plan.stages, 1):
                        self.results[stage.tag] = self.build_stage(stage, index, total, server)
            finally:
                if self.native is not None:
                    self.native.stop()
        results = [self.results[s.tag] for s in plan.stages]
        built = sum(r.status == "built" for r in results)
        pulled = sum(r.status == "pulled" for r in results)
        self.out(f"done in {fmt_seconds(time.monotonic() - started)}: {built} built, "
                 f"{total - built - pulled} reused, " + (f"{pulled} pulled from the stage cache, " if pulled else "")
                 + f"{total} stages")
        self._write_report(plan, results)
        return results

    def _native_context(self, stage: Stage, scratch: Path, server: BuildServer) -> tuple[Path, dict[str, str]]:
        """A locked stage's context, written to `scratch`, with its wheels in the store, for its native part ahead:
        the same files and build args its own build will have, so that build finds the steps in the cache."""
        ctx, files = self.renderer.context(stage, self.settings.sources, None)
        self._fill_store(f"[native part of {stage.kind}]", ctx)
        context = self.renderer.write(stage, scratch, ctx, files)
        tools = tuple(self.results[need.tag].image_id for need in stage.needs)
        return context, _build_args(context, server, tools)

    def _build_parallel(self, plan: BuildPlan, server: BuildServer) -> None:
        """Up to `jobs` stages at once, each as soon as its parent is built. After a failure nothing new starts,
        the running stages finish, and the first error is raised. Ctrl-C drops every running build's connection
        (the engine stops those builds) and raises Interrupted naming them."""
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
                        ready = [s for s in (stage.parent, *stage.needs) if s is not None]
                        if all(s.tag in self.results for s in ready):
                            pending.remove(stage)
                            running[pool.submit(self.build_stage, stage, index[stage.tag], total, server)] = stage
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
                    for stream in list(self._streams):
                        drop_build_connection(stream)
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
