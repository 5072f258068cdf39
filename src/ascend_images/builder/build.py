"""Build a plan on BuildKit (DESIGN 23, 25): one `docker buildx bake` of the plan's bake definition, on whichever
builder is named. The definition and the stages' contexts are written first (workspace.py, with the writer that makes
rendered/docker-bake.json), so what `invoke build` runs is what a user's CI runs with that file, and this module
renders, loads and checks nothing: `Builder.workspace(plan)` writes, `Builder.build(workspace)` bakes.

BuildKit orders the stages, builds a shared one once (within a build, and between concurrent builds on one engine),
takes every step it can from its cache (the engine's, or a registry's: --stage-cache), and names an image only when
its stage has finished. What stays ours around it, and why:
- the inputs: each stage's own files of the wheel store, the CANN directory and the artifacts, laid out as its named
  contexts before the build starts (workspace, stageinputs), so a missing file stops the build in seconds, not after
  an hour of emulated steps, and a wheel added to the store never changes another stage's cache keys;
- the secrets, written to files of this build only, given as bake secrets, removed after;
- progress per stage, from bake's rawjson, with a full log per stage (progress.BakeProgress): a failure shows the
  tail and the log's path;
- the report (`<work dir>/build-report.json`): each stage's tag, digest, status and time;
- a bake again after a fault of the engine's own that quirks.py names, with its upstream issue (the naming race).
One build at a time per work directory (its contexts and inputs are laid out at fixed paths, so that BuildKit sends
again only what changed); two work directories build side by side, and BuildKit shares what they have in common.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import functools
import json
import shutil
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

from ascend_images.builder import bake, quirks
from ascend_images.builder.builders import BuildxBuilder
from ascend_images.builder.engine import disk_full
from ascend_images.builder.progress import BakeProgress, StageProgress, fmt_seconds, printer
from ascend_images.builder.stageinputs import write_secrets
from ascend_images.builder.workspace import Workspace, work_dir_lock, write_workspace
from ascend_images.checkout import SourceDate, definition_revision, source_date_epoch
from ascend_images.console import note
from ascend_images.errors import BuildError, Interrupted
from ascend_images.inputs.download import with_login
from ascend_images.inputs.pypi import PYPI_SIMPLE
from ascend_images.inputs.sources import BuildInputs, Sources
from ascend_images.inputs.wheelstore import WheelStore, default_store
from ascend_images.matrix.model import Matrix
from ascend_images.stages.bake import target_name
from ascend_images.stages.contexts import INSTALLER_OS
from ascend_images.stages.plan import BuildPlan, PlanOptions
from ascend_images.stages.stage import Stage

Out = Callable[[str], None]
Only = tuple[str, str]  # (a Dockerfile stage, the tag it gets): one stage of each Dockerfile built alone


@dataclass(frozen=True)
class BuildSettings:
    sources: Sources
    inputs: BuildInputs = field(default_factory=BuildInputs)
    work_dir: Path = Path("build")
    nocache: bool = False  # every step again, BuildKit's cache ignored (a truly cold build, for benchmarks)
    # SOURCE_DATE_EPOCH and org.opencontainers.image.revision: the last change to what the images are made from
    source_date: SourceDate = field(default_factory=SourceDate)
    stage_cache: str | None = None  # REGISTRY/NAMESPACE: BuildKit's registry cache, one ref per stage
    stage_cache_read_only: bool = False
    # every locked file by its sha256; each stage gets its own files of it as the named build context `wheels`
    wheel_store: Path = field(default_factory=default_store)
    installer_base: str | None = None  # INSTALLER_BASE: None for the matrix's OS image
    builder: BuildxBuilder | None = None  # None: buildx's own choice, images in this engine
    push: bool = False  # every stage pushed to its tag's registry (a builder that keeps its images to itself)
    load: bool = False  # every stage loaded into this engine (type=docker)


@dataclass
class StageResult:
    tag: str
    kind: str
    status: str  # built (a step ran) | cached (every step from a cache, none run)
    image_id: str  # its manifest digest ("" where the builder did not say)
    seconds: float
    log: str | None
    context: str


def _first_failure(plan: BuildPlan, progresses: dict[str, StageProgress]) -> tuple[Stage, StageProgress, str,
                                                                                  str] | None:
    """The step that failed, and the stage it is of: a step that failed for a reason of its own (the steps a failure
    elsewhere stopped say only "context canceled"), under the first stage (parents first) whose build holds it."""
    found = [(digest, step, error) for stage in plan.stages
             for digest, step, error in progresses[target_name(stage)].failed_steps()]
    if not found:
        return None
    digest, step, error = next((f for f in found if "context canceled" not in f[2]), found[0])
    stage = next(s for s in plan.stages if progresses[target_name(s)].has(digest))
    return stage, progresses[target_name(stage)], step, error


DISK_FULL_HINT = " (the engine's disk is full: free space with `docker system prune`, then run again)"


def bake_error(bake_tail: str) -> str | None:
    """The bake's own ERROR line, when it has one (a failure of the solve itself, not of a step)."""
    return next((line.strip() for line in reversed(bake_tail.splitlines()) if line.startswith("ERROR: ")), None)


