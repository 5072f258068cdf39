"""What each unit of a CI session cost (dev/check_costs.py): recorded only when `.ci/run` asks for it, summed per
module (or per image in tests/image), and written once, by the controller."""

from __future__ import annotations

import json
from types import SimpleNamespace

import dev.check_costs as check_costs
from tests.fixtures.harness import hooks


class Plugins:
    def __init__(self):
        self.imported: list[str] = []

    def import_plugin(self, name: str) -> None:
        self.imported.append(name)


def test_the_record_is_loaded_only_when_asked_for(monkeypatch):
    monkeypatch.delenv("ASCEND_IMAGES_CHECK_COSTS", raising=False)
    plugins = Plugins()
    hooks.pytest_configure(SimpleNamespace(pluginmanager=plugins))
    assert plugins.imported == []
    monkeypatch.setenv("ASCEND_IMAGES_CHECK_COSTS", "build/test/main/ci-costs.json")
    hooks.pytest_configure(SimpleNamespace(pluginmanager=plugins))
    assert plugins.imported == ["dev.check_costs"]


def test_seconds_add_up_per_module_and_the_controller_writes_them(monkeypatch, tmp_path):
    monkeypatch.setattr(check_costs, "CHECKS", {})
    monkeypatch.delenv("PYTEST_XDIST_WORKER", raising=False)
    monkeypatch.setenv(check_costs.ENV, "out/costs.json")
    for nodeid, seconds in (("tests/unit/test_a.py::test_one", 1.25), ("tests/unit/test_a.py::test_two[x]", 2.5),
                            ("tests/integration/test_b.py::test_three", 4.0)):
        check_costs.pytest_runtest_logreport(SimpleNamespace(nodeid=nodeid, duration=seconds))
    monkeypatch.setenv("PYTEST_XDIST_WORKER", "gw0")  # a worker's reports reach the controller: it writes nothing
    check_costs.pytest_runtest_logreport(SimpleNamespace(nodeid="tests/unit/test_a.py::test_one", duration=9.0))
    check_costs.pytest_sessionfinish(SimpleNamespace(config=SimpleNamespace(rootpath=tmp_path)))
    assert not (tmp_path / "out" / "costs.json").exists()
    monkeypatch.delenv("PYTEST_XDIST_WORKER")
    check_costs.pytest_sessionfinish(SimpleNamespace(config=SimpleNamespace(rootpath=tmp_path)))
    written = json.loads((tmp_path / "out" / "costs.json").read_text())
    assert written == {"checks": {"tests/unit/test_a.py": 3.75, "tests/integration/test_b.py": 4.0}}
