"""`invoke test`'s runner: tests/image against one image in a pytest subprocess, every failure named from the JUnit
report."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from ascend_images.runtime.junit import cases

PROJECT_ROOT = Path(__file__).resolve().parents[3]


@dataclass
class ImageTestResult:
    image: str
    passed: int
    failed: list[str]
    skipped: int
    junit: Path
    ran: list[str] = field(default_factory=list)  # every check that passed or failed, by name

    @property
    def ok(self) -> bool:
        return not self.failed and self.passed > 0


def run_image_suite(image: str, work_dir: Path, extra: Iterable[str] = ()) -> ImageTestResult:
    """tests/image against one image, in a pytest subprocess; the JUnit report names every failure."""
    junit = work_dir / "image-tests" / f"{image.replace('/', '_').replace(':', '__')}.xml"
    junit.parent.mkdir(parents=True, exist_ok=True)
    subprocess.run([sys.executable, "-m", "pytest", str(PROJECT_ROOT / "tests" / "image"), "--image", image, "-q",
                    "-p", "no:cacheprovider", f"--junitxml={junit}", *extra], cwd=PROJECT_ROOT)
    passed, skipped, failed, ran = 0, 0, [], []
    image_id = image.rsplit(":", 1)[-1]

    def check_name(name: str) -> str:
        # test_x[<image id>] -> test_x; test_x[<image id>-<param>] -> test_x[<param>]
        base, _, param = name.partition("[")
        param = param.removesuffix("]")
        if param == image_id:
            return base
        if param.startswith(image_id + "-"):
            return f"{base}[{param[len(image_id) + 1:]}]"
        return name

    if junit.exists():
        for name, outcome in cases(junit):
            if outcome != "skipped":
                ran.append(check_name(name))
            if outcome == "failed":
                failed.append(check_name(name))
            elif outcome == "skipped":
                skipped += 1
            else:
                passed += 1
    else:
        failed.append("(pytest wrote no report)")
    return ImageTestResult(image, passed, failed, skipped, junit, ran)
