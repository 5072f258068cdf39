"""Framework locks: what an RL framework stage (verl, ROLL) installs over a backend image, every version pinned.

A framework lock lives at `locks/<release>/<backend>-<framework>-<arch>.txt`. It is resolved on top of the backend's
lock: every package that lock pins is a constraint, so the framework moves none of the backend's versions but those
matrix.yaml overrides (with why and source, where upstream's lists contradict the backend's), and the body holds only
what the framework adds or moves. Upstream installs the framework itself `--no-deps` and its NPU requirement file
after it (verl's Ascend guide, ROLL's Ascend Dockerfiles); the lock does the same: the framework's own requirements are
read from the committed transcription of that file, never from its package metadata, and the `--no-deps` packages
stand in the body as the pins they are. Tag archives (MindSpeed, ROLL) are downloads pinned in pins.yaml; the header
names them.
"""

from __future__ import annotations

import hashlib
import json
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

from packaging.requirements import InvalidRequirement, Requirement

from ascend_images.inputs.lockfile import (
    GLIBC_FLOOR,
    LOCK_FORMAT,
    Lock,
    LockError,
    load_lock,
    locks_dir,
    parse_lock,
    parse_lock_text,
)
from ascend_images.inputs.lockgen import (
    CUDA_PREFIXES,
    _public,
    _uv_version,
    never,
    sdist_build_requirements,
    uv_binary,
)
from ascend_images.inputs.pypi import PYPI_SIMPLE, download, find_sdist, has_wheel, index_files, normalize
from ascend_images.matrix.model import Variant
from ascend_images.matrix.schema import FrameworkArchive
from ascend_images.matrix.yamlfile import YamlFileError, load_yaml_file

FRAMEWORK_LOCK_KEYS = {"project", "version", "upstream", "requirements"}


@dataclass(frozen=True)
class FrameworkRequirements:
    """One upstream requirement file of a framework, transcribed into a committed file with the commit it was read
    at (GitHub is out of reach here, so the lock is made from the transcription)."""

    path: str  # relative to matrix.yaml's directory
    upstream: str  # repository, path and commit
    requirements: tuple[str, ...]


def read_framework_requirements(root: Path, rel: str) -> FrameworkRequirements:
    path = root / rel
    if not path.is_file():
        raise LockError(f"frameworks requirements: {path} does not exist (a transcribed upstream requirement file)")
    try:
        doc = load_yaml_file(path)
    except YamlFileError as exc:
        raise LockError(str(exc)) from None
    if not isinstance(doc, dict) or set(doc) != FRAMEWORK_LOCK_KEYS:
        raise LockError(f"{path}: expected exactly the keys {', '.join(sorted(FRAMEWORK_LOCK_KEYS))}")
    items = doc["requirements"]
    if not isinstance(items, list) or not all(isinstance(i, str) for i in items):
        raise LockError(f"{path}: requirements must be a list of requirement strings")
    for item in items:
        try:
            Requirement(item)
        except InvalidRequirement as exc:
            raise LockError(f"{path}: requirements: {item!r} is not a requirement ({exc})") from None
    upstream = doc["upstream"]
    if not isinstance(upstream, dict) or not {"repository", "path", "commit"} <= set(upstream):
        raise LockError(f"{path}: upstream must name repository, path and commit")
    return FrameworkRequirements(rel, f"{upstream['repository']} {upstream['path']} at {upstream['commit']}",
                                 tuple(items))


@dataclass(frozen=True)
class FrameworkLockSpec:
    """Everything a framework lock depends on: the matrix's pins and the backend lock it is resolved over."""

    release: str
    backend: str
    framework: str
    version: str
    arch: str
    python_version: str
    no_deps: tuple[str, ...]  # NAME==VERSION from PyPI, installed --no-deps
    listed: tuple[FrameworkRequirements, ...]
    packages: tuple[str, ...]  # further PyPI requirements upstream's guide installs
    overrides: tuple[str, ...]  # NAME==VERSION that win over every other requirement on NAME
    archives: tuple[FrameworkArchive, ...]
    backend_lock: Lock

    @property
    def platform(self) -> str:
        return f"{self.arch}-{GLIBC_FLOOR}"

    @property
    def python_tag(self) -> str:
        return "cp" + self.python_version.replace(".", "")

    @property
    def backend_lock_sha256(self) -> str:
        return hashlib.sha256(self.backend_lock.text.encode()).hexdigest()

    def inputs_sha256(self) -> str:
        doc = {"format": LOCK_FORMAT, "release": self.release, "backend": self.backend, "framework": self.framework,
               "version": self.version, "arch": self.arch, "python": self.python_version, "platform": self.platform,
               "no-deps": list(self.no_deps), "requirements": [[r.path, list(r.requirements)] for r in self.listed],
               "packages": list(self.packages), "overrides": list(self.overrides),
               "archives": [[a.name, a.version, a.file, a.url] for a in self.archives],
               "backend-lock": self.backend_lock_sha256}
        return hashlib.sha256(json.dumps(doc, sort_keys=True).encode()).hexdigest()

    def path(self, root: Path) -> Path:
        return root / self.release / f"{self.backend}-{self.framework}-{self.arch}.txt"

    @property
    def command(self) -> str:
        return (f"invoke lock --release {self.release} --backend {self.backend} --framework {self.framework} "
                f"--arch {self.arch}")


