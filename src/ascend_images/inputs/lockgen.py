"""Make a backend lock: resolve, with uv, what a backend stage installs for the target platform and
Python (not this host's), and write it with the header lockfile.py checks.

What gets resolved is what the stage installs: the release's torch pair and backend pins, the
runtime and build requirements of the source package exactly as its build reads them (vLLM's
requirements/common.txt for VLLM_TARGET_DEVICE=empty; SGLang's NPU project file), and the build
requirements of any locked package that has no wheel for the platform and must be built in the image.
"""

from __future__ import annotations

import subprocess
import tarfile
import tempfile
import tomllib
import urllib.parse
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from packaging.requirements import Requirement

from ascend_images.inputs.lockfile import (
    FIRST_FETCH,
    HELD,
    LOCK_FORMAT,
    LockError,
    LockSpec,
    OffPypiFile,
    SourcePackage,
    check_lock,
    parse_lock,
    parse_lock_text,
)
from ascend_images.inputs.pins import Pin
from ascend_images.inputs.pypi import (
    PYPI_SIMPLE,
    IndexFile,
    PackageIndexError,
    download,
    find_sdist,
    find_wheel,
    has_wheel,
    index_files,
    normalize,
)
from ascend_images.tools import which

Out = Callable[[str], None]
# Packages that only make sense with CUDA: a lock holding one would put CUDA in an NPU image.
CUDA_PREFIXES = ("nvidia-", "cuda-", "cupy", "flashinfer", "xformers", "sgl-kernel")
MAX_ROUNDS = 5


def uv_binary() -> str:
    found = which("uv")
    if found:
        return found
    try:
        from uv import find_uv_bin  # the `uv` wheel ships its binary with a finder
    except ImportError:
        raise LockError("uv is not installed: pip install -e '.[lock]'") from None
    return find_uv_bin()


def _member(tar: tarfile.TarFile, rel: str) -> str:
    root = tar.getnames()[0].split("/", 1)[0]
    try:
        handle = tar.extractfile(f"{root}/{rel}")
    except KeyError:
        handle = None
    if handle is None:
        raise LockError(f"{tar.name}: has no {rel}")
    return handle.read().decode("utf-8")


def _requirement_lines(text: str) -> list[str]:
    out = []
    for line in text.splitlines():
        line = line.split(" #", 1)[0].split("\t#", 1)[0].strip()
        if line and not line.startswith(("#", "-")):
            out.append(line)
    return out


def _expand_extra(project: dict, name: str, extra: str, seen: set[str] | None = None) -> list[str]:
    """An extra's requirements with self-references (`sglang[runtime_common]`) expanded."""
    seen = seen if seen is not None else set()
    if extra in seen:
        return []
    seen.add(extra)
    extras = project.get("optional-dependencies", {})
    if extra not in extras:
        raise LockError(f"{name}: the project file has no extra {extra!r} (it has: {', '.join(sorted(extras))})")
    out = []
    for item in extras[extra]:
        req = Requirement(item)
        if normalize(req.name) == normalize(name):
            for sub in sorted(req.extras):
                out += _expand_extra(project, name, sub, seen)
        else:
            out.append(item)
    return out


def tree_requirements(source: SourcePackage, sdist: Path) -> tuple[list[str], list[str]]:
    """(runtime, build) requirements of the source package as its sdist (or tag archive) declares them, read the
    way its build reads them."""
    prefix = f"{source.subdir}/" if source.subdir else ""
    with tarfile.open(sdist) as tar:
        if source.name == "vllm":
            runtime = _requirement_lines(_member(tar, f"{prefix}requirements/common.txt"))
            build = tomllib.loads(_member(tar, f"{prefix}pyproject.toml"))["build-system"]["requires"]
        elif source.name == "sglang":
            project_file = source.project_file or "pyproject.toml"
            doc = tomllib.loads(_member(tar, prefix + project_file))
            runtime = list(doc["project"].get("dependencies", []))
            runtime += _expand_extra(doc["project"], source.name, "srt_npu")
            build = doc["build-system"]["requires"]
        else:
            raise LockError(f"no recipe for the source package {source.name!r}")
    return runtime, list(build)


def without_held(build: list[str] | tuple[str, ...]) -> list[str]:
    return [r for r in build if normalize(Requirement(r).name) not in HELD]


