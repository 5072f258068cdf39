"""The same inputs give the same image (DESIGN 24), on any engine: CI's SGLang chain (base, CANN install, CANN, torch,
SGLang: the cheapest backend stage) built again with `--no-cache` on a second, empty engine (a scratch dockerd that
has only the OS images, loaded from this host's) has the digest of every stage the host's engine built. Where a
digest differs, the failure shows diffoscope's summary of the layers that differ.

And the check itself, on a purpose-broken input: a step that writes the time into a file gives two images with one
differing layer, and diffoscope names the file."""

from __future__ import annotations

import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from ascend_images.release.reproduce import ImageOn, compare
from tests.conftest import CI_SELECTIONS, IN_CI, ROOT, TEST_DOCKER_ARCH

pytestmark = [pytest.mark.docker, pytest.mark.slow]
CLAMP = ROOT / "images/common/rootfs/usr/local/libexec/ascend-images/clamp-mtimes"
HOST = {"x86_64": "amd64", "aarch64": "arm64"}[platform.machine()]
EPOCH = "1795824000"


@pytest.fixture(scope="module")
def empty_engine():
    """A second engine with nothing but the OS images the builds start from (this host's, as another machine of a
    farm would have them from the same place)."""
    from ascend_images.builder.scratch_engine import ScratchEngine, ScratchEngineError, missing_requirement

    problem = missing_requirement()
    if problem:
        if IN_CI:
            pytest.fail(f"CI=true but no second engine: {problem}")
        pytest.skip(problem)
    engine = ScratchEngine(Path(tempfile.mkdtemp(prefix="ai-repro-")))
    try:
        engine.start()
        for arch in sorted({TEST_DOCKER_ARCH, HOST}):
            engine.load_from(f"ascend-images/os:debian12-{arch}")
    except ScratchEngineError as exc:
        engine.stop()
        pytest.fail(f"the second engine did not start: {exc}")
    yield engine
    engine.stop()


def build_twice(dockerfile: str, context: Path) -> tuple[str, str]:
    """Two builds of one Dockerfile, BuildKit's cache ignored, with SOURCE_DATE_EPOCH: two images."""
    (context / "Dockerfile").write_text(dockerfile)
    (context / "clamp-mtimes").write_bytes(CLAMP.read_bytes())
    (context / "clamp-mtimes").chmod(0o755)
    tags = []
    for run in ("one", "two"):
        tag = f"ascend-images-repro/probe:{context.name}-{run}"
        result = subprocess.run(["docker", "buildx", "build", "--no-cache", "--progress", "plain", "--network", "host",
                                 "--provenance=false", "--build-arg", f"SOURCE_DATE_EPOCH={EPOCH}",
                                 "--output", f"type=image,name={tag},oci-mediatypes=true", str(context)],
                                capture_output=True, text=True, timeout=600)
        assert result.returncode == 0, result.stderr[-3000:]
        tags.append(tag)
        time.sleep(1.1)  # the second build a clock second later, always
    return tags[0], tags[1]


def remove(*tags: str) -> None:
    subprocess.run(["docker", "rmi", "-f", *tags], capture_output=True)


# as the rendered Dockerfiles add their own files (images/common/partials/image-files.j2): staged at their path under
# /out with the build's time on every file and directory, then copied onto /
STEP = (f"FROM ascend-images/os:debian12-{HOST} AS image-files\nARG SOURCE_DATE_EPOCH\n"
        "COPY clamp-mtimes /out/tools/usr/local/bin/clamp-mtimes\n"
        'RUN chmod -R go-w /out && find /out -exec touch -h -d "@${{SOURCE_DATE_EPOCH}}" {{}} +\n'
        f"FROM ascend-images/os:debian12-{HOST}\nARG SOURCE_DATE_EPOCH\nCOPY --from=image-files /out/tools/ /\n"
        "RUN clamp-mtimes --begin && {} && clamp-mtimes\n")
# the purpose-broken way: a file copied from the context straight into a directory the image has
STRAIGHT_COPY = (f"FROM ascend-images/os:debian12-{HOST}\nARG SOURCE_DATE_EPOCH\nCOPY clamp-mtimes /usr/local/bin/\n"
                 "RUN clamp-mtimes --begin && {} && clamp-mtimes\n")


def test_a_step_that_clamps_its_times_gives_the_same_image_twice(tmp_path):
    a, b = build_twice(STEP.format("mkdir -p /opt/probe && echo same > /opt/probe/file"), tmp_path)
    try:
        found = compare(ImageOn(a), ImageOn(b), tmp_path / "work")
        assert found.same, found.summary()
    finally:
        remove(a, b)


def test_a_file_copied_straight_into_the_image_gives_a_layer_of_its_own_each_build(tmp_path):
    """Why the rendered Dockerfiles stage their own files: BuildKit's COPY gives the directory a file lands in the
    clock's time (a second apart here), whatever SOURCE_DATE_EPOCH says."""
    a, b = build_twice(STRAIGHT_COPY.format("true"), tmp_path)
    try:
        found = compare(ImageOn(a), ImageOn(b), tmp_path / "work")
        assert found.differing == [1], found.summary()  # the OS layer, then the COPY
        assert "usr/local/bin/" in found.report, found.report
    finally:
        remove(a, b)


def test_a_date_written_into_a_file_is_caught_and_diffoscope_names_it(tmp_path):
    """The purpose-broken input: the same step writing the time into a file."""
    a, b = build_twice(STEP.format("mkdir -p /opt/probe && date +%s%N > /opt/probe/stamp"), tmp_path)
    try:
        found = compare(ImageOn(a), ImageOn(b), tmp_path / "work")
        assert not found.same
        assert found.differing == [2], found.summary()  # the OS layer, the COPY, then the step (index 2)
        assert "opt/probe/stamp" in found.report, found.report
        assert "diffoscope" in found.summary()
    finally:
        remove(a, b)


def test_every_stage_of_a_chain_is_the_same_on_a_second_empty_engine(ci_image_builder, empty_engine, work_dir,
                                                                     fake_cann_dir, fake_artifacts_dir, build_secrets):
    """CI's SGLang image checked by `invoke rebuild` as a user checks a published image: its revision (a worktree of
    it; this tree itself when it has uncommitted changes to the definition) builds it again from nothing on the
    second engine; every stage of the chain has the host's digest."""
    from ascend_images.checkout import definition_revision

    index = next(i for i, s in enumerate(CI_SELECTIONS) if s.get("backend") == "sglang")
    plan, _ = ci_image_builder(index)
    (top,) = plan.tops.values()
    dirty = definition_revision().endswith("-dirty")
    argv = [sys.executable, "-m", "invoke", "rebuild", top.tag, "--engine", empty_engine.host,
            "--cann-dir", str(fake_cann_dir), "--artifacts-dir", str(fake_artifacts_dir),
            "--ca-bundle", str(build_secrets["ca"]), "--work-dir", str(work_dir / "rebuild"),
            *(["--from-tree"] if dirty else [])]
    result = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=3600)
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-2000:]
    assert f"{top.tag} and {top.tag} (on {empty_engine.host}): the same image" in result.stdout, result.stdout[-2000:]
    different = []
    for stage in top.chain():  # each stage was built there from nothing: the same digest as here
        found = compare(ImageOn(stage.tag), ImageOn(stage.tag, empty_engine.host), work_dir / "repro")
        if not found.same:
            different.append(found.summary())
    assert not different, "\n\n".join(different)
