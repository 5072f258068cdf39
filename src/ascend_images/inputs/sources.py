"""Where a build gets what it installs: CANN packages (image, url, local) and the other inputs
(OS mirror, pip index and credentials, extra CA bundle, wheelhouse)."""

from __future__ import annotations

import urllib.parse
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Literal

from ascend_images.errors import SelectionError
from ascend_images.inputs.artifacts import Wanted, cann_wanted
from ascend_images.inputs.download import sha256_file
from ascend_images.inputs.pins import Pin
from ascend_images.inputs.pypi import IndexFile, find_wheel, normalize
from ascend_images.matrix.model import Variant

CannSourceKind = Literal["image", "url", "local"]
OFFICIAL_CANN_IMAGE = "quay.io/ascend/cann"
# Where a build's RUN steps find their inputs: each named build context (cann, artifacts, wheels) bind-mounted here
INPUTS_DIR = "/run/ascend-images"


@dataclass(frozen=True)
class CannPackage:
    """One CANN .run file, in install order."""

    kind: str  # toolkit | ops | nnal
    file: str
    url: str
    sha256: str


MISSING_SHA256 = "sha256-missing"
# A directory holding this file is a test double (fake CANN packages, fake kernel zips): every image
# built from it carries the label TEST_DOUBLE_LABEL, which `invoke publish` refuses.
TEST_DOUBLE_MARKER = "ASCEND-IMAGES-TEST-DOUBLE"


def is_test_double(directory: Path | None) -> bool:
    return directory is not None and (directory / TEST_DOUBLE_MARKER).is_file()


@dataclass(frozen=True)
class Artifact:
    file: str
    url: str  # where the build takes it: upstream, or a path under INPUTS_DIR
    sha256: str
    local: Path | None = None  # the host's copy, which the build's named context holds


def local_wheel(w: Wanted, directory: Path | None, cache: Path | None, pins: Mapping[str, Pin]) -> Wanted | None:
    """A vendor wheel the lock does not name yet (not pinned when it was made): the file for its platform that a
    local directory holds, or that pins.yaml (or this host's trust record) pins, with that pin's URL."""
    assert w.wheel is not None
    spec = w.wheel
    names = [*(p.name for d in (directory, cache) if d is not None and d.is_dir() for p in d.glob("*.whl")), *pins]
    found = find_wheel([IndexFile(n, "", "") for n in names], spec.name, spec.version, spec.arch, spec.python_tag)
    if found is None:
        return None
    pin = pins.get(found.file)
    return replace(w, file=found.file, url=pin.url if pin else "", sha256=pin.sha256 if pin else None)


def name_wheel(w: Wanted, directory: Path | None, cache: Path | None, pins: Mapping[str, Pin], strict: bool) -> Wanted:
    """`local_wheel`, or an error saying how to get it (a placeholder name in a preview render)."""
    if w.file or w.wheel is None:
        return w
    found = local_wheel(w, directory, cache, pins)
    if found is not None:
        return found
    spec = w.wheel
    if strict:
        raise SelectionError(f"{spec} is not on PyPI, and no file of it is pinned in pins.yaml or fetched here: "
                             "`invoke fetch` (or `invoke build ... --fetch`) finds it on "
                             f"{', '.join(spec.index_urls) or 'its vendor index'} and records it; or put it in "
                             "--artifacts-dir")
    return replace(w, file=f"{normalize(spec.name).replace('-', '_')}-{spec.version}-not-fetched.whl")


