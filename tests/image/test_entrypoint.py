"""The entrypoint every image has, checked by running the image: tini as PID 1, `docker stop` under 3 s, the
command's exit code, and the preflight's verdicts on the driver floor and the device's control nodes."""

from __future__ import annotations

import pytest

pytestmark = [pytest.mark.docker, pytest.mark.slow]


def test_pid1_is_tini(host):
    argv = host.file("/proc/1/cmdline").content_string.split("\0")
    if "qemu" in argv[0]:  # under binfmt emulation PID 1 is qemu running the program named next
        argv = argv[1:]
    assert argv[0].endswith("/tini"), argv


def test_stop_is_fast(docker_client, image):
    import time

    box = docker_client.containers.run(image, ["sh", "-c", "echo ready; exec sleep 300"], detach=True)
    try:
        deadline = time.monotonic() + 60
        while b"ready" not in box.logs() and time.monotonic() < deadline:
            time.sleep(0.2)
        started = time.monotonic()
        box.stop(timeout=10)
        assert time.monotonic() - started < 3
    finally:
        box.remove(force=True)


def test_exit_code_is_the_commands(docker_client, image):
    box = docker_client.containers.run(image, ["sh", "-c", "exit 7"], detach=True)
    try:
        assert box.wait(timeout=120)["StatusCode"] == 7
    finally:
        box.remove(force=True)


def run_preflight(docker_client, image, tmp_path, driver, mode, devices=True,
                  nodes=("davinci0", "davinci_manager", "devmm_svm", "hisi_hdc")):
    info = tmp_path / "version.info"
    info.write_text(f"Version={driver}\n")
    kwargs = {"devices": [f"/dev/null:/dev/{n}" for n in nodes]} if devices else {}
    box = docker_client.containers.run(image, ["true"], detach=True, environment={"ASCEND_PREFLIGHT": mode},
                                       volumes={str(info): {"bind": "/usr/local/Ascend/driver/version.info",
                                                            "mode": "ro"}}, **kwargs)
    try:
        code = box.wait(timeout=120)["StatusCode"]
        return code, box.logs(stdout=False, stderr=True).decode()
    finally:
        box.remove(force=True)


def test_preflight_driver_below_floor(docker_client, image, variant, tmp_path):
    code, err = run_preflight(docker_client, image, tmp_path, "24.1.rc2", "warn")
    assert code == 0 and f"host driver 24.1.rc2 is below this image's HDK floor {variant.hdk_floor}" in err
    code, err = run_preflight(docker_client, image, tmp_path, "24.1.rc2", "strict")
    assert code == 78 and "strict mode; not starting" in err


def test_preflight_driver_at_floor_passes_strict(docker_client, image, variant, tmp_path):
    code, err = run_preflight(docker_client, image, tmp_path, str(variant.hdk_floor).lower(), "strict")
    assert code == 0, err
    assert err == ""


def test_preflight_wants_the_devices_own_control_nodes(docker_client, image, tmp_path):
    """Strict mode passes with the image's device's own nodes and names the one missing: written out by hand, A2's and
    A3's are davinci_manager, devmm_svm and hisi_hdc (ref004), the 950's have no devmm_svm (Ascend/mind-cluster's
    ascend-docker-runtime, ascend910A5ManagerDevices)."""
    from tests.image.test_expected import CONTROL_NODES

    device = docker_client.images.get(image).labels["io.ascend-images.device"]
    own = CONTROL_NODES[device].split()
    code, err = run_preflight(docker_client, image, tmp_path, "26.1.0", "strict", nodes=("davinci0", *own))
    assert code == 0, err
    code, err = run_preflight(docker_client, image, tmp_path, "26.1.0", "strict", nodes=("davinci0", *own[1:]))
    assert code == 78 and f"/dev/{own[0]} is missing" in err, err
