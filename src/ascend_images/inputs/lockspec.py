"""Which lock a stage installs, and what it is made from: one spec for every layer (DESIGN 20).

    base       locks/base/base-py<ver>-<arch>.txt        the Python packages CANN's tools import, and pip (base stage)
    torch      locks/<release>/torch-<arch>.txt          torch and torch_npu, over the base lock (torch stage)
    backend    locks/<release>/<backend>-<arch>.txt      the backend's whole set, torch included (vllm, sglang stage)
    framework  locks/<release>/<backend>-<framework>-<arch>.txt   an RL framework, over the backend lock

A layer made over another holds that lock's pins as constraints and its body lists only what it adds or moves (a
move only where matrix.yaml overrides a pin, with why). The backend layer stands alone: it was always the whole set.
`lock_path` is the one place a lock's file is named; `check_lock` the one check of a lock against the matrix.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
from dataclasses import dataclass
from pathlib import Path

from ascend_images.inputs.lockfile import GLIBC_FLOOR, LOCK_FORMAT, Lock, LockError, parse_lock
from ascend_images.inputs.pypi import normalize, pinned_name
from ascend_images.inputs.sourcetree import SourcePackage
from ascend_images.inputs.upstream import FrameworkRequirements, read_framework_requirements, read_listed_requirements
from ascend_images.matrix.model import Matrix, Variant
from ascend_images.matrix.schema import FrameworkArchive, SglangPins, VllmPins

LAYERS = ("base", "torch", "backend", "framework")
# the layer each one is resolved over (None: it stands alone)
OVER = {"base": None, "torch": "base", "backend": None, "framework": "backend"}


def lock_name(layer: str, *, release: str, backend: str, framework: str, arch: str) -> str:
    """How messages name a lock: base/aarch64, cann9.1.0-pt2.10.0/torch/aarch64, .../vllm+verl/aarch64."""
    what = {"base": "base", "torch": "torch", "backend": backend, "framework": f"{backend}+{framework}"}[layer]
    return "/".join(filter(None, ("" if layer == "base" else release, what, arch)))


@dataclass(frozen=True)
class LockSpec:
    """Everything a lock depends on: the matrix's pins for its layer, and the lock it is resolved over."""

    layer: str
    release: str  # "" for the base layer, shared by every release
    backend: str  # "" below the backend layer
    arch: str
    python_version: str
    requirements: tuple[str, ...]
    framework: str = ""
    version: str = ""  # the framework's
    over: Lock | None = None  # the lock below, its pins held as constraints
    overrides: tuple[str, ...] = ()  # NAME==VERSION that win over every other requirement on NAME (uv --override)
    override_sources: tuple[str, ...] = ()  # each override's source (matrix.yaml), for the lock's `moved` lines
    torch_index_url: str = ""
    # package -> the vendor index holding versions PyPI lacks: where, not what (the lock's `off-pypi` names the file)
    package_indexes: tuple[tuple[str, str], ...] = ()
    no_deps: tuple[str, ...] = ()  # vendor packages installed --no-deps (package_indexes.*.no_deps)
    # what matrix.yaml says the lock builds from sdists on this arch (None: it does not say); checked, not resolved
    from_sdist: tuple[str, ...] | None = None
    source: SourcePackage | None = None  # the backend's source package
    listed: tuple[FrameworkRequirements, ...] = ()  # the framework's transcribed requirement files
    installed_no_deps: tuple[str, ...] = ()  # the framework's NAME==VERSION from PyPI installed --no-deps
    archives: tuple[FrameworkArchive, ...] = ()
    find_links: tuple[str, ...] = ()  # local wheel directories to resolve from too: where, not what
    # the package some devices build from its sdist for themselves, and those devices (backends.*.device_build); the
    # lock names that sdist beside the wheel the body pins for the others
    device_sdist: str = ""
    device_sdist_devices: tuple[str, ...] = ()
    device_build_requirements: tuple[str, ...] = ()

    @property
    def platform(self) -> str:
        return f"{self.arch}-{GLIBC_FLOOR}"

    @property
    def python_tag(self) -> str:
        return "cp" + self.python_version.replace(".", "")

    @property
    def name(self) -> str:
        return lock_name(self.layer, release=self.release, backend=self.backend, framework=self.framework,
                         arch=self.arch)

    @property
    def over_sha256(self) -> str:
        return hashlib.sha256(self.over.text.encode()).hexdigest() if self.over is not None else ""

    def inputs_sha256(self) -> str:
        doc: dict[str, object] = {"format": LOCK_FORMAT, "layer": self.layer, "release": self.release,
                                  "arch": self.arch, "python": self.python_version, "platform": self.platform,
                                  "requirements": list(self.requirements)}
        if self.layer == "backend":
            assert self.source is not None
            doc |= {"backend": self.backend, "source": [self.source.name, self.source.version,
                                                        self.source.project_file]}
            if self.source.archive:
                doc["source-archive"] = [*self.source.archive, self.source.subdir]
            if self.source.listed:  # the committed dependency lists are inputs: a changed list makes the lock stale
                doc["source-requirements"] = [list(self.source.listed.runtime), list(self.source.listed.build)]
        if self.layer == "framework":
            doc |= {"backend": self.backend, "framework": self.framework, "version": self.version,
                    "no-deps": list(self.installed_no_deps),
                    "listed": [[r.path, list(r.requirements)] for r in self.listed],
                    "archives": [[a.name, a.version, a.file, a.url] for a in self.archives]}
        if self.device_sdist:
            doc["device-build"] = [self.device_sdist, list(self.device_sdist_devices),
                                   list(self.device_build_requirements)]
        if self.overrides:
            doc["overrides"] = list(self.overrides)
        if self.over is not None:
            doc["over"] = self.over_sha256
        return hashlib.sha256(json.dumps(doc, sort_keys=True).encode()).hexdigest()

    @property
    def command(self) -> str:
        parts = ["invoke lock", f"--layer {self.layer}"]
        if self.release:
            parts.append(f"--release {self.release}")
        if self.backend:
            parts.append(f"--backend {self.backend}")
        if self.framework:
            parts.append(f"--framework {self.framework}")
        return " ".join([*parts, f"--arch {self.arch}"])


