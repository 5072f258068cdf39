"""A build's workspace (DESIGN 23): everything `docker buildx bake` is given, written under the work directory before
BuildKit is called, so the builder that runs the bake renders, loads and checks nothing.

It holds the plan's contexts (rendered by the writer of rendered/, which loads and checks the locks and the test
doubles), its bake definition (the writer of rendered/docker-bake.json) and each target's named contexts (laid out as
`invoke fetch --bake-inputs` lays them out). A stale lock or a missing download fails here, before any file is
written or any step runs. One workspace per work directory at a time: its files are at fixed paths, so that BuildKit
sends again only what changed; a second build of the same directory waits for the first."""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from ascend_images.builder.stageinputs import lay_out_bake_inputs
from ascend_images.checkout import SourceDate
from ascend_images.inputs.sources import Sources
from ascend_images.inputs.wheelstore import WheelStore
from ascend_images.stages.bake import bake_file, render_plan
from ascend_images.stages.contexts import INSTALLER_OS
from ascend_images.stages.plan import BuildPlan

Out = Callable[[str], None]
DEFINITION = "docker-bake.json"


@dataclass(frozen=True)
class Workspace:
    plan: BuildPlan
    root: Path  # the work directory, absolute
    definition: Path  # the bake definition of the plan's targets
    contexts: dict[str, Path]  # each stage's context, by slug
    wanted: int  # the wheel store's files the stages take
    downloaded: int  # of those, the ones fetched for this build


def write_workspace(plan: BuildPlan, sources: Sources, store: WheelStore, root: Path, login: Callable[[str], str],
                    progress: Out) -> Workspace:
    """The plan's contexts, definition and named contexts under `root`."""
    root = root.absolute()
    rendered = render_plan(plan, sources, root / "contexts")
    matrix = plan.stages[0].variant.matrix
    records = {slug: r.record for slug, r in rendered.items()}
    definition = bake_file(plan, records, matrix.source_date_epoch, SourceDate(epoch=matrix.source_date_epoch).iso,
                           matrix.spec.os[INSTALLER_OS].image)
    path = root / DEFINITION
    path.write_text(json.dumps(definition, indent=2) + "\n", encoding="utf-8")
    wanted = sum(len(r.wanted) for r in records.values())
    before = len(store.downloaded)
    lay_out_bake_inputs(plan, records, sources, store, root / "bake-inputs", login)
    downloaded = len(store.downloaded) - before
    progress(f"inputs: {len(plan.stages)} stage(s), {wanted} file(s) of the wheel store ({downloaded} downloaded "
             f"now), laid out in {root / 'bake-inputs'}")
    return Workspace(plan, root, path, {stage.slug: root / "contexts" / stage.slug for stage in plan.stages},
                     wanted, downloaded)


@contextlib.contextmanager
def work_dir_lock(work_dir: Path, out: Out) -> Iterator[None]:
    """One build per work directory at a time: a second waits, saying for whom (the kernel drops a flock when its
    holder dies, so a killed build never leaves it held)."""
    work_dir.mkdir(parents=True, exist_ok=True)
    with (work_dir / ".build.lock").open("a+") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            handle.seek(0)
            out(f"waiting for the build in {work_dir} ({handle.read().strip() or 'another process'}) to end")
            fcntl.flock(handle, fcntl.LOCK_EX)
        handle.seek(0)
        handle.truncate()
        handle.write(f"pid {os.getpid()}\n")
        handle.flush()
        yield
