"""What the GitHub workflow asks of the project: its job matrices (from matrix.yaml's ci.publish and each arch's
runner) and the NPU job's gate."""

from __future__ import annotations

from pathlib import Path

from ascend_images.errors import AscendImagesError
from ascend_images.inputs.lockspec import load_lock, variant_layers
from ascend_images.matrix.model import Matrix
from ascend_images.matrix.selection import select


def ci_matrix(matrix: Matrix, lists: bool = False) -> dict:
    """The publish selection of matrix.yaml as a GitHub Actions strategy.matrix: one job per variant and
    arch, or with `lists` one per manifest list (the merge jobs). Every entry must have a fresh lock of each layer
    for each of its arches, so CI never starts a build that is bound to fail on a missing lock."""
    include = []
    for entry in matrix.spec.ci.publish:
        base = {"device": entry.device, "backend": entry.backend, "release": entry.release, "os": entry.os,
                "framework": entry.framework}
        top = entry.backend if entry.framework == "none" else f"{entry.backend}-{entry.framework}"
        name = f"{entry.release}-{entry.device}-{top}-{entry.os}"
        for arch in entry.arches:
            (variant,) = select(matrix, arch=arch, **base)
            for layer in variant_layers(variant):  # a build bound to fail on a missing or stale lock never starts
                load_lock(variant, layer)
            if not lists:
                runner = matrix.spec.arches[arch].github_runner
                include.append({**base, "arch": arch, "runner": runner, "name": f"{name}-{arch}"})
        if lists:
            include.append({**base, "arches": ",".join(entry.arches), "name": name})
    return {"include": include}


def npu_gate(reports: list[Path], runs: Path) -> str:
    """The NPU job's gate: the aarch64 refs the build jobs pushed, and the JUnit file of each run."""
    from ascend_images.release.npugate import check_npu_gate
    from ascend_images.release.publish import report_refs

    refs = [r for r in report_refs(reports) if "-arm64@" in r] if reports else []
    ran: dict[str, Path] = {}
    if runs.is_file():
        try:
            text = runs.read_bytes().decode("utf-8")
        except UnicodeDecodeError:
            raise AscendImagesError(f"{runs}: not UTF-8 text (a TSV of REF<TAB>JUnit file lines)") from None
        for line in text.splitlines():
            if "\t" in line:
                ref, junit = line.split("\t", 1)
                ran[ref] = Path(junit)
    return check_npu_gate(refs, ran)
