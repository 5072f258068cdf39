"""Builds that overlap, are interrupted, or meet a broken engine: real `invoke` processes on a real engine.

The chains are x86_64 (native, minutes) from the test release whose torch comes from a local wheelhouse: the real
CPU wheel for the interrupted builds (its stage lasts long enough to be stopped in the middle), torch's
metadata-only double for the others, whose subject is the orchestration (a 900 MB torch layer would only be
installed, committed, pushed and pulled again; `test_wheelhouse_x86` builds and checks the real one). Each test has
stages of its own, really built, not reused: a content key sees no namespace, so each test's matrix gives CANN a
download referer of its own (rendered into the cann-install stage's RUN line), which makes its cann-install, cann and
torch stages its own; the base stays shared by all, as a real host's would."""

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

import pytest

from tests.conftest import IN_CI, ROOT, X86_RELEASE, remove_tags, with_own_cann_stages
from tests.fixtures.disk_room import all_tags
from tests.fixtures.signals import default_sigint

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
    host's OS image and x86_64 base. On it, BuildKit's cache holds nothing to finish a torch stage with, so each build
    meets the install running; and what the builds leave (the real torch's tree, per device and per step, about 5 GB
    of cache no other build ever reuses) goes with the engine instead of filling the host's, where only a prune would
    remove it, and a prune costs the bake test its chain."""
    for engine in second_engine(24000):
        engine.load_from_host(os_image_amd64)
        # the base stage is every namespace's (its content key sees none): the host's, when it has one, is reused
        bases = [t for t in all_tags(docker_client) if t.endswith("/base:debian12-py3.11-amd64")]
        if bases:
            engine.load_from_host(bases[0])
        yield engine


def test_overlapping_builds_build_each_shared_stage_once(docker_client, x86_inputs, namespace, tmp_path):
    """Two builds of the same A2 chain started together (what two engineers or two CI runners on one host do):
    both succeed, each stage is built by one of them while the other waits and reuses it, and no content key
    has two images."""
    logs = [tmp_path / "one.log", tmp_path / "two.log"]
    procs = []
    for log, device in zip(logs, ["a2", "a2"], strict=True):
        procs.append(start(build_args(**x86_inputs, namespace=namespace, device=device), log.open("w")))
        time.sleep(2)
    codes = [p.wait(timeout=1800) for p in procs]
    outs = [log.read_text() for log in logs]
    assert codes == [0, 0], outs
    built = [m for out in outs for m in re.findall(rf"\] ({re.escape(namespace)}/\S+): building", out)]
    assert len(built) == len(set(built)), f"a stage was built twice: {built}"
    shared = [t for t in built if "-a2-" in t]
    assert len(shared) == 3, built  # cann-install, cann, torch of A2 (the base is shared by every namespace)
    assert any("waiting for pid" in out for out in outs), outs
    for tag in shared:
        key = docker_client.images.get(tag).labels["io.ascend-images.content-key"]
        twins = docker_client.api.images(filters={"label": f"io.ascend-images.content-key={key}"})
        assert len(twins) == 1, f"{tag}: {len(twins)} images with one content key"


def _interrupt(x86_inputs, namespace, log: Path, sig: int, engine: str) -> tuple[int, str, str]:
    """Start a build on `engine`, wait until the torch stage is building, send `sig`; returns (exit code, output,
    tag)."""
    proc = start(build_args(**x86_inputs, namespace=namespace, device="a2"), log.open("w"), engine)
    (tag,) = torch_stages_installing(proc, log, 1)
    os.killpg(proc.pid, sig) if sig == signal.SIGKILL else proc.send_signal(sig)
    code = proc.wait(timeout=120)
    return code, log.read_text(), tag


def torch_stages_installing(proc: subprocess.Popen, log: Path, count: int) -> list[str]:
    """Wait until `count` torch stages of the build writing `log` are building and each installs its packages; their
    tags."""
    deadline = time.monotonic() + 900
    building: list[tuple[str, str]] = []
    while time.monotonic() < deadline and proc.poll() is None and len(building) < count:
        building = re.findall(r"\[\d/\d torch\] (\S+): building \(log (\S+)\)", log.read_text())
        time.sleep(1)
    assert len(building) == count, log.read_text()
    inside_the_install([Path(stage_log) for _, stage_log in building])
    return [tag for tag, _ in building]


def inside_the_install(stage_logs: list[Path], timeout: float = 300) -> None:
    """Wait until each torch stage's native stage installs its packages (the 900 MB torch tree: the stage's longest
    step), then a moment more: a signal now lands inside it."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if all(p.is_file() and "install-packages: " not in p.read_text() and
               re.search(r"\[packages \d+/\d+\] RUN .*install-packages", p.read_text()) for p in stage_logs):
            time.sleep(3)
            return
        time.sleep(0.2)
    raise AssertionError(f"no stage got to installing its packages: {stage_logs}")


