"""Shared fixtures: the Docker client, the matrix, and each test's own state. The session's harness is in
tests/fixtures/harness/ (hooks, the CI images, registries, x86_64 chains), loaded here; tests import its names from
here or from there. Tests that need Docker skip without an engine, except in CI (CI=true), where a missing engine is
a failure."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from ascend_images.matrix.model import Matrix, load_matrix  # noqa: E402
from tests.fixtures.harness.ci import (  # noqa: E402, F401
    build_secrets,
    build_selection_here,
    ci_build,
    ci_images,
    debian12_os_image,
    debian13_os_image,
    fake_artifacts_dir,
    fake_cann_dir,
    live_output,
    native_tool,
    os_image,
    work_dir,
)
from tests.fixtures.harness.common import (  # noqa: E402, F401
    HOST_CA,
    IN_CI,
    LEAK_MARKER_PREFIX,
    TEST_ARCH,
    TEST_DOCKER_ARCH,
    TEST_NAMESPACE,
    XDIST_WORKER,
    host_lock,
    image_history,
    remove_tags,
)
from tests.fixtures.harness.hooks import (  # noqa: E402, F401
    pytest_addoption,
    pytest_configure,
    pytest_sessionfinish,
    pytest_terminal_summary,
    pytest_xdist_make_scheduler,
    scope_of,
)
from tests.fixtures.harness.registries import AUTH_PASSWORD, AUTH_USER, auth_registry, kept_registries, registry  # noqa: E402, F401
from tests.fixtures.harness.x86 import (  # noqa: E402, F401
    TORCH_CPU_INDEX,
    TORCH_WHEEL,
    X86_RELEASE,
    fake_cann_both,
    light_wheelhouse,
    os_image_amd64,
    os_image_debian13_amd64,
    wheelhouse,
    with_own_cann_stages,
    x86_light_matrix,
    x86_matrix,
)


@pytest.fixture(autouse=True)
def normal_voice():
    """Each test starts at the console's normal level, whatever an in-process command before it set (`-q`)."""
    from ascend_images import console

    console.configure()


@pytest.fixture(autouse=True)
def own_state_dir(tmp_path_factory, monkeypatch) -> Path:
    """Each test's own state directory (the trust record lives there): a test never reads or writes this host's."""
    state = tmp_path_factory.mktemp("state")
    monkeypatch.setenv("ASCEND_IMAGES_STATE", str(state))
    return state


@pytest.fixture(scope="session")
def matrix() -> Matrix:
    return load_matrix(ROOT / "matrix.yaml")


@pytest.fixture(scope="session")
def docker_client():
    import docker

    try:
        client = docker.from_env(timeout=900)
        client.ping()
    except Exception as exc:
        if IN_CI:
            pytest.fail(f"CI=true but no Docker engine answers: {exc}")
        pytest.skip(f"no Docker engine: {exc}")
    return client


