"""`invoke run`'s passthrough against a real container: a prepared host tree with real character device
nodes and a driver version.info, checked from inside the container."""

from __future__ import annotations

import io
import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from ascend_images.runtime.run import RunSpec, check_host, run_container
from tests.conftest import ROOT
from tests.fixtures.signals import default_sigint
from tests.unit.test_run import make_host, needs_root

pytestmark = [pytest.mark.docker, pytest.mark.slow, needs_root]

INSIDE = ("for n in davinci2 davinci3 davinci_manager devmm_svm hisi_hdc; do "
          "[ -c /dev/$n ] && echo dev:$n; done; "
          "ls /usr/local/Ascend/driver/lib64/driver; cat /usr/local/Ascend/driver/version.info; "
          "[ -x /usr/local/bin/npu-smi ] && echo npu-smi:ok; [ -r /etc/ascend_install.info ] && echo info:ok; "
          "[ -d /usr/local/dcmi ] && echo dcmi:ok; echo RT=$ASCEND_RT_VISIBLE_DEVICES")


@pytest.fixture
def a3_image(ci_images):
    """An A3 training base whose HDK floor the prepared host's driver (25.5.0, make_host) meets: the CANN 9.1.0 one
    (floor 25.2.0) sorts first; the SGLang image on CANN 9.0.0 asks for 25.5.1, which that driver is below."""
    return next(tag for tag in ci_images if "/torch-npu:" in tag and "-a3-" in tag)


def test_devices_mounts_and_visible_devices(docker_client, a3_image, tmp_path):
    root = make_host(tmp_path, devices=(0, 1, 2, 3))
    spec = RunSpec(a3_image, ("sh", "-c", INSIDE), (2, 3), host_root=root, shm_size="64m",
                   env={"ASCEND_PREFLIGHT": "strict"})
    check_host(spec)
    out = io.StringIO()
    code = run_container(docker_client, spec, out)
    text = out.getvalue()
    assert code == 0, text
    for name in ("davinci2", "davinci3", "davinci_manager", "devmm_svm", "hisi_hdc"):
        assert f"dev:{name}" in text, text
    assert "libascend_hal.so" in text and "Version=25.5.0" in text
    assert "npu-smi:ok" in text and "info:ok" in text and "dcmi:ok" in text
    assert "RT=0,1" in text


def test_preflight_verdicts_through_run(docker_client, a3_image, tmp_path):
    floor = docker_client.images.get(a3_image).labels["io.ascend-images.hdk-floor"]
    root = make_host(tmp_path, devices=(0, 1))
    spec = RunSpec(a3_image, ("true",), (0, 1), host_root=root, shm_size="64m", env={"ASCEND_PREFLIGHT": "strict"})
    out = io.StringIO()
    assert run_container(docker_client, spec, out) == 0, out.getvalue()
    (root / "usr/local/Ascend/driver/version.info").write_text("Version=24.1.rc2\n")
    out = io.StringIO()
    assert run_container(docker_client, spec, out) == 78
    assert f"host driver 24.1.rc2 is below this image's HDK floor {floor}" in out.getvalue()


def test_exit_code_is_returned(docker_client, a3_image, tmp_path):
    spec = RunSpec(a3_image, ("sh", "-c", "echo out; exit 3"), (0,), host_root=make_host(tmp_path, devices=(0,)),
                   shm_size="64m")
    out = io.StringIO()
    assert run_container(docker_client, spec, out) == 3
    assert "out" in out.getvalue()


# --- the task itself, as users call it: `invoke run ... -- CMD` ------------------------------------------
def invoke_run(*args: str) -> list[str]:
    return [sys.executable, "-m", "invoke", "run", *args]