def framework_lock_spec(v: Variant) -> FrameworkLockSpec:
    pins = v.framework_pins
    if pins is None:
        raise LockError(f"{v.name}: no framework, so no framework lock")
    listed = tuple(read_framework_requirements(v.matrix.path.parent, r) for r in pins.requirements)
    return FrameworkLockSpec(v.release_name, v.backend, v.framework, pins.version, v.arch, v.python_version,
                             tuple(pins.no_deps), listed, tuple(pins.packages),
                             tuple(o.requirement for o in pins.overrides), tuple(pins.archives), load_lock(v))


def check_framework_lock(spec: FrameworkLockSpec, lock: Lock) -> None:
    if lock.header.get("format") != str(LOCK_FORMAT):
        raise LockError(f"{lock.path}: lock format {lock.header.get('format')!r}, this tool reads {LOCK_FORMAT}; "
                        f"regenerate it: {spec.command}")
    want, have = spec.inputs_sha256(), lock.header.get("inputs-sha256", "")
    if have != want:
        moved = lock.header.get("backend-lock", "").rpartition("sha256:")[2] != spec.backend_lock_sha256
        why = "the backend lock it was resolved over changed" if moved else "matrix.yaml or a requirement file changed"
        raise LockError(f"{lock.path} is stale: {why} (inputs-sha256 {have[:12] or 'missing'}, now {want[:12]}). "
                        f"Regenerate it: {spec.command}")
    for pin in (*spec.no_deps, *spec.overrides):
        name, _, version = pin.partition("==")
        have = lock.pins.get(normalize(name), spec.backend_lock.pins.get(normalize(name)))
        if have != version:
            raise LockError(f"{lock.path}: pins {name}=={have}, the release says {pin}; regenerate it: "
                            f"{spec.command}")
    moved = {normalize(o.partition("==")[0]) for o in spec.overrides}
    for name, version in lock.pins.items():
        below = spec.backend_lock.pins.get(name)
        if below is not None and below != version and name not in moved:
            raise LockError(f"{lock.path}: pins {name}=={version} over the backend lock's {name}=={below}: a framework "
                            "lock moves a backend pin only where matrix.yaml overrides it, with why; regenerate it: "
                            f"{spec.command}")


def load_framework_lock(v: Variant, root: Path | None = None) -> Lock:
    spec = framework_lock_spec(v)
    path = spec.path(root or locks_dir(v.matrix))
    if not path.is_file():
        raise LockError(f"no lock for {v.release_name}/{v.backend}+{v.framework}/{v.arch}: {path} does not exist. "
                        f"Make it with: {spec.command}")
    lock = parse_lock(path)
    check_framework_lock(spec, lock)
    return lock