def _no_build_step_left(timeout: float = 60) -> bool:
    """BuildKit stops a cancelled build's running step: no install-packages process of it is left (its steps run in
    BuildKit's own containers, which `docker ps` does not list)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if subprocess.run(["pgrep", "-f", "install-packages /usr/local/python"], capture_output=True).returncode:
            return True
        time.sleep(2)
    return False


def _building_and_built(out: str) -> tuple[dict[str, int], dict[str, int]]:
    """For each stage tag, the line number where it started building and where it was built."""
    lines = out.splitlines()
    start = {m.group(1): i for i, line in enumerate(lines) if (m := re.search(r"\] (\S+): building", line))}
    done = {m.group(1): i for i, line in enumerate(lines) if (m := re.search(r"\] (\S+): built in", line))}
    return start, done


def test_interrupted_builds_leave_no_tag_and_the_next_run_reuses_what_finished(own_engine, x86_torch_inputs,
                                                                               namespace, tmp_path):
    """One chain and then two side by side, each stopped in its torch stage, then built to the end:
    - Ctrl-C in the A2 chain's torch stage: exit 130, the stage named, no tag, no build step left;
    - A2 and A3 with --jobs 2: the A3 chain does not wait for the A2 one, both torch stages build at once; Ctrl-C:
      exit 130, both named, neither tagged, no build step left;
    - the same again, stopped by `kill -9` of the whole process group: no tag, no build step left;
    - the run after that reuses every stage that had finished and builds the two torch stages: each stage of the two
      chains built once over the four runs, and labelled.
    One test, so the real 900 MB torch stage is built to the end once per device (the base is shared with every
    namespace, the rest is this test's own), on an engine of its own."""
    engine = own_engine.client()
    code, out, tag = _interrupt(x86_torch_inputs, namespace, tmp_path / "ctrl-c.log", signal.SIGINT,
                               own_engine.host)
    assert code == 130, out
    assert "interrupted:" in out and "no tag was set" in out and "Log: " in out, out[-2000:]
    assert "Traceback" not in out
    assert not engine.images.list(name=tag), f"{tag} was tagged"
    # the fourth stage is torch: after the base, the CANN install and CANN
    cann = re.search(rf"\[3/4 cann\] ({re.escape(namespace)}/cann:\S+): built", out)
    assert cann, out
    assert _no_build_step_left()
    built_first = _building_and_built(out)[1]

    log = tmp_path / "jobs-2.log"
    proc = start(build_args(**x86_torch_inputs, namespace=namespace, device="a2,a3", jobs="2"), log.open("w"),
                 own_engine.host)
    torch = torch_stages_installing(proc, log, 2)
    assert tag in torch, torch
    started, built = _building_and_built(log.read_text())
    assert any("/cann-install:" in t and "-a3-" in t for t in started), started
    assert not any("/torch-npu:" in t for t in built), "a torch stage finished before both were building"
    proc.send_signal(signal.SIGINT)
    code = proc.wait(timeout=120)
    out = log.read_text()
    assert code == 130, out[-3000:]
    assert "interrupted: stopped" in out and all(t in out.split("interrupted:", 1)[1] for t in torch), out[-2000:]
    assert "no tag was set for them" in out and "Logs: " in out, out[-2000:]
    assert "Traceback" not in out
    assert re.search(rf"{re.escape(cann.group(1))}: up to date", out), out[-2000:]
    for t in torch:
        assert not engine.images.list(name=t), f"{t} was tagged"
    assert _no_build_step_left()
    built_second = _building_and_built(out)[1]

    log = tmp_path / "kill-9.log"
    proc = start(build_args(**x86_torch_inputs, namespace=namespace, device="a2,a3", jobs="2"), log.open("w"),
                 own_engine.host)
    assert sorted(torch_stages_installing(proc, log, 2)) == sorted(torch)
    os.killpg(proc.pid, signal.SIGKILL)
    assert proc.wait(timeout=120) == -signal.SIGKILL
    assert len(re.findall(r": up to date \(content key", log.read_text())) == 5, log.read_text()[-3000:]
    for t in torch:
        assert not engine.images.list(name=t), f"{t} was tagged"
    assert _no_build_step_left()

    rerun = subprocess.run(build_args(**x86_torch_inputs, namespace=namespace, device="a2,a3", jobs="2"), cwd=ROOT,
                           capture_output=True, text=True, timeout=1800,
                           env={**os.environ, "DOCKER_HOST": own_engine.host})
    assert rerun.returncode == 0, rerun.stdout[-3000:] + rerun.stderr[-3000:]
    # the base and each device's CANN install and CANN
    assert len(re.findall(r": up to date \(content key", rerun.stdout)) == 5, rerun.stdout
    _, rebuilt = _building_and_built(rerun.stdout)
    assert sorted(rebuilt) == sorted(torch), rerun.stdout[-3000:]
    # each stage of the two chains (the base is shared with every namespace): built once, over the four runs
    stages = [t for t in [*built_first, *built_second, *rebuilt] if "/base:" not in t]
    assert len(stages) == len(set(stages)) == 6, stages  # cann-install, cann, torch per device
    for t in stages:
        assert engine.images.get(t).labels["io.ascend-images.content-key"]


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


def test_unreachable_registry(docker_client, ci_builds):
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


def second_engine(size_mb: int):
    """A real second engine whose data root is a loop-mounted file system of `size_mb`."""
    import tempfile

    from tests.fixtures.small_engine import SmallEngine

    # containerd's sockets live below the exec root: a pytest tmp_path is past the 108-byte socket path limit
    engine = SmallEngine(Path(tempfile.mkdtemp(prefix="ai-small-")), size_mb=size_mb)
    try:
        engine.start()
    except (OSError, RuntimeError, subprocess.CalledProcessError) as exc:
        engine.stop()
        if IN_CI:
            pytest.fail(f"CI=true but a small loop-mounted engine could not start: {exc}")
        pytest.skip(f"no loop-mounted engine here: {exc}")
    yield engine
    engine.stop()


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
    tagged = small_engine.docker("images", "--format", "{{.Repository}}", "--filter",
                                 "reference=ascend-images-diskfull/*").stdout
    assert tagged.split() == [], text
    # the second engine left the host's alone (a dockerd started with `--bridge none` deletes docker0)
    docker_client.containers.run("ascend-images/os:debian12-amd64", "true", remove=True)


def test_a_second_engine_builds_every_stage_from_the_stage_cache(docker_client, x86_inputs, registry, empty_engine,
                                                                  namespace, tmp_path):
    """A registry as the shared stage cache (BuildKit's registry cache), with two real engines: the host's engine
    builds the A2 chain and exports each stage's steps there; a second, empty engine (only the OS base images, inputs
    like the CANN directory) builds the same selection and runs no step, every one from the cache, making the same
    images; then a selection that differs only in its profile builds exactly that one stage. Counted from the builds'
    own lines, not assumed."""
    cache = f"{registry.namespace}/stage-cache-test-double"  # the images are built from the fake CANN
    first = subprocess.run(build_args(**x86_inputs, namespace=namespace, device="a2", stage_cache=cache), cwd=ROOT,
                           capture_output=True, text=True, timeout=1800)
    assert first.returncode == 0, first.stdout[-3000:] + first.stderr
    # cann-install, cann, torch (the base: this host has it already). The test's own referer makes its cann-install
    # step run; cann's and torch's steps may come from this engine's cache all the same, since their parents' layers
    # are byte for byte another test's (reproducible builds): made, not reused, and exported either way
    built = [tag for tag in re.findall(rf"\] ({re.escape(namespace)}/\S+): (?:built in|every step from a cache)",
                                       first.stdout) if "/base:" not in tag]
    assert len(built) == 3, first.stdout[-3000:]
    for tag in built:  # each stage's steps in the registry, under its tag without the namespace
        repo, _, version = tag.rpartition(":")
        ref = f"{cache}/{repo.rsplit('/', 1)[-1]}:{version}-buildcache"
        assert docker_client.api.inspect_distribution(ref)["Descriptor"]["digest"].startswith("sha256:"), ref

    for image in ("ascend-images/os:debian12-amd64",):
        empty_engine.load_from_host(image)
    env = {**os.environ, "DOCKER_HOST": empty_engine.host}
    # under another namespace: the cache is named by what a stage is, not by who built it
    second = subprocess.run(build_args(**x86_inputs, namespace="ascend-images-fleet", device="a2", stage_cache=cache),
                            cwd=ROOT, capture_output=True, text=True, env=env, timeout=1800)
    assert second.returncode == 0, second.stdout[-3000:] + second.stderr
    made = re.findall(r"\] (\S+): every step from a cache", second.stdout)  # an empty engine's: the registry's
    renamed = [tag.replace(namespace, "ascend-images-fleet", 1) for tag in built]
    assert sorted(t for t in made if "/base:" not in t) == sorted(renamed), second.stdout[-3000:]
    # the base may be the one stage the second engine builds: the host exports its steps only when it made it (not
    # when it reused it by its content key)
    assert set(re.findall(r"\] (\S+): built in", second.stdout)) <= {"ascend-images-fleet/base:debian12-py3.11-amd64"}
    # the same images as the first engine's (a reproducible build of the same inputs): the same layers and labels,
    # but for the label naming the parent by its tag, whose namespace is each build's own (and so the digests differ;
    # test_reproducible compares digests, on two engines under one namespace)
    for tag, there_tag in zip(built, renamed, strict=True):
        here = docker_client.api.inspect_image(tag)
        there = json.loads(empty_engine.docker("image", "inspect", there_tag).stdout)[0]
        assert here["RootFS"]["Layers"] == there["RootFS"]["Layers"], tag
        labels = [dict(image["Config"]["Labels"]) for image in (here, there)]
        parents = [found.pop("org.opencontainers.image.base.name") for found in labels]
        assert labels[0] == labels[1] and parents[0].replace(namespace, "ascend-images-fleet", 1) == parents[1], tag

    third = subprocess.run(build_args(**x86_inputs, namespace="ascend-images-fleet", device="a2", stage_cache=cache,
                                      profile="debug"), cwd=ROOT, capture_output=True, text=True, env=env, timeout=1800)
    assert third.returncode == 0, third.stdout[-3000:] + third.stderr
    built = re.findall(r"\] (\S+): built in", third.stdout)
    assert len(built) == 1 and built[0].endswith("-debug"), built