def locks_dir(matrix: Matrix) -> Path:
    return matrix.path.parent / "locks"


def lock_file(root: Path, layer: str, *, release: str, backend: str, framework: str, arch: str,
              python_version: str) -> Path:
    """The one place a lock's file is named."""
    if layer == "base":
        return root / "base" / f"base-py{python_version}-{arch}.txt"
    name = {"torch": "torch", "backend": backend, "framework": f"{backend}-{framework}"}[layer]
    return root / release / f"{name}-{arch}.txt"


def lock_path(root: Path, spec: LockSpec) -> Path:
    return lock_file(root, spec.layer, release=spec.release, backend=spec.backend, framework=spec.framework,
                     arch=spec.arch, python_version=spec.python_version)


def variant_layers(v: Variant) -> list[str]:
    """The locked layers a variant's image installs, the lowest first."""
    return [layer for layer in LAYERS if layer in ("base", "torch")
            or (layer == "backend" and v.backend in ("vllm", "sglang"))
            or (layer == "framework" and v.framework != "none")]


def lock_spec(v: Variant, layer: str, root: Path | None = None,
              loaded: dict[str, Lock | LockError] | None = None) -> LockSpec:
    """The spec of one layer's lock for a variant. A layer made over another reads that lock (it must be fresh), or
    takes it from `loaded`, the variant's locks loaded so far."""
    over = _load(v, OVER[layer], root or locks_dir(v.matrix), {} if loaded is None else loaded) if OVER[layer] else None
    common = {"arch": v.arch, "python_version": v.python_version, "over": over}
    if layer == "base":
        return LockSpec("base", "", "", requirements=(*v.matrix.spec.cann.python_deps, "pip", "setuptools"), **common)
    local = v.arch_spec.torch_local_version
    held = (f"torch=={v.torch}{local}", f"torch-npu=={v.torch_npu}")
    if layer == "torch":
        return LockSpec("torch", v.release_name, "", requirements=held,
                        torch_index_url=v.arch_spec.torch_index_url, **common)
    if layer == "framework":
        return _framework_spec(v, common)
    return _backend_spec(v, held, common)


