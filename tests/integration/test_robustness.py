"""Builds that overlap, are interrupted, or meet a broken engine: real `invoke` processes on a real engine.

The chains are x86_64 (native, minutes) from the test release whose torch comes from a local wheelhouse: the real
CPU wheel for the interrupted builds (its stage lasts long enough to be stopped in the middle), torch's
metadata-only double for the others, whose subject is the orchestration (a 900 MB torch layer would only be
installed, committed, pushed and pulled again; `test_wheelhouse_x86` builds and checks the real one). Each test has
stages of its own, really built, not taken from BuildKit's cache: an image names no namespace, so each test's matrix
gives CANN a download referer of its own (rendered into the cann-install stage's RUN line), which makes its
cann-install, cann and torch stages its own; the base stays shared by all, as a real host's would."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import docker
import pytest

from tests.conftest import ROOT, X86_RELEASE, remove_tags, with_own_cann_stages
from tests.fixtures.signals import default_sigint
from tests.fixtures.small_engine import second_engine

pytestmark = [pytest.mark.docker, pytest.mark.slow]


@pytest.fixture
def namespace(docker_client):
    ns = f"ascend-images-robust-{uuid.uuid4().hex[:8]}"
    yield ns
    remove_tags(docker_client, f"{ns}/", force=True)


def build_args(matrix, cann, wheelhouse, ca, work_dir, namespace, device: str, **extra) -> list[str]:
    args = [sys.executable, "-m", "invoke", "build", "--matrix", str(matrix), "--device", device,
            "--backend", "none", "--release", X86_RELEASE, "--arch", "x86_64", "--cann-dir", str(cann),
            "--wheelhouse", str(wheelhouse), "--ca-bundle", str(ca), "--namespace", namespace,
            "--work-dir", str(work_dir)]
    for flag, value in extra.items():
        args += [f"--{flag.replace('_', '-')}", value]
    return args


def start(args: list[str], log, engine: str | None = None) -> subprocess.Popen:
    """`args` started in a session of its own, building on the host's engine or on `engine` (a DOCKER_HOST)."""
    env = {**os.environ, "DOCKER_HOST": engine} if engine else None
    return subprocess.Popen(args, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT, text=True, env=env,
                            start_new_session=True, preexec_fn=default_sigint)


def _own_stages(matrix, cann, wheelhouse, ca, directory: Path) -> dict:
    return {"matrix": with_own_cann_stages(matrix, directory / "matrix"), "cann": cann, "wheelhouse": wheelhouse,
            "ca": ca, "work_dir": directory / "work"}


@pytest.fixture
def x86_inputs(x86_light_matrix, fake_cann_both, light_wheelhouse, build_secrets, os_image_amd64, work_dir, tmp_path):
    """A chain of the test's own whose torch is the metadata-only double: what is tested is the orchestration."""
    return _own_stages(x86_light_matrix, fake_cann_both, light_wheelhouse, build_secrets["ca"], tmp_path)


@pytest.fixture
def x86_torch_inputs(x86_matrix, fake_cann_both, wheelhouse, build_secrets, os_image_amd64, work_dir, tmp_path):
    """A chain of the test's own with the real CPU torch: its torch stage lasts long enough (the 900 MB tree installed
    and compiled by its native stage) to be interrupted in the middle, which the double's few seconds are not."""
    return _own_stages(x86_matrix, fake_cann_both, wheelhouse, build_secrets["ca"], tmp_path)


@pytest.fixture
def own_engine(docker_client, os_image_amd64):
    """An engine of the test's own (a real second dockerd, its data root a loop-mounted file system), holding only the
    host's OS image. On it, BuildKit's cache holds nothing to finish a torch stage with, so each build meets the
    install running; and what the builds leave (the real torch's tree, per device and per step, about 5 GB of cache
    no other build ever reuses) goes with the engine instead of filling the host's."""
    for engine in second_engine(24000):
        engine.load_from_host(os_image_amd64)
        yield engine


