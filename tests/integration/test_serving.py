"""Serving with no NPU: `invoke run`'s own code path (commands.run_image, what the task calls) starts the CI
SGLang and vLLM images detached, with a host directory mounted read-only (-v) and a published port (-p), on the
prepared host tree with real device nodes (tests/unit/test_run.py's make_host); the image's own Python serves
the mounted file over HTTP and the host reads it back through the published port. The images are aarch64 under
qemu here, so the wait is bounded, not short."""

from __future__ import annotations

import secrets
import socket
import time
import urllib.error
import urllib.request
import uuid

import pytest

from ascend_images.cli.options import RunFlags, Selection
from ascend_images.cli.run import run_image
from ascend_images.stages.names import label
from tests.conftest import ROOT, TEST_NAMESPACE
from tests.unit.test_run import make_host, needs_root

pytestmark = [pytest.mark.docker, pytest.mark.slow, needs_root]

WAIT = 90  # seconds for the emulated interpreter to start and answer
SERVE = ["python", "-m", "http.server", "8000", "--bind", "0.0.0.0", "--directory", "/models"]


@pytest.fixture(params=["sglang", "vllm"])
def serving_image(request, docker_client, ci_images) -> str:
    """The CI image of the backend, by its label (not by its name)."""
    # the backend's own image: a framework image (verl) over it carries the same backend label
    # the backend's own image: a framework image (verl) over it carries the same backend label; one device's (A3:
    # the 950's vLLM-Ascend image serves the same way)
    images = [tag for tag in ci_images
              if docker_client.images.get(tag).labels.get(label("backend")) == request.param
              and not docker_client.images.get(tag).labels.get(label("framework"))
              and docker_client.images.get(tag).labels.get(label("device")) == "a3"]
    assert len(images) == 1, f"one A3 CI image of backend {request.param} expected: {ci_images}"
    return images[0]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def fetch_until_served(url: str, container, deadline: float) -> str:
    """The body at `url` once the server answers; fails early when the container stops, with its logs."""
    while True:
        try:
            with urllib.request.urlopen(url, timeout=5) as response:
                return response.read().decode()
        except (urllib.error.URLError, ConnectionError, TimeoutError):
            container.reload()
            if container.status not in ("created", "running"):
                pytest.fail(f"the container stopped ({container.status}) before serving:\n"
                            f"{container.logs().decode(errors='replace')}")
            if time.monotonic() > deadline:
                pytest.fail(f"nothing served at {url} within {WAIT} s:\n{container.logs().decode(errors='replace')}")
            time.sleep(1)


def test_serves_a_read_only_mount_on_a_published_port(docker_client, serving_image, tmp_path):
    (tmp_path / "host").mkdir()
    root = make_host(tmp_path / "host", devices=(0, 1))
    models = tmp_path / "models"
    models.mkdir()
    token = secrets.token_hex(16)
    (models / "token.txt").write_text(token)
    port = free_port()
    name = f"ascend-images-test-serve-{uuid.uuid4().hex[:8]}"
    flags = RunFlags(devices="0-1", host_root=str(root), shm_size="64m", name=name, detach=True,
                         restart="on-failure:2", volumes=[f"{models}:/models:ro"],
                         publish=[f"127.0.0.1:{port}:8000"], workdir="/models")
    printed: list[str] = []
    try:
        code = run_image(Selection(matrix=str(ROOT / "matrix.yaml")), flags, printed.append,
                             image=serving_image, command=SERVE, namespace=TEST_NAMESPACE)
        assert code == 0, printed  # detached: it returns once the container runs
        container = docker_client.containers.get(name)
        host = container.attrs["HostConfig"]
        assert host["PortBindings"] == {"8000/tcp": [{"HostIp": "127.0.0.1", "HostPort": str(port)}]}
        assert host["RestartPolicy"] == {"Name": "on-failure", "MaximumRetryCount": 2}
        assert container.attrs["Config"]["WorkingDir"] == "/models"
        assert {"Source": str(models), "Destination": "/models", "RW": False}.items() <= \
            next(m for m in container.attrs["Mounts"] if m["Destination"] == "/models").items()

        body = fetch_until_served(f"http://127.0.0.1:{port}/token.txt", container, time.monotonic() + WAIT)
        assert body == token

        # read-only inside, as :ro says
        result = container.exec_run(["sh", "-c", "echo x > /models/written"])
        assert result.exit_code != 0 and not (models / "written").exists(), result.output
    finally:
        for leftover in docker_client.containers.list(all=True, filters={"name": name}):
            leftover.remove(force=True)
    assert not docker_client.containers.list(all=True, filters={"name": name})