def _backend_spec(v: Variant, held: tuple[str, ...], common: dict) -> LockSpec:
    pins = v.backend_pins
    if isinstance(pins, VllmPins):
        wanted = [f"vllm-ascend=={pins.vllm_ascend}"]
        if pins.triton_ascend:
            wanted.append(f"triton-ascend=={pins.triton_ascend}")
        wanted += [p.requirement for p in pins.image_packages]
        source = SourcePackage("vllm", pins.vllm)
    elif isinstance(pins, SglangPins):
        # sgl-kernel-npu is not on any index: its wheels come from a checksummed zip (--no-deps)
        wanted = [p.requirement for p in pins.image_packages]
        if pins.triton_ascend:
            # triton-ascend's Ascend backend imports pybind11 without declaring it; SG's NPU images install
            # pybind11 before triton-ascend (docker/npu_openeuler.Dockerfile)
            wanted += [f"triton-ascend=={pins.triton_ascend}", "pybind11"]
        archive, subdir = None, ""
        if pins.tree == "git-tag":
            tag = v.matrix.spec.backends["sglang"].artifacts["source_tag"]
            archive, subdir = (tag.file.format(version=pins.sglang), tag.url.format(version=pins.sglang)), "python"
        listed = (read_listed_requirements(v.matrix.path.parent, pins.npu_requirements, pins.sglang)
                  if pins.npu_requirements else None)
        source = SourcePackage("sglang", pins.sglang, pins.project_file, archive, subdir, listed)
    else:
        raise LockError(f"backend {v.backend!r} has no lock: only vllm and sglang stages install from one")
    indexes = tuple((normalize(name), url) for name, spec in sorted(v.matrix.spec.package_indexes.items())
                    for url in spec.urls)
    no_deps = tuple(sorted(normalize(name) for name, spec in v.matrix.spec.package_indexes.items()
                           if spec.no_deps is not None))
    build = v.device_build
    sdist_devices = tuple(sorted(d for d, how in build.devices.items() if how == "sdist")) if build else ()
    device = {"device_sdist": build.package, "device_sdist_devices": sdist_devices,
              "device_build_requirements": tuple(build.build_requirements)} if build and sdist_devices else {}
    # the CANN stage installed these for the toolkit's own Python tools; a backend must keep them working
    return LockSpec("backend", v.release_name, v.backend, requirements=(*held, *wanted, *v.cann_python_deps),
                    source=source, torch_index_url=v.arch_spec.torch_index_url,
                    overrides=tuple(o.requirement for o in pins.overrides),
                    override_sources=tuple(o.source for o in pins.overrides),
                    from_sdist=tuple(pins.from_sdist[v.arch]) if v.arch in pins.from_sdist else None,
                    package_indexes=indexes, no_deps=no_deps, **device, **common)


def _framework_spec(v: Variant, common: dict) -> LockSpec:
    pins = v.framework_pins
    if pins is None:
        raise LockError(f"{v.name}: no framework, so no framework lock")
    listed = tuple(read_framework_requirements(v.matrix.path.parent, r) for r in pins.requirements)
    return LockSpec("framework", v.release_name, v.backend, framework=v.framework, version=pins.version,
                    requirements=tuple(pins.packages), listed=listed, installed_no_deps=tuple(pins.no_deps),
                    overrides=tuple(o.requirement for o in pins.overrides),
                    override_sources=tuple(o.source for o in pins.overrides), archives=tuple(pins.archives), **common)


def not_locked(v: Variant, layer: str) -> str:
    """Why matrix.yaml says a variant's lock is not to be had ("" when it should exist): its release is blocked, or
    (for a backend and what is made over it) the release names no locked build for that arch."""
    if v.release.blocked:
        return f"release blocked: {v.release.blocked}"
    if layer != "base" and v.arch_spec.unlocked:
        return f"arches.{v.arch}.unlocked: {v.arch_spec.unlocked}"
    if (layer in ("backend", "framework") and v.backend_pins is not None
            and v.arch not in getattr(v.backend_pins, "from_sdist", {})):
        return (f"matrix.yaml locks no {v.arch} build of {v.backend} for this release "
                f"(releases.{v.release_name}.backends.{v.backend}.from_sdist has no {v.arch})")
    if layer == "framework" and v.framework_pins is not None and v.framework_pins.blocked:
        return f"{v.framework} blocked: {v.framework_pins.blocked}"
    return ""


def satisfies(pinned: str | None, wanted: str) -> bool:
    """A pin meets `==wanted` as PEP 440 reads it: a local version (2.13.0+cpu) meets a public one (2.13.0)."""
    from packaging.specifiers import InvalidSpecifier, SpecifierSet
    from packaging.version import InvalidVersion, Version

    if pinned is None:
        return False
    try:
        return Version(pinned) in SpecifierSet(f"=={wanted}")
    except (InvalidVersion, InvalidSpecifier):
        return pinned == wanted


