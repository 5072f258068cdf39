"""Run an image with Ascend device passthrough: the spec, the host checks, the docker SDK arguments and
the equivalent `docker run` line (ref004's passthrough; the Ascend Docker Runtime as an alternative). What
serving needs is spelled as Docker spells it: --volume, --publish, --detach, --restart, --workdir."""

from __future__ import annotations

import os
import re
import shlex
import stat
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from ascend_images.runtime.runflags import (
    Port,
    RunError,
    Volume,
    restart_policy,
    shm_bytes,
)

# A2's and A3's control nodes beside /dev/davinciN (ref004); a device of the matrix says its own
# (devices.<d>.control_nodes: the 950 has no devmm_svm)
CONTROL_NODES = ("davinci_manager", "devmm_svm", "hisi_hdc")
DRIVER = "/usr/local/Ascend/driver"
# (container path, what it is) mounted read-only in manual mode (ref004)
TOOL_MOUNTS = (
    ("/usr/local/dcmi", "DCMI library (npu-smi needs it)"),
    ("/usr/local/bin/npu-smi", "npu-smi"),
    ("/etc/ascend_install.info", "driver install info"),
)
# Mounted read-only when the host has them: each NPU's NIC addresses, which HCCL's RoCE transport reads
# (gpustack/runtime PR 28)
OPTIONAL_MOUNTS = ("/etc/hccn.conf",)
# In the driver tree but outside lib64: the tool that answers device IP addresses (gpustack/runtime PR 29)
HCCN_TOOL = f"{DRIVER}/tools/hccn_tool"
# ref000 ("Ray Cluster Environment Variables"): what ROLL's driver reads to form a Ray cluster across nodes; verl's
# multi-node practice starts Ray by hand and reads none of them. Passed through from the invoking shell when set.
RAY_VARS = ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT", "DASHBOARD_PORT")
# ROLL's FAQ: Ray's head (GCS) 6379 and dashboard 8265, its workers' ports (10002-19999), HCCL's device port 16666
RAY_PORTS = "Ray's GCS (6379) and dashboard (8265), its worker ports (10002-19999) and HCCL's sockets"
DriverMounts = Literal["auto", "minimal", "full"]


