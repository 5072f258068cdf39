"""Build a variant from a mutated copy of the repository's matrix.yaml; copy the documents `invoke readme` writes."""

from __future__ import annotations

import shutil
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


def documents_copy(tmp_path: Path) -> tuple[Path, Path]:
    """README.md and docs/ copied under tmp_path: `invoke readme --readme README --docs DOCS` then reads and writes
    the copies, never the checkout."""
    readme = tmp_path / "README.md"
    shutil.copy(ROOT / "README.md", readme)
    docs = tmp_path / "docs"
    shutil.copytree(ROOT / "docs", docs)
    return readme, docs


def holding(name: str, readme: Path, docs: Path) -> Path:
    """The one document (README or a page of the manual) that holds the generated section `name`."""
    (found,) = [p for p in (readme, *sorted(docs.glob("*.md")))
                if f"<!-- generated:{name} -->" in p.read_text(encoding="utf-8")]
    return found
