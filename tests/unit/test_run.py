import os
import stat

import pytest

from ascend_images.runtime.run import (
    RunError,
    RunSpec,
    check_host,
    check_spec,
    compose_service,
    docker_kwargs,
    docker_run_line,
    parse_devices,
)


def test_parse_devices():
    assert parse_devices("0-3,6") == [0, 1, 2, 3, 6]
    assert parse_devices("5") == [5]
    for bad, message in [("3-1", "goes backwards"), ("0,0", "given twice"), ("a", "is not N or N-M"),
                         ("", "is not N or N-M"), ("1-2-3", "is not N or N-M")]:
        with pytest.raises(RunError, match=message):
            parse_devices(bad)


def test_manual_passthrough_spec():
    spec = RunSpec("img", ("python", "x.py"), (4, 5), ipc_host=True, network_host=True, env={"A": "1"})
    kw = docker_kwargs(spec)
    assert kw["devices"][:2] == ["/dev/davinci4:/dev/davinci4:rwm", "/dev/davinci5:/dev/davinci5:rwm"]
    assert {d.split(":")[0] for d in kw["devices"][2:]} == {"/dev/davinci_manager", "/dev/devmm_svm",
                                                           "/dev/hisi_hdc"}
    # two NPUs: the whole driver tree, read-only (HCCL's topology files and hccn_tool live there)
    assert kw["volumes"]["/usr/local/Ascend/driver"] == {"bind": "/usr/local/Ascend/driver", "mode": "ro"}
    assert "/etc/ascend_install.info" in kw["volumes"] and "/usr/local/dcmi" in kw["volumes"]
    # the container numbers what it sees from 0
    assert kw["environment"]["ASCEND_RT_VISIBLE_DEVICES"] == "0,1"
    assert kw["environment"]["A"] == "1"
    assert kw["ipc_mode"] == "host" and kw["network_mode"] == "host"
    assert "runtime" not in kw


def driver_volumes(spec: RunSpec) -> list[str]:
    return sorted(v for v in docker_kwargs(spec)["volumes"] if v.startswith("/usr/local/Ascend/driver"))


TREE = ["/usr/local/Ascend/driver"]
MINIMAL = ["/usr/local/Ascend/driver/lib64", "/usr/local/Ascend/driver/version.info"]


@pytest.mark.parametrize(("spec", "want"), [
    (RunSpec("img", devices=(0,)), MINIMAL),  # one A2 NPU: ref004's minimal mounts
    (RunSpec("img", devices=(0, 1)), TREE),  # several NPUs: HCCL
    (RunSpec("img", devices=(0,), device="a3", min_devices=2), TREE),  # A3 always
    (RunSpec("img", devices=(0, 1), driver_mounts="minimal"), MINIMAL),  # said explicitly
    (RunSpec("img", devices=(0,), driver_mounts="full"), TREE),
])
def test_driver_mount_rule(spec, want):
    assert driver_volumes(spec) == want


def test_minimal_mounts_for_several_npus_warn():
    assert any("EI0014" in w for w in check_spec(RunSpec("img", devices=(0, 1), driver_mounts="minimal")))


def test_runtime_mode():
    kw = docker_kwargs(RunSpec("img", devices=(0, 1, 2, 3, 5), mode="runtime"))
    assert kw["runtime"] == "ascend"
    assert kw["environment"]["ASCEND_VISIBLE_DEVICES"] == "0,1,2,3,5"
    assert kw["environment"]["ASCEND_RT_VISIBLE_DEVICES"] == "0,1,2,3,4"
    assert "devices" not in kw and "volumes" not in kw


def test_rt_visible_devices_must_fit_what_is_passed():
    with pytest.raises(RunError, match="names 2, but the container sees 2 NPU"):
        check_spec(RunSpec("img", devices=(6, 7), env={"ASCEND_RT_VISIBLE_DEVICES": "0,2"}))
    assert check_spec(RunSpec("img", devices=(6, 7), env={"ASCEND_RT_VISIBLE_DEVICES": "1"})) == []


def test_a3_warns_below_two_devices():
    assert any("a3 run with fewer than 2" in w for w in check_spec(RunSpec("img", devices=(0,), device="a3",
                                                                             min_devices=2)))
    assert check_spec(RunSpec("img", devices=(0, 1), device="a3", min_devices=2)) == []


def test_ray_variables_pass_through(monkeypatch):
    monkeypatch.setenv("MASTER_ADDR", "10.0.0.1")
    monkeypatch.setenv("RANK", "1")
    env = docker_kwargs(RunSpec("img", devices=(0,)))["environment"]
    assert env["MASTER_ADDR"] == "10.0.0.1" and env["RANK"] == "1" and "WORLD_SIZE" not in env


