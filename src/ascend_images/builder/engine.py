"""The Docker engine connection: made with an error that says what to do when there is none, a full disk told
apart, and what kind of image store the engine has."""

from __future__ import annotations

import os

import docker
from docker.errors import DockerException

from ascend_images.errors import DockerUnavailable


def engine_host() -> str:
    return os.environ.get("DOCKER_HOST", "unix:///var/run/docker.sock")


def connect(timeout: int = 600) -> docker.DockerClient:
    try:
        client = docker.from_env(timeout=timeout)
        client.ping()
    except DockerException as exc:
        raise DockerUnavailable(explain(exc)) from None
    return client


# how a full disk shows in a build's output: the kernel's ENOSPC (pip, tar, the engine's layer store), apt's and
# dnf's own checks before they download
DISK_FULL_SIGNS = ("no space left on device", "you don't have enough free space in", "more space needed on the")


def disk_full(output: str) -> bool:
    text = output.lower()
    return any(sign in text for sign in DISK_FULL_SIGNS)


def explain(exc: BaseException) -> str:
    """One line for an error from the Docker SDK or its transport: what failed and what to do."""
    text = str(exc)
    host = engine_host()
    if isinstance(exc, docker.errors.ImageNotFound):
        return f"no such image on the engine at {host}: {getattr(exc, 'explanation', None) or text}. " \
               "Build it (invoke build ...) or pull it; `docker images` lists what is there."
    if "Permission denied" in text or isinstance(exc, PermissionError):
        return f"permission denied on the Docker engine's socket ({host}): run as root, or add your user " \
               "to the `docker` group and log in again."
    if disk_full(text):
        return f"the Docker engine ran out of disk space ({text.strip()[:200]}). Free some " \
               "(`docker system prune`, `docker image prune`) or move its data root, then run again."
    if isinstance(exc, docker.errors.APIError):
        return f"the Docker engine at {host} refused: {getattr(exc, 'explanation', None) or text}"
    return f"no Docker engine answers at {host} ({text.strip()[:200]}). Start one (e.g. " \
           "`bash scripts/setup-host.sh`, or `dockerd &`) or set DOCKER_HOST to one that runs."


def containerd_store(client: docker.DockerClient) -> bool:
    """Whether the engine keeps its images in containerd's store (`docker info`: the snapshotter driver type)."""
    status = client.info().get("DriverStatus") or []
    return any(key == "driver-type" and "io.containerd.snapshotter" in value for key, value in status)


def image_exists(client: docker.DockerClient, ref: str) -> bool:
    try:
        client.api.inspect_image(ref)
    except docker.errors.ImageNotFound:
        return False
    return True
