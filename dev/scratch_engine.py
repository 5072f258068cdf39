"""A real, empty, second Docker engine on this host, started and stopped by its caller: what another build machine of
a fleet has (`invoke bench`'s fleet figure: that machine's build of the selection with the stage cache warm), or an
engine on a small disk (the robustness tests' disk-full build).

It shares nothing with the host's engine: its own data root, exec root, pidfile, unix socket, containerd namespace,
bridge, engine ID and daemon config (of the host's `/etc/docker/daemon.json` only the registry settings are carried
over, so it reaches the registries the host's engine reaches), and no iptables rules (builds use the host network).
Not `--bridge none`: a dockerd started that way deletes the `docker0` interface, which breaks the host's engine.

It needs root: dockerd, a bridge of its own (`ip link`), and the mounts it leaves to be undone."""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import re
import shutil
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

import docker

from ascend_images.errors import AscendImagesError

# carried over from the host's daemon config: where images come from and go to
REGISTRY_SETTINGS = ("insecure-registries", "registry-mirrors", "allow-nondistributable-artifacts",
                     "max-concurrent-downloads", "max-concurrent-uploads")
HOST_DAEMON_CONFIG = Path("/etc/docker/daemon.json")
_instances = itertools.count(1)
# how dockerd says why it stopped: a refused flag ("Status: unknown flag"), or a logged error or fatal
_ERROR_LINE = re.compile(r"^Status: |level=(error|fatal)|unknown flag", re.IGNORECASE)


class ScratchEngineError(AscendImagesError, RuntimeError):
    """The second engine could not start (or its caller may not start one)."""


def missing_requirement() -> str | None:
    """Why a scratch engine cannot start here, or None."""
    if os.geteuid() != 0:
        return (f"a second Docker engine (a scratch dockerd with its own bridge) needs root; this process runs as "
                f"uid {os.geteuid()}")
    for tool in ("dockerd", "ip", "docker"):
        if shutil.which(tool) is None:
            return f"a second Docker engine needs `{tool}` on PATH, and there is none"
    return None


def _free_subnet() -> str:
    """A 10.213.N.1/24 no interface on this host has (two scratch engines at once get two)."""
    shown = subprocess.run(["ip", "-o", "-4", "addr", "show"], capture_output=True, text=True, check=False).stdout
    taken = {int(n) for n in re.findall(r"inet 10\.213\.(\d+)\.", shown)}
    free = next((n for n in range(213, 255) if n not in taken), None) or \
        next((n for n in range(1, 213) if n not in taken), None)
    if free is None:
        raise ScratchEngineError("no free 10.213.N.0/24 subnet for a scratch engine's bridge")
    return f"10.213.{free}.1/24"


def _dockerd_major() -> int | None:
    shown = subprocess.run(["dockerd", "--version"], capture_output=True, text=True, check=False).stdout
    match = re.search(r"version (\d+)\.", shown)
    return int(match.group(1)) if match else None


