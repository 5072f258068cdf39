"""`invoke run`'s serving flags as `docker run` spells them (--volume, --publish, --detach, --restart, --workdir):
parsed, refused when wrong, and the same in the SDK call, the printed line and the compose service."""

import os

import pytest
import yaml

from ascend_images.runtime.compose import compose_service
from ascend_images.runtime.run import RunSpec, check_host, check_spec, docker_kwargs, docker_run_line
from ascend_images.runtime.runflags import (
    Port,
    RunError,
    Volume,
    parse_publish,
    parse_restart,
    parse_volume,
)
from tests.unit.test_run import SERVING, make_host, needs_root


# --- serving: --volume, --publish, --detach, --restart, --workdir, as docker run spells them ----------------
def test_parse_volume():
    assert parse_volume("/data/models:/models:ro") == Volume("/data/models", "/models", True)
    assert parse_volume("/data/x:/x") == Volume("/data/x", "/x", False)
    assert parse_volume("/data/x:/x/:rw") == Volume("/data/x", "/x", False)
    assert parse_volume("./models:/models").host == os.path.abspath("models")  # relative: from here, as docker
    for bad, message in [("/a", "give HOST:CONTAINER"), ("/a:/b:ro:x", "give HOST:CONTAINER"),
                         (":/b", "give HOST:CONTAINER"), ("/a:b", "container path 'b' must be absolute"),
                         ("/a:/b:z", "mode 'z': only ro"), ("/a:/b:RO", "mode 'RO': only ro"),
                         ("models:/m", "named volumes are not supported")]:
        with pytest.raises(RunError, match=message) as err:
            parse_volume(bad)
        assert str(err.value).startswith(f"--volume {bad!r}")  # the flag and what was given


def test_parse_publish():
    assert parse_publish("127.0.0.1:18000:8000") == Port(18000, 8000, "tcp", "127.0.0.1")
    assert parse_publish("8080:80/udp") == Port(8080, 80, "udp")
    assert parse_publish("[::1]:8080:80").publish() == "[::1]:8080:80"
    assert parse_publish("1:65535/tcp").publish() == "1:65535"
    # docker run -p's other forms (docs.docker.com, "Publishing ports"): a container port alone, an address with a
    # port Docker picks, equal ranges, sctp
    assert parse_publish("8000") == Port(None, 8000)
    assert parse_publish("127.0.0.1::80") == Port(None, 80, "tcp", "127.0.0.1")
    assert parse_publish("8000-8010:9000-9010").mappings()[-1] == (9010, 8010)
    assert parse_publish("80:80/sctp").publish() == "80:80/sctp"
    for bad, message in [("0:80", "port 0 is outside 1-65535"), ("80:65536", "port 65536 is outside"),
                         ("80:80/icmp", "protocol 'icmp': tcp, udp or sctp"),
                         ("999.1.1.1:80:80", "'999.1.1.1' is not an IP address"), ("a:80:80", "'a' is not an IP"),
                         ("8000-8010:80", "a host port range for one container port"),
                         ("8000-8002:80-81", "ranges differ in length"), (":80", "the host port is empty"),
                         ("x", "the container port 'x' is not a port or a range")]:
        with pytest.raises(RunError, match=message) as err:
            parse_publish(bad)
        assert str(err.value).startswith(f"--publish {bad!r}")


def test_parse_restart():
    for good in ("no", "always", "unless-stopped", "on-failure", "on-failure:5"):
        assert parse_restart(good) == good
    for bad in ("sometimes", "always:3", "on-failure:x", "on-failure:", ""):
        with pytest.raises(RunError, match="valid: no, on-failure\\[:N\\], always, unless-stopped"):
            parse_restart(bad)


def test_serving_flags_reach_the_sdk_call():
    from docker.models.containers import _create_container_args

    kw = docker_kwargs(SERVING)
    assert kw["volumes"][-2:] == ["/data/models:/models:ro", "/data/cache:/cache"]
    assert kw["ports"] == {"8000/tcp": [("127.0.0.1", 18000), 18001], "53/udp": [5353]}
    assert kw["restart_policy"] == {"Name": "on-failure", "MaximumRetryCount": 3}
    assert kw["working_dir"] == "/srv"
    # what the docker SDK makes of them, offline: the engine's create request
    create = _create_container_args({**kw, "detach": True, "version": "1.44"})
    host = create["host_config"]
    assert host["Binds"][-2:] == ["/data/models:/models:ro", "/data/cache:/cache"]
    assert "/usr/local/Ascend/driver/lib64:/usr/local/Ascend/driver/lib64:ro" in host["Binds"]
    assert host["PortBindings"] == {"8000/tcp": [{"HostIp": "127.0.0.1", "HostPort": "18000"},
                                                 {"HostIp": "", "HostPort": "18001"}],
                                    "53/udp": [{"HostIp": "", "HostPort": "5353"}]}
    assert host["RestartPolicy"] == {"Name": "on-failure", "MaximumRetryCount": 3}
    assert create["working_dir"] == "/srv"


