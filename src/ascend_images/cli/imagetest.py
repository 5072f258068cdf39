"""`invoke test`: the image test suite against the selection's images (built first where missing) or named ones;
with --ci, CI's images built from the test doubles and every test of this checkout."""

from __future__ import annotations

import functools
import os
import shutil
from collections.abc import Callable
from pathlib import Path

from ascend_images import DEFAULT_NAMESPACE
from ascend_images.cli.build import BUILD_HELP, build_selection
from ascend_images.cli.options import InputFlags, Selection, SourceFlags, given_flags, output_path, refuse_moot
from ascend_images.cli.taskdef import INPUTS, SELECTION, SOURCES, exit_with, run_body, task
from ascend_images.errors import SelectionError
from ascend_images.runtime.imagetests import ImageTestResult, run_image_suite

Out = Callable[[str], None]


@task(groups=(SELECTION, SOURCES, INPUTS),
      help={"image": "test this existing image (repeatable)", "namespace": BUILD_HELP["namespace"],
            "work_dir": BUILD_HELP["work_dir"], "stage_cache": BUILD_HELP["stage_cache"],
            "ci": "build matrix.yaml's ci.test from test doubles (one bake), then run every test of this checkout "
                  "with nothing skipped but tests/npu: what CI runs",
            "full": "with --ci, the full tier: also the proofs on whole emulated chains (tests marked full), as the "
                    "nightly and release jobs run"},
      iterable=["image"])
def test(c, sel, sources, inputs, image=None, namespace=None, work_dir=None, stage_cache=None, ci=False,
         full=False):
    """Build what is missing, then run the image test suite against each image of the selection."""
    from ascend_images.cli.options import env_flag

    if full and not ci:
        run_body(refuse_moot, {"--full": True}, "--full chooses the tier of --ci's test run; give --ci with it")
    if ci:
        run_body(refuse_moot, {**{f"--{k}": getattr(sel, k) for k in sel.narrows()}, "--image": image,
                               "--namespace": namespace, "--work-dir": work_dir, "--stage-cache": stage_cache,
                               **given_flags(sources, inputs)},
                 "--ci builds matrix.yaml's ci.test from the test doubles and runs every test as CI does; leave it "
                 "out, or leave --ci out to test the selection's images")
        exit_with(run_body(test_ci, print, full=full))
        return  # all passed: the selection's image tests below are not what --ci runs
    if image:  # the images are tested as they are: nothing is selected or built
        run_body(refuse_moot, {**{f"--{k}": getattr(sel, k) for k in sel.narrows()}, "--namespace": namespace,
                               "--stage-cache": stage_cache, **given_flags(sources, inputs)},
                 "--image names the images to test, so nothing is selected or built; leave one out")
    run_body(inputs.check)
    results = run_body(run_image_tests, sel, sources, inputs, print, images=list(image or []),
                       work_dir=run_body(output_path, "--work-dir", work_dir, "build"),
                       namespace=namespace or DEFAULT_NAMESPACE,
                       stage_cache=stage_cache or env_flag("ASCEND_IMAGES_STAGE_CACHE"))
    exit_with(0 if all(r.ok for r in results) else 1)


def test_ci(out: Out, *, full: bool = False) -> int:
    """`invoke test --ci`: CI's images built from the doubles (ci.test and each committed image changed since the full
    tier's last proof), then the test suite; with `full`, the images built with every step run again and the full
    tier; pytest's exit code."""
    from ascend_images.cli.doubles import run_test_suite

    build_ci_images(out, no_cache=full)  # the full tier proves the CI images from nothing: every step runs again
    return run_test_suite(full=full)


# The room the test session keeps on the engine's disk beside the changed images it builds: a session over CI's nine
# images and six changed ones, all just built, took 16.3 GB by a quarter of its tests and was still taking more (its
# disk was full there); a whole cold run, command 1 and the CI bake included, took 32 GB at its peak
TEST_ROOM_GB = 30.0
# what one changed image takes, before this run has built one: 3.8 GB an image when all 17 filled 64.5 GB
CHANGED_IMAGE_GB = 5.0
GB = 1024**3


