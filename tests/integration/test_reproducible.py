"""The same inputs give the same image (DESIGN 24), on any engine: CI's SGLang chain (base, CANN install, CANN, torch,
SGLang: the cheapest backend stage) built again with `--no-cache` on a second, empty engine (a scratch dockerd that
has only the OS images, loaded from this host's) has the digest of every stage the host's engine built. Where a
digest differs, the failure shows diffoscope's summary of the layers that differ.

The proof is kept on this host, named by what decides it: a later run whose stages are the same images (their
digests), on the same engine, with the same rebuild code, does not build the chain again.

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
from tests.conftest import IN_CI, ROOT, TEST_DOCKER_ARCH

pytestmark = [pytest.mark.docker, pytest.mark.slow]
CLAMP = ROOT / "images/common/rootfs/usr/local/libexec/ascend-images/clamp-mtimes"
HOST = {"x86_64": "amd64", "aarch64": "arm64"}[platform.machine()]
EPOCH = "1795824000"


@pytest.fixture(scope="module")
def empty_engine():
    """A second engine with nothing but the OS images the builds start from (this host's, as another machine of a
    farm would have them from the same place)."""
    from dev.scratch_engine import ScratchEngine, ScratchEngineError, missing_requirement

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


# What decides a proof's outcome beside the images themselves (their digests: the same digest, the same bytes): the
# engine and buildx that build, and the code `invoke rebuild` runs (its task and compare, and the build it starts)
REBUILD_MODULES = ("ascend_images.cli.rebuild", "ascend_images.release.reproduce", "ascend_images.cli.build",
                   "ascend_images.builder.build", "ascend_images.builder.builders", "ascend_images.cli.inputs")
# the proof itself and the second engine it starts
PROOF_CODE = ("tasks.py", "tests/integration/test_reproducible.py", "dev/scratch_engine.py")


def rebuild_code() -> list[Path]:
    """The files of every module of ours `invoke rebuild` imports, as a fresh interpreter loads them."""
    code = f"import importlib, sys\nfor m in {REBUILD_MODULES!r}: importlib.import_module(m)\n" \
           "print('\\n'.join(sorted(m.__file__ for n, m in sys.modules.items() " \
           "if n.startswith('ascend_images') and getattr(m, '__file__', None))))"
    listed = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True,
                            env={**os.environ, "PYTHONPATH": str(ROOT / "src")}).stdout
    return [Path(line) for line in listed.split()] + [ROOT / path for path in PROOF_CODE]


def proof_record(docker_client, digests: dict[str, str]) -> Path:
    """Where a proof of these images is kept on this host (~/.cache/ascend-images/test/reproduced, like the tests'
    registries): named by what decides its outcome, and nothing else."""
    from ascend_images.inputs.download import host_cache

    digest = hashlib.sha256()
    for tag, image in sorted(digests.items()):
        digest.update(f"{tag.split('/', 1)[-1]} {image}\n".encode())
    buildx = subprocess.run(["docker", "buildx", "version"], capture_output=True, text=True, check=True).stdout
    digest.update(f"{docker_client.version()['Version']} {buildx}".encode())
    for file in rebuild_code():
        digest.update(file.relative_to(ROOT).as_posix().encode() + b"\0" + file.read_bytes())
    return host_cache("test") / "reproduced" / f"{digest.hexdigest()[:24]}.json"


@pytest.mark.full  # a whole emulated chain; the tests above show the same image from the same inputs on small ones
def test_every_stage_of_a_chain_is_the_same_on_a_second_empty_engine(request, docker_client, ci_build, work_dir,
                                                                     build_secrets):
    """CI's SGLang image checked by `invoke rebuild` as a user checks a published image: its revision (a worktree of
    it; this tree itself when it has uncommitted changes to the definition) builds it again from nothing on the
    second engine; every stage of the chain has the host's digest, and the report names the image as it was given.

    A proof is kept, named by what decides it: the chain's digests (the images themselves), the engine and buildx
    versions, and the code `invoke rebuild` imports. When one is kept for what this run has, nothing is built
    again (14 min under emulation): the same images were rebuilt from nothing by the same code on the same engine.
    ASCEND_IMAGES_REPROVE=1 builds it again anyway."""
    from ascend_images.checkout import definition_revision
    from tests.fixtures.ci_images import INPUTS

    top = next(t for t in ci_build.plan.tops.values() if t.kind == "sglang")
    chain = [stage.tag for stage in top.chain()]
    host_digests = {tag: docker_client.images.get(tag).id for tag in chain}
    record = proof_record(docker_client, host_digests)
    if record.exists() and os.environ.get("ASCEND_IMAGES_REPROVE") != "1":
        return  # these very images were rebuilt from nothing by this code on this engine (its name says so)
    empty_engine = request.getfixturevalue("empty_engine")
    dirty = definition_revision().endswith("-dirty")
    inputs = ROOT / INPUTS
    argv = [sys.executable, "-m", "invoke", "rebuild", top.tag, "--engine", empty_engine.host,
            "--cann-dir", str(inputs), "--artifacts-dir", str(inputs),
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
