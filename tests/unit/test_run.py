import os
import stat

import pytest
import yaml

from ascend_images.runtime.compose import compose_service
from ascend_images.runtime.run import RunSpec, check_host, check_spec, docker_kwargs, docker_run_line, run_container
from ascend_images.runtime.runflags import (
    Port,
    RunError,
    Volume,
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
    assert "/usr/local/Ascend/driver:/usr/local/Ascend/driver:ro" in kw["volumes"]
    assert "/etc/ascend_install.info:/etc/ascend_install.info:ro" in kw["volumes"]
    assert "/usr/local/dcmi:/usr/local/dcmi:ro" in kw["volumes"]
    # the container numbers what it sees from 0
    assert kw["environment"]["ASCEND_RT_VISIBLE_DEVICES"] == "0,1"
    assert kw["environment"]["A"] == "1"
    assert kw["ipc_mode"] == "host" and kw["network_mode"] == "host"
    assert "runtime" not in kw


def driver_volumes(spec: RunSpec) -> list[str]:
    return sorted(v.split(":")[0] for v in docker_kwargs(spec)["volumes"] if v.startswith("/usr/local/Ascend/driver"))


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
    assert yaml.safe_load(compose)["services"]["ascend"]["devices"][0] == "/dev/davinci0:/dev/davinci0"
    assert yaml.safe_load(compose)["services"]["ascend"]["command"] == ["bash", "-c", "echo hi"]


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
    assert not any(v.endswith(":/etc/hccn.conf:ro")
                   for v in docker_kwargs(RunSpec("img", devices=(0, 1), host_root=root))["volumes"])
    (root / "etc/hccn.conf").write_text("address_0=192.168.100.100\n")
    volumes = docker_kwargs(RunSpec("img", devices=(0, 1), host_root=root))["volumes"]
    assert f"{root}/etc/hccn.conf:/etc/hccn.conf:ro" in volumes


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


SERVING = RunSpec("repo/sglang:tag", ("python", "-m", "http.server", "8000"), (0,),
                  volumes=(Volume("/data/models", "/models", True), Volume("/data/cache", "/cache")),
                  ports=(Port(18000, 8000, "tcp", "127.0.0.1"), Port(18001, 8000), Port(5353, 53, "udp")),
                  detach=True, restart="on-failure:3", workdir="/srv", name="serve")


class FakeContainer:
    def __init__(self, fail_start=False):
        self.name, self.id, self.calls, self.fail_start = "serve", "0123456789abcdef", [], fail_start

    def start(self):
        self.calls.append("start")
        if self.fail_start:
            raise RuntimeError("port is already allocated")

    def logs(self, **_):
        self.calls.append("logs")
        return iter([b"hi\n"])

    def wait(self):
        return {"StatusCode": 0}

    def remove(self, force=False):
        self.calls.append("remove")


class FakeClient:
    def __init__(self, container):
        self.container, self.created = container, None
        self.containers = self

    def create(self, **kwargs):
        self.created = kwargs
        return self.container


def test_detached_run_starts_says_its_name_and_leaves_it():
    import io

    client, out = FakeClient(FakeContainer()), io.StringIO()
    assert run_container(client, SERVING, out) == 0
    assert client.container.calls == ["start"]  # no log following, not removed
    assert "started serve (0123456789ab)" in out.getvalue() and "docker rm -f serve" in out.getvalue()
    assert client.created["restart_policy"] == {"Name": "on-failure", "MaximumRetryCount": 3}
    failing = FakeClient(FakeContainer(fail_start=True))
    with pytest.raises(RuntimeError, match="already allocated"):
        run_container(failing, SERVING, io.StringIO())
    assert failing.container.calls == ["start", "remove"]  # a container that never ran is not left behind
    foreground = FakeClient(FakeContainer())
    assert run_container(foreground, RunSpec("img", devices=(0,)), io.StringIO()) == 0
    assert foreground.container.calls == ["start", "logs", "remove"]


# what the user typed -> what the file must hold, written by hand
AWKWARD = {
    "QUOTES": ("say \"hi\" and 'bye'", "say \"hi\" and 'bye'", "say \"hi\" and 'bye'"),
    "COLON": ("key: value", "key: value", "key: value"),
    "HASH": ("a # not a comment", "a # not a comment", "a # not a comment"),
    "DOLLAR": ("cost $HOME and ${PATH}", "cost $$HOME and $${PATH}", "cost $$HOME and $${PATH}"),
    "K8S_REF": ("$(HOME)/x", "$$(HOME)/x", "$$(HOME)/x"),
    "DOUBLED": ("a$$b", "a$$$$b", "a$$$$b"),
    "TRAILING": ("cost 5$", "cost 5$$", "cost 5$$"),
    "UNICODE": ("Grüße 中文 ✓", "Grüße 中文 ✓", "Grüße 中文 ✓"),
    "BOOL_LIKE": ("no", "no", "no"),
}


def test_awkward_values_round_trip_through_compose_and_k8s():
    from ascend_images.runtime.k8s import k8s_yaml

    spec = RunSpec("repo/img:tag", ("echo", "$HOME: $(HOME) # x"), (0,),
                   env={k: typed for k, (typed, _, _) in AWKWARD.items()})
    service = yaml.safe_load(compose_service(spec))["services"]["ascend"]
    assert {k: service["environment"][k] for k in AWKWARD} == {k: c for k, (_, c, _) in AWKWARD.items()}
    assert service["command"] == ["echo", "$$HOME: $$(HOME) # x"]
    pod = yaml.safe_load(k8s_yaml(spec, "huawei.com/Ascend910"))["spec"]
    container = pod["containers"][0]
    env = {e["name"]: e["value"] for e in container["env"]}
    assert {k: env[k] for k in AWKWARD} == {k: k8s for k, (_, _, k8s) in AWKWARD.items()}
    assert container["args"] == ["echo", "$$HOME: $$(HOME) # x"]


def test_a_newline_in_an_env_value_is_refused():
    from ascend_images.errors import AscendImagesError
    from ascend_images.matrix.selection import parse_env_overrides

    with pytest.raises(AscendImagesError, match=r"--env X: the value holds the control character"):
        parse_env_overrides(["X=one\ntwo"])


def a5_host(tmp_path, ub=True):
    """A 950 host as Ascend/mind-cluster's default mount table (appendix.md Table 6) has it: no devmm_svm; the UB
    devices as directories of nodes (addUBDevice walks /dev/ummu and /dev/uburma)."""
    root = make_host(tmp_path)
    (root / "dev/devmm_svm").unlink()
    if ub:
        for directory in ("ummu", "uburma"):
            (root / "dev" / directory).mkdir()
            os.mknod(root / "dev" / directory / f"{directory}0", 0o666 | stat.S_IFCHR, os.makedev(1, 3))
    (root / "etc/hccl_rootinfo.json").write_text("{}\n")
    return root


@needs_root
def test_the_950_passes_its_own_nodes_and_mounts(tmp_path):
    """What CCI's 950 run example and mind-cluster pass, written out by hand: davinciN, davinci_manager and hisi_hdc,
    never devmm_svm; /dev/ummu and /dev/uburma when the host has them; /etc/hccl_rootinfo.json read-only when there.
    The device plugin's resource is huawei.com/npu."""
    from tests.unit.inprocess import run_ascend_images

    root = a5_host(tmp_path)
    argv = ["run", "--print", "--device", "a5", "--devices", "0-1", "--host-root", str(root), "--format"]
    code, out, err = run_ascend_images([*argv, "docker"])
    assert code == 0, err
    nodes = {line.split()[1].split(":")[1] for line in out.splitlines() if line.strip().startswith("--device ")}
    assert nodes == {"/dev/davinci0", "/dev/davinci1", "/dev/davinci_manager", "/dev/hisi_hdc", "/dev/ummu",
                     "/dev/uburma"}
    assert f"-v {root}/etc/hccl_rootinfo.json:/etc/hccl_rootinfo.json:ro" in out
    compose = yaml.safe_load(run_ascend_images([*argv, "compose"])[1])["services"]["ascend"]
    assert {d.split(":")[1] for d in compose["devices"]} == nodes
    k8s = yaml.safe_load(run_ascend_images([*argv, "k8s"])[1])
    assert k8s["spec"]["containers"][0]["resources"]["limits"] == {"huawei.com/npu": 2}
    # the host check takes the UB directories and wants no devmm_svm
    check_host(RunSpec("img", devices=(0, 1), host_root=root, control_nodes=("davinci_manager", "hisi_hdc"),
                       optional_nodes=("ummu", "uburma")))
    # an A3 line on the same host still asks for devmm_svm, so the check above is the 950's list at work
    with pytest.raises(RunError, match="devmm_svm does not exist"):
        check_host(RunSpec("img", devices=(0, 1), host_root=root))


@needs_root
def test_a_950_host_without_ub_devices_is_told_and_still_runs(tmp_path):
    from tests.unit.inprocess import run_ascend_images

    root = a5_host(tmp_path, ub=False)
    code, out, err = run_ascend_images(["run", "--print", "--device", "a5", "--devices", "0", "--host-root",
                                        str(root), "--format", "docker"])
    assert code == 0, err
    assert "/dev/ummu" not in out and "/dev/uburma" not in out
    assert "warning: /dev/ummu and /dev/uburma: not on this host, so not passed" in err