@dataclass(frozen=True)
class RunSpec:
    image: str
    command: tuple[str, ...] = ()
    devices: tuple[int, ...] = ()
    mode: Literal["manual", "runtime"] = "manual"
    host_root: Path = Path("/")  # where host paths are looked up (a prepared tree in tests)
    # minimal: the driver's lib64 and version.info (ref004); full: the whole driver tree, which HCCL needs for
    # its topology files and hccn_tool (vllm-project/recipes PR 907: EI0014 otherwise; gpustack/runtime PR 29);
    # auto: full when the run spans 2 or more NPUs or the device never runs alone (A3's min_devices)
    driver_mounts: DriverMounts = "auto"
    min_devices: int = 1
    shm_size: str = "16g"
    ipc_host: bool = False
    network_host: bool = False
    env: dict[str, str] = field(default_factory=dict)
    name: str | None = None
    device: str | None = None  # a2 | a3 | a5, from the image's labels, for device-specific checks
    control_nodes: tuple[str, ...] = CONTROL_NODES  # the device's (devices.<d>.control_nodes)
    # device nodes, or directories of them, passed when the host has them (the 950's UB devices, /dev/ummu and
    # /dev/uburma), and files mounted read-only when present (devices.<d>.optional_nodes, optional_mounts)
    optional_nodes: tuple[str, ...] = ()
    device_mounts: tuple[str, ...] = ()
    framework: str | None = None  # verl | roll, from the selection or the image's labels: a Ray training job
    # what serving needs, as docker run spells it
    volumes: tuple[Volume, ...] = ()
    ports: tuple[Port, ...] = ()
    detach: bool = False
    restart: str | None = None  # no | on-failure[:N] | always | unless-stopped (needs detach)
    workdir: str | None = None

    def host(self, path: str) -> Path:
        return self.host_root / path.lstrip("/")

    @property
    def full_driver(self) -> bool:
        if self.driver_mounts == "auto":
            return len(self.devices) >= 2 or self.min_devices >= 2
        return self.driver_mounts == "full"

    def mounts(self) -> list[tuple[str, str]]:
        """(host path, container path), read-only: the required ones, then the optional ones the host has."""
        driver = [(DRIVER, DRIVER)] if self.full_driver else [
            (f"{DRIVER}/lib64", f"{DRIVER}/lib64"),
            (f"{DRIVER}/version.info", f"{DRIVER}/version.info"),
        ]
        required = [(str(self.host(h)), c) for h, c in driver + [(p, p) for p, _ in TOOL_MOUNTS]]
        optional = [*OPTIONAL_MOUNTS, *(p for p in self.device_mounts if p not in OPTIONAL_MOUNTS)]
        return required + [(str(self.host(p)), p) for p in optional if self.host(p).exists()]

    def binds(self) -> list[str]:
        """Every bind in docker run -v spelling: the driver and tool mounts (read-only, manual mode only: the
        Ascend Docker Runtime mounts its own), then each --volume."""
        driver = [f"{h}:{c}:ro" for h, c in self.mounts()] if self.mode == "manual" else []
        return driver + [v.bind() for v in self.volumes]

    def device_nodes(self) -> list[tuple[str, str]]:
        """The NPUs' nodes and the device's control nodes, which must exist; then its optional nodes the host has
        (Docker passes a directory's devices for a directory, as `--device /dev/ummu` does)."""
        names = [f"davinci{n}" for n in self.devices] + list(self.control_nodes)
        return [(str(self.host(f"/dev/{n}")), f"/dev/{n}") for n in names] + self.present_optional_nodes()

    def present_optional_nodes(self) -> list[tuple[str, str]]:
        return [(str(self.host(f"/dev/{n}")), f"/dev/{n}") for n in self.optional_nodes
                if self.host(f"/dev/{n}").exists()]

    def missing_optional_nodes(self) -> list[str]:
        return [f"/dev/{n}" for n in self.optional_nodes if not self.host(f"/dev/{n}").exists()]

    def environment(self) -> dict[str, str]:
        env: dict[str, str] = {}
        # Inside the container the runtime numbers the visible NPUs from 0 (vllm-ascend issue 6942).
        env["ASCEND_RT_VISIBLE_DEVICES"] = ",".join(str(i) for i in range(len(self.devices)))
        if self.mode == "runtime":
            env["ASCEND_VISIBLE_DEVICES"] = ",".join(map(str, self.devices))
        for var in RAY_VARS:
            if os.environ.get(var):
                env[var] = os.environ[var]
        env.update(self.env)
        return env


# what the Docker engine accepts as a container name (its daemon's restrictedNamePattern)
CONTAINER_NAME = re.compile(r"[a-zA-Z0-9][a-zA-Z0-9_.-]*")


