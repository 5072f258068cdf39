"""The installed package is the product: the maintainers' lab (the benchmark, the CI cost records, a second engine
started for a measurement or a test, the disk room a CI run makes) lives in dev/ and tests/, run from a checkout. A
user's `invoke` never starts a daemon of its own nor imports the checkout's dev/ or tests/."""

from __future__ import annotations

import ast
from pathlib import Path

from tests.conftest import ROOT

PACKAGE = ROOT / "src" / "ascend_images"
# the lab's concepts, by the names the checkout gives them (dev/, tests/fixtures/)
LAB_MODULES = {"bench", "benchmark", "cicosts", "ci_costs", "scratch_engine", "disk_room", "small_engine"}


def modules() -> list[Path]:
    return sorted(PACKAGE.rglob("*.py"))


def test_the_package_holds_no_lab_module():
    assert modules(), PACKAGE
    found = [str(p.relative_to(PACKAGE)) for p in modules() if p.stem in LAB_MODULES or p.parent.name in LAB_MODULES]
    assert found == []


def test_the_package_imports_nothing_of_the_checkouts_lab():
    found = []
    for path in modules():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else (
                [node.module or ""] if isinstance(node, ast.ImportFrom) else [])
            found += [f"{path.relative_to(PACKAGE)}: {n}" for n in names if n.split(".")[0] in ("dev", "tests")]
    assert found == []


def test_the_package_starts_no_docker_daemon():
    """A process list naming dockerd (the scratch engine's Popen) is a daemon of our own."""
    found = []
    for path in modules():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.List | ast.Tuple) and node.elts and isinstance(node.elts[0], ast.Constant) \
                    and str(node.elts[0].value).rsplit("/", 1)[-1] == "dockerd":
                found.append(f"{path.relative_to(PACKAGE)}:{node.lineno}")
    assert found == []