def resolve_artifacts(what: str, wanted: list[Wanted], known: dict[str, str], directory: Path | None,
                      strict: bool, cache: Path | None = None, pins: Mapping[str, Pin] | None = None
                      ) -> dict[str, Artifact]:
    """Where each wanted file comes from: `directory` (--cann-dir / --artifacts-dir: every file must be there), else
    `cache` (filled by `invoke fetch`). A build takes it from there as its named build context `<mount>` (INPUTS_DIR),
    never from the network: downloads are fetch's (resumed, retried, verified, cached once per host). Its sha256 is
    the local copy's, which must be the one `known` (pins.yaml, --checksums, this host's trust record) or the matrix
    names; a preview render (not strict) of a file not fetched yet shows the pin, or a placeholder."""
    out: dict[str, Artifact] = {}
    wanted = [name_wheel(w, directory, cache, pins or {}, strict) for w in wanted]
    if directory is not None:
        missing = [w.file for w in wanted if not (directory / w.file).is_file()]
        if missing:
            have = sorted(p.name for p in directory.iterdir() if p.is_file()) or ["(nothing)"]
            raise SelectionError(f"{what} needs {', '.join(missing)} in {directory}; it has: {', '.join(have)}")
    for w in wanted:
        expected = known.get(w.file) or w.sha256
        path = f"{INPUTS_DIR}/{w.mount}/{w.file}"
        local = next((d / w.file for d in (directory, cache) if d is not None and (d / w.file).is_file()), None)
        if local is not None:
            got = sha256_file(local)
            if expected and got != expected:
                raise SelectionError(f"{what}: {local} has sha256 {got}, but {expected} is expected "
                                     "(matrix.yaml, the lock, pins.yaml or this host's trust record); delete it and "
                                     "fetch it again")
            out[w.key] = Artifact(w.file, path, got, local)
            continue
        if strict:
            raise SelectionError(
                f"{what}: {w.file} is not fetched yet; a build takes it from this host's download cache, not the "
                "network: `invoke fetch` (or `invoke build ... --fetch`) downloads and verifies it (and trusts it on "
                "first use where pins.yaml has no pin yet), or put the file in a local directory (--cann-dir / "
                "--artifacts-dir)")
        out[w.key] = Artifact(w.file, path, expected or MISSING_SHA256)
    return out


