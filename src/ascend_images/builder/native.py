"""A stage's native part built ahead. A locked stage starts with a `packages` build stage on the host's own arch
(its wheels installed for the target and compiled there) that needs nothing of the stage's parent image. So once a
stage is to be built, the native parts of the stages after it are built beside it, one at a time, into the engine's
build cache (`--target packages`, no tag): while an emulated stage keeps one core busy, the other installs and
compiles what the next stages will copy, and each of those builds takes its packages steps from the cache.

A native part that fails here costs nothing but its time: its stage builds it again and reports it, log and all."""

from __future__ import annotations

import shutil
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ascend_images.builder.engine import drop_build_connection
from ascend_images.builder.progress import StageProgress, fmt_seconds
from ascend_images.stages.stage import Stage

PACKAGES_TARGET = "packages"  # the build stage images/common/partials/packages-native.j2 names
AHEAD_CPU_SHARES = 2  # the least docker accepts (a stage's build has the default, 1024)


@dataclass
class NativeJob:
    stage: Stage
    done: threading.Event = field(default_factory=threading.Event)


def later_locked_stages(stages: list[Stage], built: Stage) -> list[Stage]:
    """The stages after `built` in plan order whose image descends from it (parent or needed tool, at any depth) and
    that have a native part (a needed installer): their content keys change with it, so each of them is built too."""
    below = {built.tag}
    out = []
    for stage in stages[stages.index(built) + 1:]:
        if (stage.parent is not None and stage.parent.tag in below) or any(n.tag in below for n in stage.needs):
            below.add(stage.tag)
            if stage.needs:
                out.append(stage)
    return out


class NativeParts:
    """One worker thread building the scheduled stages' native parts in order; `wait_for(stage)` before a stage
    builds, `stop()` when the build ends (a running native build is dropped, as Ctrl-C drops a stage's)."""

    def __init__(self, client: Any, prepare: Callable[[Stage, Path], tuple[Path, dict[str, str]]],
                 ready: Callable[[Stage], bool], streams: set[Any], lock: threading.Lock,
                 cancelled: threading.Event, log_dir: Path, work_dir: Path, out: Callable[[str], None]):
        self.client = client
        self.prepare = prepare  # (stage, scratch dir) -> (its context directory, its build args)
        self.ready = ready  # whether the stage's needed tools are built (their ids are its build args)
        self.streams, self.lock = streams, lock
        self.cancelled = cancelled  # Ctrl-C in a parallel build: it dropped every stream, this one's too
        self.log_dir, self.work_dir, self.out = log_dir, work_dir, out
        self.jobs: dict[str, NativeJob] = {}
        self.queue: list[NativeJob] = []
        self.stopped = threading.Event()
        self.current: Any = None  # the native build's stream being read
        self.wakeup = threading.Condition()
        self.thread: threading.Thread | None = None

    def schedule(self, stages: list[Stage]) -> None:
        with self.wakeup:
            for stage in stages:
                if stage.tag not in self.jobs:
                    job = self.jobs[stage.tag] = NativeJob(stage)
                    self.queue.append(job)
            if self.queue and self.thread is None:
                self.thread = threading.Thread(target=self._work, name="native-parts", daemon=True)
                self.thread.start()
            self.wakeup.notify_all()

    def wait_for(self, stage: Stage) -> None:
        """Before `stage` builds: its native part, if scheduled, is done (it will take it from the cache)."""
        job = self.jobs.get(stage.tag)
        if job is not None:
            while not job.done.wait(0.5) and not self.stopped.is_set():
                pass

    def stop(self) -> None:
        self.stopped.set()
        with self.wakeup:
            self.wakeup.notify_all()
        with self.lock:
            if self.current is not None:
                drop_build_connection(self.current)
        if self.thread is not None:
            self.thread.join(timeout=10)  # a download still going ends with the process (a daemon thread)

    def _next(self) -> NativeJob | None:
        with self.wakeup:
            while not self.stopped.is_set():
                job = next((j for j in self.queue if self.ready(j.stage)), None)
                if job is not None:
                    self.queue.remove(job)
                    return job
                self.wakeup.wait(0.5)  # a needed tool (the installer) is still building
        return None

    def _work(self) -> None:
        while (job := self._next()) is not None:
            try:
                self._build(job.stage)
            finally:
                job.done.set()
        with self.wakeup:  # stopped: whoever waits on a job not started goes on
            for job in self.queue:
                job.done.set()

    def _build(self, stage: Stage) -> None:
        label = f"[native part of {stage.kind}]"
        log_path = self.log_dir / f"native-{stage.slug}.log"
        started = time.monotonic()
        scratch = Path(tempfile.mkdtemp(prefix=".native-", dir=self.work_dir))
        failure = ""
        try:
            context, buildargs = self.prepare(stage, scratch)
            if f" AS {PACKAGES_TARGET}" not in (context / "Dockerfile").read_text(encoding="utf-8"):
                return
            self.out(f"{label} {stage.tag}: started ahead, beside the stages before it (log {log_path})")
            with StageProgress(label, log_path, lambda line: None) as progress:
                # the lowest CPU weight: ahead of time it may take what the emulated stage leaves idle, never slow it
                stream = self.client.api.build(path=str(context), target=PACKAGES_TARGET, rm=True, forcerm=True,
                                               pull=False, decode=True, network_mode="host", buildargs=buildargs,
                                               container_limits={"cpushares": AHEAD_CPU_SHARES})
                with self.lock:  # Ctrl-C drops it with the stages' (the streams), stop() on its own
                    self.streams.add(stream)
                    self.current = stream
                try:
                    for chunk in stream:
                        for text in chunk.get("stream", "").splitlines():
                            progress.line(text)
                        if "error" in chunk:
                            failure = chunk.get("errorDetail", {}).get("message") or chunk["error"]
                            progress.line(f"ERROR: {failure}")
                finally:
                    with self.lock:
                        self.streams.discard(stream)
                        self.current = None
        except Exception as exc:  # the stage's own build reports what is wrong, log and all
            failure = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        finally:
            shutil.rmtree(scratch, ignore_errors=True)
        if self.stopped.is_set() or self.cancelled.is_set():
            return  # the build ended or was interrupted: what became of a native part ahead is not news
        if failure:
            self.out(f"{label} {stage.tag}: not built ahead ({failure}); the stage builds it itself")
        else:
            self.out(f"{label} {stage.tag}: built ahead in {fmt_seconds(time.monotonic() - started)}")
