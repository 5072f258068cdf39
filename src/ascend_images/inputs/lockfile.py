"""Backend lock files: what a release's backend stage installs, every version pinned, per arch.

A lock lives at `locks/<release>/<backend>-<arch>.txt` beside matrix.yaml. Its body is a pip
requirements file (one `name==version` per package, produced by a resolver for the target platform);
its header records what it was made from, including a hash of the matrix inputs, so a lock that no
longer matches the matrix is refused instead of silently building other versions.
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass, field
from pathlib import Path

from packaging.requirements import InvalidRequirement, Requirement

from ascend_images.errors import SelectionError
from ascend_images.inputs.pypi import normalize
from ascend_images.matrix.model import Matrix, Variant
from ascend_images.matrix.schema import SglangPins, VllmPins
from ascend_images.matrix.yamlfile import YamlFileError, load_yaml_file

LOCK_FORMAT = 1
# The lowest glibc of the OSes we build (Ubuntu 22.04: 2.35): a lock resolved for it installs on all.
GLIBC_FLOOR = "manylinux_2_35"
# Already installed by the torch stage; a backend lock pins them to the release's versions and the
# build refuses a lock that does not.
HELD = ("torch", "torch-npu")


class LockError(SelectionError):
    """A backend lock is missing, stale, or does not hold the release's pins."""


@dataclass(frozen=True)
class ListedRequirements:
    """A source package's dependency lists as a committed file transcribes them from the upstream tree (SGLang's
    python/pyproject_npu.toml), with the commit they were read at: what a lock is resolved from when the tree
    itself (a tag archive on GitHub) cannot be downloaded."""

    path: str  # relative to matrix.yaml's directory
    upstream: str  # repository, path and commit it was read from
    runtime: tuple[str, ...]  # the project's dependencies and its srt_npu extra, as the lock reads them
    build: tuple[str, ...]


@dataclass(frozen=True)
class SourcePackage:
    """The backend package built from its sdist after the lock is installed (vLLM for no CUDA;
    SGLang with its NPU project file)."""

    name: str
    version: str
    project_file: str | None = None
    # the git tag's archive instead of the index's sdist: (file, url), and the project's directory in it
    archive: tuple[str, str] | None = None
    subdir: str = ""
    listed: ListedRequirements | None = None


@dataclass(frozen=True)
class LockSpec:
    """Everything from matrix.yaml a lock depends on."""

    release: str
    backend: str
    arch: str
    python_version: str
    requirements: tuple[str, ...]
    source: SourcePackage
    torch_index_url: str = ""
    # NAME==VERSION requirements that win over every other requirement on NAME (uv --override)
    overrides: tuple[str, ...] = ()
    # what matrix.yaml says the lock builds from sdists on this arch (None: it does not say); checked, not resolved
    from_sdist: tuple[str, ...] | None = None
    # package -> the vendor index holding versions PyPI lacks. Where, not what: not part of the inputs hash (the
    # lock's `off-pypi` header names the pinned file)
    package_indexes: tuple[tuple[str, str], ...] = ()
    # packages installed --no-deps from a pinned file when PyPI lacks their version (package_indexes.*.no_deps)
    no_deps: tuple[str, ...] = ()

    @property
    def platform(self) -> str:
        return f"{self.arch}-{GLIBC_FLOOR}"

    @property
    def python_tag(self) -> str:
        return "cp" + self.python_version.replace(".", "")

    def inputs_sha256(self) -> str:
        doc = {
            "format": LOCK_FORMAT, "release": self.release, "backend": self.backend, "arch": self.arch,
            "python": self.python_version, "platform": self.platform, "requirements": list(self.requirements),
            "source": [self.source.name, self.source.version, self.source.project_file],
        }
        if self.source.archive:  # only when present, so locks of index sdists stay valid
            doc["source-archive"] = [*self.source.archive, self.source.subdir]
        if self.overrides:  # only when present, so locks made before overrides existed stay valid
            doc["overrides"] = list(self.overrides)
        if self.source.listed:  # the committed dependency lists are inputs: a changed list makes the lock stale
            doc["source-requirements"] = [list(self.source.listed.runtime), list(self.source.listed.build)]
        return hashlib.sha256(json.dumps(doc, sort_keys=True).encode()).hexdigest()

    def path(self, root: Path) -> Path:
        return root / self.release / f"{self.backend}-{self.arch}.txt"

    @property
    def command(self) -> str:
        return f"invoke lock --release {self.release} --backend {self.backend} --arch {self.arch}"


def locks_dir(matrix: Matrix) -> Path:
    return matrix.path.parent / "locks"


