"""`invoke test`: the image test suite against the selection's images (built first where missing) or named ones;
with --ci, CI's images built from the test doubles and every test of this checkout."""

from __future__ import annotations

import functools
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
    """`invoke test --ci`: ci.test built from the doubles, the test suite, then each committed image changed since
    the full tier's last proof built, tested and untagged in turn (cli/changedcheck.py); with `full`, the images built
    with every step run again and the full tier; pytest's exit code, or 1 when only a changed image failed."""
    import datetime as dt

    from ascend_images.cli.changedcheck import report
    from ascend_images.cli.doubles import run_test_suite

    build_ci_images(out, no_cache=full)  # the full tier proves the CI images from nothing: every step runs again
    session_began = dt.datetime.now(dt.UTC)
    code = run_test_suite(full=full)
    checks = check_changed(out, session_began, no_cache=full)
    if checks:
        report(checks, out)
    return code or (1 if any(not c.ok for c in checks) else 0)


def build_ci_images(out: Callable[[str], None], root: Path | None = None, arch: str | None = None,
                    no_cache: bool = False) -> tuple:
    """ci.test from the doubles, in one bake under CI's namespace, its report in CI_WORK_DIR (with `no_cache`, every
    step run again); returns (plan, results)."""
    from ascend_images.checkout import ROOT
    from ascend_images.cli.doubles import CI_WORK_DIR, ci_build

    root = root or ROOT
    made = ci_build(root)
    made.inputs.check()
    sel = Selection(matrix=str(root / "matrix.yaml"), arch=arch)
    return build_selection(sel, made.sources, made.inputs, out, work_dir=root / CI_WORK_DIR, namespace=made.namespace,
                           ci="test", no_cache=no_cache)


def check_changed(out: Out, session_began, root: Path | None = None, arch: str | None = None,
                  no_cache: bool = False) -> list:
    """Each committed image whose definition changed since the full tier's last proof, built, tested and untagged in
    turn (cli/changedcheck.py), on the engine ci.test was built on."""
    from ascend_images.builder import records
    from ascend_images.builder.engine import connect, free_bytes
    from ascend_images.checkout import ROOT
    from ascend_images.cli.changedcheck import Engine, check_changed_images
    from ascend_images.cli.doubles import CI_WORK_DIR, changed_images, ci_build
    from ascend_images.matrix.selection import ci_variants
    from ascend_images.stages.plan import PlanOptions, make_plan

    root = root or ROOT
    sel = Selection(matrix=str(root / "matrix.yaml"), arch=arch)
    matrix = sel.load()
    changed = changed_images(matrix, arch, root)
    work_dir = root / CI_WORK_DIR / "changed"
    shutil.rmtree(work_dir, ignore_errors=True)  # an earlier run's reports name other images
    if not changed:
        return []
    out(f"{len(changed)} committed image(s) whose definition changed since the full tier's last proof, each built, "
        "tested and untagged in turn: " + ", ".join(v.name for v in changed))
    made = ci_build(root)
    client = connect()
    ci_plan = make_plan(ci_variants(matrix, "test", arch),
                        PlanOptions(made.sources.sources(matrix, strict=False).cann, made.namespace))

    def build(variant, own: Path) -> list[str]:
        plan, _ = build_selection(sel, made.sources, made.inputs, out, work_dir=own, namespace=made.namespace,
                                  no_cache=no_cache, only=[variant])
        return [stage.tag for stage in plan.top(variant).chain()]  # from the base up: the image last

    def untag(tags) -> None:
        for tag in tags:
            client.images.remove(tag)

    engine = Engine(build, lambda image, own: run_image_suite(image, own), untag,
                    lambda since: records.prune(records.made_since(records.cache_records(), since)),
                    functools.partial(free_bytes, client))
    return check_changed_images(changed, {s.tag for s in ci_plan.stages}, work_dir, engine, out, session_began)


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
