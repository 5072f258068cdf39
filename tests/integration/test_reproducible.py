"""The same inputs give the same image (DESIGN 24), on any engine: CI's SGLang chain (base, CANN install, CANN, torch,
SGLang: the cheapest backend stage) built again with `--no-cache` on a second, empty engine (a scratch dockerd that
has only the OS images, loaded from this host's) has the digest of every stage the host's engine built. Where a
digest differs, the failure shows diffoscope's summary of the layers that differ.

The proof is kept on this host, named by what decides it: a later run whose stages have the same content keys, on the
same engine, with the same rebuild code, checks the host's digests against it instead of building the chain again.

And the check itself, on a purpose-broken input: a step that writes the time into a file gives two images with one
differing layer, and diffoscope names the file."""

from __future__ import annotations

import hashlib
import json
import os
import platform
import subprocess
import sys
import tempfile
import threading
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
    # its data root then holds a chain, hundreds of thousands of files (130 s of this worker's time in a CI run):
    # removed while the worker goes on (the session waits for the thread at its end)
    threading.Thread(target=engine.stop, name="second-engine-stop").start()


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


# What decides a proof's outcome beside the chain's content keys (which cover the build definition and its inputs):
# the engine and buildx that build, and the code of `invoke rebuild` and of this check
PROOF_CODE = ("tasks.py", "src/ascend_images/cli", "src/ascend_images/release/reproduce.py",
              "src/ascend_images/checkout.py", "tests/integration/test_reproducible.py")


def proof_record(docker_client, tags: list[str]) -> Path:
    """Where a proof of these stages is kept on this host (~/.cache/ascend-images/test/reproduced, like the tests'
    registries): named by what decides its outcome."""
    from ascend_images.inputs.download import host_cache
    from ascend_images.stages.names import CONTENT_KEY_LABEL

    digest = hashlib.sha256()
    for tag in tags:
        digest.update(f"{tag} {docker_client.images.get(tag).labels[CONTENT_KEY_LABEL]}\n".encode())
    buildx = subprocess.run(["docker", "buildx", "version"], capture_output=True, text=True, check=True).stdout
    digest.update(f"{docker_client.version()['Version']} {buildx}".encode())
    for top in PROOF_CODE:
        path = ROOT / top
        for file in sorted(path.rglob("*.py")) if path.is_dir() else [path]:
            digest.update(file.relative_to(ROOT).as_posix().encode() + b"\0" + file.read_bytes())
    return host_cache("test") / "reproduced" / f"{digest.hexdigest()[:24]}.json"


def test_every_stage_of_a_chain_is_the_same_on_a_second_empty_engine(request, docker_client, ci_image_builder,
                                                                     work_dir, fake_cann_dir, fake_artifacts_dir,
                                                                     build_secrets):
    """CI's SGLang image checked by `invoke rebuild` as a user checks a published image: its revision (a worktree of
    it; this tree itself when it has uncommitted changes to the definition) builds it again from nothing on the
    second engine; every stage of the chain has the host's digest.

    A proof is kept, named by what decides it (the stages' content keys, the engine and buildx versions, the code of
    `invoke rebuild` and of this check). When one is kept for what this run has, the host's stages must have the
    digests it proved (the same inputs, the same bytes), and nothing is built again: a warm run with nothing changed
    proves nothing new by building the chain a second time (14 min under emulation). ASCEND_IMAGES_REPROVE=1 builds
    it again anyway."""
    from ascend_images.checkout import definition_revision

    index = next(i for i, s in enumerate(CI_SELECTIONS) if s.get("backend") == "sglang")
    plan, _ = ci_image_builder(index)
    (top,) = plan.tops.values()
    chain = [stage.tag for stage in top.chain()]
    host_digests = {tag: docker_client.images.get(tag).id for tag in chain}
    record = proof_record(docker_client, chain)
    if record.exists() and os.environ.get("ASCEND_IMAGES_REPROVE") != "1":
        proven = json.loads(record.read_text())
        assert proven["digests"] == host_digests, (
            f"{record} proved other digests for the same content keys, engine and code ({proven['proven']}): the "
            f"host built them again and got other bytes\nproven: {proven['digests']}\nhere:   {host_digests}")
        return
    empty_engine = request.getfixturevalue("empty_engine")
    dirty = definition_revision().endswith("-dirty")
    argv = [sys.executable, "-m", "invoke", "rebuild", top.tag, "--engine", empty_engine.host,
            "--cann-dir", str(fake_cann_dir), "--artifacts-dir", str(fake_artifacts_dir),
            "--ca-bundle", str(build_secrets["ca"]), "--work-dir", str(work_dir / "rebuild"),
            *(["--from-tree"] if dirty else [])]
    started = time.monotonic()
    result = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=3600)
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-2000:]
    assert f"{top.tag} and {top.tag} (on {empty_engine.host}): the same image" in result.stdout, result.stdout[-2000:]
    different = []
    for tag in chain:  # each stage was built there from nothing: the same digest as here
        found = compare(ImageOn(tag), ImageOn(tag, empty_engine.host), work_dir / "repro")
        if not found.same:
            different.append(found.summary())
    assert not different, "\n\n".join(different)
    record.parent.mkdir(parents=True, exist_ok=True)
    record.write_text(json.dumps({"digests": host_digests, "proven": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                                  "rebuild_seconds": round(time.monotonic() - started)}, indent=2) + "\n")
