"""Version ordering for CANN (8.3.RC1 < 8.3.0 < 8.5.0), HDK drivers (25.3.RC1) and Python packages."""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import total_ordering

from packaging.specifiers import SpecifierSet
from packaging.version import Version

_ASCEND_RE = re.compile(
    r"^(?P<major>\d+)\.(?P<minor>\d+)"
    r"(?:\.(?:(?P<rc>[Rr][Cc])(?P<rcnum>\d+)|(?P<patch>\d+))(?:\.(?P<extra>[A-Za-z0-9.]+))?)?$"
)


@total_ordering
@dataclass(frozen=True)
class AscendVersion:
    """A CANN or HDK version: MAJOR.MINOR.RCn or MAJOR.MINOR.PATCH, with an optional build suffix.

    A release candidate sorts before the final releases of its line: 8.3.RC1 < 8.3.RC2 < 8.3.0 < 8.3.1.
    """

    major: int
    minor: int
    rc: int | None
    patch: int
    text: str

    @classmethod
    def parse(cls, text: str) -> AscendVersion:
        match = _ASCEND_RE.match(str(text).strip())
        if not match:
            raise ValueError(
                f"{text!r} is not a CANN/HDK version; expected MAJOR.MINOR.PATCH or MAJOR.MINOR.RCn "
                "(e.g. 8.5.0, 8.3.RC1, 25.3.RC1)"
            )
        rc = int(match["rcnum"]) if match["rc"] else None
        patch = int(match["patch"]) if match["patch"] else 0
        return cls(int(match["major"]), int(match["minor"]), rc, patch, str(text).strip())

    def _key(self) -> tuple[int, int, int, int]:
        # (major, minor, 0, rc) for candidates, (major, minor, 1, patch) for releases
        if self.rc is not None:
            return (self.major, self.minor, 0, self.rc)
        return (self.major, self.minor, 1, self.patch)

    def __lt__(self, other: object) -> bool:
        if not isinstance(other, AscendVersion):
            return NotImplemented
        return self._key() < other._key()

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, AscendVersion):
            return NotImplemented
        return self._key() == other._key()

    def __hash__(self) -> int:
        return hash(self._key())

    def __str__(self) -> str:
        return self.text

    @property
    def tag(self) -> str:
        """The lower-case form image tags use (8.3.RC1 -> 8.3.rc1)."""
        return self.text.lower()

    @property
    def line(self) -> tuple[int, int]:
        return (self.major, self.minor)


def ascend(text: str) -> AscendVersion:
    return AscendVersion.parse(text)


def python_version_in(version: str, spec: str) -> bool:
    """True when a Python version such as '3.11' satisfies a range such as '>=3.9,<3.12'."""
    return Version(version) in SpecifierSet(spec)


def release_of(version: str) -> str:
    """The public release part of a PEP 440 version: 2.7.1.post2 -> 2.7.1, 0.10.0rc1 -> 0.10.0."""
    return ".".join(str(p) for p in Version(version).release)