def reported(work_dir: Path, status: str | None = None) -> dict[str, str]:
    """The last build of `work_dir`'s stages by its report (build-report.json), as {tag: digest}: all of them, or
    those of one status (built: a step ran; cached: every step from a cache)."""
    report = json.loads((work_dir / "build-report.json").read_text(encoding="utf-8"))
    return {stage["tag"]: stage["image_id"] for stage in report["stages"] if status in (None, stage["status"])}


def config_digest(client: docker.DockerClient, tag: str) -> str:
    """The digest of an image's config: its ID on the classic image store, its manifest's config on containerd's."""
    image = client.api.inspect_image(tag)
    return image.get("Descriptor", {}).get("annotations", {}).get("config.digest") or image["Id"]


def test_overlapping_builds_build_each_shared_stage_once(docker_client, x86_inputs, namespace, tmp_path):
    """Two builds of the same A2 chain started together (what two engineers or two CI runners on one host do), in
    one work directory and in two: all succeed with the same images. In one directory the second waits for the
    first and takes every step from BuildKit's cache; in two, BuildKit runs what both need once, and each gets it."""
    logs = [tmp_path / "one.log", tmp_path / "two.log", tmp_path / "three.log"]
    work = x86_inputs["work_dir"]
    procs = []
    for log, work_dir in zip(logs, [work, work, work.with_name("work-other")], strict=True):
        procs.append(start(build_args(**{**x86_inputs, "work_dir": work_dir}, namespace=namespace, device="a2"),
                           log.open("w")))
        time.sleep(2)
    codes = [p.wait(timeout=1800) for p in procs]
    outs = [log.read_text() for log in logs]
    assert codes == [0, 0, 0], outs
    # the second build in `work` waited for the first and ran no step: the first built the A2 chain's own stages
    # (cann-install, cann, torch; the base is shared by every chain) once. Each directory's report is its last build's
    assert f"waiting for the build in {work}" in outs[1], outs[1]
    second, other = reported(work), reported(work.with_name("work-other"))
    assert len(second) == len(other) == 4, (second, other)
    assert len([t for t in reported(work, "cached") if "-a2-" in t]) == 3, second
    assert second == other and all(d.startswith("sha256:") for d in second.values()), (second, other)


def _interrupt(x86_inputs, namespace, log: Path, sig: int, engine: str) -> tuple[int, str, str]:
    """Start a build on `engine`, wait until the torch stage is installing its packages, send `sig` to the whole
    process group (as a terminal sends Ctrl-C); returns (exit code, output, tag)."""
    proc = start(build_args(**x86_inputs, namespace=namespace, device="a2"), log.open("w"), engine)
    (tag,) = torch_stages_installing(proc, log, 1)
    os.killpg(proc.pid, sig)
    code = proc.wait(timeout=120)
    return code, log.read_text(), tag


def torch_stages_installing(proc: subprocess.Popen, log: Path, count: int) -> list[str]:
    """Wait until the `count` torch stages of the build writing `log` are the only ones left and busy (their CANN
    images exported, a step of their own image or its export under way), so that a signal lands inside them; their
    tags. Their install runs in a stage of the build host's own beside the CANN stages, and a stage's log holds its
    parents' steps too: what says where the build is are the parents' exports and the torch image's own steps."""
    deadline = time.monotonic() + 900
    while time.monotonic() < deadline and proc.poll() is None:
        logs = logs_dir(log)
        canns = sorted(logs.glob("*-cann--*.log")) if logs else []
        torches = sorted(logs.glob("*-torch-npu--*.log")) if logs else []
        exported = [p for p in canns if re.search(r"^#(\d+) exporting to image$.*^#\1 DONE", p.read_text(),
                                                  re.S | re.M)]
        if len(exported) == count and len([p for p in torches if busy(p.read_text())]) == count:
            break
        time.sleep(0.2)
    else:
        raise AssertionError(f"no {count} torch stage(s) got to building:\n{log.read_text()[-3000:]}")
    plan = re.findall(r"^  torch +(\S+)  <- ", log.read_text(), re.M)
    assert len(plan) == count, log.read_text()
    return plan


