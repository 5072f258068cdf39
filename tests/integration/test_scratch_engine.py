"""The scratch engine (`dev/scratch_engine.py`): a real second dockerd on this host, as `invoke bench`'s
fleet figure and the robustness tests' small engine start it. It starts empty and apart from the host's engine, runs
a container, takes dockerd flags of the caller's (`--add-runtime`), and when stopped leaves nothing: no process, no
bridge, no mount, no directory; the host's engine and its docker0 are as they were."""

from __future__ import annotations

import json
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest

from dev.scratch_engine import ScratchEngine, mounts_below
from tests.unit.test_run import needs_root

pytestmark = [pytest.mark.docker, needs_root]


def links() -> set[str]:
    shown = subprocess.run(["ip", "-o", "link", "show"], capture_output=True, text=True, check=True).stdout
    return {line.split(":")[1].strip().split("@")[0] for line in shown.splitlines()}


def lasting(names: set[str]) -> set[str]:
    """The host's own interfaces: not a veth of some container, nor the bridge of another test's scratch engine (on
    another worker, stopped meanwhile)."""
    return {n for n in names if not n.startswith(("veth", "ais"))}


def processes_mentioning(text: str) -> list[str]:
    found = []
    for proc in Path("/proc").iterdir():
        if proc.name.isdigit():
            try:
                cmdline = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            except OSError:
                continue
            if text in cmdline:
                found.append(f"{proc.name}: {cmdline}")
    return found


def test_a_scratch_engine_starts_empty_apart_and_leaves_nothing(docker_client, os_image_amd64):
    before = links()
    runc = shutil.which("runc") or "/usr/sbin/runc"
    # the name the fleet bench's Ascend runtime will have: a host whose daemon.json already names a runtime
    # `ascend` (this project's test hosts do) must not make dockerd refuse the flag as given twice
    engine = ScratchEngine(Path(tempfile.mkdtemp(prefix="ai-scratch-")), extra_args=("--add-runtime", f"ascend={runc}"))
    engine.start()
    try:
        info = json.loads(engine.docker("info", "--format", "{{json .}}").stdout)
        assert info["DockerRootDir"] == str(engine.data_root)
        assert info["Images"] == 0 and info["Containers"] == 0, info
        assert info["ID"] != docker_client.info()["ID"]  # BuildKit keeps its state per engine ID
        assert "ascend" in info["Runtimes"], info["Runtimes"]
        assert engine.bridge in links() - before
        subnet = engine.docker("network", "inspect", "bridge", "--format",
                               "{{(index .IPAM.Config 0).Subnet}}").stdout.decode().strip()
        assert subnet.startswith("10.213."), subnet
        assert not engine.client().images.list()

        engine.load_from(os_image_amd64)  # from the host's engine
        assert [t for i in engine.client().images.list() for t in i.tags] == [os_image_amd64]
        ran = engine.docker("run", "--rm", "--runtime", "ascend", os_image_amd64, "cat", "/etc/debian_version")
        assert ran.stdout.decode().strip().startswith("12"), ran
        pid = int((engine.root / "dockerd.pid").read_text())
        assert mounts_below(engine.root)  # its network namespace, at least
    finally:
        engine.stop()

    assert not Path(f"/proc/{pid}").exists()
    assert not processes_mentioning(str(engine.root)), processes_mentioning(str(engine.root))  # containerd too
    assert not mounts_below(engine.root) and not mounts_below(engine.data_root)
    assert not engine.root.exists() and not engine.data_root.exists()
    # its bridge went; the host's interfaces stayed (a veth of some container on the host's engine may come and go)
    assert engine.bridge not in links() and lasting(before) <= links()
    engine.stop()  # twice is harmless
    # the host's engine is as it was and still runs containers on its own bridge
    docker_client.containers.run(os_image_amd64, "true", remove=True)
    if "docker0" in before:
        assert "docker0" in links()


def test_a_scratch_engine_that_cannot_start_says_why_and_leaves_nothing(tmp_path):
    """dockerd refuses an unknown flag: the error carries its log, and what start() had made is gone."""
    from dev.scratch_engine import ScratchEngineError

    before = links()
    engine = ScratchEngine(Path(tempfile.mkdtemp(prefix="ai-scratch-")), extra_args=("--no-such-flag",))
    try:
        with pytest.raises(ScratchEngineError, match="the scratch dockerd exited .*no-such-flag"):
            engine.start()
        assert not engine.root.exists() and engine.bridge not in links() and lasting(before) <= links()
    finally:
        engine.stop()  # a no-op, unless start() left something (the test has failed then)
