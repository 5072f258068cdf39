"""Which committed images a change touches, the way docker-library's official-images decides what to build: every
image's build context is committed (`rendered/`, one directory per stage), so an image's definition changed between
two revisions exactly when a stage of its chain has a file that differs. A stage's identity is its context and its
parent's (DESIGN 14), so a changed parent changes every image over it."""

from __future__ import annotations

import subprocess
from pathlib import Path

from ascend_images.errors import SelectionError
from ascend_images.matrix.model import Matrix, Variant
from ascend_images.stages.drift import committed_plan, committed_variants, rendered_dir


def changed_stage_dirs(root: Path, since: str, rendered: str = "rendered") -> set[str]:
    """The stage directories under `rendered` whose files differ between revision `since` and the working tree (a
    file added, changed or removed, committed or not)."""
    def git(*args: str) -> str:
        done = subprocess.run(["git", *args], cwd=root, capture_output=True, text=True, check=False)
        if done.returncode != 0:
            raise SelectionError(f"git {' '.join(args)} in {root} failed: {done.stderr.strip()}")
        return done.stdout

    known = subprocess.run(["git", "cat-file", "-e", f"{since}^{{commit}}"], cwd=root, capture_output=True,
                           check=False)
    if known.returncode != 0:
        raise SelectionError(f"revision {since} (the full tier's last proof) is not in the history of {root}: clone "
                             "with the full history (`git fetch --unshallow`), or run the full tier "
                             "(`invoke test --ci --full`) to prove every image again")
    paths = git("diff", "--name-only", since, "--", rendered).splitlines()
    paths += git("ls-files", "--others", "--exclude-standard", "--", rendered).splitlines()
    # rendered/docker-bake.json is written from the stages' contexts: it names no change of its own
    return {Path(p).parts[1] for p in paths if len(Path(p).parts) > 2}


def changed_variants(matrix: Matrix, dirs: set[str], arch: str | None = None) -> list[Variant]:
    """The committed variants (of `arch`, or all) whose chain holds a stage in `dirs`, in the committed order."""
    plan = committed_plan(matrix)
    return [v for v in committed_variants(matrix) if (arch is None or v.arch == arch)
            and any(stage.slug in dirs for stage in plan.top(v).chain())]


def changed_since(matrix: Matrix, since: str, arch: str | None = None) -> list[Variant]:
    """The committed variants whose definition differs between revision `since` and the working tree."""
    root = rendered_dir(matrix).parent
    return changed_variants(matrix, changed_stage_dirs(root, since, rendered_dir(matrix).name), arch)