def logs_dir(log: Path) -> Path | None:
    """The logs directory of the build writing `log`, once it has said it."""
    found = re.search(r"building \d+ stage\(s\) with one bake on .* \(logs (\S+)\)", log.read_text())
    return Path(found.group(1)) if found else None


def stage_log(log: Path, tag: str) -> Path:
    """The log of stage `tag` of the build writing `log` (its logs directory's `NN-<slug>.log`)."""
    logs = logs_dir(log)
    assert logs is not None, log.read_text()[-3000:]
    (found,) = logs.glob(f"*-{tag.rsplit('/', 1)[-1].replace(':', '--')}.log")
    return found


def busy(text: str) -> bool:
    """Does a torch stage's log show a step of its image (`stage-N`, after the parents') or its export started and
    not ended?"""
    steps = re.findall(r"^#(\d+) (?:\[stage-\d+ \d+/\d+\] |exporting to image$)", text, re.M)
    return any(not re.search(rf"^#{step} (DONE|CACHED|ERROR|CANCELED)", text, re.M) for step in steps)


ENGINE: list = []  # the engine the interrupt test builds on


def steps_running() -> int:
    """The steps its BuildKit runs now: each has a directory of its own under <data root>/buildkit/executor while it
    runs (its containers are BuildKit's own, which `docker ps` does not list)."""
    executor = ENGINE[0].data_root / "buildkit" / "executor"
    return sum(1 for entry in executor.iterdir() if entry.is_dir()) if executor.is_dir() else 0


