"""The flags tasks take, grouped as they travel together: what to build (Selection), where its inputs come from
(SourceFlags), how the build reaches indexes and mirrors (InputFlags), and the run and lock options."""

from __future__ import annotations

import os
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Literal

from ascend_images.cli.project import project_path
from ascend_images.errors import SelectionError
from ascend_images.inputs.cache import default_cache
from ascend_images.inputs.checksums import parse_checksums
from ascend_images.inputs.pins import Pin, pinned_sha256, pins_path, read_pins, trust_record_path
from ascend_images.inputs.sources import (
    ArtifactSource,
    BuildInputs,
    CannSource,
    Credential,
    Sources,
    split_url,
)
from ascend_images.matrix.model import Matrix, Variant, load_matrix
from ascend_images.matrix.selection import control_character, parse_env_overrides, select

PathKind = Literal["file", "dir", "dir-to-make", "file-to-write"]


def shown(value: str) -> str:
    """A user's value as an error message shows it: as given, unless it holds characters that would break the line
    (then quoted, with escapes)."""
    return repr(value) if control_character(value) is not None or not value or value != value.strip() else value


def checked_path(flag: str, value: str, kind: PathKind) -> Path:
    """A file or directory flag's path, checked before anything is rendered or built: it exists, is of the right
    kind and can be read (a directory to make: its nearest existing parent can be written). An empty value is no
    path: Path("") would be the current directory."""
    if not value.strip():
        raise SelectionError(f"{flag} is empty: give a {'file' if kind.startswith('file') else 'directory'} path")
    path = Path(value)
    if kind == "file-to-write":
        if path.is_dir():
            raise SelectionError(f"{flag} {shown(value)}: a directory, not a file")
        checked_path(flag, str(path.parent), "dir-to-make")
        return path
    value = shown(value)
    if kind == "dir-to-make":
        parent = next((p for p in (path, *path.parents) if p.exists()), Path("/"))
        if not parent.is_dir():
            raise SelectionError(f"{flag} {value}: {parent} is a file, not a directory")
        if not os.access(parent, os.W_OK | os.X_OK):
            raise SelectionError(f"{flag} {value}: {parent} is not writable")
        if parent != path and str(parent).startswith(("/proc", "/sys")):
            raise SelectionError(f"{flag} {value}: nothing can be made under {parent}")
        return path
    if not path.exists():
        raise SelectionError(f"{flag} {value}: no such {'file' if kind == 'file' else 'directory'}")
    if kind == "file" and not path.is_file():
        raise SelectionError(f"{flag} {value}: a directory, not a file")
    if kind == "dir" and not path.is_dir():
        raise SelectionError(f"{flag} {value}: a file, not a directory")
    if not os.access(path, os.R_OK):
        raise SelectionError(f"{flag} {value}: not readable")
    return path


def output_path(flag: str, value: str | None, default: str, kind: PathKind = "dir-to-make") -> Path:
    """Where a task writes: the flag's path as given, or its default inside the project; checked before anything
    is written (never empty, never into a file, writable)."""
    return checked_path(flag, project_path(value, default), kind)


def whole_number(flag: str, value: str | int, minimum: int, maximum: int = 10_000) -> int:
    """A number flag's value (invoke hands strings: a default that is an int would make invoke's own parser convert
    it, with a traceback for `abc`), checked before anything starts."""
    text = str(value).strip()
    if not text.isdecimal() or not text.isascii():
        raise SelectionError(f"{flag} {shown(str(value))}: expected a whole number from {minimum} to {maximum}")
    number = int(text)
    if not minimum <= number <= maximum:
        raise SelectionError(f"{flag} {number}: expected a whole number from {minimum} to {maximum}")
    return number


def without_effect(flag: str, value: object, because: str) -> SelectionError:
    """The refusal of a flag that would change nothing in the combination given (as Docker refuses --restart with
    --rm): named as typed, with its value, and what it needs or why it is moot."""
    shown_value = "" if value is True else f" {shown(str(value))}"
    return SelectionError(f"{flag}{shown_value} has no effect here: {because}")


def refuse_moot(given: dict[str, object], because: str) -> None:
    """The first of these flags that was given (not None, False or an empty list) is refused: `because` says why
    they all change nothing."""
    for flag, value in given.items():
        if value not in (None, False, []):
            raise without_effect(flag, value[0] if isinstance(value, list) else value, because)


def read_only_needs_a_cache(stage_cache: str | None, read_only: bool) -> None:
    if read_only and not stage_cache:
        raise without_effect("--stage-cache-read-only", True, "it says how the stage cache is used, and none is "
                             "named; add --stage-cache REGISTRY/NAMESPACE (or set ASCEND_IMAGES_STAGE_CACHE)")