def test_printed_line_and_compose():
    spec = RunSpec("repo/img:tag", ("bash", "-c", "echo hi"), (0, 1), ipc_host=True)
    line = docker_run_line(spec)
    assert line.startswith("docker run --rm -it")
    assert "--device /dev/davinci1 \\\n" in line and "--ipc=host" in line
    assert "-e ASCEND_RT_VISIBLE_DEVICES=0,1" in line
    assert line.endswith("repo/img:tag bash -c 'echo hi'")
    compose = compose_service(spec)
    assert "    devices:\n      - /dev/davinci0:/dev/davinci0" in compose
    assert 'command: ["bash", "-c", "echo hi"]' in compose


def make_host(tmp_path, devices=(0, 1), hal=True):
    """A prepared host tree with real character device nodes (major/minor of /dev/null)."""
    dev = tmp_path / "dev"
    dev.mkdir()
    for name in [*(f"davinci{n}" for n in devices), "davinci_manager", "devmm_svm", "hisi_hdc"]:
        os.mknod(dev / name, 0o666 | stat.S_IFCHR, os.makedev(1, 3))
    driver = tmp_path / "usr/local/Ascend/driver"
    (driver / "lib64/driver").mkdir(parents=True)
    if hal:
        (driver / "lib64/driver/libascend_hal.so").write_bytes(b"")
    (driver / "version.info").write_text("Version=25.5.0\n")
    (driver / "tools").mkdir()
    (driver / "tools/hccn_tool").write_text("#!/bin/sh\necho fake hccn_tool\n")
    (tmp_path / "usr/local/dcmi").mkdir(parents=True)
    (tmp_path / "usr/local/bin").mkdir(parents=True)
    (tmp_path / "usr/local/bin/npu-smi").write_text("#!/bin/sh\necho fake npu-smi\n")
    (tmp_path / "usr/local/bin/npu-smi").chmod(0o755)
    (tmp_path / "etc").mkdir()
    (tmp_path / "etc/ascend_install.info").write_text("Driver_Install_Path_Param=/usr/local/Ascend\n")
    return tmp_path


# mknod needs root; with CI=true not being root is a failure (the test runs and mknod fails), not a skip
needs_root = pytest.mark.skipif(os.geteuid() != 0 and os.environ.get("CI", "").lower() not in ("1", "true", "yes"),
                                reason="mknod needs root")


@needs_root
def test_host_check_passes_on_a_complete_host(tmp_path):
    check_host(RunSpec("img", devices=(0, 1), host_root=make_host(tmp_path)))


@needs_root
def test_host_check_lists_what_is_missing_and_what_is_there(tmp_path):
    root = make_host(tmp_path, devices=(0, 1), hal=False)
    (root / "usr/local/bin/npu-smi").unlink()
    with pytest.raises(RunError) as err:
        check_host(RunSpec("img", devices=(0, 1, 2, 3), host_root=root))
    text = str(err.value)
    assert f"{root}/dev/davinci2 does not exist" in text and f"{root}/dev/davinci3 does not exist" in text
    assert f"{root}/usr/local/bin/npu-smi does not exist" in text
    assert "libascend_hal.so is missing" in text
    assert "NPU nodes on this host: davinci0, davinci1, davinci_manager" in text


@needs_root
def test_host_check_wants_hccn_tool_for_several_npus_and_mounts_hccn_conf_when_there(tmp_path):
    root = make_host(tmp_path)
    (root / "usr/local/Ascend/driver/tools/hccn_tool").unlink()
    check_host(RunSpec("img", devices=(0,), host_root=root))  # one NPU: not needed
    with pytest.raises(RunError, match="hccn_tool is missing"):
        check_host(RunSpec("img", devices=(0, 1), host_root=root))
    assert "/etc/hccn.conf" not in docker_kwargs(RunSpec("img", devices=(0, 1), host_root=root))["volumes"].values()
    (root / "etc/hccn.conf").write_text("address_0=192.168.100.100\n")
    volumes = docker_kwargs(RunSpec("img", devices=(0, 1), host_root=root))["volumes"]
    assert volumes[str(root / "etc/hccn.conf")] == {"bind": "/etc/hccn.conf", "mode": "ro"}


@needs_root
def test_host_check_rejects_a_plain_file_as_device(tmp_path):
    root = make_host(tmp_path)
    (root / "dev/davinci1").unlink()
    (root / "dev/davinci1").write_text("")
    with pytest.raises(RunError, match="davinci1 is not a character device"):
        check_host(RunSpec("img", devices=(0, 1), host_root=root))


def test_runtime_mode_needs_the_runtime():
    with pytest.raises(RunError, match="no 'ascend' runtime .*it has: runc"):
        check_host(RunSpec("img", devices=(0,), mode="runtime"), runtimes={"runc"})
    check_host(RunSpec("img", devices=(0,), mode="runtime"), runtimes={"runc", "ascend"})
