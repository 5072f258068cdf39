"""A pytest JUnit report read back: each test case's name and outcome."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Literal

Outcome = Literal["passed", "failed", "skipped"]


def cases(path: Path) -> list[tuple[str, Outcome]]:
    out: list[tuple[str, Outcome]] = []
    for case in ET.parse(path).getroot().iter("testcase"):
        if case.find("failure") is not None or case.find("error") is not None:
            out.append((case.get("name", "?"), "failed"))
        elif case.find("skipped") is not None:
            out.append((case.get("name", "?"), "skipped"))
        else:
            out.append((case.get("name", "?"), "passed"))
    return out