def test_serving_flags_reach_the_printed_line():
    line = docker_run_line(SERVING)
    assert line.startswith("docker run -d \\\n")
    assert "--rm" not in line and "-it" not in line  # Docker refuses --restart with --rm; a detached run stays
    for part in ("--name serve", "--restart on-failure:3", "-v /data/models:/models:ro", "-v /data/cache:/cache",
                 "-p 127.0.0.1:18000:8000", "-p 18001:8000", "-p 5353:53/udp", "--workdir /srv"):
        assert f"  {part} \\\n" in line, (part, line)
    assert line.endswith("repo/sglang:tag python -m http.server 8000")


def test_serving_flags_reach_the_compose_service():

    service = yaml.safe_load(compose_service(SERVING))["services"]["ascend"]
    assert service["restart"] == "on-failure:3" and service["working_dir"] == "/srv"
    assert service["volumes"][-2:] == ["/data/models:/models:ro", "/data/cache:/cache"]
    assert service["ports"] == ["127.0.0.1:18000:8000", "18001:8000", "5353:53/udp"]
    assert service["environment"] == {"ASCEND_RT_VISIBLE_DEVICES": "0"}
    assert service["command"] == ["python", "-m", "http.server", "8000"]
    # `no` is a boolean to YAML 1.1: quoted, it stays the string compose wants
    assert yaml.safe_load(compose_service(RunSpec("i", devices=(0,), detach=True, restart="no")))[
        "services"]["ascend"]["restart"] == "no"


def test_runtime_mode_keeps_the_volumes():
    kw = docker_kwargs(RunSpec("img", devices=(0,), mode="runtime", volumes=(Volume("/m", "/models", True),)))
    assert kw["volumes"] == ["/m:/models:ro"] and kw["runtime"] == "ascend"


def test_restart_needs_detach_and_workdir_is_absolute():
    with pytest.raises(RunError, match="--restart always needs --detach"):
        check_spec(RunSpec("img", devices=(0,), restart="always"))
    assert check_spec(RunSpec("img", devices=(0,), restart="always", detach=True)) == []
    with pytest.raises(RunError, match="--workdir 'srv' must be an absolute path"):
        check_spec(RunSpec("img", devices=(0,), workdir="srv"))


def test_a_mount_point_is_given_once():
    with pytest.raises(RunError, match="--volume /x:/usr/local/dcmi: /usr/local/dcmi is already a driver or tool"):
        check_spec(RunSpec("img", devices=(0,), volumes=(Volume("/x", "/usr/local/dcmi"),)))
    with pytest.raises(RunError, match="/m is already the target of --volume /a:/m"):
        check_spec(RunSpec("img", devices=(0,), volumes=(Volume("/a", "/m"), Volume("/b", "/m"))))
    with pytest.raises(RunError, match="host port 80/tcp given twice"):
        check_spec(RunSpec("img", devices=(0,), ports=(Port(80, 8000), Port(80, 8001))))
    assert check_spec(RunSpec("img", devices=(0,), ports=(Port(80, 8000), Port(80, 8000, "udp")))) == []


def test_publish_with_host_network_warns():
    assert any("--network-host" in w for w in check_spec(RunSpec("img", devices=(0,), network_host=True,
                                                                 ports=(Port(80, 80),))))


def test_volume_host_path_must_exist_in_either_mode(tmp_path):
    (tmp_path / "models").mkdir()
    spec = RunSpec("img", devices=(0,), mode="runtime", volumes=(Volume(str(tmp_path / "models"), "/models", True),
                                                                 Volume(str(tmp_path / "gone"), "/gone")))
    with pytest.raises(RunError) as err:
        check_host(spec, runtimes={"runc", "ascend"})
    assert f"--volume {tmp_path}/gone:/gone: the host path {tmp_path}/gone does not exist" in str(err.value)
    assert "models" not in str(err.value)


@needs_root
def test_volume_host_path_is_checked_with_the_passthrough(tmp_path):
    root = make_host(tmp_path)
    spec = RunSpec("img", devices=(0,), host_root=root, volumes=(Volume(str(tmp_path / "nope"), "/models", True),))
    with pytest.raises(RunError, match=f"--volume {tmp_path}/nope:/models:ro: the host path {tmp_path}/nope does"):
        check_host(spec)
