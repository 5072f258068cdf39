"""A checksums file given with --checksums: sha256sum-style lines ('<64 hex>  <file name>') the user vouches for.
(Pins of what upstream publishes no sha256 for live in pins.yaml: inputs/pins.py.)"""

from __future__ import annotations

from pathlib import Path

from ascend_images.errors import SelectionError


def parse_checksums(path: Path) -> dict[str, str]:
    """A sha256sum-style file: '<64 hex>  <file name>' per line."""
    out: dict[str, str] = {}
    for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        parts = line.split()
        if len(parts) != 2 or len(parts[0]) != 64 or any(c not in "0123456789abcdef" for c in parts[0].lower()):
            raise SelectionError(f"{path}:{n}: expected '<sha256>  <file>', got {line!r}")
        out[parts[1].lstrip("*").rsplit("/", 1)[-1]] = parts[0].lower()
    return out
