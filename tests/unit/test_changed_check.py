"""CI's check of the changed images (cli/changedcheck.py): each built, tested and untagged before the next, ci.test's
stages never untagged, the records made since the session began pruned only before an image the disk cannot hold,
and an image it still cannot hold failed and named without a build. The engine is a stand-in that keeps what was
done; the figures are written out by hand."""

from __future__ import annotations

import datetime as dt
from pathlib import Path
from types import SimpleNamespace

from ascend_images.cli.changedcheck import Engine, check_changed_images
from ascend_images.runtime.imagetests import ImageTestResult

GB = 1024**3
CHANGED = [SimpleNamespace(name=n) for n in ("one/a2", "two/a3", "three/a5")]
SHARED = "ns/base:1"  # a stage ci.test holds, under every changed image
BEGAN = dt.datetime(2026, 12, 5, 23, 0, tzinfo=dt.UTC)  # the test session


def engine(free: list[float | None], failing: tuple[str, ...] = ()) -> tuple[Engine, list]:
    """A stand-in engine: each variant's chain is SHARED then two stages of its own; `free` (GB, None: an engine
    elsewhere) is read before and after each build, in turn. Returns it and the log of what was done."""
    done: list = []
    readings = iter(free)

    def build(variant, work_dir: Path) -> list[str]:
        done.append(("build", variant.name, work_dir.name))
        own = variant.name.split("/")[0]
        return [SHARED, f"ns/{own}-mid:1", f"ns/{own}:1"]

    def suite(image: str, work_dir: Path) -> ImageTestResult:
        done.append(("suite", image))
        failed = [name for name in failing if image.startswith(f"ns/{name}:")]
        return ImageTestResult(image, 0 if failed else 12, [f"test_{f}" for f in failed], 1, work_dir / "j.xml")

    def read() -> int | None:
        gb = next(readings)
        return None if gb is None else int(gb * GB)

    return Engine(build, suite, lambda tags: done.append(("untag", *tags)),
                  lambda since: done.append(("prune since", since)), read), done


def check(stand_in: Engine, tmp_path: Path, lines: list[str] | None = None):
    say = lines.append if lines is not None else (lambda line: None)
    return check_changed_images(CHANGED, {SHARED}, tmp_path, stand_in, say, BEGAN)


def test_each_image_is_built_tested_and_untagged_before_the_next(tmp_path):
    stand_in, done = engine([20, 16, 20, 16, 20, 16])
    lines: list[str] = []
    checks = check(stand_in, tmp_path, lines)
    assert done == [
        ("build", "one/a2", "1"), ("suite", "ns/one:1"), ("untag", "ns/one-mid:1", "ns/one:1"),
        ("build", "two/a3", "2"), ("suite", "ns/two:1"), ("untag", "ns/two-mid:1", "ns/two:1"),
        ("build", "three/a5", "3"), ("suite", "ns/three:1"), ("untag", "ns/three-mid:1", "ns/three:1"),
    ]
    assert [(c.variant, c.image, c.passed, c.failed, c.ok) for c in checks] == [
        ("one/a2", "ns/one:1", 12, (), True), ("two/a3", "ns/two:1", 12, (), True),
        ("three/a5", "ns/three:1", 12, (), True)]
    assert "changed image 3/3: three/a5: building, then its image tests" in lines


def test_a_failing_image_is_failed_and_the_next_still_checked(tmp_path):
    stand_in, done = engine([20, 16] * 3, failing=("two",))
    checks = check(stand_in, tmp_path)
    assert [c.ok for c in checks] == [True, False, True]
    assert checks[1].failed == ("test_two",)
    assert ("untag", "ns/two-mid:1", "ns/two:1") in done  # untagged all the same


def test_the_cache_since_the_session_is_pruned_only_before_an_image_the_disk_cannot_hold(tmp_path):
    # 12 free >= 5 + 2 wanted: built, took 6 (6 + 2 wanted now); 8: built, took 8 (10 wanted); 0: pruned, 14: built
    stand_in, done = engine([12, 6, 8, 0, 0, 14, 8])
    lines: list[str] = []
    checks = check(stand_in, tmp_path, lines)
    assert [d[0] for d in done] == ["build", "suite", "untag", "build", "suite", "untag", "prune since", "build",
                                    "suite", "untag"]
    assert ("prune since", BEGAN) in done
    assert [c.ok for c in checks] == [True, True, True]
    said = ("the engine's disk had 0.0 GB free, and a changed image wants 10.0 GB: pruned the cache records made since "
            "the test session began (an image after this one builds again what an image before it built)")
    assert said in lines


def test_an_image_the_disk_cannot_hold_after_the_prune_is_failed_with_the_rest(tmp_path):
    stand_in, done = engine([6.9, 6.9])  # 5 for an image, 2 beside it
    lines: list[str] = []
    checks = check(stand_in, tmp_path, lines)
    assert done == [("prune since", BEGAN)]
    assert [(c.variant, c.ok) for c in checks] == [("one/a2", False), ("two/a3", False), ("three/a5", False)]
    assert lines[-1] == ("the engine's disk has 6.9 GB free, and a changed image wants 7.0 GB: 3 changed image(s) "
                         "not checked: one/a2, two/a3, three/a5")


def test_an_engine_elsewhere_checks_them_all_and_never_prunes(tmp_path):
    stand_in, done = engine([None] * 6)
    checks = check(stand_in, tmp_path)
    assert [c.ok for c in checks] == [True, True, True]
    assert [d[0] for d in done].count("build") == 3
    assert "prune since" not in [d[0] for d in done]
