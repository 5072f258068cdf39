"""The values of `docker run`'s flags as `invoke run` takes them, parsed and checked the way Docker reads them:
--volume, --publish, --restart, --shm-size and the NPU list of --devices. Each wrong value is refused naming the flag,
the value and the forms that would be valid."""

from __future__ import annotations

import ipaddress
import os
import re
from dataclasses import dataclass
from typing import Any, Literal

from ascend_images.errors import AscendImagesError


class RunError(AscendImagesError):
    """The host cannot run the requested passthrough."""


@dataclass(frozen=True)
class Volume:
    """`--volume HOST:CONTAINER[:ro|rw]`: a host path bound into the container."""

    host: str  # absolute
    container: str  # absolute
    read_only: bool = False

    def bind(self) -> str:
        """Docker's own spelling, for -v, the SDK's volumes and compose."""
        return f"{self.host}:{self.container}:ro" if self.read_only else f"{self.host}:{self.container}"


@dataclass(frozen=True)
class Port:
    """`--publish`, in docker run -p's forms: CONTAINER, HOST:CONTAINER, IP:HOST:CONTAINER or IP::CONTAINER, each port
    one or a range of `count` consecutive ones (8000-8010:8000-8010), /tcp, /udp or /sctp."""

    host_port: int | None  # the first; None: Docker picks free ones
    container_port: int  # the first
    protocol: Literal["tcp", "udp", "sctp"] = "tcp"
    host_ip: str = ""
    count: int = 1

    def mappings(self) -> list[tuple[int, int | None]]:
        """(container port, host port or None), one per port of the range."""
        return [(self.container_port + i, None if self.host_port is None else self.host_port + i)
                for i in range(self.count)]

    def publish(self) -> str:
        """Docker's own spelling, for -p and compose."""
        def ports(first: int) -> str:
            return f"{first}-{first + self.count - 1}" if self.count > 1 else str(first)

        ip = f"[{self.host_ip}]" if ":" in self.host_ip else self.host_ip
        host = "" if self.host_port is None else ports(self.host_port)
        proto = "" if self.protocol == "tcp" else f"/{self.protocol}"  # tcp is Docker's default
        if not ip and not host:
            return f"{ports(self.container_port)}{proto}"
        return f"{ip + ':' if ip else ''}{host}:{ports(self.container_port)}{proto}"


RESTART_POLICIES = ("no", "on-failure", "always", "unless-stopped")


def parse_volume(text: str) -> Volume:
    """HOST:CONTAINER[:ro|rw], as docker run -v takes it; a relative host path is taken from here. Named
    volumes are not supported: the host side is a path."""
    parts = text.split(":")
    if len(parts) not in (2, 3) or not all(parts[:2]):
        raise RunError(f"--volume {text!r}: give HOST:CONTAINER[:ro|rw] (e.g. /data/models:/models:ro)")
    host, container = parts[0], parts[1]
    mode = parts[2] if len(parts) == 3 else "rw"
    if mode not in ("ro", "rw"):
        raise RunError(f"--volume {text!r}: mode {mode!r}: only ro (read-only) or rw")
    if not container.startswith("/"):
        raise RunError(f"--volume {text!r}: the container path {container!r} must be absolute")
    target = container.rstrip("/") or "/"
    if target == "/":  # Docker: "invalid mount config: destination can't be '/'"
        raise RunError(f"--volume {text!r}: the container path cannot be / (Docker refuses a mount over the root); "
                       "give a directory such as /data")
    if ".." in target.split("/"):  # Docker would clean it to another path; Kubernetes refuses a mountPath with '..'
        raise RunError(f"--volume {text!r}: the container path {container!r} holds '..'; give the path it means")
    if "/" not in host and not host.startswith((".", "~")):
        raise RunError(f"--volume {text!r}: {host!r} is not a path (named volumes are not supported; "
                       f"./{host} for a directory here)")
    return Volume(os.path.abspath(os.path.expanduser(host)), target, mode == "ro")


PUBLISH_FORMS = ("CONTAINER, HOST:CONTAINER, IP:HOST:CONTAINER or IP::CONTAINER (docker run -p's forms), each port "
                 "1-65535 or a range of them (8000-8010:8000-8010), then /tcp, /udp or /sctp; an IPv6 address in "
                 "brackets ([::1]:8000:8000)")