def lock_spec(variant: Variant) -> LockSpec:
    pins = variant.backend_pins
    local = variant.arch_spec.torch_local_version
    held = (f"torch=={variant.torch}{local}", f"torch-npu=={variant.torch_npu}")
    if isinstance(pins, VllmPins):
        wanted = [f"vllm-ascend=={pins.vllm_ascend}"]
        if pins.triton_ascend:
            wanted.append(f"triton-ascend=={pins.triton_ascend}")
        source = SourcePackage("vllm", pins.vllm)
    elif isinstance(pins, SglangPins):
        # sgl-kernel-npu is not on any index: its wheels come from a checksummed zip (--no-deps)
        wanted = []
        if pins.triton_ascend:
            # triton-ascend's Ascend backend imports pybind11 without declaring it; SG's NPU images install
            # pybind11 before triton-ascend (docker/npu_openeuler.Dockerfile)
            wanted += [f"triton-ascend=={pins.triton_ascend}", "pybind11"]
        archive, subdir = None, ""
        if pins.tree == "git-tag":
            tag = variant.matrix.spec.backends["sglang"].artifacts["source_tag"]
            archive, subdir = (tag.file.format(version=pins.sglang), tag.url.format(version=pins.sglang)), "python"
        listed = (read_listed_requirements(variant.matrix.path.parent, pins.npu_requirements, pins.sglang)
                  if pins.npu_requirements else None)
        source = SourcePackage("sglang", pins.sglang, pins.project_file, archive, subdir, listed)
    else:
        raise LockError(f"backend {variant.backend!r} has no lock: only vllm and sglang stages install from one")
    # the CANN stage installed these for the toolkit's own Python tools; a backend must keep them working
    cann_deps = tuple(variant.cann_python_deps)
    indexes = tuple((normalize(name), url) for name, spec in sorted(variant.matrix.spec.package_indexes.items())
                    for url in spec.urls)
    no_deps = tuple(sorted(normalize(name) for name, spec in variant.matrix.spec.package_indexes.items()
                           if spec.no_deps is not None))
    return LockSpec(variant.release_name, variant.backend, variant.arch, variant.python_version,
                    (*held, *wanted, *cann_deps), source, variant.arch_spec.torch_index_url,
                    tuple(o.requirement for o in pins.overrides),
                    tuple(pins.from_sdist[variant.arch]) if variant.arch in pins.from_sdist else None, indexes,
                    no_deps)


def read_listed_requirements(root: Path, rel: str, version: str) -> ListedRequirements:
    """The committed dependency lists of a source package (matrix: npu_requirements), checked for their shape."""
    path = root / rel
    if not path.is_file():
        raise LockError(f"npu_requirements: {path} does not exist (the committed dependency list of SGLang {version})")
    try:
        doc = load_yaml_file(path)
    except YamlFileError as exc:
        raise LockError(str(exc)) from None
    keys = {"project", "version", "upstream", "dependencies", "srt_npu", "build-system-requires"}
    if not isinstance(doc, dict) or set(doc) != keys:
        raise LockError(f"{path}: expected exactly the keys {', '.join(sorted(keys))}")
    if str(doc["version"]) != version:
        raise LockError(f"{path}: lists version {doc['version']}, the release pins {version}")
    lists = {}
    for key in ("dependencies", "srt_npu", "build-system-requires"):
        items = doc[key]
        if not isinstance(items, list) or not all(isinstance(i, str) for i in items):
            raise LockError(f"{path}: {key} must be a list of requirement strings")
        for item in items:
            try:
                Requirement(item)
            except InvalidRequirement as exc:
                raise LockError(f"{path}: {key}: {item!r} is not a requirement ({exc})") from None
        lists[key] = tuple(items)
    upstream = doc["upstream"]
    if not isinstance(upstream, dict) or not {"repository", "path", "commit"} <= set(upstream):
        raise LockError(f"{path}: upstream must name repository, path and commit")
    return ListedRequirements(rel, f"{upstream['repository']} {upstream['path']} at {upstream['commit']}",
                              lists["dependencies"] + lists["srt_npu"], lists["build-system-requires"])


@dataclass(frozen=True)
class OffPypiFile:
    """A locked package whose pinned version PyPI does not carry, installed --no-deps from a vendor's file: the
    file pinned in pins.yaml when the lock was made, or None (recorded on first fetch, then pinned)."""

    name: str
    version: str
    file: str | None = None
    url: str | None = None
    sha256: str | None = None


FIRST_FETCH = "recorded-on-first-fetch"


@dataclass(frozen=True)
class Lock:
    path: Path
    header: dict[str, str]
    pins: dict[str, str]  # normalised name -> version
    text: str
    build_requirements: tuple[str, ...] = field(default=())
    from_source: tuple[str, ...] = field(default=())
    overrides: tuple[str, ...] = field(default=())

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


