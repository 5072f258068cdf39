"""Pins of the downloads PyPI does not carry (CANN packages, sgl-kernel-npu zips, tag archives, vendor wheels):
file name, URL, size and sha256 (DESIGN 15).

Two places hold them, in one format:
- the committed pin file, `pins.yaml` beside matrix.yaml: reviewed in a diff, enforced by every fetch and build, and
  the only record `invoke publish` accepts;
- the user's trust record, `trusted-on-first-use.yaml` in the state directory ($XDG_STATE_HOME/ascend-images, or
  --state-dir): what `invoke fetch` trusted on first use on this host, enforced from then on here, written to the pin
  file by `invoke fetch --record`. Trust is state, not cache (DESIGN 22): deleting the download cache to free space
  must not make the next fetch trust a changed file again.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import asdict, dataclass
from pathlib import Path

import yaml

from ascend_images.errors import SelectionError
from ascend_images.matrix.model import Matrix
from ascend_images.matrix.yamlfile import YamlFileError, load_yaml_file

PINS_FILE = "pins.yaml"
TRUST_RECORD = "trusted-on-first-use.yaml"
_SHA256 = re.compile(r"^[0-9a-f]{64}$")
_HEADER = {
    PINS_FILE: (
        "# Downloads PyPI does not carry, pinned (DESIGN 15): CANN packages, sgl-kernel-npu zips, git tag archives\n"
        "# and vendor wheels. `invoke fetch` verifies every download against this file, and `invoke publish` refuses\n"
        "# an image built from a download that is not in it. `invoke fetch --record` adds what a connected host\n"
        "# trusted on first use; review each addition in the diff before committing it.\n"),
    TRUST_RECORD: (
        "# What `invoke fetch` trusted on first use on this host (no pin in pins.yaml): enforced here from now on.\n"
        "# `invoke fetch --record` writes these into the committed pins.yaml.\n"),
}


@dataclass(frozen=True)
class Pin:
    file: str
    url: str
    size: int
    sha256: str

    def line(self) -> str:
        """The entry as it stands in a pin file, for a message that says what to add."""
        return yaml.safe_dump({"pins": {self.file: _entry(self)}}, sort_keys=True, width=1000).split("\n", 1)[1]


def _entry(pin: Pin) -> dict[str, object]:
    return {k: v for k, v in asdict(pin).items() if k != "file"}


def pins_path(matrix: Matrix) -> Path:
    return matrix.path.parent / PINS_FILE


def default_state_dir() -> Path:
    """ASCEND_IMAGES_STATE, else $XDG_STATE_HOME/ascend-images, else ~/.local/state/ascend-images (XDG's default)."""
    override = os.environ.get("ASCEND_IMAGES_STATE")
    if override:
        return Path(override)
    xdg = os.environ.get("XDG_STATE_HOME")
    return (Path(xdg) if xdg and Path(xdg).is_absolute() else Path.home() / ".local" / "state") / "ascend-images"


def trust_record_path(state_dir: Path | None = None) -> Path:
    return (state_dir or default_state_dir()) / TRUST_RECORD


def adopt_cached_trust(cache: Path, record: Path, out: Callable[[str], None]) -> None:
    """A trust record an earlier version kept in the download cache moves to the state directory (once), so an
    upgrade neither loses what was trusted nor keeps it where a cache clean-up would delete it."""
    old = cache / TRUST_RECORD
    if old.is_file() and not record.exists():
        record.parent.mkdir(parents=True, exist_ok=True)
        old.replace(record)
        out(f"note: the trust record moved from the download cache to {record} (trust is state, not cache)")


def read_pins(path: Path) -> dict[str, Pin]:
    """A pin file's entries by file name ({} when it does not exist); a malformed entry names its key and rule."""
    if not path.is_file():
        return {}
    try:
        doc = load_yaml_file(path) or {}
    except YamlFileError as exc:
        raise SelectionError(str(exc)) from None
    entries = doc.get("pins") if isinstance(doc, dict) else None
    if entries is None:
        entries = {}
    if not isinstance(entries, dict):
        raise SelectionError(f"{path}: 'pins' must be a mapping of file name to url, size and sha256")
    out = {}
    for file, entry in entries.items():
        where = f"{path}: pins.{file}"
        if not isinstance(entry, dict) or set(entry) != {"url", "size", "sha256"}:
            raise SelectionError(f"{where}: expected exactly url, size and sha256, got {entry!r}")
        sha256, size, url = str(entry["sha256"]), entry["size"], str(entry["url"])
        if not _SHA256.match(sha256):
            raise SelectionError(f"{where}.sha256: {sha256!r} is not 64 lowercase hex digits")
        if not isinstance(size, int) or isinstance(size, bool) or size < 0:
            raise SelectionError(f"{where}.size: {size!r} is not a byte count")
        if not url.startswith(("https://", "http://")):
            raise SelectionError(f"{where}.url: {url!r} is not an http(s) URL")
        out[str(file)] = Pin(str(file), url, size, sha256)
    return out


def write_pins(path: Path, pins: Iterable[Pin]) -> None:
    """The whole file, sorted by name, written atomically (a half-written pin file is never left in place)."""
    body = {"pins": {p.file: _entry(p) for p in sorted(pins, key=lambda p: p.file)}}
    text = _HEADER.get(path.name, "") + yaml.safe_dump(body, sort_keys=True, width=1000)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(text, encoding="utf-8")
    tmp.replace(path)


def add_pins(path: Path, new: Iterable[Pin]) -> list[Pin]:
    """Add pins to a file; returns those that were not there. A file already pinned otherwise is refused."""
    have = read_pins(path)
    added = []
    for pin in new:
        old = have.get(pin.file)
        if old is not None and old.sha256 != pin.sha256:
            raise SelectionError(f"{path}: {pin.file} is pinned to sha256 {old.sha256}, not {pin.sha256}; "
                                 "refused (review which one is right, and edit the file by hand)")
        if old is None:
            have[pin.file] = pin
            added.append(pin)
    if added:
        write_pins(path, have.values())
    return added


def pinned_sha256(pins: Mapping[str, Pin]) -> dict[str, str]:
    return {file: pin.sha256 for file, pin in pins.items()}
