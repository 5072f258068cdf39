"""CI's room-making (tests/fixtures/disk_room.py) on a real second engine: what it removes at each step, and what it
keeps. The engine's disk is the host's, so "room" is asked for as zero (the first step only) and as more than the
disk has (every step, then False); with the CI images gone, the cold run's figure is the one asked."""

from __future__ import annotations

import subprocess
import tempfile
import time
from pathlib import Path

import docker
import pytest

from dev.scratch_engine import ScratchEngine
from tests.fixtures.disk_room import GB, free_bytes, make_room, prune_build_cache
from tests.unit.test_run import needs_root

pytestmark = [pytest.mark.docker, needs_root]


def tags(engine: ScratchEngine) -> set[str]:
    return {t for image in engine.client().images.list() for t in image.tags}


def build_cache(engine: ScratchEngine) -> list[dict]:
    """The engine's build-cache records. dockerd 28.5's `system df` fails with NotFound when a build's transient
    `-view` snapshot goes while it counts (a CI run met it right after a build); the count asked again is settled."""
    for attempt in range(3):
        try:
            return engine.client().df().get("BuildCache") or []
        except docker.errors.NotFound:
            if attempt == 2:
                raise
            time.sleep(1)
    raise AssertionError("unreachable")


def build_cache_bytes(engine: ScratchEngine) -> int:
    return sum(entry.get("Size", 0) for entry in build_cache(engine))


# written out: the checkout's revision of the build definition as the test hands it to make_room, and another one
REVISION, OTHER_REVISION = "1" * 40, "2" * 40


def labelled(engine: ScratchEngine, base: str, tag: str, revision: str, where: Path) -> None:
    """`tag` on the engine: `base` with the revision label the builder gives every stage."""
    where.mkdir()
    (where / "Dockerfile").write_text(f"FROM {base}\nLABEL org.opencontainers.image.revision={revision}\n")
    subprocess.run(["docker", "--host", engine.host, "buildx", "build", "--load", "-t", tag, str(where)], check=True,
                   capture_output=True)


def test_make_room_removes_leftovers_first_then_the_cache_then_the_ci_images(os_image_amd64, tmp_path):
    engine = ScratchEngine(Path(tempfile.mkdtemp(prefix="ai-scratch-")))
    engine.start()
    try:
        engine.load_from(os_image_amd64)
        leftovers = {"ascend-images-robust-0123abcd/base:debian12-py3.11-amd64", "127.0.0.1:5999/pushed/base:x"}
        ci = "ascend-images-test/base:debian12-py3.11-amd64"
        for tag in leftovers:
            engine.docker("tag", os_image_amd64, tag)
        labelled(engine, os_image_amd64, ci, REVISION, tmp_path / "ci")
        # a CI image of another revision: its run builds every stage again, so it is no warm run's
        stale = "ascend-images-test/cann:9.1.0-a2-debian12-py3.11-amd64"
        labelled(engine, os_image_amd64, stale, OTHER_REVISION, tmp_path / "stale")
        context = tmp_path / "context"
        context.mkdir()
        (context / "Dockerfile").write_text(f"FROM {os_image_amd64}\nRUN head -c 20000000 /dev/urandom > /blob\n")
        subprocess.run(["docker", "--host", engine.host, "buildx", "build", "--load", "-t", "probe:made", str(context)],
                       check=True, capture_output=True)
        assert build_cache_bytes(engine) > 10_000_000
        scratch_tmp = tmp_path / "tmp"
        dead = scratch_tmp / "ai-repro-dead"
        dead.mkdir(parents=True)
        (dead / "dockerd.pid").write_text("999999999\n")
        said: list[str] = []

        assert make_room(0, 0, engine.host, said.append, scratch_tmp, REVISION)
        assert tags(engine) == {os_image_amd64, ci, "probe:made"}
        assert not dead.exists()
        assert build_cache_bytes(engine) > 10_000_000  # room enough: the cache stays
        assert "this warm run wants 0 GB" in said[0], said
        assert "removed 2 leftover tag(s), 1 CI image tag(s) of another revision than 111111111111" in said[1], said
        assert "1 stale scratch engine root(s)" in said[1], said

        said.clear()
        too_much = free_bytes(engine.client().info()["DockerRootDir"]) + 10_000 * GB
        assert not make_room(too_much, too_much, engine.host, said.append, scratch_tmp, REVISION)
        assert build_cache_bytes(engine) == 0
        assert ci not in tags(engine) and os_image_amd64 in tags(engine)
        assert any("BuildKit's cache pruned but its cache mounts" in line for line in said), said
        assert any("BuildKit's cache mounts pruned" in line for line in said), said
        assert any("removed the CI images" in line for line in said), said
        # with no CI image left the run is a cold one: the cold figure is the one that counts
        said.clear()
        assert make_room(too_much, 0, engine.host, said.append, scratch_tmp, REVISION)
        assert "this cold run wants 0 GB" in said[0], said
        assert not make_room(0, too_much, engine.host, said.append, scratch_tmp, REVISION)
        # CI images of another revision only: a cold run as well, and they go first
        said.clear()
        labelled(engine, os_image_amd64, stale, OTHER_REVISION, tmp_path / "stale-again")
        assert make_room(too_much, 0, engine.host, said.append, scratch_tmp, REVISION)
        assert "this cold run wants 0 GB" in said[0] and stale not in tags(engine), said
    finally:
        engine.stop()


MOUNTED = """FROM {base}
ARG RUN
RUN --mount=type=cache,id=probe-kept,target=/kept \\
    sh -c 'echo kept: $(ls /kept); head -c 5000000 /dev/urandom > /kept/wheel.whl'
RUN head -c 20000000 /dev/urandom > /blob
"""


def test_a_prune_that_keeps_the_cache_mounts_keeps_what_they_hold_and_nothing_else(os_image_amd64, tmp_path):
    """The room-making's second step: every record of BuildKit's cache goes but the cache mounts (the wheels compiled
    on the target), whose content the next build finds; the third step takes those too."""
    engine = ScratchEngine(Path(tempfile.mkdtemp(prefix="ai-scratch-")))
    engine.start()
    try:
        engine.load_from(os_image_amd64)
        (tmp_path / "Dockerfile").write_text(MOUNTED.format(base=os_image_amd64))

        def build(run: str) -> str:
            done = subprocess.run(["docker", "--host", engine.host, "buildx", "build", "--progress", "plain",
                                   "--build-arg", f"RUN={run}", "-t", f"probe:{run}", str(tmp_path)],
                                  check=True, capture_output=True, text=True)
            return done.stderr

        assert "kept: wheel.whl" not in build("first")
        assert build_cache_bytes(engine) > 25_000_000
        prune_build_cache(engine.host, keep_cache_mounts=True)
        # the 20 MB step is gone, the 5 MB mount stays (and the base's snapshot, which the image holds)
        kinds = {entry["Type"] for entry in build_cache(engine)}
        assert kinds == {"exec.cachemount"}, kinds
        assert "kept: wheel.whl" in build("second")
        prune_build_cache(engine.host, keep_cache_mounts=False)
        assert build_cache_bytes(engine) == 0
        assert "kept: wheel.whl" not in build("third")
    finally:
        engine.stop()
