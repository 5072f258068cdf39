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


# the checks of what only one kind of image has (pyproject's markers), and the images of that kind
IMAGE_KINDS = {"backend_image": ("a vLLM or SGLang image", lambda v: v.backend != "none"),
               "framework_image": ("a verl or ROLL image", lambda v: v.framework != "none"),
               "vllm_image": ("an image over vLLM-Ascend", lambda v: v.backend == "vllm")}


def unfit_kind(node, variant) -> str | None:
    """The kind of image a check marked for one kind needs and `variant` is not, if so."""
    for marker, (kind, fits) in IMAGE_KINDS.items():
        if node.get_closest_marker(marker) and not fits(variant):
            return kind
    return None


def pytest_generate_tests(metafunc):
    if "image" in metafunc.fixturenames:
        images = metafunc.config.getoption("--image") or ci_image_tags()
        if not metafunc.config.getoption("--image"):
            # CI's images are known before the session: a check runs on the images of its kind, the rest deselected
            variants = ci_image_variants()
            images = [i for i in images if unfit_kind(metafunc.definition, variants[i]) is None]
        # package scope: one container per image (per worker) for all of tests/image
        metafunc.parametrize("image", images, ids=[image_id(i) for i in images], scope="package", indirect=True)


@pytest.fixture(autouse=True)
def image_of_its_kind(request):
    """An --image run learns each image's kind from its labels: a check of another kind's is skipped, saying so."""
    if "image" in request.fixturenames and any(request.node.get_closest_marker(m) for m in IMAGE_KINDS):
        kind = unfit_kind(request.node, request.getfixturevalue("variant"))
        if kind is not None:
            pytest.skip(f"a check of {kind} only (an --image run: CI deselects it on other images)")


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
