"""README's set-up on the host it names (issue 41): a stock Debian 12 root (debootstrap minbase plus Debian's python3,
nothing else) runs scripts/setup-venv.sh, the Python part of scripts/setup-host.sh, and then the commands README
gives work, from any directory. Debian's python3 has no pip and refuses installs into the system (PEP 668): the
script must make a venv of its own and never touch the system's Python.

The root is the native-arch debootstrap image the other tests use, run with the host's network; the checkout is
copied in (this tree, as a fresh clone holds it). pip inside trusts the host's CA bundle: this machine reaches PyPI
through a TLS proxy (the same bundle builds get)."""

from __future__ import annotations

import io
import subprocess
import tarfile

import pytest

from tests.conftest import HOST_CA, ROOT

pytestmark = [pytest.mark.docker, pytest.mark.network, pytest.mark.slow]


def checkout_tar() -> bytes:
    """The tracked files of this tree as they are now (a fresh clone's content, uncommitted edits included)."""
    listed = subprocess.run(["git", "-C", str(ROOT), "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
                            capture_output=True, check=True).stdout.split(b"\0")
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as tar:
        for name in filter(None, (n.decode() for n in listed)):
            path = ROOT / name
            if path.is_file():
                tar.add(path, arcname=f"ascend-images/{name}", recursive=False)
    return buffer.getvalue()


@pytest.fixture(scope="module")
def debian_root(docker_client, os_image_amd64):
    """A container of the stock root with Debian's python3 added, the checkout in /src/ascend-images."""
    container = docker_client.containers.run(
        os_image_amd64, ["sleep", "infinity"], detach=True, network_mode="host", remove=True,
        volumes={str(HOST_CA): {"bind": "/host-ca.pem", "mode": "ro"}},
        environment={"PIP_CERT": "/host-ca.pem", "DEBIAN_FRONTEND": "noninteractive"})
    try:
        installed = container.exec_run(["sh", "-c", "apt-get update -qq && apt-get install -y -qq python3 >/dev/null"])
        assert installed.exit_code == 0, installed.output.decode()[-2000:]
        container.exec_run(["mkdir", "-p", "/src"])
        assert container.put_archive("/src", checkout_tar())
        yield container
    finally:
        container.kill()


def sh(container, script: str, workdir: str = "/src/ascend-images") -> tuple[int, str]:
    result = container.exec_run(["bash", "-c", script], workdir=workdir)
    return result.exit_code, result.output.decode(errors="replace")


def test_the_stock_root_is_what_the_issue_describes(debian_root):
    """Debian's python3, with neither pip nor a way to install into the system: what the old set-up stopped on."""
    assert sh(debian_root, "python3 --version")[1].startswith("Python 3.11.")
    code, said = sh(debian_root, "python3 -m pip --version")
    assert code != 0 and "No module named pip" in said
    code, said = sh(debian_root, "python3 -c 'import ensurepip'")
    assert code != 0, said  # no python3-venv yet: the script must install it


def test_setup_makes_its_own_venv_and_the_commands_work_from_anywhere(debian_root):
    code, said = sh(debian_root, "bash scripts/setup-venv.sh 2>&1")
    assert code == 0, said[-3000:]
    assert "python ready: Python 3.11." in said
    # the system's Python is untouched: still no pip, nothing of ours in it
    code, _ = sh(debian_root, "python3 -m pip --version")
    assert code != 0
    code, _ = sh(debian_root, "python3 -c 'import ascend_images'")
    assert code != 0
    # README's commands: invoke from the venv, ascend-images from PATH, both from a directory that is not the checkout
    code, said = sh(debian_root, ".venv/bin/invoke --list")
    assert code == 0 and "build" in said, said
    code, said = sh(debian_root, "ascend-images env --device a3 --json", workdir="/tmp")
    assert code == 0, said
    assert '"variant": "cann9.1.0-pt2.10.0/a3/none/debian12/aarch64/system"' in said
    code, said = sh(debian_root, "ascend-images --version", workdir="/")
    assert code == 0 and said.startswith("ascend-images 0.1.0 ("), said
    # and it is the command the venv's pytest finds too (README's second command)
    code, said = sh(debian_root, ".venv/bin/python -m pytest --version")
    assert code == 0, said


def test_setup_runs_again_without_redoing_anything(debian_root):
    code, said = sh(debian_root, "bash scripts/setup-venv.sh 2>&1")
    assert code == 0, said[-3000:]
    assert "apt-get install" not in said and "-m venv" not in said
