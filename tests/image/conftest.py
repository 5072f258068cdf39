"""tests/image runs against a container of each image: the CI selection's images (built or reused once
per session), or the images named with --image. Every expectation comes from the image's own labels
and matrix.yaml, never from a per-image list."""

from __future__ import annotations

import pytest

from ascend_images.matrix.selection import parse_env_overrides, select
from ascend_images.release.imagemeta import variant_from_labels
from ascend_images.stages.names import image_tag
from tests.conftest import CI_SELECTIONS, ROOT, TEST_ARCH, TEST_NAMESPACE


def ci_image_selections() -> dict:
    """The tags the CI selection produces, in CI_SELECTIONS' order, with each one's variant and the index of the
    selection that makes it, known without an engine (plans are deterministic)."""
    from ascend_images.matrix.model import load_matrix

    matrix = load_matrix(ROOT / "matrix.yaml")
    out = {}
    for index, selection in enumerate(CI_SELECTIONS):
        chosen = {**selection, "env": parse_env_overrides(selection.get("env", []))}
        for v in select(matrix, arch=TEST_ARCH, **chosen):
            out.setdefault(image_tag(v, TEST_NAMESPACE), (v, index))
    return out


def ci_image_variants() -> dict:
    """The tags the CI selection produces, in CI_SELECTIONS' order, with each one's variant."""
    return {tag: v for tag, (v, _) in ci_image_selections().items()}


def ci_image_backends() -> dict[str, str]:
    """The tags the CI selection produces, with each one's backend."""
    return {tag: v.backend for tag, v in ci_image_variants().items()}


def ci_image_tags() -> list[str]:
    return list(ci_image_backends())


def pytest_generate_tests(metafunc):
    if "image" in metafunc.fixturenames:
        images = metafunc.config.getoption("--image") or ci_image_tags()
        if metafunc.definition.get_closest_marker("backend_image") and not metafunc.config.getoption("--image"):
            # a check of what only a backend image has runs on those: deselected, not skipped, on the others
            backends = ci_image_backends()
            images = [i for i in images if backends[i] != "none"]
        if metafunc.definition.get_closest_marker("framework_image") and not metafunc.config.getoption("--image"):
            variants = ci_image_variants()
            images = [i for i in images if variants[i].framework != "none"]
        # package scope: one container per image for all of tests/image, whose checks then run one after another
        metafunc.parametrize("image", images, ids=[i.rsplit(":", 1)[-1] for i in images], scope="package",
                             indirect=True)


@pytest.fixture(scope="package")
def image(request, docker_client):
    """The image under test: one of CI's is built (or reused) alone, its selection only, so its checks start as soon
    as it exists, not after every CI image."""
    if not request.config.getoption("--image"):
        _, index = ci_image_selections()[request.param]
        request.getfixturevalue("ci_image_builder")(index)
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
def python_stack(host, variant) -> dict:
    """The image's stack loaded in one Python process (probe.py), read by every module's checks."""
    from tests.image.probe import probe_stack

    return probe_stack(host, variant.backend, variant.framework)