def first_difference(source: SourcePackage, tree: tuple[list[str], list[str]], archive: str) -> str | None:
    """Where the committed dependency lists differ from those in the source tree: the first package (by name) whose
    requirement differs, is only in one of them, or None when they agree."""
    assert source.listed is not None
    for what, committed, upstream in (("runtime", source.listed.runtime, tree[0]),
                                      ("build", source.listed.build, tree[1])):
        ours = {normalize(Requirement(r).name): r for r in committed}
        theirs = {normalize(Requirement(r).name): r for r in upstream}
        for name in sorted(set(ours) | set(theirs)):
            a, b = ours.get(name), theirs.get(name)
            if a is None or b is None or Requirement(a) != Requirement(b):
                return (f"{name} ({what}): {source.listed.path} has {a or 'nothing'!r}, "
                        f"{source.project_file or 'pyproject.toml'} in {archive} has {b or 'nothing'!r}")
    return None


def sdist_build_requirements(sdist: Path) -> list[str]:
    """PEP 518 build requirements of an sdist (setuptools' defaults when it declares none)."""
    if not sdist.name.endswith(".tar.gz"):
        raise LockError(f"{sdist.name}: only .tar.gz sdists are read")
    with tarfile.open(sdist) as tar:
        try:
            doc = tomllib.loads(_member(tar, "pyproject.toml"))
        except LockError:
            doc = {}
    requires = doc.get("build-system", {}).get("requires", ["setuptools>=40.8.0", "wheel"])
    return [r for r in requires if normalize(Requirement(r).name) not in HELD]


def _public(url: str) -> str:
    """A URL without credentials, for the lock header."""
    parts = urllib.parse.urlsplit(url)
    host = parts.hostname or ""
    if parts.port:
        host += f":{parts.port}"
    return urllib.parse.urlunsplit((parts.scheme, host, parts.path, "", ""))