def make_framework_lock(spec: FrameworkLockSpec, root: Path, out, cache_dir: Path, index_url: str = PYPI_SIMPLE
                        ) -> Path:
    """Resolve the framework's requirements with every backend pin as a constraint, and write what it adds."""
    backend = spec.backend_lock
    no_deps = {normalize(p.partition("==")[0]): p.partition("==")[2] for p in spec.no_deps}
    # what the backend installs --no-deps is resolved without here too: its metadata is no more read than there
    held_out = sorted({*no_deps, *(f.name for f in backend.off_pypi)})
    out(f"[lock] {spec.release}/{spec.backend}+{spec.framework}/{spec.arch}: over {backend.path.name} "
        f"({len(backend.pins)} pins), from {', '.join(r.path for r in spec.listed) or 'no requirement file'}")
    lines = [f"# {spec.framework} {spec.version}: {r.path} ({r.upstream})\n" + "\n".join(r.requirements)
             for r in spec.listed]
    if spec.packages:
        lines.append("# installed beside them by upstream's guide (matrix.yaml frameworks.*.packages)\n"
                     + "\n".join(spec.packages))
    overridden = {normalize(o.partition("==")[0]) for o in spec.overrides}
    with tempfile.TemporaryDirectory(prefix="ascend-framework-lock.") as tmp:
        work = Path(tmp)
        (work / "requirements.in").write_text("\n".join(lines) + "\n", encoding="utf-8")
        (work / "constraints.txt").write_text(
            "".join(f"{name}=={version}\n" for name, version in backend.pins.items()
                    if name not in held_out and name not in overridden), encoding="utf-8")
        (work / "overrides.txt").write_text("".join(never(name) + "\n" for name in held_out)
                                            + "".join(o + "\n" for o in spec.overrides), encoding="utf-8")
        cmd = [uv_binary(), "pip", "compile", "requirements.in", "-c", "constraints.txt", "--override",
               "overrides.txt", "-o", "resolved.txt", "--quiet", "--python-platform", spec.platform,
               "--python-version", spec.python_version, "--no-header", "--annotation-style", "line",
               "--index-url", index_url]
        result = subprocess.run(cmd, cwd=work, capture_output=True, text=True)
        if result.returncode != 0:
            raise LockError(f"uv could not resolve {spec.framework} {spec.version} over {backend.path} (every backend "
                            f"pin held):\n" + (result.stderr.strip() or result.stdout.strip()))
        resolved = parse_lock(work / "resolved.txt")
        body_lines = (work / "resolved.txt").read_text(encoding="utf-8").splitlines()
    # what the framework adds, and what an override of the matrix moves (the stage reinstalls it over the backend's)
    added = {n: v for n, v in resolved.pins.items() if backend.pins.get(n) != v}
    # a package with no wheel for the platform builds from its sdist in the image, without isolation: against the
    # backend's build tools, so each of its build requirements must already be pinned there
    from_source = []
    for name, version in added.items():
        files = index_files(index_url, name)
        if has_wheel(files, name, version, spec.arch, spec.python_tag):
            continue
        sdist = download(find_sdist(files, name, version), cache_dir)
        needs = [normalize(Requirement(r).name) for r in sdist_build_requirements(sdist)]
        missing = [n for n in needs if n not in backend.pins and n not in added]
        if missing:
            raise LockError(f"{spec.framework} {spec.version}: {name}=={version} has no {spec.platform} wheel on "
                            f"{_public(index_url)}, and its sdist needs {', '.join(missing)} to build, which neither "
                            "lock pins")
        out(f"[lock]   {name} {version} has no {spec.platform} wheel: built in the image from its sdist "
            f"(build requirements {', '.join(needs)}, pinned by the backend lock)")
        from_source.append(name)
    cuda = sorted(n for n in added if n.startswith(CUDA_PREFIXES))
    if cuda:
        raise LockError(f"{spec.framework} {spec.version}: the resolution pulls CUDA packages ({', '.join(cuda)}); "
                        "an NPU image must not carry them")
    body = [line for line in body_lines if line.strip() and not line.startswith("#")
            and normalize(line.split("==", 1)[0]) in added]
    body += [f"{name}=={version}  # installed --no-deps, as upstream does (matrix.yaml frameworks)"
             for name, version in sorted(no_deps.items())]
    header = [
        f"# ascend-images framework lock for {spec.release} / {spec.backend} + {spec.framework} / {spec.arch}, "
        f"Python {spec.python_version}",
        "# Resolved over the backend lock (every pin of it a constraint) by `invoke lock`; do not edit, regenerate.",
        f"# format: {LOCK_FORMAT}",
        f"# release: {spec.release}",
        f"# backend: {spec.backend}",
        f"# framework: {spec.framework}=={spec.version}",
        f"# arch: {spec.arch}",
        f"# python: {spec.python_version}",
        f"# platform: {spec.platform}",
        f"# inputs-sha256: {spec.inputs_sha256()}",
        f"# backend-lock: {backend.path.name} sha256:{spec.backend_lock_sha256}",
        f"# regenerate: {spec.command}",
        f"# resolver: {_uv_version()} pip compile",
        f"# index: {_public(index_url)}",
        "# requirements: " + "; ".join(f"{r.path} ({r.upstream})" for r in spec.listed),
        f"# no-deps: {' '.join(spec.no_deps)}",
        f"# from-source: {' '.join(sorted(from_source))}",
        f"# overrides: {' '.join(spec.overrides)}",
        f"# resolved-without: {' '.join(held_out)} (uv --override NAME ; sys_platform == 'never')",
        "# archives: " + ", ".join(f"{a.name}=={a.version} {a.file} {a.url}" for a in spec.archives),
    ]
    text = "\n".join(header) + "\n" + "\n".join(body) + "\n"
    path = spec.path(root)
    check_framework_lock(spec, parse_lock_text(text, path))
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(text, encoding="utf-8")
    tmp.replace(path)
    out(f"[lock] wrote {path}: {len(added)} packages over the backend's, {len(no_deps)} --no-deps")
    return path


def no_deps_installed(lock: Lock) -> dict[str, str]:
    """What a framework lock's stage installs --no-deps (name -> version): the header's `no-deps` packages and its
    `archives`. `pip check` waives what these alone require, as upstream installs them so."""
    out = {}
    for entry in lock.header.get("no-deps", "").split():
        name, _, version = entry.partition("==")
        out[normalize(name)] = version
    for entry in filter(None, (e.strip() for e in lock.header.get("archives", "").split(","))):
        name, _, version = entry.split()[0].partition("==")
        out[normalize(name)] = version
    return out
