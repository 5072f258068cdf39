"""tests/image runs against a container of each image: the images CI tests (built before the session by README's
command 2), or the images named with --image. Every expectation comes from the image's own labels
and matrix.yaml, never from a per-image list."""

from __future__ import annotations

import functools
from pathlib import Path

import pytest

from ascend_images.matrix.model import load_matrix
from ascend_images.release.imagemeta import variant_from_labels
from tests.conftest import ROOT
from tests.fixtures.ci_images import ci_plan


@functools.cache
def ci_image_variants() -> dict:
    """The images CI tests (matrix.yaml's ci.test, as `invoke build --ci test` tags them), in its order, with each
    one's variant, known without an engine (plans are deterministic)."""
    plan = ci_plan(load_matrix(ROOT / "matrix.yaml"))
    return {top.tag: v for v, top in plan.tops.items()}


def ci_image_tags() -> list[str]:
    return list(ci_image_variants())


def image_id(tag: str) -> str:
    """The part of an image's test ids that names it: its tag after the colon."""
    return tag.rsplit(":", 1)[-1]


def image_ids(config) -> list[str]:
    return [image_id(tag) for tag in (config.getoption("--image") or ci_image_tags())]


def pytest_generate_tests(metafunc):
    if "image" in metafunc.fixturenames:
        images = metafunc.config.getoption("--image") or ci_image_tags()
        if not metafunc.config.getoption("--image"):
            variants = ci_image_variants()
            # a check of what only a backend (or framework) image has runs on those: deselected, not skipped
            if metafunc.definition.get_closest_marker("backend_image"):
                images = [i for i in images if variants[i].backend != "none"]
            if metafunc.definition.get_closest_marker("framework_image"):
                images = [i for i in images if variants[i].framework != "none"]
            if metafunc.definition.get_closest_marker("vllm_image"):
                images = [i for i in images if variants[i].backend == "vllm"]
        # package scope: one container per image (per worker) for all of tests/image
        metafunc.parametrize("image", images, ids=[image_id(i) for i in images], scope="package", indirect=True)


@pytest.fixture(scope="package")
def image(request, docker_client):
    """The image under test: one CI built before the session (README's command 2), or one named with --image."""
    if not request.config.getoption("--image"):
        request.getfixturevalue("ci_build")
    return request.param


@pytest.fixture(scope="package")
def variant(image, docker_client, matrix):
    return variant_from_labels(matrix, docker_client.images.get(image).labels, image)


@pytest.fixture(scope="package")
def container(image, docker_client):
    box = docker_client.containers.run(image, ["sleep", "infinity"], detach=True,
                                       environment={"ASCEND_PREFLIGHT": "off"})
    yield box
    box.remove(force=True)


@pytest.fixture(scope="package")
def host(container):
    import testinfra

    return testinfra.get_host(f"docker://{container.id}")


@pytest.fixture(scope="package")
def image_locks(host) -> dict:
    """The locks the image's stages installed, by layer (base, torch, backend, framework), as the image keeps them
    (/etc/ascend-images/locks/)."""
    from pathlib import Path

    from ascend_images.inputs.lockfile import parse_lock_text

    out = {}
    for name in host.check_output("ls /etc/ascend-images/locks").split():
        path = f"/etc/ascend-images/locks/{name}"
        lock = parse_lock_text(host.file(path).content_string, Path(path))
        out[lock.header["layer"]] = lock
    return out


@pytest.fixture(scope="package")
def python_stack(host, variant, container) -> dict:
    """The image's stack loaded in one Python process (probe.py), once per image and probe.py (facts.py), read by
    every module's checks."""
    from tests.image.facts import session_fact
    from tests.image.probe import probe_stack

    probe = Path(__file__).with_name("probe.py").read_text(encoding="utf-8")
    asked = (variant.backend, variant.framework, variant.device)
    return session_fact(container.attrs["Image"], "python-stack-" + "-".join(asked),
                        lambda: probe_stack(host, *asked), probe)