@dataclass(frozen=True)
class CannSource:
    kind: CannSourceKind
    directory: Path | None = None  # local: a directory of .run packages
    checksums: dict[str, str] = field(default_factory=dict)  # url: file -> sha256, over the matrix's
    image: str | None = None  # image: override the official image reference
    strict: bool = True  # False only to preview (render) without checksums
    cache: Path | None = None  # url: files `invoke fetch` already downloaded are served from here

    def __post_init__(self) -> None:
        if self.kind == "local":
            if self.directory is None:
                raise SelectionError("--cann-source local needs --cann-dir DIR (a directory of CANN .run packages)")
            if not self.directory.is_dir():
                raise SelectionError(f"--cann-dir {self.directory}: not a directory")

    @property
    def test_double(self) -> bool:
        return self.kind == "local" and is_test_double(self.directory)

    def packages(self, variant: Variant) -> list[CannPackage]:
        if self.kind == "image":
            return []
        resolved = resolve_artifacts(
            f"CANN {variant.release.cann} for {variant.device}/{variant.arch}", cann_wanted(variant),
            self.checksums, self.directory if self.kind == "local" else None, self.strict,
            self.cache if self.kind == "url" else None,
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
    cache: Path | None = None  # files `invoke fetch` already downloaded
    pins: dict[str, Pin] = field(default_factory=dict)  # pins.yaml and this host's trust record, by file

    def __post_init__(self) -> None:
        if self.directory is not None and not self.directory.is_dir():
            raise SelectionError(f"--artifacts-dir {self.directory}: not a directory")

    @property
    def test_double(self) -> bool:
        return is_test_double(self.directory)

    def resolve(self, what: str, wanted: list[Wanted]) -> dict[str, Artifact]:
        return resolve_artifacts(what, wanted, self.checksums, self.directory, self.strict, self.cache, self.pins)


@dataclass(frozen=True)
class Sources:
    cann: CannSource
    artifacts: ArtifactSource = field(default_factory=ArtifactSource)
    torch_index_url: str | None = None  # None: the matrix's per-arch default; "" for none


Credential = tuple[str, str, str]  # (host, login, password) as a netrc `machine` line holds them


def split_url(flag: str, url: str, what: str = "index") -> tuple[str, Credential | None]:
    """A URL given on the command line (an index, an OS mirror) as (the URL without credentials, its credentials):
    only the first may reach a Dockerfile, a label or a cache key; the second travels as a build secret (a
    netrc, an apt auth.conf). A token in the query string has no such way and is refused."""
    if url == "":
        return "", None
    bad = next((c for c in url if ord(c) < 0x21 or ord(c) == 0x7F), None)
    if bad is not None:
        raise SelectionError(f"{flag}: the URL holds {bad!r}; a URL has no spaces or control characters")
    parts = urllib.parse.urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise SelectionError(f"{flag} {_redacted(parts)}: expected an http(s)://HOST/... {what} URL")
    if parts.query or parts.fragment:
        raise SelectionError(f"{flag} {_redacted(parts)}: a query or fragment cannot be kept out of the image; give "
                             "credentials as https://USER:TOKEN@HOST/... or with --netrc")
    host = parts.hostname + (f":{parts.port}" if parts.port else "")
    public = urllib.parse.urlunsplit((parts.scheme, host, parts.path, "", ""))
    if parts.username is None and parts.password is None:
        return public, None
    login = urllib.parse.unquote(parts.username or "")
    password = urllib.parse.unquote(parts.password or "")
    # a netrc or auth.conf line is split at white space: a credential holding any cannot be written to one
    if any(c.isspace() or ord(c) < 0x20 or ord(c) == 0x7F for c in login + password):
        raise SelectionError(f"{flag} {_redacted(parts)}: the user name or password holds white space or a control "
                             "character (percent-encoded); a netrc line cannot carry it")
    return public, (parts.hostname, login, password)


def _redacted(parts: urllib.parse.SplitResult) -> str:
    host = parts.hostname or ""
    return urllib.parse.urlunsplit((parts.scheme, host, parts.path, "", "")) if host else "(the URL)"


@dataclass(frozen=True)
class BuildInputs:
    """Everything a build fetches that is not part of the recipe: none of it is rendered into a
    Dockerfile, so changing a mirror or a credential never changes an image's cache keys or digest."""

    os_mirror: str = ""  # without credentials: those are os_mirror_credential
    os_mirror_credential: Credential | None = None
    pip_index_url: str = ""
    pip_extra_index_urls: tuple[str, ...] = ()
    pip_trusted_hosts: tuple[str, ...] = ()
    pip_offline: bool = False
    wheelhouse: Path | None = None
    ca_bundle: Path | None = None
    netrc: Path | None = None
    index_credentials: tuple[Credential, ...] = ()  # from index URLs the Dockerfiles name without them

    def __post_init__(self) -> None:
        for flag, path in (("--wheelhouse", self.wheelhouse), ("--ca-bundle", self.ca_bundle),
                           ("--netrc", self.netrc)):
            if path is not None and not path.exists():
                raise SelectionError(f"{flag} {path}: does not exist")
        if self.pip_offline and self.wheelhouse is None:
            raise SelectionError("--offline needs --wheelhouse DIR: with no index, pip can only install from it")

    def os_mirror_document(self) -> bytes | None:
        """The build secret os-install reads: the mirror URL, then the login and password (empty lines without
        credentials). A secret, never a build arg: `docker history` records every build arg's value."""
        if not self.os_mirror:
            return None
        _, login, password = self.os_mirror_credential or ("", "", "")
        return f"{self.os_mirror}\n{login}\n{password}\n".encode()

    def netrc_text(self) -> bytes | None:
        """--netrc's content with a `machine` line for each index credential, or None when there is neither."""
        if self.netrc is None and not self.index_credentials:
            return None
        own = self.netrc.read_bytes() if self.netrc is not None else b""
        lines = "".join(f"machine {h} login {login} password {password}\n" for h, login, password in
                        self.index_credentials)
        return own + (b"\n" if own and not own.endswith(b"\n") else b"") + lines.encode()

    def pip_conf(self) -> str:
        lines = ["[global]", "no-cache-dir = true", "disable-pip-version-check = true"]
        if self.pip_index_url:
            lines.append(f"index-url = {self.pip_index_url}")
        extras = list(self.pip_extra_index_urls)
        if extras:
            lines.append("extra-index-url =\n    " + "\n    ".join(extras))
        if self.pip_trusted_hosts:
            lines.append("trusted-host =\n    " + "\n    ".join(self.pip_trusted_hosts))
        if self.pip_offline:
            lines.append("no-index = true")
        return "\n".join(lines) + "\n"
