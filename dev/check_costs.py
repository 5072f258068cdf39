"""A pytest plugin for `.ci/run`, which asks for it with ASCEND_IMAGES_CHECK_COSTS=FILE: the seconds each unit of the
session took (an image's checks `image:<id>`, or a module), written to FILE by the controller at the session's end.
`invoke ci-costs` adds them to the CI build's report (dev/cicosts.py). A user's `invoke test` records nothing."""

from __future__ import annotations

import functools
import json
import os
from pathlib import Path

import pytest

from tests.fixtures.harness.hooks import scope_of

ENV = "ASCEND_IMAGES_CHECK_COSTS"
CHECKS: dict[str, float] = {}
_CONFIG: list[pytest.Config] = []


def pytest_configure(config: pytest.Config) -> None:
    _CONFIG.append(config)


@functools.cache
def _image_ids() -> list[str]:
    from tests.image.conftest import image_ids

    return image_ids(_CONFIG[0])


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    if not os.environ.get("PYTEST_XDIST_WORKER"):
        # only an image check asks the engine which images there are: a unit test may stand in for subprocess
        unit = scope_of(report.nodeid, _image_ids() if report.nodeid.startswith("tests/image/") else [])
        CHECKS[unit] = round(CHECKS.get(unit, 0.0) + report.duration, 2)


def pytest_sessionfinish(session: pytest.Session) -> None:
    if CHECKS and not os.environ.get("PYTEST_XDIST_WORKER"):
        path = Path(os.environ[ENV])
        path = path if path.is_absolute() else session.config.rootpath / path
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps({"checks": CHECKS}, indent=1) + "\n")