@dataclass
class ScratchEngine:
    """`root` holds the socket, exec root, pidfile, config and log: keep it short (containerd's sockets live below
    the exec root, and a unix socket path has at most 107 bytes: a pytest tmp_path is too long). `data_root`
    (default root/data) holds the images; both are removed by stop(). `extra_args` go to dockerd as they are (e.g.
    `("--add-runtime", "ascend=PATH")`)."""

    root: Path
    data_root: Path | None = None
    extra_args: tuple[str, ...] = ()
    start_timeout: float = 60
    bridge: str = field(init=False)

    def __post_init__(self) -> None:
        self.root = Path(self.root).absolute()
        self.data_root = Path(self.data_root).absolute() if self.data_root else self.root / "data"
        self.bridge = f"ais{os.getpid() % 100000}n{next(_instances)}"  # at most 15 characters
        self._proc: subprocess.Popen | None = None
        self._bridge_made = False

    @property
    def socket(self) -> Path:
        return self.root / "docker.sock"

    @property
    def host(self) -> str:
        return f"unix://{self.socket}"

    @property
    def log(self) -> Path:
        return self.root / "dockerd.log"

    @property
    def exec_root(self) -> Path:
        return self.root / "exec"

    def _config(self) -> Path:
        """The host's registry settings; on dockerd < 23 a trust key of its own too, which is the engine ID there
        (the host's key would give both engines one ID, and BuildKit keeps its state per engine ID). From 23 on, the
        ID is a file in the data root."""
        config = {}
        with contextlib.suppress(OSError, ValueError):
            host = json.loads(HOST_DAEMON_CONFIG.read_text())
            config = {k: v for k, v in host.items() if k in REGISTRY_SETTINGS}
        major = _dockerd_major()
        if major is not None and major < 23:
            config["deprecated-key-path"] = str(self.root / "key.json")
        if major is not None and major >= 26:  # the image store the host's engine has (scripts/setup-engine.sh)
            config["features"] = {"containerd-snapshotter": True}
        path = self.root / "daemon.json"
        path.write_text(json.dumps(config, indent=2) + "\n")
        return path

    def start(self) -> None:
        problem = missing_requirement()
        if problem:
            raise ScratchEngineError(problem)
        try:
            self._start()
        except BaseException:
            self.stop()
            raise

    def _start(self) -> None:
        self.root.mkdir(parents=True, exist_ok=True)
        self.data_root.mkdir(parents=True, exist_ok=True)
        subnet = _free_subnet()
        self._run("ip", "link", "add", "name", self.bridge, "type", "bridge")
        self._bridge_made = True
        self._run("ip", "addr", "add", subnet, "dev", self.bridge)
        namespace = f"ascend-scratch-{self.bridge}"
        self._proc = subprocess.Popen(
            ["dockerd", "--config-file", str(self._config()), "--data-root", str(self.data_root),
             "--exec-root", str(self.exec_root), "--pidfile", str(self.root / "dockerd.pid"), "--host", self.host,
             "--bridge", self.bridge, "--iptables=false", "--containerd-namespace", namespace,
             "--containerd-plugins-namespace", f"{namespace}-plugins", *self.extra_args],
            stdout=open(self.log, "wb"), stderr=subprocess.STDOUT,  # noqa: SIM115 - the daemon owns it
            start_new_session=True)  # a Ctrl-C meant for the caller reaches it through stop(), not twice
        deadline = time.monotonic() + self.start_timeout
        while time.monotonic() < deadline:
            if self._proc.poll() is not None:
                raise ScratchEngineError(f"the scratch dockerd exited ({self._proc.returncode}): {self._why()}")
            if self.docker("info", check=False).returncode == 0:
                return
            time.sleep(0.5)
        raise ScratchEngineError(f"the scratch dockerd did not answer in {self.start_timeout:.0f} s: "
                                 f"{self._log_tail()}")

    def _why(self) -> str:
        """The log's error lines, else its tail: dockerd 28 follows a bad flag with its whole usage text."""
        try:
            lines = self.log.read_text(errors="replace").splitlines()
        except OSError:
            return "(no log)"
        errors = [line for line in lines if _ERROR_LINE.search(line)]
        return ("\n".join(errors[:5]) if errors else self._log_tail()) + f" (log {self.log})"

    def _log_tail(self) -> str:
        try:
            return self.log.read_text(errors="replace")[-2000:].strip()
        except OSError:
            return "(no log)"

    @staticmethod
    def _run(*args: str) -> None:
        result = subprocess.run(args, capture_output=True, text=True, check=False)
        if result.returncode != 0:
            raise ScratchEngineError(f"{' '.join(args)}: {result.stderr.strip() or result.returncode}")

    def docker(self, *args: str, check: bool = True, **kwargs) -> subprocess.CompletedProcess:
        """The docker CLI against this engine."""
        return subprocess.run(["docker", "--host", self.host, *args], capture_output=True, check=check, **kwargs)

    def client(self, timeout: int = 600) -> docker.DockerClient:
        return docker.DockerClient(base_url=self.host, timeout=timeout)

    def load_from(self, ref: str, source_host: str | None = None) -> None:
        """Copy an image from another engine (default: the host's, DOCKER_HOST) with `docker save | docker load`."""
        load_image(ref, self.host, source_host)

    def stop(self) -> None:
        """Stop the daemon and remove everything it had: mounts, bridge, root and data root. Safe to call twice."""
        proc, self._proc = self._proc, None
        if proc is not None and proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        # a daemon that did not stop cleanly leaves its network namespace (below the exec root) and its layers'
        # mounts (below the data root) mounted; a caller's own mount of the data root goes too
        for below in (self.root, self.data_root):
            for mount in sorted(mounts_below(below), key=len, reverse=True):
                subprocess.run(["umount", "-l", mount], check=False, capture_output=True)
        if self._bridge_made:
            subprocess.run(["ip", "link", "delete", self.bridge], check=False, capture_output=True)
            self._bridge_made = False
        for path in (self.data_root, self.root):
            shutil.rmtree(path, ignore_errors=True)

    def __enter__(self) -> ScratchEngine:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def mounts_below(path: Path) -> list[str]:
    """Mount points at or below `path`."""
    top = str(path).rstrip("/")
    points = [line.split()[1].replace("\\040", " ") for line in Path("/proc/mounts").read_text().splitlines()]
    return [p for p in points if p == top or p.startswith(top + "/")]


def load_image(ref: str, target_host: str, source_host: str | None = None) -> None:
    """`docker save REF | docker load` from one engine to another."""
    source = ["--host", source_host] if source_host else []
    save = subprocess.Popen(["docker", *source, "save", ref], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    load = subprocess.run(["docker", "--host", target_host, "load", "-q"], stdin=save.stdout, capture_output=True,
                          check=False)
    assert save.stdout is not None
    save.stdout.close()
    saved = save.wait()
    if saved != 0:
        error = save.stderr.read().decode(errors="replace").strip() if save.stderr else ""
        raise ScratchEngineError(f"docker save {ref} failed: {error or saved}")
    if load.returncode != 0:
        raise ScratchEngineError(f"docker load of {ref} into {target_host} failed: "
                                 f"{load.stderr.decode(errors='replace').strip()}")
