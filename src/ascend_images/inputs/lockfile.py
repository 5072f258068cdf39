"""The lock file format: what a stage installs, every version pinned, per arch, each with the sha256 of the one file
the target platform installs.

A lock's body is a pip requirements file, one `name==version --hash=sha256:<hex>` per package (the hash names the
file the target installs: its best wheel, or the sdist a package without one is built from); a package PyPI does not
carry is pinned without a hash (its file is pinned in the header and in pins.yaml). The header records what the lock
was made from, including a hash of its inputs, so a lock that no longer matches the matrix is refused instead of
silently building other versions. Which lock a stage takes, and what it is made from, is lockspec.py's.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

from ascend_images.errors import SelectionError
from ascend_images.inputs.pypi import normalize

LOCK_FORMAT = 2  # 2: each pin carries the sha256 of the file the target platform installs
# The lowest glibc of the OSes we build (Ubuntu 22.04: 2.35): a lock resolved for it installs on all.
GLIBC_FLOOR = "manylinux_2_35"
FIRST_FETCH = "recorded-on-first-fetch"


class LockError(SelectionError):
    """A lock is missing, stale, or does not hold the release's pins."""


@dataclass(frozen=True)
class OffPypiFile:
    """A locked package whose pinned version PyPI does not carry, installed --no-deps from a vendor's file: the
    file pinned in pins.yaml when the lock was made, or None (recorded on first fetch, then pinned)."""

    name: str
    version: str
    file: str | None = None
    url: str | None = None
    sha256: str | None = None


@dataclass(frozen=True)
class DeviceSdist:
    """A locked package some devices install built from its sdist for the device (DESIGN 28), not the wheel the body
    pins: the sdist as the index published it, and the devices that build it."""

    name: str
    version: str
    file: str
    url: str
    sha256: str
    devices: tuple[str, ...]


@dataclass(frozen=True)
class Lock:
    path: Path
    header: dict[str, str]
    pins: dict[str, str]  # normalised name -> version
    text: str
    build_requirements: tuple[str, ...] = field(default=())
    from_source: tuple[str, ...] = field(default=())
    overrides: tuple[str, ...] = field(default=())
    hashes: dict[str, str] = field(default_factory=dict)  # normalised name -> sha256 of the target's file
    via: dict[str, frozenset[str]] = field(default_factory=dict)  # name -> what requires it (the resolver's note)

    def closure(self, names: set[str]) -> set[str]:
        """`names` with everything they require within the lock, as the resolver's `# via` notes say: what a set
        installed --no-deps needs beside it."""
        out = set(names)
        while more := {n for n, by in self.via.items() if n not in out and by & out}:
            out |= more
        return out

    @property
    def source_sdist(self) -> tuple[str, str, str | None]:
        """(file, url, sha256) of the source package's sdist as the index published it, or of its tag archive as
        pins.yaml pins it (None: no pin yet when the lock was made; recorded on first fetch)."""
        parts = self.header.get("source-sdist", "").split()
        if len(parts) != 3 or not (parts[2].startswith("sha256:") or parts[2] == FIRST_FETCH):
            raise LockError(f"{self.path}: header 'source-sdist' must be '<file> <url> sha256:<hex>' or "
                            f"'<file> <url> {FIRST_FETCH}'")
        return parts[0], parts[1], None if parts[2] == FIRST_FETCH else parts[2].removeprefix("sha256:")

    @property
    def source_subdir(self) -> str:
        """The source package's directory inside its archive ("" for an index sdist, whose root is the project)."""
        return self.header.get("source-subdir", "")

    @property
    def off_pypi(self) -> list[OffPypiFile]:
        """The header's `off-pypi` entries, comma-separated: '<name>==<version> <file> <url> sha256:<hex>' (pinned)
        or '<name>==<version> recorded-on-first-fetch'. Each is a pin of the lock's body too."""
        out = []
        for entry in filter(None, (e.strip() for e in self.header.get("off-pypi", "").split(","))):
            parts = entry.split()
            name, sep, version = parts[0].partition("==") if parts else ("", "", "")
            pinned = len(parts) == 4 and parts[3].startswith("sha256:") and len(parts[3]) == 71
            if not sep or not (pinned or parts[1:] == [FIRST_FETCH]):
                raise LockError(f"{self.path}: header 'off-pypi' entry {entry!r} must be '<name>==<version> <file> "
                                f"<url> sha256:<64 hex>' or '<name>==<version> {FIRST_FETCH}'")
            if self.pins.get(normalize(name)) != version:
                raise LockError(f"{self.path}: header 'off-pypi' names {name}=={version}, the lock pins "
                                f"{name}=={self.pins.get(normalize(name))}")
            out.append(OffPypiFile(normalize(name), version, *parts[1:3], parts[3].removeprefix("sha256:"))
                       if pinned else OffPypiFile(normalize(name), version))
        return out

    @property
    def device_sdists(self) -> dict[str, DeviceSdist]:
        """The header's `device-build` entries, comma-separated: '<name>==<version> <file> <url> sha256:<hex> for
        <device> ...', by name. Each is a pin of the lock's body too (whose hash is the wheel the other devices
        install)."""
        out = {}
        for entry in filter(None, (e.strip() for e in self.header.get("device-build", "").split(","))):
            parts = entry.split()
            name, sep, version = parts[0].partition("==") if parts else ("", "", "")
            if (not sep or len(parts) < 6 or parts[4] != "for" or not parts[3].startswith("sha256:")
                    or len(parts[3]) != 71):
                raise LockError(f"{self.path}: header 'device-build' entry {entry!r} must be '<name>==<version> "
                                "<file> <url> sha256:<64 hex> for <device> ...'")
            if self.pins.get(normalize(name)) != version:
                raise LockError(f"{self.path}: header 'device-build' names {name}=={version}, the lock pins "
                                f"{name}=={self.pins.get(normalize(name))}")
            out[normalize(name)] = DeviceSdist(normalize(name), version, parts[1], parts[2],
                                               parts[3].removeprefix("sha256:"), tuple(parts[5:]))
        return out

    @property
    def no_deps(self) -> dict[str, str]:
        """What the lock's stage installs --no-deps as upstream does (name -> version): the header's `no-deps`
        packages and its `archives`. `pip check` waives what these alone require."""
        out = {}
        for entry in self.header.get("no-deps", "").split():
            name, _, version = entry.partition("==")
            out[normalize(name)] = version
        for entry in filter(None, (e.strip() for e in self.header.get("archives", "").split(","))):
            name, _, version = entry.split()[0].partition("==")
            out[normalize(name)] = version
        return out


