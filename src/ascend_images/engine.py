"""The Docker engine connection, with an error that says what to do when there is none."""

from __future__ import annotations

import os

import docker
from docker.errors import DockerException

from .errors import DockerUnavailable


def connect(timeout: int = 600) -> docker.DockerClient:
    try:
        client = docker.from_env(timeout=timeout)
        client.ping()
    except DockerException as exc:
        host = os.environ.get("DOCKER_HOST", "unix:///var/run/docker.sock")
        raise DockerUnavailable(
            f"no Docker engine answers at {host} ({exc}). Start one (e.g. `bash scripts/setup-host.sh`, "
            "or `dockerd &`) or set DOCKER_HOST."
        ) from None
    return client


def image_exists(client: docker.DockerClient, ref: str) -> bool:
    try:
        client.api.inspect_image(ref)
    except docker.errors.ImageNotFound:
        return False
    return True