def _nothing_of_the_build_left(work: Path, timeout: float = 60) -> bool:
    """BuildKit stops a cancelled build's running step, and no buildx outlives the build that ran it: no step runs on
    the engine, and no `docker buildx bake` of this work directory's is left."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        bakes = subprocess.run(["pgrep", "-f", f"buildx bake --progress rawjson --metadata-file {work}"],
                               capture_output=True).returncode == 0
        if not steps_running() and not bakes:
            return True
        time.sleep(2)
    return False


def test_interrupted_builds_leave_no_tag_and_the_next_run_takes_what_finished(own_engine, x86_torch_inputs,
                                                                              namespace, tmp_path):
    """One chain and then two side by side, each stopped in its torch stage, then built to the end:
    - Ctrl-C to the process group (a terminal's) in the A2 chain's torch stage: exit 130 and one line naming the
      stage, no tag for it, no build step and no buildx left;
    - A2 and A3 in one bake: both torch stages install at once; Ctrl-C: exit 130, both named, neither tagged;
    - the same again, stopped by `kill -9` of the whole process group: no tag, no build step, no buildx left;
    - the run after that takes every stage that had finished from BuildKit's cache and makes the two torch stages.
    One test, so the real 900 MB torch stage is built to the end once per device (the base is shared with every
    namespace, the rest is this test's own), on an engine of its own."""
    engine = own_engine.client()
    ENGINE[:] = [own_engine]
    work = x86_torch_inputs["work_dir"].absolute()
    code, out, tag = _interrupt(x86_torch_inputs, namespace, tmp_path / "ctrl-c.log", signal.SIGINT,
                               own_engine.host)
    assert code == 130, out
    said = [line for line in out.splitlines() if line.startswith("interrupted:")]
    assert len(said) == 1 and tag in said[0] and "none of them was tagged" in said[0] and "Logs: " in said[0], out
    assert "Traceback" not in out and "context canceled" not in out, out[-2000:]
    assert not engine.images.list(name=tag), f"{tag} was tagged"
    # what had finished is tagged, as the line counts it (the stages run side by side: how far the others got varies)
    finished = int(re.search(r"the (\d+) finished are kept", said[0]).group(1))
    planned = re.findall(r"^  \S+ +(\S+)  <- ", out, re.M)
    assert len([t for t in planned if engine.images.list(name=t)]) == finished < len(planned), out
    assert _nothing_of_the_build_left(work)

    log = tmp_path / "both.log"
    proc = start(build_args(**x86_torch_inputs, namespace=namespace, device="a2,a3"), log.open("w"), own_engine.host)
    torch = torch_stages_installing(proc, log, 2)
    assert tag in torch, torch
    os.killpg(proc.pid, signal.SIGINT)
    code = proc.wait(timeout=120)
    out = log.read_text()
    assert code == 130, out[-3000:]
    said = [line for line in out.splitlines() if line.startswith("interrupted:")]
    assert len(said) == 1 and "Traceback" not in out, out[-2000:]
    # the line names what it left untagged, and the engine agrees: a torch stage whose last step ended as the signal
    # came may have been exported and tagged, and is then counted among the finished
    unfinished = re.search(r"unfinished \(([^)]*)\)", said[0]).group(1).split(", ")
    assert [t for t in torch if t in unfinished], said[0]
    for t in torch:
        assert bool(engine.images.list(name=t)) == (t not in unfinished), (t, said[0])
    assert _nothing_of_the_build_left(work)

    # kill -9 of what is left unfinished (both torch stages, unless one's export ended as Ctrl-C came)
    pending = [t for t in torch if t in unfinished]
    devices = ",".join(d for d in ("a2", "a3") if any(f"-{d}-" in t for t in pending))
    log = tmp_path / "kill-9.log"
    proc = start(build_args(**x86_torch_inputs, namespace=namespace, device=devices), log.open("w"), own_engine.host)
    assert sorted(torch_stages_installing(proc, log, len(pending))) == sorted(pending)
    exporting = {t for t in pending if "exporting to image" in stage_log(log, t).read_text()}
    os.killpg(proc.pid, signal.SIGKILL)
    assert proc.wait(timeout=120) == -signal.SIGKILL
    for t in pending:  # an export already under way may end and be tagged: BuildKit tags only a whole image
        assert t in exporting or not engine.images.list(name=t), f"{t} was tagged"
    assert _nothing_of_the_build_left(work)

    rerun = subprocess.run(build_args(**x86_torch_inputs, namespace=namespace, device="a2,a3"), cwd=ROOT,
                           capture_output=True, text=True, timeout=1800,
                           env={**os.environ, "DOCKER_HOST": own_engine.host})
    assert rerun.returncode == 0, rerun.stdout[-3000:] + rerun.stderr[-3000:]
    # what finished before comes from the cache (the CANN stages); the torch stages, stopped each time in a step or
    # in their export, are made now: from their cached steps where every step had finished before the signal
    built, cached = reported(work, "built"), reported(work, "cached")
    assert set(torch) <= set(built) | set(cached) and len(built) + len(cached) == 7, rerun.stdout[-3000:]
    assert len([t for t in cached if "/cann:" in t]) == 2, rerun.stdout[-3000:]
    for t in torch:
        assert engine.images.get(t).labels["io.ascend-images.stage"] == "torch"


# --- engine faults: one line saying what to do, a non-zero exit, no traceback ------------------------------
def invoke(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "invoke", *args], cwd=ROOT, capture_output=True, text=True,
                          env={**os.environ, **(env or {})}, timeout=300)


def assert_one_clear_line(result: subprocess.CompletedProcess, *phrases: str) -> None:
    text = result.stdout + result.stderr
    assert result.returncode != 0, text
    assert "Traceback" not in text, text
    for phrase in phrases:
        assert phrase in text, text


def test_missing_image(docker_client):
    assert_one_clear_line(invoke("inspect", "nosuch/image:tag"), "error: no such image", "invoke build")


def test_no_engine_at_docker_host(tmp_path):
    env = {"DOCKER_HOST": f"unix://{tmp_path}/nothing.sock"}
    assert_one_clear_line(invoke("inspect", "ascend-images/os:debian12-arm64", env=env),
                          "no Docker engine answers at unix://", "DOCKER_HOST")
    assert_one_clear_line(invoke("build", "--device", "a3", "--cann-dir", str(tmp_path), "--namespace", "x",
                                 env=env), "no Docker engine answers")


def test_unreachable_registry(docker_client, ci_build):
    import socket

    with socket.socket() as sock:  # a port nothing listens on
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    result = invoke("publish", "--registry", f"127.0.0.1:{port}/ascend", "--device", "a3", "--backend", "none",
                    "--namespace", "ascend-images-test", "--allow-test-double")
    assert_one_clear_line(result, "error:", f"127.0.0.1:{port}")


def test_permission_denied_on_the_engine_socket(tmp_path):
    """A socket the user may not open, for real: a listening socket with mode 000, and an `invoke` process
    without CAP_DAC_OVERRIDE (root without it is refused like any user outside the `docker` group)."""
    import socket

    path = tmp_path / "docker.sock"
    with socket.socket(socket.AF_UNIX) as server:
        server.bind(str(path))
        server.listen()
        os.chmod(path, 0)
        env = {**os.environ, "DOCKER_HOST": f"unix://{path}"}
        drop = ["setpriv", "--bounding-set=-dac_override,-dac_read_search", "--inh-caps=-all", "--"]
        result = subprocess.run([*drop, sys.executable, "-m", "invoke", "inspect", "ascend-images/os:debian12-amd64"],
                                cwd=ROOT, capture_output=True, text=True, env=env, timeout=300)
        assert_one_clear_line(result, "permission denied on the Docker engine's socket", str(path), "docker` group")
        # the control: the same socket with the capability kept is opened (the refusal was the permission)
        with socket.socket(socket.AF_UNIX) as client:
            client.connect(str(path))


@pytest.fixture
def small_engine():
    """A second engine with a 400 MB data root: a base stage does not fit."""
    yield from second_engine(400)


@pytest.fixture
def empty_engine():
    """A second engine with room for a chain (a sparse 8 GB data root) and nothing in it."""
    yield from second_engine(8000)


def test_disk_full_during_a_build(docker_client, x86_inputs, small_engine, tmp_path):
    """A base stage (Python, pip, build tools: ~670 MB on the OS image) on an engine with ~250 MB free: the
    build fails for real with ENOSPC. One clear line says the disk is full and what to do, the log path is
    given and no tag is set."""
    small_engine.load_from_host("ascend-images/os:debian12-amd64")
    assert small_engine.free_mb() < 400
    env = {"DOCKER_HOST": small_engine.host}
    result = subprocess.run(build_args(**x86_inputs, namespace="ascend-images-diskfull", device="a2"), cwd=ROOT,
                            capture_output=True, text=True, env={**os.environ, **env}, timeout=1800)
    text = result.stdout + result.stderr
    assert_one_clear_line(result, "disk is full", "docker system prune", "full log:")
    # the stage that hit the full disk is not tagged
    # the engine that just ran out of disk once failed to list its images in a CI run (exit 1, stderr unseen; alone,
    # 3 of 3 passed): asked again a few times, and what it said shown if it never answers
    for _ in range(5):
        listed = small_engine.docker("images", "--format", "{{.Repository}}", "--filter",
                                     "reference=ascend-images-diskfull/*", check=False, text=True)
        if listed.returncode == 0:
            break
        time.sleep(3)
    assert listed.returncode == 0, \
        f"the full engine lists no images: {listed.stderr}\n{small_engine.log.read_text(errors='replace')[-2000:]}"
    assert listed.stdout.split() == [], text
    # the second engine left the host's alone (a dockerd started with `--bridge none` deletes docker0)
    docker_client.containers.run("ascend-images/os:debian12-amd64", "true", remove=True)


def test_a_second_engine_takes_the_stages_from_the_stage_cache(docker_client, x86_inputs, registry, empty_engine,
                                                                  namespace, tmp_path):
    """A registry as the shared stage cache (BuildKit's registry cache, a ref per stage), with two real engines: the
    host's engine builds the A2 chain and exports each stage's steps there; a second, empty engine (only the OS base
    image, an input like the CANN directory) builds the same selection under another namespace, the base every step
    from the cache, making the very same images, config for config (no image names a namespace);
    then a selection that differs only in its profile builds exactly that one stage. Counted from the builds' own
    lines. (The stages from CANN's install up run again on the empty engine: see below.)"""
    from ascend_images.stages.bake import target_name
    from ascend_images.stages.stage import Stage

    cache = f"{registry.namespace}/stage-cache-test-double"  # the images are built from the fake CANN
    first = subprocess.run(build_args(**x86_inputs, namespace=namespace, device="a2", stage_cache=cache), cwd=ROOT,
                           capture_output=True, text=True, timeout=1800)
    assert first.returncode == 0, first.stdout[-3000:] + first.stderr
    work = x86_inputs["work_dir"]
    made = reported(work)
    assert len(made) == 4 and len([t for t in reported(work, "built") if "/base:" not in t]) >= 1, made
    for tag in made:  # each stage's steps in the registry, under its target's name (the stage's directory)
        name = target_name(Stage("any", tag, None, None))  # type: ignore[arg-type]
        ref = f"{cache}/{name}:buildcache"
        assert docker_client.api.inspect_distribution(ref)["Descriptor"]["digest"].startswith("sha256:"), ref

    empty_engine.load_from_host("ascend-images/os:debian12-amd64")
    env = {**os.environ, "DOCKER_HOST": empty_engine.host}
    # under another namespace: the cache is named by what a stage is, not by who built it
    second = subprocess.run(build_args(**x86_inputs, namespace="ascend-images-fleet", device="a2", stage_cache=cache),
                            cwd=ROOT, capture_output=True, text=True, env=env, timeout=1800)
    assert second.returncode == 0, second.stdout[-3000:] + second.stderr
    # the base every step from the cache. The stages from CANN's install up run again: on dockerd 28.5's BuildKit
    # the step that mounts the `cann` context misses the imported cache though both engines export the same cache
    # records (docs/building.md, "The stage cache"); BuildKit 0.13 took CANN's install from it
    from_cache = reported(work, "cached")
    assert {t.split("/", 1)[1].split(":")[0] for t in from_cache} >= {"base"}, second.stdout[-3000:]
    # every stage, taken from the cache or run again, is the image the first engine made: the same image config (its
    # layers' diff IDs, history, labels and env). Not the engines' image IDs: on the containerd image store an ID is
    # its manifest's digest, which names each layer's compressed blob, and an engine may hold a layer compressed
    # another way (the zstd publish test re-exports it) while the content is the same
    second_client = docker.DockerClient(base_url=empty_engine.host)
    tags = sorted(tag.replace(namespace, "ascend-images-fleet", 1) for tag in made)
    assert [config_digest(docker_client, tag.replace("ascend-images-fleet", namespace, 1)) for tag in tags] == \
        [config_digest(second_client, tag) for tag in tags], tags

    third = subprocess.run(build_args(**x86_inputs, namespace="ascend-images-fleet", device="a2", stage_cache=cache,
                                      profile="debug"), cwd=ROOT, capture_output=True, text=True, env=env, timeout=1800)
    assert third.returncode == 0, third.stdout[-3000:] + third.stderr
    built = list(reported(work, "built"))
    assert len(built) == 1 and built[0].endswith("-debug"), reported(work)
