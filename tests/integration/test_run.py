"""`invoke run`'s passthrough against a real container: a prepared host tree with real character device
nodes and a driver version.info, checked from inside the container."""

from __future__ import annotations

import io

import pytest

from ascend_images.run import RunSpec, check_host, run_container
from tests.unit.test_run import make_host, needs_root

pytestmark = [pytest.mark.docker, pytest.mark.slow, needs_root]

INSIDE = ("for n in davinci2 davinci3 davinci_manager devmm_svm hisi_hdc; do "
          "[ -c /dev/$n ] && echo dev:$n; done; "
          "ls /usr/local/Ascend/driver/lib64/driver; cat /usr/local/Ascend/driver/version.info; "
          "[ -x /usr/local/bin/npu-smi ] && echo npu-smi:ok; [ -r /etc/ascend_install.info ] && echo info:ok; "
          "[ -d /usr/local/dcmi ] && echo dcmi:ok; echo RT=$ASCEND_RT_VISIBLE_DEVICES")


@pytest.fixture
def a3_image(ci_images):
    return next(tag for tag in ci_images if "-a3-" in tag)


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
