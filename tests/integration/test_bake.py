"""`invoke build` and the committed bake file are one mechanism (DESIGN 25): README's command 2 ran, for the images
CI tests, the very definition committed in rendered/docker-bake.json: its variables, each of its targets attribute
for attribute, and its `ci-test` group as what it built. The committed contexts are the matrix's own renders
(tests/unit/test_rendered.py); a build from other inputs (the doubles here) differs in its contexts only by what
those inputs are: the files' names and sha256, and the test-double label. No second build of the chain runs here:
every build is a bake of this definition."""

from __future__ import annotations

import json

import pytest

from ascend_images.stages.bake import target_name
from tests.conftest import ROOT
from tests.fixtures.ci_images import WORK

pytestmark = [pytest.mark.docker]


def test_invoke_build_ran_the_committed_definition(ci_build):
    committed = json.loads((ROOT / "rendered" / "docker-bake.json").read_text())
    ran = json.loads((ROOT / WORK / "docker-bake.json").read_text())
    assert ran["variable"] == committed["variable"]
    assert ran["group"]["default"]["targets"] == committed["group"]["ci-test"]["targets"]
    assert sorted(ran["target"]) == sorted(target_name(stage) for stage in ci_build.plan.stages)
    assert [name for name, target in ran["target"].items() if committed["target"].get(name) != target] == []
