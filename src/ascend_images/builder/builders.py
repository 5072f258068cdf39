"""The BuildKit builder a build runs on, and whether this host can run one, checked before anything is rendered,
fetched or built: each missing piece is one line naming what is missing, what was found and the minimum.

- the `docker` CLI and its buildx plugin (>= MIN_BUILDX: bake's `target:` contexts, `--progress rawjson`, and a
  target's `network` read from the bake definition itself);
- the builder: `--builder NAME`, else BUILDX_BUILDER, else buildx's current one (`docker buildx use`), as buildx
  itself chooses; one that does not exist is refused, naming those that do;
- for the `docker` driver (BuildKit inside dockerd), that engine's version (>= MIN_ENGINE: a BuildKit that keeps a
  finished stage's build record under concurrent bakes, and the containerd image store, whose image ids are the
  manifest digests a registry shows). Why these floors: docs/design.md, "The engine".

A builder whose images land in the engine this process talks to (the `docker` driver on that engine) builds into it.
Any other (docker-container, remote, kubernetes, or the docker driver of another engine) keeps its images to
itself: its build pushes to a registry (`--push`) or loads into this engine (`--load`), and the images are read from
there."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from dataclasses import dataclass, replace

from ascend_images.builder.endpoint import DEFAULT_CONTEXT, DEFAULT_HOST, ContextError, resolve
from ascend_images.errors import SelectionError, Unreachable

MIN_BUILDX = (0, 17)
MIN_ENGINE = (27, 0)
SETUP_HINT = "scripts/setup-host.sh installs both on Debian and Ubuntu"


class HostUnfit(Unreachable):
    """The host's Docker CLI, buildx or engine cannot run the build (exit 3: the same command works once it can)."""


@dataclass(frozen=True)
class BuildxBuilder:
    name: str
    driver: str  # docker | docker-container | remote | kubernetes
    endpoint: str  # its first node's: a docker context name or address (docker driver), an address (remote), ...
    local: bool  # its images land in the engine this process talks to
    engine: tuple[int, ...] | None = None  # the docker driver's dockerd version (None: another driver, not asked)

    def describe(self) -> str:
        return f"builder {self.name!r} (driver {self.driver}, endpoint {self.endpoint})"

    @property
    def context(self) -> str | None:
        """The docker context a `docker` driver builder of another context is: buildx builds on such a builder only
        from that context (`docker --context NAME buildx ...`), never by `--builder NAME` from another one."""
        if self.driver == "docker" and self.endpoint not in (DEFAULT_CONTEXT, "") and "://" not in self.endpoint:
            return self.endpoint
        return None


def _version(text: str) -> tuple[int, ...]:
    found = re.search(r"(\d+)\.(\d+)(?:\.(\d+))?", text)
    return tuple(int(part) for part in found.groups() if part is not None) if found else ()


def _shown(version: tuple[int, ...]) -> str:
    return ".".join(map(str, version))