def check_spec(spec: RunSpec) -> list[str]:
    """Errors that make the spec unusable anywhere; returns warnings."""
    warnings = []
    if not spec.devices:
        raise RunError("--devices is empty: give NPU numbers such as 0-3")
    if spec.name is not None and not CONTAINER_NAME.fullmatch(spec.name):
        raise RunError(f"--name {spec.name!r}: Docker refuses it; a container name is [a-zA-Z0-9][a-zA-Z0-9_.-]* "
                       "(e.g. sglang-0)")
    rt = spec.env.get("ASCEND_RT_VISIBLE_DEVICES")
    if rt is not None:
        bad = [x for x in rt.split(",") if not x.strip().isdigit() or int(x) >= len(spec.devices)]
        if bad:
            raise RunError(
                f"ASCEND_RT_VISIBLE_DEVICES={rt} names {', '.join(bad)}, but the container sees "
                f"{len(spec.devices)} NPU(s) numbered 0..{len(spec.devices) - 1} (host devices "
                f"{','.join(map(str, spec.devices))}); ASCEND_VISIBLE_DEVICES is the host-side list"
            )
    if spec.driver_mounts == "minimal" and (len(spec.devices) >= 2 or spec.min_devices >= 2):
        warnings.append("--driver-mounts minimal with several NPUs: HCCL needs the driver's topology files and "
                        "hccn_tool, which only the whole driver tree has (error EI0014); use full")
    if spec.restart is not None and not spec.detach:
        raise RunError(f"--restart {spec.restart} needs --detach: a restart policy keeps a background container "
                       "running; in the foreground the container is removed when it exits")
    if spec.workdir is not None and not spec.workdir.startswith("/"):
        raise RunError(f"--workdir {spec.workdir!r} must be an absolute path in the container")
    shm_bytes(spec.shm_size)
    taken = {c: "a driver or tool mount" for _, c in spec.mounts()} if spec.mode == "manual" else {}
    for volume in spec.volumes:
        if volume.container in taken:
            raise RunError(f"--volume {volume.bind()}: {volume.container} is already {taken[volume.container]}")
        taken[volume.container] = f"the target of --volume {volume.bind()}"
    bound: dict[tuple[str, int, str], Port] = {}
    for port in spec.ports:
        for _, host_port in port.mappings():
            if host_port is None:
                continue
            key = (port.host_ip, host_port, port.protocol)
            if key in bound:
                raise RunError(f"--publish {port.publish()}: host port {host_port}/{port.protocol} given twice "
                               f"(also by --publish {bound[key].publish()})")
            bound[key] = port
    if spec.ports and spec.network_host:
        warnings.append("--publish with --network-host: the container already uses the host's ports; Docker "
                        "ignores the published ones")
    world = spec.environment().get("WORLD_SIZE", "1")
    if spec.framework and not spec.network_host and (not world.isdigit() or int(world) > 1):
        warnings.append(f"a {spec.framework} job across nodes (WORLD_SIZE={world}) forms a Ray cluster: {RAY_PORTS} "
                        "must reach the other nodes; pass --network-host (in Kubernetes: hostNetwork)")
    if spec.mode == "manual" and spec.missing_optional_nodes():
        warnings.append(f"{' and '.join(spec.missing_optional_nodes())}: not on this host, so not passed; URMA's "
                        "distributed communication needs them (UB devices, present where the driver supports the UB "
                        "protocol)")
    if spec.min_devices >= 2 and len(spec.devices) < spec.min_devices:
        warnings.append(f"an {spec.device or 'NPU'} run with fewer than {spec.min_devices} devices: its NPUs come "
                        "in pairs of dies; HCCL jobs usually need both (pass e.g. --devices 0-1)")
    return warnings


def volume_problems(spec: RunSpec) -> list[str]:
    return [f"--volume {v.bind()}: the host path {v.host} does not exist" for v in spec.volumes
            if not Path(v.host).exists()]


def check_volumes(spec: RunSpec) -> None:
    """Each --volume's host path exists (Docker would make an empty directory of a missing one)."""
    problems = volume_problems(spec)
    if problems:
        raise RunError("\n".join(problems))


def check_host(spec: RunSpec, runtimes: set[str] | None = None) -> None:
    """Every node and mount the spec needs exists on the host; else one error listing all that is missing
    and what the host does have."""
    problems = volume_problems(spec)
    if spec.mode == "runtime":
        if runtimes is not None and "ascend" not in runtimes:
            problems.append(f"the Docker engine has no 'ascend' runtime (it has: {', '.join(sorted(runtimes))}); "
                            "install the Ascend Docker Runtime or use --mode manual")
    else:
        optional = {host for host, _ in spec.present_optional_nodes()}
        for host, _ in spec.device_nodes():
            path = Path(host)
            if not path.exists():
                problems.append(f"{host} does not exist")
            elif not stat.S_ISCHR(path.stat().st_mode) and not (host in optional and path.is_dir()):
                problems.append(f"{host} is not a character device")
        for host, _ in spec.mounts():
            if not Path(host).exists():
                problems.append(f"{host} does not exist")
        if spec.full_driver and spec.host(DRIVER).exists() and not spec.host(HCCN_TOOL).exists():
            problems.append(f"{spec.host(HCCN_TOOL)} is missing: multi-NPU runs read device IPs through it")
        lib = spec.host(f"{DRIVER}/lib64/driver/libascend_hal.so")
        if spec.host(f"{DRIVER}/lib64").exists() and not lib.exists():
            problems.append(f"{lib} is missing: CANN cannot load the driver without it (vllm-ascend issue 1440)")
    if problems:
        have = sorted(p.name for p in spec.host("/dev").glob("davinci*")) if spec.host("/dev").exists() else []
        raise RunError(
            "this host cannot run the requested passthrough:\n" + "\n".join(f"  - {p}" for p in problems)
            + f"\nNPU nodes on this host: {', '.join(have) or 'none'}"
        )


