"""The entrypoint's preflight and the profile snippet are plain sh/bash: run them on the host."""

import os
import subprocess
from pathlib import Path

import pytest

ROOTFS = Path(__file__).resolve().parents[2] / "images" / "common" / "rootfs"
PREFLIGHT = ROOTFS / "usr/local/libexec/ascend-images/preflight"


def run_preflight(tmp_path, mode, driver=None, devices=(), floor="25.3.RC1", control_nodes=None):
    dev = tmp_path / "dev"
    dev.mkdir(parents=True, exist_ok=True)
    for name in devices:
        (dev / name).touch()
    info = tmp_path / "version.info"
    if driver is not None:
        info.write_text(f"Version={driver}\nascendhal_version=7.35.23\n")
    env = {"PATH": os.environ["PATH"], "ASCEND_PREFLIGHT": mode, "ASCEND_IMAGES_HDK_FLOOR": floor,
           "ASCEND_DRIVER_VERSION_INFO": str(info), "ASCEND_DEV_DIR": str(dev)}
    if control_nodes is not None:
        env["ASCEND_IMAGES_CONTROL_NODES"] = control_nodes
    return subprocess.run(["sh", str(PREFLIGHT)], env=env, capture_output=True, text=True)


ALL_DEVICES = ("davinci0", "davinci_manager", "devmm_svm", "hisi_hdc")


@pytest.mark.parametrize("driver,ok", [("25.3.rc1", True), ("25.5.0", True), ("24.1.rc2", False),
                                       ("25.2.0", False), ("26.0.RC1", True)])
def test_strict_driver_floor(tmp_path, driver, ok):
    result = run_preflight(tmp_path, "strict", driver, ALL_DEVICES)
    assert (result.returncode == 0) is ok, result.stderr
    if not ok:
        assert f"host driver {driver} is below this image's HDK floor 25.3.RC1" in result.stderr


def test_warn_goes_on_and_reports(tmp_path):
    result = run_preflight(tmp_path, "warn", "24.1.rc2")
    assert result.returncode == 0
    assert "below this image's HDK floor" in result.stderr
    assert "no NPU device nodes" in result.stderr


def test_missing_companion_nodes(tmp_path):
    result = run_preflight(tmp_path, "strict", "25.5.0", ("davinci0", "davinci_manager"))
    assert result.returncode == 78
    assert "devmm_svm is missing" in result.stderr and "hisi_hdc is missing" in result.stderr


def test_the_950s_control_nodes_have_no_devmm_svm(tmp_path):
    """A 950 host has no /dev/devmm_svm (Ascend/mind-cluster ascend-docker-runtime process.go: the A5 manager devices
    are hisi_hdc alone, beside davinci_manager): its image's list, not A2's, is what strict mode checks."""
    nodes = ("davinci0", "davinci_manager", "hisi_hdc")
    assert run_preflight(tmp_path, "strict", "25.5.0", nodes, control_nodes="davinci_manager hisi_hdc").returncode == 0
    a2 = run_preflight(tmp_path, "strict", "25.5.0", nodes)
    assert a2.returncode == 78 and "devmm_svm is missing" in a2.stderr
    lacking = run_preflight(tmp_path / "without-hisi-hdc", "strict", "25.5.0", ("davinci0", "davinci_manager"),
                            control_nodes="davinci_manager hisi_hdc")
    assert lacking.returncode == 78 and "hisi_hdc is missing" in lacking.stderr and "devmm_svm" not in lacking.stderr


def test_off_and_bad_mode(tmp_path):
    assert run_preflight(tmp_path, "off", "1.0.0").returncode == 0
    bad = run_preflight(tmp_path, "loud")
    assert bad.returncode == 78 and "not one of warn, strict, off" in bad.stderr


def test_profile_snippet_is_idempotent(tmp_path):
    script = tmp_path / "set_env.sh"
    script.write_text('export PATH=/opt/ascend/bin:$PATH\nexport LD_LIBRARY_PATH=/opt/ascend/lib:$LD_LIBRARY_PATH\n'
                      'export ABI_ARG="$1"\n')
    scripts = tmp_path / "env-scripts"
    scripts.write_text(f"{script} --cxx_abi=1\n")
    snippet = (ROOTFS / "usr/local/lib/ascend-images/profile.bash").read_text().replace(
        "/etc/ascend-images/env-scripts", str(scripts))
    (tmp_path / "profile.bash").write_text(snippet)
    cmd = (f"source {tmp_path}/profile.bash; a=$PATH:$LD_LIBRARY_PATH:$ABI_ARG; source {tmp_path}/profile.bash; "
           f"source {tmp_path}/profile.bash; echo \"$a\"; echo \"$PATH:$LD_LIBRARY_PATH:$ABI_ARG\"")
    env = {"PATH": "/opt/ascend/bin:/usr/local/python/bin:/usr/bin:/bin", "LD_LIBRARY_PATH": "/opt/ascend/lib"}
    out = subprocess.run(["bash", "--noprofile", "--norc", "-c", cmd], env=env, capture_output=True, text=True)
    first, last = out.stdout.splitlines()
    assert first == last == "/opt/ascend/bin:/usr/local/python/bin:/usr/bin:/bin:/opt/ascend/lib:--cxx_abi=1"
    # a login shell whose /etc/profile reset PATH gets the image's Python back, ahead of the OS's
    env["PATH"] = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
    out = subprocess.run(["bash", "--noprofile", "--norc", "-c", f"source {tmp_path}/profile.bash; echo $PATH"],
                         env=env, capture_output=True, text=True)
    assert out.stdout.strip() == "/opt/ascend/bin:/usr/local/python/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:" \
        "/usr/bin:/sbin:/bin"
