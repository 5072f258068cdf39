"""Shared fixtures. Tests that need Docker skip without an engine, except in CI (CI=true), where a
missing engine is a failure."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from ascend_images.matrix import Matrix, load_matrix  # noqa: E402

IN_CI = os.environ.get("CI", "").lower() in ("1", "true", "yes")


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
