"""The checksums file: sha256sum-style lines ('<64 hex>  <file name>'), read and written here only. Beside
matrix.yaml it holds what `invoke fetch` trusted on first use; given with --checksums, what the user vouches for."""

from __future__ import annotations

import datetime
from pathlib import Path

from ascend_images.errors import SelectionError
from ascend_images.matrix.model import Matrix

CHECKSUMS_FILE = "checksums.sha256"


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


def checksums_path(matrix: Matrix) -> Path:
    return matrix.path.parent / CHECKSUMS_FILE


def recorded_checksums(matrix: Matrix) -> dict[str, str]:
    path = checksums_path(matrix)
    return parse_checksums(path) if path.is_file() else {}


def record_checksum(path: Path, file: str, sha256: str, url: str) -> None:
    """Append a trust-on-first-use record: the file's hash, with when and where it came from."""
    stamp = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d")
    header = "" if path.is_file() else (
        "# sha256 of downloads whose upstream publishes none, recorded on first download by `invoke fetch`\n"
        "# (trust on first use). Review additions in the diff; a later download that differs is refused.\n")
    with path.open("a", encoding="utf-8") as handle:
        handle.write(f"{header}# {stamp} first download from {url}\n{sha256}  {file}\n")
