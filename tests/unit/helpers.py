"""Build a variant from a mutated copy of the repository's matrix.yaml."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import yaml

from ascend_images.matrix import Variant, load_matrix, select

ROOT = Path(__file__).resolve().parents[2]


def mutated_matrix(tmp_path: Path, mutate: Callable[[dict], None]) -> Path:
    data = yaml.safe_load((ROOT / "matrix.yaml").read_text())
    mutate(data)
    path = tmp_path / "matrix.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def variant(tmp_path: Path, mutate: Callable[[dict], None] | None = None, **kwargs) -> Variant:
    path = mutated_matrix(tmp_path, mutate) if mutate else ROOT / "matrix.yaml"
    kwargs.setdefault("device", "a3")
    (v,) = select(load_matrix(path), **kwargs)
    return v