def _port_range(text: str, what: str, whole: str) -> tuple[int, int]:
    match = re.fullmatch(r"(\d+)(?:-(\d+))?", text)
    if not match:
        raise RunError(f"--publish {whole!r}: {what} {text!r} is not a port or a range; give {PUBLISH_FORMS}")
    first, last = int(match[1]), int(match[2] or match[1])
    for port in (first, last):
        if not 1 <= port <= 65535:
            raise RunError(f"--publish {whole!r}: port {port} is outside 1-65535")
    if last < first:
        raise RunError(f"--publish {whole!r}: the range {text} goes backwards")
    return first, last


def parse_publish(text: str) -> Port:
    """docker run -p's forms (PUBLISH_FORMS), split as Docker's nat.ParsePortSpec splits them: the last part is the
    container's, the one before it the host's, the rest the address."""
    body, _, protocol = text.rpartition("/") if "/" in text else (text, "", "tcp")
    if protocol not in ("tcp", "udp", "sctp"):
        raise RunError(f"--publish {text!r}: protocol {protocol!r}: tcp, udp or sctp")
    parts = body.split(":")
    container_text = parts[-1]
    host_text = parts[-2] if len(parts) >= 2 else ""
    ip = ":".join(parts[:-2]) if len(parts) >= 3 else ""
    if len(parts) >= 3 and not ip:
        raise RunError(f"--publish {text!r}: the address before {host_text or ':'} is empty; give {PUBLISH_FORMS}")
    if ip.startswith("["):
        if not ip.endswith("]"):
            raise RunError(f"--publish {text!r}: {ip!r} opens a bracket it does not close")
        ip = ip[1:-1]
    if ip:
        try:
            ipaddress.ip_address(ip)
        except ValueError:
            raise RunError(f"--publish {text!r}: {ip!r} is not an IP address") from None
    container = _port_range(container_text, "the container port", text)
    count = container[1] - container[0] + 1
    host = None
    if host_text:
        host = _port_range(host_text, "the host port", text)
        if host[1] - host[0] + 1 != count:
            which = ("a host port range for one container port (Docker would pick one of them) is refused: give "
                     "one host port" if count == 1 else "the host and container ranges differ in length")
            raise RunError(f"--publish {text!r}: {which}")
    elif len(parts) == 2:  # ":80": a host side named empty without an address
        raise RunError(f"--publish {text!r}: the host port is empty; give {PUBLISH_FORMS}")
    return Port(host[0] if host else None, container[0], protocol, ip, count)  # type: ignore[arg-type]


def parse_restart(text: str) -> str:
    """no | on-failure[:N] | always | unless-stopped, as docker run --restart takes it."""
    name, colon, count = text.partition(":")
    if name not in RESTART_POLICIES or (colon and (name != "on-failure" or not count.isdigit())):
        raise RunError(f"--restart {text!r}: valid: no, on-failure[:N], always, unless-stopped")
    return text


def restart_policy(text: str) -> dict[str, Any]:
    """The docker SDK's restart_policy for a --restart value."""
    name, _, count = text.partition(":")
    return {"Name": name, "MaximumRetryCount": int(count)} if count else {"Name": name}


SHM_UNITS = {"": 1, "k": 1024, "m": 1024**2, "g": 1024**3, "t": 1024**4, "p": 1024**5}
INT64_MAX = 2**63 - 1


def shm_bytes(text: str) -> int:
    """Docker's --shm-size (binary units, as its RAMInBytes reads them: 64m, 16g, 1.5g, 16GiB). 0 is refused: Docker
    reads it as its default (64m), Kubernetes as a limit of nothing."""
    match = re.fullmatch(r"(\d+(?:\.\d+)?) ?([kKmMgGtTpP])?[iI]?[bB]?", text)
    if not match:
        raise RunError(f"--shm-size {text!r}: give a size such as 64m or 16g")
    size = int(float(match[1]) * SHM_UNITS[(match[2] or "").lower()])
    if not 0 < size <= INT64_MAX:
        raise RunError(f"--shm-size {text!r}: give a size above 0 and below 8 EiB, such as 64m or 16g (Docker reads "
                       "0 as its default 64m)")
    return size


def parse_devices(text: str) -> list[int]:
    """'0-3,6' -> [0, 1, 2, 3, 6]."""
    out: list[int] = []
    for part in text.split(","):
        part = part.strip()
        match = re.fullmatch(r"(\d+)(?:-(\d+))?", part)
        if not match:
            raise RunError(f"--devices {text!r}: {part!r} is not N or N-M (e.g. 0-3,6)")
        first, last = int(match[1]), int(match[2] or match[1])
        if last < first:
            raise RunError(f"--devices {text!r}: range {part!r} goes backwards")
        for n in range(first, last + 1):
            if n in out:
                raise RunError(f"--devices {text!r}: device {n} given twice")
            out.append(n)
    return out