class LockMaker:
    def __init__(self, out: Out, cache_dir: Path, index_url: str = PYPI_SIMPLE, torch_index_url: str | None = None,
                 extra_index_urls: tuple[str, ...] = (), pins: Mapping[str, Pin] | None = None):
        self.out = out
        self.cache_dir = cache_dir
        self.index_url = index_url
        self.extra_index_urls = extra_index_urls
        self.torch_index_url = torch_index_url
        self.pins = dict(pins or {})  # the committed pin file's entries
        self._files: dict[str, list[IndexFile]] = {}

    def files(self, project: str) -> list[IndexFile]:
        key = normalize(project)
        if key not in self._files:
            self._files[key] = index_files(self.index_url, project)
        return self._files[key]

    def off_pypi(self, spec: LockSpec) -> list[OffPypiFile]:
        """Each pinned package whose version the index lacks for the platform. It must be one matrix.yaml installs
        --no-deps from a vendor's file (package_indexes.<name>.no_deps, as upstream installs it): the lock is
        resolved without it, so neither its file nor its metadata is needed here, and its entry names the file
        pins.yaml pins for the platform, or says that fetch records it on first use."""
        vendors = {name for name, _ in spec.package_indexes}
        out = []
        for requirement in (*spec.requirements, *spec.overrides):
            name, sep, version = requirement.partition("==")
            if not sep or normalize(name) not in vendors:
                continue
            if has_wheel(self.files(name), name, version, spec.arch, spec.python_tag):
                continue
            where = f"package_indexes.{normalize(name)}"
            if normalize(name) not in spec.no_deps:
                raise LockError(f"{name}=={version} is not on {_public(self.index_url)} for {spec.platform}, and "
                                f"matrix.yaml {where} has no no_deps: say (with upstream's source) that it is "
                                "installed --no-deps, so the lock can be resolved without its metadata")
            candidates = [IndexFile(p.file, p.url, p.sha256) for p in self.pins.values()]
            pinned = find_wheel(candidates, name, version, spec.arch, spec.python_tag)
            entry = (OffPypiFile(normalize(name), version, pinned.file, pinned.url, pinned.sha256) if pinned
                     else OffPypiFile(normalize(name), version))
            self.out(f"[lock]   {name} {version} is not on {_public(self.index_url)}: resolved without it "
                     f"({where}.no_deps), installed --no-deps from "
                     + (f"{pinned.file} (pins.yaml)" if pinned else "the file fetch records on first use"))
            out.append(entry)
        return out

    def _resolve(self, spec: LockSpec, lines: list[str], work: Path, without: list[str]) -> dict[str, str]:
        (work / "requirements.in").write_text("\n".join(lines) + "\n", encoding="utf-8")
        overrides: list[str] = []
        override_lines = [*spec.overrides, *(never(name) for name in without)]
        if override_lines:
            (work / "overrides.txt").write_text("\n".join(override_lines) + "\n", encoding="utf-8")
            overrides = ["--override", "overrides.txt"]
        cmd = [uv_binary(), "pip", "compile", "requirements.in", "-o", "resolved.txt", "--quiet", *overrides,
               "--python-platform", spec.platform, "--python-version", spec.python_version,
               "--no-header", "--annotation-style", "line", "--index-url", self.index_url]
        torch_index = spec.torch_index_url if self.torch_index_url is None else self.torch_index_url
        extras = [u for u in (torch_index, *self.extra_index_urls) if u]
        for url in extras:
            cmd += ["--extra-index-url", url]
        if extras:
            cmd += ["--index-strategy", "unsafe-best-match"]
        result = subprocess.run(cmd, cwd=work, capture_output=True, text=True)
        if result.returncode != 0:
            hint = (f" (the x86_64 torch CPU build is on {torch_index}; pass --torch-index-url for a mirror)"
                    if torch_index else "")
            raise LockError(f"uv could not resolve {spec.release}/{spec.backend}/{spec.arch}{hint}:\n"
                            + (result.stderr.strip() or result.stdout.strip()))
        return parse_lock(work / "resolved.txt").pins

    def _needs_build(self, spec: LockSpec, pins: dict[str, str], skip: set[str]) -> list[str]:
        names = [n for n in pins if n not in HELD and n not in skip]
        with ThreadPoolExecutor(8) as pool:
            wheels = dict(zip(names, pool.map(
                lambda n: has_wheel(self.files(n), n, pins[n], spec.arch, spec.python_tag), names), strict=True))
        return sorted(n for n, ok in wheels.items() if not ok)

    def source_archive(self, source: SourcePackage) -> tuple[IndexFile, Path | None]:
        """The source tree and its local copy: the index's sdist (with the index's sha256), or the git tag's archive,
        whose host publishes no sha256: pins.yaml pins it, or fetch records it on first use (sha256 ""). An archive
        that cannot be downloaded here is None when the committed dependency lists stand in for it."""
        if source.archive is None:
            item = find_sdist(self.files(source.name), source.name, source.version)
            return item, download(item, self.cache_dir)
        file, url = source.archive
        pin = self.pins.get(file)
        item = IndexFile(file, url, pin.sha256 if pin else "")
        try:
            return item, download(item, self.cache_dir)
        except PackageIndexError as exc:
            if source.listed is None:
                raise LockError(f"{source.name} {source.version}: its tag archive {url} could not be downloaded: "
                                f"{exc}") from None
            self.out(f"[lock]   {file} could not be downloaded ({exc}): the lock is made from {source.listed.path} "
                     "alone, not checked against the tree")
            return item, None

    def requirements(self, source: SourcePackage, tree: Path | None) -> tuple[list[str], list[str], str]:
        """(runtime, build) requirements and the header line saying where they come from: the committed lists
        (checked against the tree when it is here: a difference stops the lock), or the tree itself."""
        if source.listed is None:
            assert tree is not None
            runtime, build = tree_requirements(source, tree)
            read = ("requirements/common.txt and pyproject.toml" if source.name == "vllm"
                    else source.project_file or "pyproject.toml")
            return runtime, without_held(build), f"{read} in {tree.name}"
        if tree is not None:
            difference = first_difference(source, tree_requirements(source, tree), tree.name)
            if difference:
                raise LockError(f"{source.name} {source.version}: the committed dependency list differs from "
                                f"upstream's: {difference}. Transcribe the upstream file again (and its commit)")
        checked = "checked against the tag archive" if tree is not None else "not checked against the tag archive"
        return (list(source.listed.runtime), without_held(source.listed.build),
                f"{source.listed.path} ({source.listed.upstream}; {checked})")

    def make(self, spec: LockSpec, root: Path) -> Path:
        source = spec.source
        sdist_item, tree = self.source_archive(source)
        self.out(f"[lock] {spec.release}/{spec.backend}/{spec.arch}: {sdist_item.file} "
                 f"(sha256 {sdist_item.sha256[:12] or 'recorded on first fetch'})")
        runtime, build, listed_from = self.requirements(source, tree)
        from_source: list[str] = []
        # Sdists build without isolation, against the image's packages: as torch's, a build requirement's pin on a
        # package the runtime set already has yields to the runtime's version (arctic-inference 0.1.1 pins
        # protobuf==5.29.5 to build, vLLM 0.18.0 needs protobuf>=5.29.6 to run); the header lists each one.
        relaxed: list[str] = []
        with tempfile.TemporaryDirectory(prefix="ascend-lock.") as tmp:
            work = Path(tmp)
            off_pypi = self.off_pypi(spec)
            without = [f.name for f in off_pypi]
            for _ in range(MAX_ROUNDS):
                lines = [f"# {spec.release} {spec.backend} {spec.arch}: release pins", *spec.requirements,
                         f"# {source.name} {source.version}: runtime requirements as its build reads them", *runtime,
                         "# build requirements (installed first; sdists build without isolation)", *build]
                pins = self._resolve(spec, lines, work, without)
                new = [n for n in self._needs_build(spec, pins, set(without)) if n not in from_source]
                if not new:
                    break
                for name in new:
                    item = find_sdist(self.files(name), name, pins[name])
                    extra = sdist_build_requirements(download(item, self.cache_dir))
                    self.out(f"[lock]   {name} {pins[name]} has no {spec.platform} wheel: built in the image "
                             f"(build requirements: {', '.join(extra)})")
                    for i, requirement in enumerate(extra):
                        req = Requirement(requirement)
                        have = pins.get(normalize(req.name))
                        if have is not None and not req.specifier.contains(have, prereleases=True):
                            relaxed.append(f"{requirement.replace(' ', '')}({name})")
                            extra[i] = req.name
                            self.out(f"[lock]     {requirement} yields to the runtime's {req.name}=={have} "
                                     "(no build isolation)")
                    build = sorted({*build, *extra})
                from_source += new
            else:
                raise LockError(f"{spec.release}/{spec.backend}/{spec.arch}: build requirements did not settle "
                                f"after {MAX_ROUNDS} rounds (from source: {', '.join(from_source)})")
            body = (work / "resolved.txt").read_text(encoding="utf-8")
        # what the resolver left out stands in the body as the pin it is, so the install and every check see it
        body += "".join(f"{f.name}=={f.version}  # not on PyPI: installed --no-deps from the off-pypi file above\n"
                        for f in off_pypi)
        cuda = sorted(n for n in pins if n.startswith(CUDA_PREFIXES))
        if cuda:
            raise LockError(f"{spec.release}/{spec.backend}/{spec.arch}: the resolution pulls CUDA packages "
                            f"({', '.join(cuda)}); an NPU image must not carry them")
        build_names = sorted({normalize(Requirement(r).name) for r in build})
        header = [
            f"# ascend-images backend lock for {spec.release} / {spec.backend} / {spec.arch}, "
            f"Python {spec.python_version}",
            "# Resolved for the target platform by `invoke lock`; do not edit, regenerate with the command below.",
            f"# format: {LOCK_FORMAT}",
            f"# release: {spec.release}",
            f"# backend: {spec.backend}",
            f"# arch: {spec.arch}",
            f"# python: {spec.python_version}",
            f"# platform: {spec.platform}",
            f"# inputs-sha256: {spec.inputs_sha256()}",
            f"# regenerate: {spec.command}",
            f"# resolver: {_uv_version()} pip compile",
            f"# index: {' '.join(_public(u) for u in (self.index_url, *self.extra_index_urls))}",
            f"# source-package: {source.name}=={source.version}"
            + (f" ({source.project_file})" if source.project_file else ""),
            f"# source-sdist: {sdist_item.file} {sdist_item.url} "
            + (f"sha256:{sdist_item.sha256}" if sdist_item.sha256 else FIRST_FETCH),
            f"# source-requirements: {listed_from}",
            *([f"# source-subdir: {source.subdir}"] if source.subdir else []),
            f"# build-requirements: {' '.join(build_names)}",
            f"# from-source: {' '.join(sorted(from_source))}",
        ]
        if relaxed:
            header.append(f"# build-pins-relaxed: {' '.join(relaxed)}")
        if off_pypi:
            header.append("# off-pypi: " + ", ".join(
                f"{f.name}=={f.version} {f.file} {f.url} sha256:{f.sha256}" if f.file else f"{f.name}=={f.version} "
                f"{FIRST_FETCH}" for f in off_pypi))
            header.append("# resolved-without: " + " ".join(without) + " (uv --override NAME ; "
                          "sys_platform == 'never': installed --no-deps, as matrix.yaml package_indexes.*.no_deps "
                          "says upstream does; the resolver never read their metadata)")
        if spec.overrides:
            header.append(f"# overrides: {' '.join(spec.overrides)}")
        return write_lock(spec, root, "\n".join(header) + "\n" + body)


def never(name: str) -> str:
    """An override that takes a requirement out of a resolution: its marker is never true."""
    return f"{name} ; sys_platform == 'never'"


def _uv_version() -> str:
    result = subprocess.run([uv_binary(), "--version"], capture_output=True, text=True)
    return result.stdout.strip() or "uv"


def write_lock(spec: LockSpec, root: Path, text: str) -> Path:
    """Atomic: a lock that fails its own check is never left in place."""
    path = spec.path(root)
    check_lock(spec, parse_lock_text(text, path))
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(text, encoding="utf-8")
    tmp.replace(path)
    return path

