"""Which Docker engine a command talks to, chosen as the docker CLI chooses it (docker/cli, cli/command/cli.go
resolveContextName, and its context store), so the SDK reaches the engine `docker buildx` and the user's own `docker`
reach: DOCKER_HOST, else DOCKER_CONTEXT, else the config's currentContext (`docker context use`), else the default
socket. A context lives in $DOCKER_CONFIG (default ~/.docker): contexts/meta/<sha256 of its name>/meta.json names
the endpoint, contexts/tls/<the same>/docker/ holds its TLS material."""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from ascend_images.errors import AscendImagesError

DEFAULT_HOST = "unix:///var/run/docker.sock"
DEFAULT_CONTEXT = "default"


class ContextError(AscendImagesError):
    """The context Docker's settings name does not exist or cannot be read."""


@dataclass(frozen=True)
class Endpoint:
    host: str  # the address as it is tried: unix:///..., tcp://HOST:PORT, ssh://USER@HOST
    context: str  # "default" when DOCKER_HOST or nothing chose one
    source: str  # what chose it: DOCKER_HOST, DOCKER_CONTEXT, CONFIG (`docker context use`), or DEFAULT
    tls_dir: Path | None = None  # the context's TLS material, when it has some
    skip_tls_verify: bool = False

    @property
    def from_environment(self) -> bool:
        """DOCKER_HOST or the default socket: docker-py's from_env reads them (with DOCKER_TLS_VERIFY, DOCKER_CERT_PATH)
        as the CLI does."""
        return self.context == DEFAULT_CONTEXT

    def describe(self) -> str:
        """The address whole, and what chose it: what every engine error names."""
        if self.source == "DOCKER_HOST":
            return f"{self.host} (from DOCKER_HOST)"
        if self.source == "DEFAULT":
            return f"{self.host} (the default socket: neither DOCKER_HOST nor a docker context names another)"
        chosen = "DOCKER_CONTEXT" if self.source == "DOCKER_CONTEXT" else "`docker context use`, in config.json"
        return f"{self.host} (docker context {self.context!r}, chosen by {chosen})"


def config_dir(env: Mapping[str, str]) -> Path:
    return Path(env.get("DOCKER_CONFIG") or Path(env.get("HOME") or Path.home()) / ".docker")


def _current_context(directory: Path) -> str:
    path = directory / "config.json"
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return ""
    except OSError as exc:
        raise ContextError(f"{path}: cannot be read ({exc.strerror}); it names the current docker context") from None
    try:
        config = json.loads(text) if text.strip() else {}
    except ValueError as exc:
        raise ContextError(f"{path}: not valid JSON ({exc}); Docker reads the current context from it") from None
    value = config.get("currentContext", "") if isinstance(config, dict) else ""
    return value if isinstance(value, str) else ""


def resolve(env: Mapping[str, str] | None = None) -> Endpoint:
    """The engine's endpoint and what chose it; ContextError for a context Docker's store does not have."""
    env = os.environ if env is None else env
    if env.get("DOCKER_HOST"):
        return Endpoint(env["DOCKER_HOST"], DEFAULT_CONTEXT, "DOCKER_HOST")
    directory = config_dir(env)
    name, source = env.get("DOCKER_CONTEXT", ""), "DOCKER_CONTEXT"
    if not name:
        name, source = _current_context(directory), "CONFIG"
    if not name or name == DEFAULT_CONTEXT:
        return Endpoint(DEFAULT_HOST, DEFAULT_CONTEXT, "DEFAULT" if not name else source)
    digest = hashlib.sha256(name.encode()).hexdigest()
    meta = directory / "contexts" / "meta" / digest / "meta.json"
    chosen = "DOCKER_CONTEXT" if source == "DOCKER_CONTEXT" else f"currentContext in {directory / 'config.json'}"
    try:
        data = json.loads(meta.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ContextError(f"docker context {name!r} (from {chosen}) does not exist: no {meta}; `docker context ls` "
                           "lists the contexts there, `docker context use default` goes back to the default") from None
    except (OSError, ValueError) as exc:
        raise ContextError(f"docker context {name!r} (from {chosen}): {meta} cannot be read ({exc})") from None
    docker_endpoint = (data.get("Endpoints") or {}).get("docker") if isinstance(data, dict) else None
    if not isinstance(docker_endpoint, dict) or not docker_endpoint.get("Host"):
        raise ContextError(f"docker context {name!r} (from {chosen}) names no Docker endpoint ({meta})")
    tls = directory / "contexts" / "tls" / digest / "docker"
    return Endpoint(docker_endpoint["Host"], name, source, tls if tls.is_dir() else None,
                    bool(docker_endpoint.get("SkipTLSVerify")))
