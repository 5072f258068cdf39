"""The faults of the engine a build works around, each in this one place with its upstream issue, the engines it is
seen on and when it can go (DESIGN 29). A bake that failed only of such a fault is baked again: the try again finds
every finished step in BuildKit's cache.

What went with the floor at Docker 27 and buildx 0.17 (docs/design.md, "The engine"): the compose file that gave
each target the host's network (buildx 0.13's bake read `network` from compose only), the bakes again after
BuildKit's own session deadline (moby/buildkit 4327, 20 s in 0.13, 300 s from 0.14) and its follow-ons, and the
tests' second read of a history the engine gave only for an unpacked image."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from ascend_images.builder.progress import StageProgress

EngineVersion = tuple[int, ...]


@dataclass(frozen=True)
class Quirk:
    name: str
    why: str  # what happened, as the build says when it bakes again
    issue: str  # upstream's report
    until: str  # when the workaround can be deleted
    applies: Callable[[EngineVersion], bool]  # on which engines (the docker driver's dockerd version)
    met: Callable[[list[str]], bool]  # the errors of the steps that failed for a reason of their own

    def __str__(self) -> str:
        return f"{self.name} ({self.issue}; {self.until})"


def own_errors(progresses: Iterable[StageProgress]) -> list[str]:
    """The errors of the steps that failed for a reason of their own (not stopped by a failure elsewhere)."""
    return [error for progress in progresses for _, _, error in progress.failed_steps()
            if "context canceled" not in error]


_ALREADY_EXISTS = re.compile(r'image "[^"]+": already exists')

# Builds on one engine exporting one image name at the same moment: the containerd image store creates the name for
# one and refuses the others. Seen here on dockerd 28.5.2 (12 of 80 builds of one tag, four at a time), and reported
# on 29.1.3 with buildx 0.30.1; CI's overlapping bakes meet it on a shared stage
NAMING_RACE = Quirk(
    "naming race", "another build on this engine named the same image at the same moment (the containerd image "
    "store refused the second name)", "docker/buildx#3576", "delete once a Docker release names images atomically",
    applies=lambda engine: True,
    met=lambda errors: bool(errors) and all(_ALREADY_EXISTS.search(e) for e in errors))

QUIRKS = (NAMING_RACE,)
RETRIES = 3  # a chain has a handful of stages; each try gets at least one more of them named


def met(engine: EngineVersion | None, progresses: Iterable[StageProgress]) -> Quirk | None:
    """The quirk a failed bake met, on this engine (None: unknown, every quirk considered), or None: a failure of
    the build's own, which no try again mends."""
    errors = own_errors(progresses)
    return next((q for q in QUIRKS if (engine is None or q.applies(engine)) and q.met(errors)), None)
