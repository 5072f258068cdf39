"""Docker's environment chooses the engine as the docker CLI chooses it (issue 54, item 5): DOCKER_HOST, else
DOCKER_CONTEXT, else the current context (`docker context use`), else the default socket; the contexts are made here by
the docker CLI itself in a temporary DOCKER_CONFIG, so the file format is Docker's, not ours. Every engine error names
the address really tried, whole, and what chose it, and exits 3. Before, only DOCKER_HOST was read (a context was
ignored: the default socket was used instead), and the address was cut with the cause at 200 characters."""

from __future__ import annotations

import shutil
import socket
import subprocess

import pytest

from tests.unit.inprocess import PROGRAMS

DEFAULT_HOST = "unix:///var/run/docker.sock"  # Docker's default socket (docs.docker.com, dockerd --host)

pytestmark = pytest.mark.skipif(shutil.which("docker") is None, reason="needs the docker CLI (set-up installs it)")


def closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def docker_cli(config, *argv: str) -> None:
    subprocess.run(["docker", *argv], env={"DOCKER_CONFIG": str(config), "PATH": "/usr/local/bin:/usr/bin:/bin"},
                   check=True, capture_output=True, timeout=60)


@pytest.fixture
def config(tmp_path, monkeypatch):
    """A DOCKER_CONFIG of its own with two contexts the docker CLI made, each at a port nothing listens on."""
    directory = tmp_path / "docker-config"
    ports = {"closed-a": closed_port(), "closed-b": closed_port()}
    for name, port in ports.items():
        docker_cli(directory, "context", "create", name, "--docker", f"host=tcp://127.0.0.1:{port}")
    for key in ("DOCKER_HOST", "DOCKER_CONTEXT", "DOCKER_TLS_VERIFY", "DOCKER_CERT_PATH"):
        monkeypatch.delenv(key, raising=False)
    monkeypatch.setenv("DOCKER_CONFIG", str(directory))
    return directory, ports


def test_the_precedence_is_the_docker_clis(config, monkeypatch):
    from ascend_images.builder.endpoint import resolve

    directory, ports = config
    assert (resolve().host, resolve().source) == (DEFAULT_HOST, "DEFAULT")
    docker_cli(directory, "context", "use", "closed-a")
    assert (resolve().host, resolve().context) == (f"tcp://127.0.0.1:{ports['closed-a']}", "closed-a")
    monkeypatch.setenv("DOCKER_CONTEXT", "closed-b")  # the environment over `docker context use`
    assert (resolve().host, resolve().context) == (f"tcp://127.0.0.1:{ports['closed-b']}", "closed-b")
    monkeypatch.setenv("DOCKER_HOST", "tcp://127.0.0.1:9")  # DOCKER_HOST over any context
    assert (resolve().host, resolve().source) == ("tcp://127.0.0.1:9", "DOCKER_HOST")
    monkeypatch.delenv("DOCKER_HOST")
    monkeypatch.setenv("DOCKER_CONTEXT", "default")
    assert resolve().host == DEFAULT_HOST


@pytest.mark.parametrize("program", PROGRAMS.values(), ids=PROGRAMS.keys())
@pytest.mark.parametrize("chosen_by", ["DOCKER_CONTEXT", "docker context use"])
def test_a_context_at_a_closed_port_is_named_and_exits_3(config, monkeypatch, program, chosen_by):
    directory, ports = config
    if chosen_by == "DOCKER_CONTEXT":
        monkeypatch.setenv("DOCKER_CONTEXT", "closed-b")
    else:
        docker_cli(directory, "context", "use", "closed-b")
    code, out, err = program(["inspect", "ascend-images/os:debian12-arm64"])
    assert code == 3 and out == "", err
    assert err.startswith(f"error: no Docker engine answers at tcp://127.0.0.1:{ports['closed-b']} (docker context "
                          f"'closed-b', chosen by {'DOCKER_CONTEXT' if chosen_by == 'DOCKER_CONTEXT' else '`docker'}")
    assert "[Errno 111] Connection refused" in err and err.count("\n") == 1


def test_docker_host_wins_over_the_context_and_is_named(config, monkeypatch):
    directory, _ = config
    docker_cli(directory, "context", "use", "closed-a")
    port = closed_port()
    monkeypatch.setenv("DOCKER_HOST", f"tcp://127.0.0.1:{port}")
    code, _, err = PROGRAMS["ascend-images"](["inspect", "x:1"])
    assert code == 3 and err.startswith(f"error: no Docker engine answers at tcp://127.0.0.1:{port} (from DOCKER_HOST)")


def test_a_context_docker_does_not_have(config, monkeypatch):
    monkeypatch.setenv("DOCKER_CONTEXT", "gone")
    code, _, err = PROGRAMS["ascend-images"](["inspect", "x:1"])
    assert code == 2 and err.startswith("error: docker context 'gone' (from DOCKER_CONTEXT) does not exist"), err


def test_a_long_address_is_named_whole(monkeypatch, tmp_path):
    socket_path = tmp_path / ("a-directory-with-a-long-name-" * 6) / "docker.sock"
    monkeypatch.setenv("DOCKER_HOST", f"unix://{socket_path}")
    code, _, err = PROGRAMS["ascend-images"](["inspect", "x:1"])
    assert code == 3 and f"unix://{socket_path} (from DOCKER_HOST)" in err and err.count("\n") == 1, err


def test_an_ssh_host_goes_through_the_systems_ssh(monkeypatch):
    """ssh:// as the docker CLI does it: the system's ssh (its config, agent, known hosts; docker-py's use_ssh_client);
    a host that does not answer is exit 3 naming it."""
    if shutil.which("ssh") is None:
        pytest.skip("no ssh client")
    port = closed_port()
    monkeypatch.setenv("DOCKER_HOST", f"ssh://nobody@127.0.0.1:{port}")
    code, _, err = PROGRAMS["ascend-images"](["inspect", "x:1"])
    assert code == 3 and f"error: no Docker engine answers at ssh://nobody@127.0.0.1:{port} (from DOCKER_HOST)" in err
    assert "paramiko" not in err


def test_the_sdk_reaches_the_engine_the_cli_reaches(tmp_path, monkeypatch, docker_client):
    """A context the docker CLI made, at the engine this host runs: the SDK's connection (builder.engine.connect)
    reaches the engine `docker info` reaches through the same context."""
    import os

    from ascend_images.builder.engine import connect

    directory = tmp_path / "docker-config"
    host = os.environ.get("DOCKER_HOST") or DEFAULT_HOST
    docker_cli(directory, "context", "create", "here", "--docker", f"host={host}")
    cli = subprocess.run(["docker", "--context", "here", "info", "--format", "{{.ID}}"], capture_output=True,
                         text=True, env={"DOCKER_CONFIG": str(directory), "PATH": "/usr/local/bin:/usr/bin:/bin"},
                         timeout=60)
    assert cli.returncode == 0, cli.stderr
    for key in ("DOCKER_HOST", "DOCKER_TLS_VERIFY", "DOCKER_CERT_PATH"):
        monkeypatch.delenv(key, raising=False)
    monkeypatch.setenv("DOCKER_CONFIG", str(directory))
    monkeypatch.setenv("DOCKER_CONTEXT", "here")
    assert connect(timeout=60).info()["ID"] == cli.stdout.strip()
