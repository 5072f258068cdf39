"""Where a build gets what it installs: CANN packages (image, url, local) and the other inputs
(OS mirror, pip index and credentials, extra CA bundle, wheelhouse)."""

from __future__ import annotations

import hashlib
import urllib.parse
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from .errors import SelectionError
from .matrix import Variant

CannSourceKind = Literal["image", "url", "local"]
OFFICIAL_CANN_IMAGE = "quay.io/ascend/cann"
# The build server's address is a build ARG, expanded by the shell inside RUN.
SERVER_VAR = "${ASCEND_BUILD_SERVER}"


@dataclass(frozen=True)
class CannPackage:
    """One CANN .run file, in install order."""

    kind: str  # toolkit | ops | nnal
    file: str
    url: str
    sha256: str


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


_hash_cache: dict[tuple[str, int, int], str] = {}


def sha256_file(path: Path) -> str:
    stat = path.stat()
    key = (str(path.resolve()), stat.st_size, stat.st_mtime_ns)
    if key not in _hash_cache:
        digest = hashlib.sha256()
        with path.open("rb") as handle:
            for chunk in iter(lambda: handle.read(1 << 20), b""):
                digest.update(chunk)
        _hash_cache[key] = digest.hexdigest()
    return _hash_cache[key]


MISSING_SHA256 = "sha256-missing"


@dataclass(frozen=True)
class Artifact:
    file: str
    url: str
    sha256: str


def resolve_artifacts(what: str, wanted: dict[str, tuple[str, str]], known: dict[str, str],
                      directory: Path | None, mount: str, strict: bool) -> dict[str, Artifact]:
    """wanted: key -> (file name, upstream URL). From `directory` (served by the build server under
    /<mount>/, sha256 computed here) or from upstream (sha256 from `known`, required when strict)."""
    out: dict[str, Artifact] = {}
    if directory is not None:
        missing = [f for f, _ in wanted.values() if not (directory / f).is_file()]
        if missing:
            have = sorted(p.name for p in directory.iterdir() if p.is_file()) or ["(nothing)"]
            raise SelectionError(f"{what} needs {', '.join(missing)} in {directory}; it has: {', '.join(have)}")
        for key, (file, _) in wanted.items():
            out[key] = Artifact(file, f"{SERVER_VAR}/{mount}/{file}", sha256_file(directory / file))
        return out
    missing = [f for f, _ in wanted.values() if f not in known]
    if missing and strict:
        raise SelectionError(
            f"{what}: no sha256 for {', '.join(missing)}; add it to matrix.yaml or pass --checksums FILE "
            "(sha256sum format), or put the files in a local directory (--cann-dir / --artifacts-dir)"
        )
    for key, (file, url) in wanted.items():
        out[key] = Artifact(file, url, known.get(file, MISSING_SHA256))
    return out


@dataclass(frozen=True)
class CannSource:
    kind: CannSourceKind
    directory: Path | None = None  # local: a directory of .run packages
    checksums: dict[str, str] = field(default_factory=dict)  # url: file -> sha256, over the matrix's
    image: str | None = None  # image: override the official image reference
    strict: bool = True  # False only to preview (render) without checksums

    def __post_init__(self) -> None:
        if self.kind == "local":
            if self.directory is None:
                raise SelectionError("--cann-source local needs --cann-dir DIR (a directory of CANN .run packages)")
            if not self.directory.is_dir():
                raise SelectionError(f"--cann-dir {self.directory}: not a directory")

    def packages(self, variant: Variant) -> list[CannPackage]:
        if self.kind == "image":
            return []
        cann = variant.matrix.spec.cann
        version = urllib.parse.quote(variant.release.cann)
        wanted = {kind: (f, cann.download_url.format(version=version, file=f))
                  for kind, f in variant.package_files().items()}
        resolved = resolve_artifacts(
            f"CANN {variant.release.cann} for {variant.device}/{variant.arch}", wanted,
            {**variant.cann.sha256, **self.checksums},
            self.directory if self.kind == "local" else None, "cann", self.strict,
        )
        return [CannPackage(kind, a.file, a.url, a.sha256) for kind, a in resolved.items()]

    def official_image(self, variant: Variant) -> str:
        if self.image:
            return self.image
        official_os = variant.os_spec.official_cann_os
        if official_os is None:
            valid = [n for n, o in variant.matrix.spec.os.items() if o.official_cann_os]
            raise SelectionError(
                f"--cann-source image: there is no official CANN image for os {variant.os!r}; "
                f"official images exist for: {', '.join(valid)} (or pass --cann-image REF)"
            )
        return (
            f"{OFFICIAL_CANN_IMAGE}:{variant.cann_version.tag}-{variant.device_spec.chip}-"
            f"{official_os}-py{variant.python_version}"
        )


@dataclass(frozen=True)
class ArtifactSource:
    """Downloads that are not on PyPI: SGLang source trees, sgl-kernel-npu zips, BiSheng Python."""

    directory: Path | None = None  # --artifacts-dir, for air-gapped hosts
    checksums: dict[str, str] = field(default_factory=dict)
    strict: bool = True

    def __post_init__(self) -> None:
        if self.directory is not None and not self.directory.is_dir():
            raise SelectionError(f"--artifacts-dir {self.directory}: not a directory")

    def resolve(self, what: str, wanted: dict[str, tuple[str, str]], known: dict[str, str]) -> dict[str, Artifact]:
        return resolve_artifacts(what, wanted, {**known, **self.checksums}, self.directory, "artifacts",
                                 self.strict)


@dataclass(frozen=True)
class Sources:
    cann: CannSource
    artifacts: ArtifactSource = field(default_factory=ArtifactSource)
    torch_index_url: str | None = None  # None: the matrix's per-arch default; "" for none


@dataclass(frozen=True)
class BuildInputs:
    """Everything a build fetches that is not part of the recipe: none of it is rendered into a
    Dockerfile, so changing a mirror or a credential never changes an image's content key."""

    os_mirror: str = ""
    pip_index_url: str = ""
    pip_extra_index_urls: tuple[str, ...] = ()
    pip_trusted_hosts: tuple[str, ...] = ()
    pip_offline: bool = False
    wheelhouse: Path | None = None
    ca_bundle: Path | None = None
    netrc: Path | None = None

    def __post_init__(self) -> None:
        for flag, path in (("--wheelhouse", self.wheelhouse), ("--ca-bundle", self.ca_bundle),
                           ("--netrc", self.netrc)):
            if path is not None and not path.exists():
                raise SelectionError(f"{flag} {path}: does not exist")
        if self.pip_offline and self.wheelhouse is None:
            raise SelectionError("--offline needs --wheelhouse DIR: with no index, pip can only install from it")

    @property
    def has_credentials(self) -> bool:
        urls = (self.pip_index_url, *self.pip_extra_index_urls)
        return self.netrc is not None or any(urllib.parse.urlsplit(u).password for u in urls if u)

    def pip_conf(self, server_url: str) -> str:
        lines = ["[global]", "no-cache-dir = true", "disable-pip-version-check = true"]
        if self.pip_index_url:
            lines.append(f"index-url = {self.pip_index_url}")
        extras = list(self.pip_extra_index_urls)
        if extras:
            lines.append("extra-index-url =\n    " + "\n    ".join(extras))
        hosts = ["127.0.0.1", *self.pip_trusted_hosts]
        lines.append("trusted-host =\n    " + "\n    ".join(hosts))
        if self.wheelhouse is not None:
            lines.append(f"find-links = {server_url}/wheelhouse/")
        if self.pip_offline:
            lines.append("no-index = true")
        return "\n".join(lines) + "\n"