def given_flags(*groups: object) -> dict[str, object]:
    """The flags of option dataclasses (SourceFlags, InputFlags) by their command-line names."""
    return {f"--{f.name.replace('_', '-')}": getattr(group, f.name) for group in groups for f in fields(group)
            if f.metadata.get("flag", True)}


@dataclass
class Selection:
    """The selection flags every task takes."""

    matrix: str | None = None  # None: the project's matrix.yaml (cli.project)
    device: str | None = None
    backend: str | None = None
    release: str | None = None
    os: str | None = None
    arch: str | None = None
    python: str | None = None
    profile: str | None = None
    env: list[str] = field(default_factory=list)
    allocator: str | None = None
    framework: str | None = None

    @property
    def matrix_path(self) -> str:
        return project_path(self.matrix, "matrix.yaml")

    def load(self) -> Matrix:
        return load_matrix(checked_path("--matrix", self.matrix_path, "file"))

    def narrows(self) -> list[str]:
        """The selection flags given (all but --matrix): a task that lists everything lists only what they name."""
        return [name for name in ("device", "backend", "release", "os", "arch", "python", "profile", "allocator",
                                  "framework") if getattr(self, name) is not None] + (["env"] if self.env else [])

    def variants(self, matrix: Matrix | None = None) -> list[Variant]:
        matrix = matrix or self.load()
        return select(matrix, device=self.device, backend=self.backend, release=self.release, os=self.os,
                      arch=self.arch, python=self.python, profile=self.profile,
                      env=parse_env_overrides(self.env), allocator=self.allocator,
                      framework=self.framework)


@dataclass
class SourceFlags:
    cann_source: str | None = None
    cann_dir: str | None = None
    cann_image: str | None = None
    checksums: str | None = None
    artifacts_dir: str | None = None
    torch_index_url: str | None = None
    cache_dir: str | None = None  # what `invoke fetch` downloaded; default ~/.cache/ascend-images/downloads
    state_dir: str | None = None  # the trust record's directory; default $XDG_STATE_HOME/ascend-images
    wheel_store: str | None = None  # the host's wheel store; default ~/.cache/ascend-images/wheels
    # how the task spells cache_dir on its command line (fetch: --dest); not a flag itself
    cache_flag: str = field(default="--cache-dir", metadata={"flag": False})

    @property
    def cann_kind(self) -> str:
        return "local" if self.cann_dir and not self.cann_source else (self.cann_source or "")

    def check_paths(self) -> None:
        """Every path flag, checked before the first use of any (inside the task, so errors read as one line)."""
        for flag, value, kind in (("--checksums", self.checksums, "file"), ("--cann-dir", self.cann_dir, "dir"),
                                  ("--artifacts-dir", self.artifacts_dir, "dir"),
                                  (self.cache_flag, self.cache_dir, "dir-to-make"),
                                  ("--state-dir", self.state_dir, "dir-to-make"),
                                  ("--wheel-store", self.wheel_store, "dir-to-make")):
            if value is not None:
                checked_path(flag, value, kind)  # type: ignore[arg-type]

    def cache(self) -> Path:
        self.check_paths()
        return Path(self.cache_dir) if self.cache_dir else default_cache()

    def known_pins(self, matrix: Matrix) -> dict[str, Pin]:
        """pins.yaml beside matrix.yaml, over what this host's cache trusted on first use."""
        return {**read_pins(self.trust_record()), **read_pins(pins_path(matrix))}

    def store_root(self) -> Path:
        from ascend_images.inputs.wheelstore import default_store

        self.check_paths()
        return Path(self.wheel_store) if self.wheel_store else default_store()

    def trust_record(self) -> Path:
        self.check_paths()
        return trust_record_path(Path(self.state_dir) if self.state_dir else None)

    def known_checksums(self, matrix: Matrix) -> dict[str, str]:
        """The pins' sha256, overridden by --checksums."""
        self.check_paths()
        given = parse_checksums(Path(self.checksums)) if self.checksums else {}
        return {**pinned_sha256(self.known_pins(matrix)), **given}

    def sources(self, matrix: Matrix, *, strict: bool = True) -> Sources:
        kind = self.cann_kind or matrix.spec.defaults.cann_source
        if kind not in ("image", "url", "local"):
            raise SelectionError(f"--cann-source {kind!r}: valid: image, url, local")
        checksums = self.known_checksums(matrix)
        cache = self.cache() if self.cache().is_dir() else None
        cann = CannSource(kind, Path(self.cann_dir) if self.cann_dir else None, checksums, self.cann_image,
                          strict=strict, cache=cache)  # type: ignore[arg-type]
        artifacts = ArtifactSource(Path(self.artifacts_dir) if self.artifacts_dir else None, checksums, strict,
                                   cache, self.known_pins(matrix))
        # the Dockerfile names the index without its credentials (index_credentials carries those)
        torch_index = None if self.torch_index_url is None else split_url("--torch-index-url",
                                                                                self.torch_index_url)[0]
        return Sources(cann, artifacts, torch_index)

    def index_credentials(self) -> tuple[Credential, ...]:
        """The credentials of the index URLs these flags name, for the netrc a build gets as a secret."""
        if not self.torch_index_url:
            return ()
        credential = split_url("--torch-index-url", self.torch_index_url)[1]
        return (credential,) if credential else ()