_PIN = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)(\[[^\]]*\])?==([^\s;#]+)")


def parse_lock(path: Path) -> Lock:
    return parse_lock_text(path.read_text(encoding="utf-8"), path)


def parse_lock_text(text: str, path: Path) -> Lock:
    """A lock's header and pins; `path` names it in errors (the text may come from elsewhere, e.g. an image)."""
    header: dict[str, str] = {}
    pins: dict[str, str] = {}
    for n, line in enumerate(text.splitlines(), 1):
        if line.startswith("# ") and ": " in line and not pins:
            key, _, value = line[2:].partition(": ")
            header[key.strip()] = value.strip()
            continue
        body = line.split("#", 1)[0].strip()
        if not body:
            continue
        match = _PIN.match(body)
        if not match:
            raise LockError(f"{path}:{n}: expected 'name==version', got {body!r}")
        pins[normalize(match.group(1))] = match.group(3)
    return Lock(path, header, pins, text,
                tuple(header.get("build-requirements", "").split()), tuple(header.get("from-source", "").split()),
                tuple(header.get("overrides", "").split()))


def check_lock(spec: LockSpec, lock: Lock) -> None:
    """Raise LockError unless the lock was made from exactly these inputs and pins what they say."""
    if lock.header.get("format") != str(LOCK_FORMAT):
        raise LockError(f"{lock.path}: lock format {lock.header.get('format')!r}, this tool reads "
                        f"{LOCK_FORMAT}; regenerate it: {spec.command}")
    want = spec.inputs_sha256()
    have = lock.header.get("inputs-sha256", "")
    if have != want:
        raise LockError(
            f"{lock.path} is stale: it was resolved from other inputs than matrix.yaml now gives for "
            f"{spec.release}/{spec.backend}/{spec.arch} (inputs-sha256 {have[:12] or 'missing'}, matrix "
            f"{want[:12]}): requirements now {', '.join(spec.requirements)}, source {spec.source.name}=="
            f"{spec.source.version}. Regenerate it: {spec.command}"
        )
    wanted = [(r, "the release needs") for r in spec.requirements]
    wanted += [(o, "the release overrides it to") for o in spec.overrides]
    for requirement, says in wanted:
        name, sep, version = requirement.partition("==")
        if not sep:
            continue
        got = lock.pins.get(normalize(name))
        if got != version:
            raise LockError(f"{lock.path}: pins {name}=={got}, {says} {version}; regenerate it: {spec.command}")
    built = " ".join(sorted(lock.from_source)) or "nothing"
    where = f"releases.{spec.release}.backends.{spec.backend}.from_sdist.{spec.arch}"
    if spec.from_sdist is None:
        raise LockError(f"{lock.path} builds {built} from sdists on {spec.arch}, and matrix.yaml does not say so: "
                        f"add {where}: [{', '.join(sorted(lock.from_source))}]")
    if sorted(spec.from_sdist) != sorted(lock.from_source):
        raise LockError(f"{lock.path} builds {built} from sdists on {spec.arch}, matrix.yaml {where} says "
                        f"{' '.join(sorted(spec.from_sdist)) or 'nothing'}: correct the matrix, or regenerate the "
                        f"lock: {spec.command}")
    if set(lock.overrides) != set(spec.overrides):
        raise LockError(f"{lock.path}: header 'overrides' says {' '.join(lock.overrides) or 'none'}, the release "
                        f"says {' '.join(spec.overrides) or 'none'}; regenerate it: {spec.command}")
    lock.source_sdist  # noqa: B018 - validates the header
    lock.off_pypi  # noqa: B018 - validates the header


def load_lock(variant: Variant, root: Path | None = None) -> Lock:
    spec = lock_spec(variant)
    path = spec.path(root or locks_dir(variant.matrix))
    if not path.is_file() and variant.release.blocked:
        raise LockError(f"release {spec.release} cannot be built with backend {spec.backend}: matrix.yaml marks it "
                        f"blocked: {variant.release.blocked}")
    if not path.is_file():
        raise LockError(
            f"no lock for {spec.release}/{spec.backend}/{spec.arch}: {path} does not exist. "
            f"Make it with: {spec.command}"
            + (f" (needs the torch index {spec.torch_index_url})" if spec.torch_index_url else "")
        )
    lock = parse_lock(path)
    check_lock(spec, lock)
    return lock


def lock_specs(matrix: Matrix, variants: list[Variant]) -> list[LockSpec]:
    """One spec per (release, backend, arch) among the variants that have a backend."""
    seen: dict[tuple[str, str, str], LockSpec] = {}
    for v in variants:
        if v.backend in ("vllm", "sglang"):
            spec = lock_spec(v)
            seen.setdefault((spec.release, spec.backend, spec.arch), spec)
    return [seen[k] for k in sorted(seen)]