def _docker(*args: str, timeout: int = 60) -> subprocess.CompletedProcess:
    try:
        return subprocess.run(["docker", *args], capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        raise HostUnfit(f"`docker {' '.join(args)}` did not answer in {timeout} s: the engine or builder it "
                        "talks to hangs") from None


def check_cli() -> str:
    """The docker CLI on PATH and its buildx plugin's version; HostUnfit naming what is missing."""
    cli = shutil.which("docker")
    if cli is None:
        raise HostUnfit(f"no `docker` command on PATH ({os.environ.get('PATH', '')}): builds need the Docker CLI "
                        f"with its buildx plugin >= {_shown(MIN_BUILDX)} ({SETUP_HINT})")
    found = _docker("buildx", "version")
    if found.returncode != 0:
        client = _docker("version", "--format", "{{.Client.Version}}").stdout.strip() or "of unknown version"
        raise HostUnfit(f"the docker CLI at {cli} ({client}) has no buildx plugin: builds need buildx >= "
                        f"{_shown(MIN_BUILDX)} (Debian and Ubuntu: apt-get install docker-buildx; {SETUP_HINT})")
    version = _version(found.stdout.split(" ", 1)[-1])
    if version and version < MIN_BUILDX:
        raise HostUnfit(f"buildx {_shown(version)} (`docker buildx version` at {cli}): builds need buildx >= "
                        f"{_shown(MIN_BUILDX)} ({SETUP_HINT})")
    return found.stdout.strip()


def _field(text: str, name: str) -> str:
    found = re.search(rf"^{re.escape(name)}:\s*(.*)$", text, flags=re.MULTILINE)
    return found.group(1).strip() if found else ""


def builder_names() -> list[str]:
    listed = _docker("buildx", "ls", "--format", "json")
    names = []
    for line in listed.stdout.splitlines():
        try:
            names.append(json.loads(line)["Name"])
        except (ValueError, KeyError, TypeError):
            continue
    return names


def find_builder(name: str | None) -> BuildxBuilder:
    """The builder `name` names (None: buildx's own choice), as `docker buildx inspect` describes it."""
    chosen = name or os.environ.get("BUILDX_BUILDER") or None
    found = _docker("buildx", "inspect", *([chosen] if chosen else []))
    if found.returncode != 0:
        said = (found.stderr.strip().splitlines() or [f"exit {found.returncode}"])[-1]
        if chosen and "no builder" in said:
            flag = "--builder" if name else "BUILDX_BUILDER"
            known = ", ".join(builder_names()) or "none"
            raise SelectionError(f"{flag} {chosen}: no such builder (`docker buildx ls` has: {known}); create one "
                                 "with `docker buildx create --name NAME ...`, or leave it out for the current one")
        raise HostUnfit(f"`docker buildx inspect{' ' + chosen if chosen else ''}` failed: {said}")
    text = found.stdout
    nodes = text.split("Nodes:", 1)[-1]
    builder_name, driver, endpoint = _field(text, "Name"), _field(text, "Driver"), _field(nodes, "Endpoint")
    return BuildxBuilder(builder_name, driver, endpoint, driver == "docker" and _same_engine(endpoint))


def engine_of(endpoint: str) -> str:
    """The address of a docker driver's endpoint: a context's host, or the address itself. The `default` context is
    what DOCKER_HOST names, else the default socket (the docker CLI's own rule)."""
    if "://" in endpoint:
        return endpoint
    if endpoint == DEFAULT_CONTEXT:
        return os.environ.get("DOCKER_HOST") or DEFAULT_HOST
    try:
        return resolve({**os.environ, "DOCKER_HOST": "", "DOCKER_CONTEXT": endpoint}).host
    except ContextError:
        return endpoint


def _same_engine(endpoint: str) -> bool:
    try:
        here = resolve().host
    except ContextError:
        return False
    return engine_of(endpoint) == here


def check_engine(builder: BuildxBuilder) -> tuple[int, ...]:
    """The engine a `docker` driver builds in is recent enough: its version; HostUnfit naming it and its version
    otherwise."""
    host = engine_of(builder.endpoint) if builder.driver == "docker" else resolve().host
    found = _docker("-H", host, "version", "--format", "{{json .Server}}")
    try:
        server = json.loads(found.stdout) if found.returncode == 0 else None
    except ValueError:
        server = None
    if not isinstance(server, dict):
        said = (found.stderr.strip().splitlines() or [f"exit {found.returncode}"])[-1]
        raise HostUnfit(f"no Docker engine answers at {host} ({builder.describe()}): {said}")
    version = _version(server.get("Version") or "")
    if version and version < MIN_ENGINE:
        raise HostUnfit(f"the Docker engine at {host} is {server.get('Version')} (API {server.get('ApiVersion')}): "
                        f"builds need Docker Engine >= {_shown(MIN_ENGINE)} ({SETUP_HINT}), or another BuildKit "
                        "builder (--builder)")
    return version


def preflight(name: str | None) -> BuildxBuilder:
    """Everything a build needs from the host, checked in the order a user meets it."""
    check_cli()
    builder = find_builder(name)
    if builder.driver == "docker" or builder.name == "default":
        builder = replace(builder, engine=check_engine(builder))
    return builder
