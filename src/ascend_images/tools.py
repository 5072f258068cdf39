"""Where the command-line tools the project installs are found: beside the running interpreter first (the venv's bin/,
which is on no PATH when a user types `.venv/bin/invoke`), then on PATH."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path


def which(name: str) -> str | None:
    beside = Path(sys.executable).parent / name
    if beside.is_file():
        return str(beside)
    return shutil.which(name)
