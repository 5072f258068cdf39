"""The installed `ascend-images` script, for tests that run a command line exactly as a user types it.

The script `pip install -e .` put next to this interpreter (or on PATH) when there is one; otherwise one installed
here into a venv of its own over this interpreter's site-packages, as a fresh checkout's user gets it. Either way it
runs with PYTHONPATH at this tree's src/, so it runs this checkout's code even when pip's editable install points at
another checkout."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

from tests.conftest import ROOT

NAME = "ascend-images"
ENV = {**os.environ, "PYTHONPATH": str(ROOT / "src")}


def find_or_install(venv: Path) -> Path:
    beside = Path(sys.executable).parent / NAME
    if beside.is_file():
        return beside
    found = shutil.which(NAME)
    if found:
        return Path(found)
    subprocess.run([sys.executable, "-m", "venv", "--system-site-packages", str(venv)], check=True, timeout=120)
    installed = subprocess.run([str(venv / "bin" / "pip"), "install", "-q", "--no-deps", "-e", str(ROOT)],
                               capture_output=True, text=True, timeout=300)
    assert installed.returncode == 0, installed.stdout + installed.stderr
    return venv / "bin" / NAME


def run(script: Path, *argv: str, cwd: Path = ROOT, timeout: int = 300) -> subprocess.CompletedProcess:
    return subprocess.run([str(script), *argv], cwd=cwd, env=ENV, capture_output=True, text=True, timeout=timeout)
