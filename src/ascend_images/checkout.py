"""The source tree this package runs from, and what identifies it: the version, the git revision and the matrix
digest, each from one place (every command, label and attestation asks here).

A package installed from a checkout (`pip install -e .`, what scripts/setup-host.sh does) runs from that tree, so
the templates (images/) and the data (matrix.yaml, locks/) are beside it. A copy installed without its checkout
(`pip install .`) has no templates: `templates_missing()` says so, and the command refuses at its start.
"""

from __future__ import annotations

import hashlib
import subprocess
from pathlib import Path

from ascend_images import __version__

ROOT = Path(__file__).resolve().parents[2]
IMAGES_DIR = ROOT / "images"  # the stage templates and the files stages copy


def version() -> str:
    """The project's version: `ascend_images.__version__`, which pyproject.toml reads too (dynamic version)."""
    return __version__


def templates_missing() -> str:
    """Why this copy of the package cannot render (a sentence), or "" when it runs from its checkout."""
    if IMAGES_DIR.is_dir():
        return ""
    return (f"this copy of ascend-images was installed without its checkout ({IMAGES_DIR} is missing: `pip install .` "
            "copies the package only); install it from a checkout instead: bash scripts/setup-host.sh, or "
            "python3 -m venv .venv && .venv/bin/pip install -e .")


def _git(root: Path, *args: str) -> subprocess.CompletedProcess | None:
    try:
        return subprocess.run(["git", "-C", str(root), *args], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return None


def revision(root: Path = ROOT) -> str:
    """The full commit the tree is at ("" outside a git checkout or without git): org.opencontainers.image.revision
    and the provenance's commit."""
    result = _git(root, "rev-parse", "HEAD")
    return result.stdout.strip() if result is not None and result.returncode == 0 else ""


def describe(root: Path = ROOT) -> str:
    """The short commit with -dirty when tracked files differ from it (as `git describe --dirty`: untracked files do
    not count); "unknown" outside a git checkout or without git."""
    head = _git(root, "rev-parse", "--short", "HEAD")
    if head is None or head.returncode:
        return "unknown"
    changed = _git(root, "status", "--porcelain", "--untracked-files=no")
    dirty = changed is None or changed.returncode or changed.stdout.strip()
    return head.stdout.strip() + ("-dirty" if dirty else "")


def file_sha256(path: Path) -> str:
    """The sha256 of a file's bytes: matrix.yaml's digest in --version, labels and provenance."""
    return hashlib.sha256(path.read_bytes()).hexdigest()