def build_ci_images(out: Callable[[str], None], root: Path | None = None, arch: str | None = None,
                    no_cache: bool = False) -> tuple:
    """The CI run's images from the doubles: ci.test in one bake under CI's namespace, its report in CI_WORK_DIR (with
    `no_cache`, every step run again); then each committed image whose definition changed since the full tier's
    last proof, one bake each, while the engine's disk keeps the tests' room (CHANGED_BUILD_RECORD says which were
    built and which left). Returns ci.test's (plan, results)."""
    from ascend_images.checkout import ROOT
    from ascend_images.cli.doubles import CI_WORK_DIR, ChangedBuild, changed_images, ci_build, write_changed_build

    root = root or ROOT
    made = ci_build(root)
    made.inputs.check()
    sel = Selection(matrix=str(root / "matrix.yaml"), arch=arch)
    matrix = sel.load()
    changed = changed_images(matrix, arch, root)
    room = env_float("ASCEND_IMAGES_CI_CHANGED_ROOM_GB", TEST_ROOM_GB) * GB  # a bad value stops the run before a bake
    shutil.rmtree(root / CI_WORK_DIR / "changed", ignore_errors=True)  # an earlier run's reports name other images
    write_changed_build(ChangedBuild((), tuple(v.name for v in changed)), root)  # until each is built
    ci = build_selection(sel, made.sources, made.inputs, out, work_dir=root / CI_WORK_DIR, namespace=made.namespace,
                         ci="test", no_cache=no_cache)
    if changed:
        out(f"{len(changed)} image(s) beside ci.test whose definition changed since the full tier's last proof: "
            + ", ".join(v.name for v in changed))
    built: list[str] = []
    largest = CHANGED_IMAGE_GB * GB
    disk = _engine_disk() if changed else lambda: None  # no changed image: no connection
    for number, variant in enumerate(changed):
        free = disk()
        if free is not None and free < room + largest:
            left = [v.name for v in changed[number:]]
            out(f"{len(left)} changed image(s) neither built nor checked in this run: the engine's disk has "
                f"{free / GB:.1f} GB free, and the next image takes about {largest / GB:.1f} GB beside the tests' "
                f"{room / GB:.0f} GB (a run on a larger disk builds them): " + ", ".join(left))
            break
        build_selection(sel, made.sources, made.inputs, out, work_dir=root / CI_WORK_DIR / "changed" / str(number),
                        namespace=made.namespace, no_cache=no_cache, only=[variant])
        after = disk()
        if free is not None and after is not None:
            largest = max(largest, free - after)
        built.append(variant.name)
        write_changed_build(ChangedBuild(tuple(built), tuple(v.name for v in changed[number + 1:])), root)
    return ci


def _engine_disk() -> Callable[[], int | None]:
    """Reads the free space of the engine's disk, over one connection."""
    from ascend_images.builder.engine import connect, free_bytes

    return functools.partial(free_bytes, connect())


def env_float(name: str, default: float) -> float:
    value = os.environ.get(name, "")
    try:
        return float(value) if value.strip() else default
    except ValueError:
        raise SelectionError(f"{name}={value!r}: not a number of GB (e.g. {default:g}, the default)") from None


def run_image_tests(sel: Selection, flags: SourceFlags, input_flags: InputFlags, out: Out, *, images: list[str],
                    work_dir: Path = Path("build"), namespace: str = DEFAULT_NAMESPACE,
                    stage_cache: str | None = None) -> list[ImageTestResult]:
    if any(not i.strip() for i in images):
        raise SelectionError("--image is empty: give an image reference to test (e.g. ascend/sglang:tag), or leave "
                             "--image out to test the selection's images")
    if not images:
        plan, _ = build_selection(sel, flags, input_flags, out, work_dir=work_dir, namespace=namespace,
                                  stage_cache=stage_cache)
        images = [plan.top(v).tag for v in sel.variants()]
    from ascend_images.builder.engine import connect
    from ascend_images.release.imagemeta import present

    client = connect()
    results = []
    for image in images:
        present(client, image)  # pushed by a builder of its own: read from its registry
        out(f"testing {image}")
        results.append(run_image_suite(image, work_dir))
    out(f"\n{'image':90} {'passed':>6} {'failed':>6} {'skipped':>7}")
    for r in results:
        out(f"{r.image:90} {r.passed:6} {len(r.failed):6} {r.skipped:7}")
        for name in r.failed:
            out(f"    FAILED {name}")
    return results
