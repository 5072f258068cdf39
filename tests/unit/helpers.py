"""Build a variant from a mutated copy of the repository's matrix.yaml."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from ascend_images.matrix.model import Variant, load_matrix
from ascend_images.matrix.selection import select
from tests.fixtures.matrices import matrix_copy

ROOT = Path(__file__).resolve().parents[2]


def mutated_matrix(tmp_path: Path, mutate: Callable[[dict], None]) -> Path:
    return matrix_copy(tmp_path, mutate)


def variant(tmp_path: Path, mutate: Callable[[dict], None] | None = None, **kwargs) -> Variant:
    path = mutated_matrix(tmp_path, mutate) if mutate else ROOT / "matrix.yaml"
    kwargs.setdefault("device", "a3")
    (v,) = select(load_matrix(path), **kwargs)
    return v