def check_lock(spec: LockSpec, lock: Lock) -> None:
    """Raise LockError unless the lock was made from exactly these inputs, pins what they say and names a file for
    every pin."""
    if lock.header.get("format") != str(LOCK_FORMAT):
        raise LockError(f"{lock.path}: lock format {lock.header.get('format')!r}, this tool reads "
                        f"{LOCK_FORMAT}; regenerate it: {spec.command}")
    want, have = spec.inputs_sha256(), lock.header.get("inputs-sha256", "")
    if have != want:
        moved = spec.over is not None and lock.header.get("over", "").rpartition("sha256:")[2] != spec.over_sha256
        why = (f"the {OVER[spec.layer]} lock it was resolved over changed" if moved
               else "matrix.yaml or a requirement file changed")
        raise LockError(f"{lock.path} is stale: {why} (inputs-sha256 {have[:12] or 'missing'}, now {want[:12]}): "
                        f"requirements now {', '.join(spec.requirements) or 'none'}. Regenerate it: {spec.command}")
    below = spec.over.pins if spec.over is not None else {}
    wanted = [(r, "the release needs") for r in spec.requirements]
    wanted += [(o, "the release overrides it to") for o in spec.overrides]
    wanted += [(p, "the release installs --no-deps") for p in spec.installed_no_deps]
    for requirement, says in wanted:
        name, sep, version = requirement.partition("==")
        if not sep:
            continue
        got = lock.pins.get(pinned_name(requirement), below.get(pinned_name(requirement)))
        if not satisfies(got, version):
            raise LockError(f"{lock.path}: pins {name}=={got}, {says} {version}; regenerate it: {spec.command}")
    moved_ok = {pinned_name(o) for o in spec.overrides}
    for name, version in lock.pins.items():
        if below.get(name) not in (None, version) and name not in moved_ok:
            raise LockError(f"{lock.path}: pins {name}=={version} over the {OVER[spec.layer]} lock's "
                            f"{name}=={below[name]}: a lock moves a pin below it only where matrix.yaml overrides it, "
                            f"with why; regenerate it: {spec.command}")
    off = {f.name for f in lock.off_pypi}
    unhashed = sorted(n for n in lock.pins if n not in lock.hashes and n not in off)
    if unhashed:
        raise LockError(f"{lock.path}: {', '.join(unhashed)} pinned with no sha256 of the file to install; "
                        f"regenerate it: {spec.command}")
    if spec.layer == "backend":
        _check_backend(spec, lock)


def _check_backend(spec: LockSpec, lock: Lock) -> None:
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
    named = lock.device_sdists.get(normalize(spec.device_sdist)) if spec.device_sdist else None
    if spec.device_sdist and (named is None or named.devices != spec.device_sdist_devices):
        said = f"{named.name} for {' '.join(named.devices)}" if named else "none"
        raise LockError(f"{lock.path}: header 'device-build' says {said}, matrix.yaml backends.{spec.backend}."
                        f"device_build builds {spec.device_sdist} from its sdist for "
                        f"{' '.join(spec.device_sdist_devices)}; regenerate it: {spec.command}")


def load_lock(v: Variant, layer: str = "backend", root: Path | None = None) -> Lock:
    """A variant's lock of one layer, checked against the matrix (and against the lock it is made over)."""
    return _load(v, layer, root or locks_dir(v.matrix), {})


def _load(v: Variant, layer: str, root: Path, loaded: dict[str, Lock | LockError]) -> Lock:
    """One layer's lock, read once into `loaded` (or why it cannot be had: raised again on every ask)."""
    if layer not in loaded:
        try:
            loaded[layer] = _read(v, layer, root, loaded)
        except LockError as exc:
            loaded[layer] = exc
    got = loaded[layer]
    if isinstance(got, LockError):
        raise got.with_traceback(None)
    return got


def _read(v: Variant, layer: str, root: Path, loaded: dict[str, Lock | LockError]) -> Lock:
    if layer == "backend" and v.backend not in ("vllm", "sglang"):
        raise LockError(f"backend {v.backend!r} has no lock: only vllm and sglang stages install from one")
    spec = lock_spec(v, layer, root, loaded)
    path = lock_path(root, spec)
    if not path.is_file():
        why = not_locked(v, layer)
        if why:
            raise LockError(f"{spec.name} has no lock, and matrix.yaml says why: {why}")
        raise LockError(f"no lock for {spec.name}: {path} does not exist. Make it with: {spec.command}"
                        + (f" (needs the torch index {spec.torch_index_url})" if spec.torch_index_url else ""))
    lock = parse_lock(path)
    check_lock(spec, lock)
    return lock


@dataclass(frozen=True)
class VariantLocks:
    """A variant's locks, loaded when its plan is made, each once: a layer is checked over the one below it, so
    loading the layers one by one read the lowest again for each (planning and rendering a verl chain read 49 lock
    files for its 4). A lock that cannot be had is kept as the error that says why, raised where the lock is asked
    for: a preview render goes on with a placeholder."""

    variant: Variant
    root: Path
    loaded: dict[str, Lock | LockError]
    # the backend lock's wheels PyPI does not carry (its `off-pypi` header), by name; () without that lock
    off_pypi: tuple[str, ...] = ()

    def lock(self, layer: str = "backend") -> Lock:
        return _load(self.variant, layer, self.root, self.loaded)


def variant_locks(v: Variant, root: Path | None = None) -> VariantLocks:
    root = root or locks_dir(v.matrix)
    loaded: dict[str, Lock | LockError] = {}
    for layer in variant_layers(v):
        with contextlib.suppress(LockError):
            _load(v, layer, root, loaded)
    backend = loaded.get("backend")
    try:
        off_pypi = tuple(f.name for f in backend.off_pypi) if isinstance(backend, Lock) else ()
    except LockError:  # a header that does not parse: the stage's own read of it says so
        off_pypi = ()
    return VariantLocks(v, root, loaded, off_pypi)

