"""The source tree this package runs from, and what identifies it: the version, the git revision and the matrix
digest, each from one place (every command, label and attestation asks here).

A package installed from a checkout (`pip install -e .`, what scripts/setup-host.sh does) runs from that tree, so
the templates (images/) and the data (matrix.yaml, locks/) are beside it. A copy installed without its checkout
(`pip install .`) has no templates: `templates_missing()` says so, and the command refuses at its start.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import os
import subprocess
from dataclasses import dataclass
from pathlib import Path

from ascend_images import __version__
from ascend_images.errors import SelectionError

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


# What the images are made from: a commit that changes none of these changes no image, so it keeps the images'
# SOURCE_DATE_EPOCH and revision (and the CI's images of the commit before stay current). The builder is not among
# them: every label, output and cache setting is the bake definition's (stages/bake.py), which it only runs
BUILD_DEFINITION = ("matrix.yaml", "pins.yaml", "locks", "upstream", "images", "src/ascend_images/stages",
                    "src/ascend_images/matrix", "src/ascend_images/inputs")


@dataclass(frozen=True)
class SourceDate:
    """What an image is of (DESIGN 24): SOURCE_DATE_EPOCH (its `created` and the clamp of its file times) and the
    revision whose checkout builds it (org.opencontainers.image.revision)."""

    revision: str = ""
    epoch: int = 0

    @property
    def iso(self) -> str:
        return dt.datetime.fromtimestamp(self.epoch, dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def definition_revision(root: Path = ROOT) -> str:
    """The last commit that changed the build definition (`git log -1 -- BUILD_DEFINITION`: HEAD's in a shallow clone,
    whose history stops there), `-dirty` after it when the tree changes the definition; "" outside a git checkout. A
    checkout of it renders every image as this tree does."""
    found = _git(root, "log", "-1", "--format=%H", "--", *BUILD_DEFINITION)
    if found is None or found.returncode or not found.stdout.strip():
        return ""
    changed = _git(root, "status", "--porcelain", "--untracked-files=no", "--", *BUILD_DEFINITION)
    dirty = changed is None or changed.returncode or changed.stdout.strip()
    return found.stdout.strip() + ("-dirty" if dirty else "")


def source_date_epoch(default: int) -> int:
    """$SOURCE_DATE_EPOCH when set (the reproducible-builds convention: whole seconds since 1970 UTC), else
    `default` (the matrix release's date)."""
    given = os.environ.get("SOURCE_DATE_EPOCH")
    if given is None:
        return default
    if not given.strip().isdigit():
        raise SelectionError(f"SOURCE_DATE_EPOCH={given!r}: expected whole seconds since 1970-01-01 UTC "
                             "(e.g. `git log -1 --format=%ct`), or leave it unset for matrix.yaml's source_date")
    return int(given)


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