def test_invoke_run_manual_mode_streams_and_returns_the_exit_code(a3_image, tmp_path):
    root = make_host(tmp_path, devices=(0, 1, 2, 3))
    script = INSIDE + "; [ -r /usr/local/Ascend/driver/tools/hccn_tool ] && echo hccn_tool:ok; exit 5"
    result = subprocess.run(invoke_run("--image", a3_image, "--devices", "2-3", "--host-root", str(root),
                                       "--shm-size", "64m", "--", "sh", "-c", script),
                            cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert result.returncode == 5, result.stdout + result.stderr
    for line in ("dev:davinci2", "dev:davinci3", "RT=0,1", "hccn_tool:ok", "Version=25.5.0"):
        assert line in result.stdout, result.stdout  # 2 NPUs: the whole driver tree, hccn_tool included


@pytest.fixture
def a3_cann_image(ci_build, a3_image) -> str:
    """The CANN stage under `a3_image`: the same entrypoint, environment and labels, half the bytes (no torch) to
    copy into a second engine."""
    return next(stage.tag for stage in ci_build.plan.stages if stage.kind == "cann" and "-a3-" in stage.tag
                and stage.variant.release.cann in a3_image)


@pytest.fixture
def engine_with_the_runtime_double(docker_client, a3_cann_image, tmp_path_factory):
    """A second, empty engine of the test's own with the test-double `ascend` runtime registered (dockerd
    `--add-runtime`), and the A3 CANN image loaded. The host's engine never has the double: there, `invoke run
    --mode runtime` must find the real Ascend Docker Runtime or say it is missing."""
    import tempfile

    from tests.fixtures.small_engine import SmallEngine

    runtime = ROOT / "tests/fixtures/ascend_runtime/ascend-runtime"
    engine = SmallEngine(Path(tempfile.mkdtemp(prefix="ai-runtime-")), size_mb=8192,
                         extra_args=("--add-runtime", f"ascend={runtime}"))
    try:
        engine.start()
        engine.load_from_host(a3_cann_image)
        yield engine
    finally:
        engine.stop()


def test_invoke_run_runtime_mode_starts_through_the_ascend_runtime(engine_with_the_runtime_double, a3_cann_image):
    engine = engine_with_the_runtime_double
    log = Path("/run/ascend-images-test-runtime.log")  # where the double records
    before = log.read_text() if log.exists() else ""
    show = "echo visible=$ASCEND_VISIBLE_DEVICES rt=$ASCEND_RT_VISIBLE_DEVICES"
    env = {**os.environ, "DOCKER_HOST": engine.host}
    result = subprocess.run(invoke_run("--image", a3_cann_image, "--devices", "0-1,3", "--mode", "runtime", "--",
                                       "sh", "-c", show),
                            cwd=ROOT, capture_output=True, text=True, timeout=300, env=env)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "visible=0,1,3 rt=0,1,2" in result.stdout
    recorded = log.read_text()[len(before):]
    assert "ASCEND_VISIBLE_DEVICES=0,1,3" in recorded, recorded  # what the runtime was handed


def test_the_hosts_engine_has_no_test_double_runtime(docker_client):
    """setup-host.sh registers no fake runtime: on the host's engine `--mode runtime` is refused unless the real
    Ascend Docker Runtime is there."""
    runtimes = docker_client.info().get("Runtimes", {})
    registered = runtimes.get("ascend", {}).get("path", "")
    assert "ascend-images-test" not in registered and "tests/fixtures" not in registered, runtimes


def test_ctrl_c_stops_the_container(docker_client, a3_image, tmp_path):
    root = make_host(tmp_path, devices=(0,))
    name = f"ascend-images-test-run-{uuid.uuid4().hex[:8]}"
    proc = subprocess.Popen(invoke_run("--image", a3_image, "--devices", "0", "--host-root", str(root), "--name",
                                       name, "--shm-size", "64m", "--", "sh", "-c", "echo started; exec sleep 300"),
                            cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            preexec_fn=default_sigint)
    assert proc.stdout is not None
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and "started" not in proc.stdout.readline():
        pass
    proc.send_signal(signal.SIGINT)
    assert proc.wait(timeout=60) == 130
    assert not docker_client.containers.list(all=True, filters={"name": name})


def test_invoke_run_detached_with_a_read_only_volume_and_a_restart_policy(docker_client, a3_image, tmp_path):
    """--detach returns once the container runs and leaves it (its restart policy, its logs); -v ...:ro and
    --workdir reach it; the test removes it."""
    root = make_host(tmp_path, devices=(0, 1))
    data = tmp_path / "data"
    data.mkdir()
    (data / "x").write_text("from the host\n")
    name = f"ascend-images-test-detach-{uuid.uuid4().hex[:8]}"
    try:
        result = subprocess.run(invoke_run("--image", a3_image, "--devices", "0-1", "--host-root", str(root),
                                           "--shm-size", "64m", "--name", name, "--detach", "--restart",
                                           "unless-stopped", "-v", f"{data}:/data:ro", "-w", "/data", "--",
                                           "sh", "-c", "cat x; pwd; touch y || echo read-only; exec sleep 300"),
                                cwd=ROOT, capture_output=True, text=True, timeout=300)
        assert result.returncode == 0, result.stdout + result.stderr
        assert f"started {name}" in result.stdout
        container = docker_client.containers.get(name)
        assert container.attrs["HostConfig"]["RestartPolicy"]["Name"] == "unless-stopped"
        deadline = time.monotonic() + 120
        logs = ""
        while time.monotonic() < deadline and "read-only" not in logs:
            time.sleep(1)
            logs = container.logs().decode(errors="replace")
        assert "from the host" in logs and "/data" in logs and "read-only" in logs, logs
        container.reload()
        assert container.status == "running"  # detached: still there after invoke returned
    finally:
        for leftover in docker_client.containers.list(all=True, filters={"name": name}):
            leftover.remove(force=True)


def test_run_build_makes_just_the_overlay_a_whole_build_would(docker_client, a3_image, fake_cann_dir,
                                                               fake_artifacts_dir, build_secrets, work_dir, tmp_path):
    """`run -e K=V` runs the overlay image of K=V: refused while the engine lacks it (saying --build would make
    it), made by --build over the image below (nothing else built), and the very image `invoke build` of the same
    selection makes: a whole build afterwards runs no step, and gives the overlay the same digest."""
    from ascend_images.stages.names import TEST_DOUBLE_LABEL
    from tests.conftest import TEST_ARCH, TEST_NAMESPACE, build_selection_here

    probe = f"ASCEND_IMAGES_RUN_BUILD=x{uuid.uuid4().hex[:8]}"
    selection = {"device": "a3", "backend": "none", "release": "cann9.1.0-pt2.10.0"}
    flags = [f"--{k}={v}" for k, v in selection.items()]
    args = [*flags, f"--arch={TEST_ARCH}", f"--namespace={TEST_NAMESPACE}", "-e", probe, "--devices", "0-1",
            "--host-root", str(make_host(tmp_path, devices=(0, 1))), "--shm-size", "64m", "--",
            "sh", "-c", "echo ran in $0"]
    refused = subprocess.run(invoke_run(*args), cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert refused.returncode != 0, refused.stdout
    assert "is not on this engine" in refused.stderr and "add --build" in refused.stderr, refused.stderr
    overlay = None
    try:
        ran = subprocess.run(invoke_run("--build", *args), cwd=ROOT, capture_output=True, text=True, timeout=900)
        assert ran.returncode == 0, ran.stdout + ran.stderr
        assert "ran in sh" in ran.stdout
        building = next(line for line in ran.stderr.splitlines() if line.startswith("building the overlay "))
        overlay, below = building.removeprefix("building the overlay ").split(" over ")
        assert below == a3_image  # over the image already here, not a chain of its own
        image = docker_client.images.get(overlay)
        assert probe in image.attrs["Config"]["Env"]
        # an --env overlay alone keeps the default profile, production (ref000's level, written out by hand), and
        # the `none` backend preloads no allocator
        assert "ASCEND_GLOBAL_LOG_LEVEL=3" in image.attrs["Config"]["Env"]
        assert not [e for e in image.attrs["Config"]["Env"] if e.startswith("LD_PRELOAD=")], image.attrs["Config"]
        assert image.labels.get(TEST_DOUBLE_LABEL)  # made from doubles below: never publishable either
        made = image.id
        plan, results = build_selection_here({**selection, "env": [probe]}, fake_cann_dir, build_secrets,
                                             work_dir / "overlay", artifacts_dir=fake_artifacts_dir)
        top = {r.tag: r for r in results}[plan.top(next(iter(plan.tops))).tag]
        # the same image, digest for digest (its steps over a parent given as a target are another cache key than
        # over the same parent given as an image: BuildKit may run them again, to the same bytes), over the very
        # image below that `run --build` found here
        assert (top.tag, top.image_id) == (overlay, made)
        below_id = docker_client.images.get(a3_image).id
        assert {r.tag: r.image_id for r in results}[a3_image] == below_id
    finally:
        if overlay:
            docker_client.images.remove(overlay, force=True)