def source_date(matrix: Matrix) -> SourceDate:
    """What the images of this checkout are of: the matrix release's date (or $SOURCE_DATE_EPOCH) and the last
    revision that changed what images are made from."""
    return SourceDate(definition_revision(), source_date_epoch(matrix.source_date_epoch))


class Builder:
    def __init__(self, settings: BuildSettings, out: Out | None = None, progress: Out = note):
        self.settings = settings
        self.out = out or printer()
        self.progress = progress  # each stage's step lines: stderr, unlike its outcome
        stamp = dt.datetime.now().strftime("%Y%m%d-%H%M%S")
        self.log_dir = settings.work_dir / "logs" / stamp
        self._tags_before: dict[str, str] | None = None  # the engine's tags as the running build found them

    @functools.cached_property
    def store(self) -> WheelStore:
        inputs = self.settings.inputs
        indexes = [] if inputs.pip_offline else [inputs.pip_index_url or PYPI_SIMPLE, *inputs.pip_extra_index_urls]
        return WheelStore(self.settings.wheel_store, indexes, [inputs.wheelhouse] if inputs.wheelhouse else [],
                          offline=inputs.pip_offline, out=self.progress,
                          fetch_hint="invoke fetch ... (the same selection flags) on a connected host")

    def variables(self, plan: BuildPlan, work: Path) -> dict[str, str]:
        """The bake definition's variables for this build (stages/bake.py lists them)."""
        date, settings = self.settings.source_date, self.settings
        local = settings.builder is None or settings.builder.driver == "docker"
        return {"NAMESPACE": plan.options.namespace, "PUSH": "true" if settings.push else "false",
                "CACHE": settings.stage_cache or "", "CACHE_READ_ONLY": str(settings.stage_cache_read_only).lower(),
                "CONTEXTS": str(work / "contexts"), "BAKE_INPUTS": str(work / "bake-inputs"),
                "SOURCE_DATE_EPOCH": str(date.epoch), "CREATED": date.iso, "REVISION": date.revision,
                "INSTALLER_BASE": settings.installer_base or plan.stages[0].variant.matrix.spec.os[INSTALLER_OS].image,
                # this project's builds reach their package mirrors through the host's network; a BuildKit of its
                # own (docker-container, remote, kubernetes) grants that only by an entitlement, so there, its own
                "NETWORK": "host" if local else "default"}

    @contextlib.contextmanager
    def workspace(self, plan: BuildPlan) -> Iterator[Workspace]:
        """The plan written out for its bake (workspace.py), the work directory held for this build until the block
        ends."""
        with work_dir_lock(self.settings.work_dir, self.out):
            written = write_workspace(plan, self.settings.sources, self.store, self.settings.work_dir,
                                      lambda url: with_login(url, self.settings.inputs.index_credentials),
                                      self.progress)
            yield written

    def overrides(self, plan: BuildPlan, secrets: dict[str, Path], only: Only | None = None) -> dict:
        """What this build adds to the definition: the secrets it was given, and the output where it is not the
        definition's (a load into this engine; `only` a single stage of each Dockerfile, under a tag of its own)."""
        target: dict = {}
        if secrets:
            target["secret"] = [f"id={name},src={path}" for name, path in sorted(secrets.items())]
        if self.settings.load:
            target["output"] = ["type=docker"]
        if only:
            target["target"], target["tags"] = only[0], [only[1]]
        return {"target": {target_name(stage): dict(target) for stage in plan.stages}} if target else {}

    def build(self, workspace: Workspace, only: Only | None = None) -> list[StageResult]:
        """One bake of the workspace's definition; each stage tagged only once it finished."""
        started, plan = time.monotonic(), workspace.plan
        scratch = Path(tempfile.mkdtemp(prefix=".build-", dir=workspace.root))
        try:
            secrets = write_secrets(self.settings.inputs, scratch / "secrets")
            extra = scratch / "build.json"
            extra.write_text(json.dumps(self.overrides(plan, secrets, only)), encoding="utf-8")
            files = (workspace.definition, extra)
            self._tags_before = self._engine_tags(plan)
            outcome, progresses, ran = self._bake(plan, files, scratch / "metadata.json")
        finally:
            shutil.rmtree(scratch, ignore_errors=True)
        results = self._results(plan, outcome, progresses, ran, workspace.contexts, only)
        built = sum(r.status == "built" for r in results)
        self.out(f"done in {fmt_seconds(time.monotonic() - started)}: {built} built, {len(results) - built} made "
                 f"from cached steps, {len(results)} stages")
        self._write_report(plan, results)
        return results

    def native_tool(self, stage: Stage, name: str) -> str:
        """The `installer` build stage of a locked stage's Dockerfile (its native tool: the build host's Python and uv
        with the install scripts) as an image named `name`, for measuring what it does (bench/install.py). The stage
        alone, over its parent's image as built (`stage.parent.tag`)."""
        alone = replace(stage, parent=None, external_parent=stage.parent.tag if stage.parent else stage.external_parent,
                        users=[stage.variant])
        with self.workspace(BuildPlan([alone], {stage.variant: alone},
                                      PlanOptions(self.settings.sources.cann))) as written:
            self.build(written, only=("installer", name))
        return name

    def _bake(self, plan: BuildPlan, files: tuple[Path, ...],
              metadata: Path) -> tuple[bake.BakeOutcome, dict[str, StageProgress], dict[str, int]]:
        """The last try's outcome and progress, and the steps each target ran over all tries (a try's work is this
        build's, though the next try finds it in the cache). A bake is tried again only where it failed of a fault
        of the engine's that quirks.py knows, on an engine it is seen on."""
        outcome, progresses, tail, bake_log = self._bake_once(plan, files, metadata, "")
        ran_before = dict.fromkeys(progresses, 0)
        engine = self.settings.builder.engine if self.settings.builder else None
        tries = 0
        while not outcome.interrupted and outcome.returncode != 0 and tries < quirks.RETRIES:
            quirk = quirks.met(engine, progresses.values())
            if quirk is None:
                break
            tries += 1
            for name, progress in progresses.items():
                ran_before[name] += progress.steps_run
            self.out(f"{quirk.why} ({quirk.issue}): baking once more, from the cache ({tries}/{quirks.RETRIES})")
            outcome, progresses, tail, bake_log = self._bake_once(plan, files, metadata, f"-again{tries}")
        self._raise_for(plan, outcome, progresses, tail, bake_log)
        return outcome, progresses, {name: ran_before[name] + p.steps_run for name, p in progresses.items()}

    def _bake_once(self, plan: BuildPlan, files: tuple[Path, ...], metadata: Path,
                   suffix: str) -> tuple[bake.BakeOutcome, dict[str, StageProgress], str, Path]:
        """One bake: its outcome, each target's progress, the last lines of the bake's own log and that log."""
        total = len(plan.stages)
        progresses = {target_name(stage): StageProgress(f"[{i}/{total} {stage.kind}]",
                                                        self.log_dir / f"{i:02d}-{stage.slug}{suffix}.log",
                                                        self.progress)
                      for i, stage in enumerate(plan.stages, 1)}
        builder = self.settings.builder
        command = bake.BakeCommand(files, tuple(progresses), self.variables(plan, files[0].parent),
                                   metadata, builder.name if builder else None, self.settings.nocache,
                                   builder.context if builder else None)
        self.out(f"building {total} stage(s) with one bake on "
                 f"{self.settings.builder.describe() if self.settings.builder else 'the current builder'} "
                 f"(logs {self.log_dir})")
        with contextlib.ExitStack() as stack:
            for progress in progresses.values():
                stack.enter_context(progress)
            log = stack.enter_context(StageProgress("[bake]", self.log_dir / f"bake{suffix}.log", self.progress))
            demux = BakeProgress(progresses, log)
            outcome = bake.run(command, demux)
            demux.finish({target_name(s): target_name(s.parent) if s.parent else None for s in plan.stages})
            tail = log.tail()
        return outcome, progresses, tail, log.log_path

    def _engine_tags(self, plan: BuildPlan) -> dict[str, str] | None:
        """The plan's tags the engine the images land in holds, with their image IDs; None where they land elsewhere
        (a push, a builder of its own) or the engine does not answer."""
        builder = self.settings.builder
        if self.settings.push or (builder is not None and not builder.local):
            return None
        context = ["--context", builder.context] if builder is not None and builder.context else []
        # reference filters are or-ed: only the plan's own tags are listed
        wanted = [arg for stage in plan.stages for arg in ("--filter", f"reference={stage.tag}")]
        try:
            listed = subprocess.run(["docker", *context, "image", "ls", "--no-trunc", *wanted, "--format",
                                     "{{.Repository}}:{{.Tag}} {{.ID}}"], capture_output=True, text=True,
                                    timeout=60, check=False)
        except (OSError, subprocess.TimeoutExpired):
            return None
        if listed.returncode != 0:
            return None
        return dict(line.split(" ", 1) for line in listed.stdout.splitlines() if " " in line)

    def _raise_for(self, plan: BuildPlan, outcome: bake.BakeOutcome, progresses: dict[str, StageProgress],
                   bake_tail: str, bake_log: Path) -> None:
        unfinished = [stage for stage in plan.stages if not progresses[target_name(stage)].exported]
        if outcome.interrupted:
            # BuildKit finishes an export the signal lands in, and tags it, though the progress that says so may
            # never reach us: a stage whose tag now names another image than before the build finished
            before, after = self._tags_before, self._engine_tags(plan)
            if before is not None and after is not None:
                unfinished = [s for s in unfinished if after.get(s.tag) in (None, before.get(s.tag))]
            done = len(plan.stages) - len(unfinished)
            raise Interrupted(f"the build stopped with {len(unfinished)} of {len(plan.stages)} stage(s) unfinished "
                              f"({', '.join(s.tag for s in unfinished) or 'none'}): none of them was tagged; the "
                              f"{done} finished are kept, and the next build takes their steps from the cache. "
                              f"Logs: {self.log_dir}")
        if outcome.returncode == 0 and not unfinished:
            return
        parts = []
        failure = _first_failure(plan, progresses)
        own = bake_error(bake_tail)
        if own and disk_full(own):
            own += DISK_FULL_HINT
        if failure is not None and "context canceled" in failure[3] and own and "context canceled" not in own:
            # every step was stopped by the bake's own failure: that is the cause to show, not a stopped step
            parts.append(f"the bake failed: {own} (every stage's steps then stopped: context canceled)\n--- last "
                         f"lines of the bake's log ---\n{bake_tail}\n--- full log: {bake_log}")
            names = ", ".join(stage.tag for stage in unfinished)
            raise BuildError("\n".join(parts) + f"\n(no tag was set for {names})")
        if failure is None:
            hint = DISK_FULL_HINT if disk_full(bake_tail) else ""
            parts.append(f"the bake ended with exit {outcome.returncode} and no failed step{hint}\n--- last lines "
                         f"of the bake's log ---\n{bake_tail}\n--- full log: {bake_log}")
        else:
            stage, progress, step, error = failure
            if disk_full(f"{error}\n{progress.tail()}\n{bake_tail}"):
                error += DISK_FULL_HINT
            parts.append(f"{progress.label} {stage.tag} failed at step {step} after {fmt_seconds(progress.seconds)}: "
                         f"{error}\n--- last lines of {progress.log_path} ---\n{progress.tail()}\n"
                         f"--- full log: {progress.log_path}")
        names = ", ".join(stage.tag for stage in unfinished)
        raise BuildError("\n".join(parts) + f"\n(no tag was set for {names})")

    def _results(self, plan: BuildPlan, outcome: bake.BakeOutcome, progresses: dict[str, StageProgress],
                 ran_steps: dict[str, int], contexts: dict[str, Path], only: Only | None = None) -> list[StageResult]:
        results = []
        for stage in plan.stages:
            progress = progresses[target_name(stage)]
            digest = (outcome.metadata.get(target_name(stage)) or {}).get("containerimage.digest", "")
            ran = ran_steps[target_name(stage)]
            status = "cached" if ran == 0 and progress.steps_cached else "built"
            tag = only[1] if only else stage.tag  # native_tool's image has a name of its own
            result = StageResult(tag, stage.kind, status, digest, progress.seconds, str(progress.log_path),
                                 str(contexts[stage.slug]))
            short = digest.removeprefix("sha256:")[:12] or "pushed"
            if status == "cached":
                self.out(f"{progress.label} {tag}: every step from a cache, made in "
                         f"{fmt_seconds(progress.seconds)} ({short})")
            else:
                self.out(f"{progress.label} {tag}: built in {fmt_seconds(progress.seconds)} ({short}; "
                         f"{ran} step(s) run, {progress.steps_cached} from a cache)")
            results.append(result)
        return results

    def _write_report(self, plan: BuildPlan, results: list[StageResult]) -> None:
        report = {
            "stages": [asdict(r) for r in results],
            "variants": {v.name: {"image": top.tag, **v.describe()} for v, top in plan.tops.items()},
        }
        path = self.settings.work_dir / "build-report.json"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