def check_ca_bundle(value: str) -> None:
    """--ca-bundle is PEM certificates, as OpenSSL loads a CA file (what pip, curl and apt are handed in the build):
    a DER file, a key alone or any other file is refused here, not skipped deep inside an emulated build."""
    import ssl

    try:
        ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT).load_verify_locations(cafile=value)
    except ssl.SSLError as exc:
        raise SelectionError(f"--ca-bundle {shown(value)}: not PEM CA certificates ({exc.reason or exc}); give a file "
                             "of -----BEGIN CERTIFICATE----- blocks, e.g. /etc/ssl/certs/ca-certificates.crt") from None


def env_flag(name: str) -> str | None:
    value = os.environ.get(name)
    return value or None


@dataclass
class InputFlags:
    os_mirror: str | None = None
    pip_index_url: str | None = None
    pip_extra_index_url: list[str] = field(default_factory=list)
    pip_trusted_host: list[str] = field(default_factory=list)
    offline: bool = False
    wheelhouse: str | None = None
    ca_bundle: str | None = None
    netrc: str | None = None

    def check(self) -> None:
        """The path flags, and the CA bundle read as TLS reads it, before anything is built."""
        for flag, value, kind in (("--wheelhouse", self.wheelhouse, "dir"), ("--ca-bundle", self.ca_bundle, "file"),
                                  ("--netrc", self.netrc, "file")):
            if value is not None:
                checked_path(flag, value, kind)  # type: ignore[arg-type]
        if self.ca_bundle is not None:
            check_ca_bundle(self.ca_bundle)

    def inputs(self, index_credentials: tuple[Credential, ...] = ()) -> BuildInputs:
        self.check()
        # credentials are better kept off the command line: the environment is read too
        index = self.pip_index_url or env_flag("ASCEND_IMAGES_PIP_INDEX_URL") or ""
        extra = list(self.pip_extra_index_url)
        if env_flag("ASCEND_IMAGES_PIP_EXTRA_INDEX_URL"):
            extra += env_flag("ASCEND_IMAGES_PIP_EXTRA_INDEX_URL").split()  # type: ignore[union-attr]
        for flag, url in (("--pip-index-url", index), *(("--pip-extra-index-url", u) for u in extra)):
            split_url(flag, url)  # given in the pip.conf secret, never rendered: only checked
        os_mirror, os_mirror_credential = split_url("--os-mirror", self.os_mirror or "", "OS package mirror")
        return BuildInputs(
            os_mirror=os_mirror,
            os_mirror_credential=os_mirror_credential,
            pip_index_url=index,
            pip_extra_index_urls=tuple(extra),
            pip_trusted_hosts=tuple(self.pip_trusted_host),
            pip_offline=self.offline,
            wheelhouse=Path(self.wheelhouse) if self.wheelhouse else None,
            ca_bundle=Path(self.ca_bundle) if self.ca_bundle else None,
            netrc=Path(self.netrc) if self.netrc else None,
            index_credentials=index_credentials,
        )


@dataclass
class RunFlags:
    devices: str = "0"
    mode: str = "manual"
    host_root: str = "/"
    driver_mounts: str = "auto"
    shm_size: str = "16g"
    ipc_host: bool = False
    network_host: bool = False
    name: str | None = None
    # serving, as docker run spells it
    volumes: list[str] = field(default_factory=list)  # HOST:CONTAINER[:ro|rw]
    publish: list[str] = field(default_factory=list)  # [IP:]HOST:CONTAINER[/tcp|/udp]
    detach: bool = False
    restart: str | None = None  # no | on-failure[:N] | always | unless-stopped (needs detach)
    workdir: str | None = None
    # --print: what to print (comma-separated: docker, compose, k8s) and, for k8s, a Deployment of N replicas
    format: str = "docker,compose"
    replicas: int = 0
    # the selection's overlay (--env, --profile, --allocator) missing on the engine: build it over the image below
    # (which must be here) instead of refusing
    build: bool = False


@dataclass
class LockFlags:
    release: str | None = None
    backend: str | None = None  # default: every backend that installs from a lock
    arch: str | None = None  # default: every arch of the matrix
    index_url: str = ""
    torch_index_url: str | None = None
    extra_index_urls: list[str] = field(default_factory=list)
    # default: every framework lock of the selection after its backend's; one name: only that framework's locks
    framework: str | None = None
    layer: str | None = None  # base, torch, backend, framework (comma-separated); default: every layer, lowest first
    find_links: list[str] = field(default_factory=list)  # local wheel directories to resolve from too