def docker_kwargs(spec: RunSpec) -> dict[str, Any]:
    """Arguments for docker SDK `containers.create`/`run`."""
    kwargs: dict[str, Any] = {
        "image": spec.image,
        "command": list(spec.command) or None,
        "environment": spec.environment(),
        # bytes: docker-py reads k, m and g only (16GiB or 1t would fail there, while the docker line takes them)
        "shm_size": shm_bytes(spec.shm_size),
        "name": spec.name,
    }
    if spec.mode == "runtime":
        kwargs["runtime"] = "ascend"
    else:
        kwargs["devices"] = [f"{h}:{c}:rwm" for h, c in spec.device_nodes()]
    if spec.binds():
        kwargs["volumes"] = spec.binds()  # the -v strings of the printed line, word for word
    if spec.ports:
        ports: dict[str, list[Any]] = {}
        for p in spec.ports:
            for container_port, host_port in p.mappings():  # None: a free port Docker picks
                ports.setdefault(f"{container_port}/{p.protocol}", []).append(
                    (p.host_ip, host_port) if p.host_ip else host_port)
        kwargs["ports"] = ports
    if spec.restart:
        kwargs["restart_policy"] = restart_policy(spec.restart)
    kwargs["working_dir"] = spec.workdir
    if spec.ipc_host:
        kwargs["ipc_mode"] = "host"
    if spec.network_host:
        kwargs["network_mode"] = "host"
    return {k: v for k, v in kwargs.items() if v is not None}


def docker_run_line(spec: RunSpec) -> str:
    # detached: kept after it exits (its logs, its restart policy: Docker refuses --restart with --rm)
    parts = ["docker", "run", "-d"] if spec.detach else ["docker", "run", "--rm", "-it"]
    if spec.name:
        parts += ["--name", spec.name]
    if spec.restart:
        parts += ["--restart", spec.restart]
    parts += ["--shm-size", spec.shm_size]
    if spec.ipc_host:
        parts += ["--ipc=host"]
    if spec.network_host:
        parts += ["--network=host"]
    if spec.mode == "runtime":
        parts += ["--runtime=ascend"]
    else:
        for h, c in spec.device_nodes():
            parts += ["--device", h if h == c else f"{h}:{c}"]
    for bind in spec.binds():
        parts += ["-v", bind]
    for port in spec.ports:
        parts += ["-p", port.publish()]
    if spec.workdir:
        parts += ["--workdir", spec.workdir]
    for k, v in spec.environment().items():
        parts += ["-e", f"{k}={v}"]
    parts += [spec.image, *spec.command]
    return " \\\n  ".join(_group(parts))


def _group(parts: list[str]) -> list[str]:
    """Flag and value on one line, for a readable command."""
    lines: list[str] = []
    i = 0
    head = []
    while i < len(parts) and parts[i] in ("docker", "run", "--rm", "-it", "-d"):
        head.append(parts[i])
        i += 1
    lines.append(" ".join(head))
    while i < len(parts):
        if parts[i] in ("--device", "-v", "-p", "-e", "--name", "--restart", "--workdir", "--shm-size"):
            lines.append(f"{parts[i]} {shlex.quote(parts[i + 1])}")
            i += 2
        elif parts[i].startswith("-"):
            lines.append(parts[i])
            i += 1
        else:
            lines.append(" ".join(shlex.quote(p) for p in parts[i:]))
            break
    return lines


def run_container(client: Any, spec: RunSpec, out: Any) -> int:
    """Start, stream output, return the exit code; Ctrl-C stops the container. Detached (--detach): start,
    say its name and return 0; the container stays (its restart policy, its logs) until `docker rm -f`."""
    container = client.containers.create(**docker_kwargs(spec), detach=True)
    if spec.detach:
        try:
            container.start()
        except BaseException:
            container.remove(force=True)
            raise
        out.write(f"started {container.name} ({container.id[:12]}) in the background: docker logs -f "
                  f"{container.name}; docker rm -f {container.name} stops and removes it\n")
        out.flush()
        return 0
    try:
        container.start()
        try:
            for chunk in container.logs(stream=True, follow=True):
                out.write(chunk.decode("utf-8", "replace"))
                out.flush()
            return int(container.wait()["StatusCode"])
        except KeyboardInterrupt:
            container.stop(timeout=10)
            raise  # the task's wrapper says so in one line and exits 130 (a container's own 130 stays its own)
    finally:
        container.remove(force=True)
