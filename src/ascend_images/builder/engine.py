"""The Docker engine connection: made with an error that says what to do when there is none, a full disk told
apart, and what kind of image store the engine has."""

from __future__ import annotations

import os
import re

import docker
from docker.errors import DockerException

from ascend_images.builder.endpoint import DEFAULT_HOST, ContextError, Endpoint, resolve
from ascend_images.errors import DockerUnavailable


def engine_host() -> str:
    """The engine's address as the docker CLI would choose it (builder.endpoint), whole."""
    return _endpoint_or_host().host


def _endpoint_or_host() -> Endpoint:
    try:
        return resolve()
    except ContextError:  # said by connect(); a message about another error still names an address
        return Endpoint(os.environ.get("DOCKER_HOST") or DEFAULT_HOST, "default", "DOCKER_HOST")


def client_for(endpoint: Endpoint, timeout: int = 600) -> docker.DockerClient:
    """A client of the endpoint's engine. ssh:// goes through the system's ssh, as the docker CLI's does (its
    config, agent and known hosts; no paramiko)."""
    ssh = endpoint.host.startswith("ssh://")
    if endpoint.from_environment:
        return docker.from_env(timeout=timeout, use_ssh_client=ssh)
    tls: docker.tls.TLSConfig | bool = False
    if endpoint.tls_dir is not None:
        ca, cert, key = (endpoint.tls_dir / name for name in ("ca.pem", "cert.pem", "key.pem"))
        tls = docker.tls.TLSConfig(client_cert=(str(cert), str(key)) if cert.is_file() and key.is_file() else None,
                                   ca_cert=str(ca) if ca.is_file() else None,
                                   verify=ca.is_file() and not endpoint.skip_tls_verify)
    return docker.DockerClient(base_url=endpoint.host, tls=tls, timeout=timeout, use_ssh_client=ssh)


def connect(timeout: int = 600) -> docker.DockerClient:
    endpoint = resolve()  # a context that does not exist: ContextError, before anything is tried
    try:
        client = client_for(endpoint, timeout)
        client.ping()
    except DockerException as exc:
        raise DockerUnavailable(explain(exc, endpoint)) from None
    return client


# how a full disk shows in a build's output: the kernel's ENOSPC (pip, tar, the engine's layer store), apt's and
# dnf's own checks before they download, and `apt-get update` whose gpgv could not write its temporary files (it
# says the repository's signature is invalid: seen in this project's disk-full test, and Docker's users know it)
DISK_FULL_SIGNS = ("no space left on device", "you don't have enough free space in", "more space needed on the",
                   "at least one invalid signature was encountered")


def disk_full(output: str) -> bool:
    text = output.lower()
    return any(sign in text for sign in DISK_FULL_SIGNS)


def cause(exc: BaseException) -> str:
    """What went wrong underneath, in a few words and never cut: the innermost `[Errno N] ...` of the transport's
    chain (requests, urllib3), else the whole text."""
    text = str(exc).strip()
    found = re.findall(r"\[Errno -?\d+\] [^'\")\]]+", text)
    return found[-1].strip() if found else text


def explain(exc: BaseException, endpoint: Endpoint | None = None) -> str:
    """One line for an error from the Docker SDK or its transport: what failed, at which address (whole, and what
    chose it) and what to do."""
    text = str(exc)
    endpoint = endpoint or _endpoint_or_host()
    where = endpoint.describe()
    if isinstance(exc, docker.errors.ImageNotFound):
        return f"no such image on the engine at {where}: {getattr(exc, 'explanation', None) or text}. " \
               "Build it (invoke build ...) or pull it; `docker images` lists what is there."
    if "Permission denied" in text or isinstance(exc, PermissionError):
        return f"permission denied on the Docker engine's socket at {where}: run as root, or add your user " \
               "to the `docker` group and log in again."
    if disk_full(text):
        return f"the Docker engine at {where} ran out of disk space ({cause(exc)}). Free some " \
               "(`docker system prune`, `docker image prune`) or move its data root, then run again."
    if isinstance(exc, docker.errors.APIError):
        return f"the Docker engine at {where} refused: {getattr(exc, 'explanation', None) or text}"
    return f"no Docker engine answers at {where}: {cause(exc)}. Start one (e.g. `bash scripts/setup-host.sh`, " \
           "or `dockerd &`), or point DOCKER_HOST or DOCKER_CONTEXT at one that runs."


def containerd_store(client: docker.DockerClient) -> bool:
    """Whether the engine keeps its images in containerd's store (`docker info`: the snapshotter driver type)."""
    status = client.info().get("DriverStatus") or []
    return any(key == "driver-type" and "io.containerd.snapshotter" in value for key, value in status)


def free_bytes(client: docker.DockerClient) -> int | None:
    """Free space on the disk of the engine's data root, where the engine is on this host; else None."""
    import shutil

    if not engine_host().startswith("unix://"):
        return None
    try:
        return shutil.disk_usage(client.info()["DockerRootDir"]).free
    except (OSError, KeyError, DockerException):
        return None


def image_exists(client: docker.DockerClient, ref: str) -> bool:
    try:
        client.api.inspect_image(ref)
    except docker.errors.ImageNotFound:
        return False
    return True
