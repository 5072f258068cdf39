"""CI's check of each committed image whose definition changed since the full tier last proved it, one image at a
time, after the test session, as docker-stacks builds and then tests each image: a bake of that image alone (its
stages that ci.test holds come from ci.test's cache), the image test suite against it (what `invoke test --image`
runs), then its own stages' tags removed. A change to the base stands under every committed image, more than the
disk holds: when the next image would not fit, the cache records made since the session began are pruned first (the
tests' builds and the changed images'; ci.test's stay).

Why after the session: the session then runs on the disk every change's run has, and the changed images share what
it leaves. Why prune only when short: on the containerd image store a prune can make steps built before it miss the
cache on their next build (two small builds FROM a local OS image: 2 of 2 steps cached before a prune of an unrelated
build's records, 0 of 2 after), so the session's records stay while the disk has room for the next image."""

from __future__ import annotations

import datetime as dt
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from ascend_images.matrix.model import Variant
from ascend_images.runtime.imagetests import ImageTestResult

Out = Callable[[str], None]
GB = 1024**3
# what one changed image takes on the engine's disk before its check has measured one: 3.8 GB an image when all 17
# committed images filled 64.5 GB
CHANGED_IMAGE_GB = 5.0
# kept free beside the image: its suite's containers and the engine's own writes (a base change's run, built to the
# largest image measured, went down to 1 GB free)
HEADROOM_GB = 2.0


@dataclass(frozen=True)
class ChangedCheck:
    variant: str
    image: str
    passed: int
    failed: tuple[str, ...]
    seconds: float

    @property
    def ok(self) -> bool:
        return not self.failed and self.passed > 0


@dataclass(frozen=True)
class Engine:
    """What the check does on the engine, given by the caller (the real one: cli/imagetest.py check_changed)."""

    build: Callable[[Variant, Path], list[str]]  # bake one variant into a work dir: the tags of its stages
    suite: Callable[[str, Path], ImageTestResult]  # the image test suite against a tag
    untag: Callable[[Sequence[str]], None]
    prune_since: Callable[[dt.datetime], None]  # the cache records made since then, but cache mounts
    free: Callable[[], int | None]  # free bytes on the engine's disk (None: an engine elsewhere)


def check_changed_images(changed: Sequence[Variant], kept_tags: set[str], work_dir: Path, engine: Engine,
                         out: Out, session_began: dt.datetime) -> list[ChangedCheck]:
    """Build, test and untag each of `changed` in turn; `kept_tags` are ci.test's stages, never untagged. Before an
    image the disk cannot hold, what was built since `session_began` is pruned; an image it still cannot hold fails,
    named with the rest, without a build."""
    checks: list[ChangedCheck] = []
    largest = int(CHANGED_IMAGE_GB * GB)
    for number, variant in enumerate(changed, 1):
        need = largest + int(HEADROOM_GB * GB)
        free = engine.free()
        if free is not None and free < need:
            engine.prune_since(session_began)
            out(f"the engine's disk had {free / GB:.1f} GB free, and a changed image wants {need / GB:.1f} GB: "
                "pruned the cache records made since the test session began (an image after this one builds again "
                "what an image before it built)")
            free = engine.free()
        if free is not None and free < need:
            for rest in changed[number - 1:]:
                checks.append(ChangedCheck(rest.name, "", 0, ("(not built: the engine's disk is short)",), 0.0))
            out(f"the engine's disk has {free / GB:.1f} GB free, and a changed image wants {need / GB:.1f} GB: "
                f"{len(changed) - number + 1} changed image(s) not checked: "
                + ", ".join(v.name for v in changed[number - 1:]))
            break
        out(f"changed image {number}/{len(changed)}: {variant.name}: building, then its image tests")
        started = time.monotonic()
        own = work_dir / str(number)
        tags = engine.build(variant, own)
        after = engine.free()
        if free is not None and after is not None:
            largest = max(largest, free - after)
        image = tags[-1]
        result = engine.suite(image, own)
        engine.untag([t for t in tags if t not in kept_tags])
        check = ChangedCheck(variant.name, image, result.passed, tuple(result.failed), time.monotonic() - started)
        checks.append(check)
        out(f"changed image {number}/{len(changed)}: {variant.name}: {check.passed} passed, {len(check.failed)} "
            f"failed in {check.seconds:.0f}s")
    return checks


def report(checks: Sequence[ChangedCheck], out: Out) -> None:
    out(f"\n{'changed image':70} {'passed':>6} {'failed':>6}")
    for check in checks:
        out(f"{check.variant:70} {check.passed:6} {len(check.failed):6}")
        for name in check.failed:
            out(f"    FAILED {name}")