_PIN = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)(\[[^\]]*\])?==([^\s;#]+)")
_HASH = re.compile(r"--hash[= ]sha256:([0-9a-f]{64})")


def parse_lock(path: Path) -> Lock:
    try:
        text = path.read_bytes().decode("utf-8")
    except UnicodeDecodeError:
        raise LockError(f"{path}: not UTF-8 text") from None
    return parse_lock_text(text, path)


def parse_lock_text(text: str, path: Path) -> Lock:
    """A lock's header, pins and hashes; `path` names it in errors (the text may come from elsewhere, e.g. an
    image). A pin's hash may stand on its own line after a trailing backslash, as pip writes them."""
    header: dict[str, str] = {}
    pins: dict[str, str] = {}
    hashes: dict[str, str] = {}
    via: dict[str, frozenset[str]] = {}
    last = ""
    for n, line in enumerate(text.splitlines(), 1):
        if line.startswith("# ") and ": " in line and not pins:
            key, _, value = line[2:].partition(": ")
            header[key.strip()] = value.strip()
            continue
        body = line.split(" #", 1)[0].split("\t#", 1)[0].strip().rstrip("\\").strip()
        if not body or body.startswith("#"):
            continue
        if body.startswith("--hash"):
            found = _HASH.match(body)
            if not found or not last:
                raise LockError(f"{path}:{n}: expected '--hash=sha256:<64 hex>' after a pin, got {body!r}")
            hashes[last] = found[1]
            continue
        match = _PIN.match(body)
        if not match:
            raise LockError(f"{path}:{n}: expected 'name==version [--hash=sha256:<hex>]', got {body!r}")
        last = normalize(match.group(1))
        pins[last] = match.group(3)
        if found := _HASH.search(body):
            hashes[last] = found[1]
        note = line.partition("#")[2].strip()
        if note.startswith("via "):
            via[last] = frozenset(normalize(n.strip()) for n in note[4:].split(",") if not n.strip().startswith("-"))
    return Lock(path, header, pins, text,
                tuple(header.get("build-requirements", "").split()), tuple(header.get("from-source", "").split()),
                tuple(header.get("overrides", "").split()), hashes, via)


def pin_line(name: str, version: str, sha256: str | None, note: str = "") -> str:
    """One body line: the pin, the hash of the target's file (none for a package PyPI does not carry) and a note."""
    line = f"{name}=={version}" + (f" --hash=sha256:{sha256}" if sha256 else "")
    return f"{line}  # {note}" if note else line


def installed_below(locks: list[Lock]) -> dict[str, str]:
    """What the locks of the stages below install, name -> version, each one over the one before (a later lock
    that moves a pin wins, as its stage reinstalls it)."""
    out: dict[str, str] = {}
    for lock in locks:
        out.update(lock.pins)
    return out
