"""Make a lock, any layer: resolve with uv what its stage installs for the target platform and Python (not this
host's), pin the sha256 of the one file the target installs for each package, and write it with the header lockspec
checks. One maker for every layer (DESIGN 20): what differs is data of the spec.

What gets resolved is what the stage installs: the layer's requirements (base: what CANN's tools import, and pip;
torch: the torch pair; backend: the release's pins and the source package's runtime and build requirements exactly
as its build reads them, plus the build requirements of any locked package with no wheel for the platform; framework:
its transcribed requirement files), with the pins of the lock it is made over as constraints.
"""

from __future__ import annotations

import subprocess
import tempfile
import urllib.parse
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from packaging.requirements import Requirement

from ascend_images.inputs.lockfile import (
    FIRST_FETCH,
    LOCK_FORMAT,
    Lock,
    LockError,
    OffPypiFile,
    parse_lock,
    parse_lock_text,
    pin_line,
)
from ascend_images.inputs.lockspec import OVER, LockSpec, check_lock, lock_path
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
    pinned_name,
    target_file,
)
from ascend_images.inputs.sourcetree import (
    SourcePackage,
    first_difference,
    sdist_build_requirements,
    tree_requirements,
    without_held,
)
from ascend_images.tools import which

Out = Callable[[str], None]
# Packages that only make sense with CUDA: a lock holding one would put CUDA in an NPU image.
CUDA_PREFIXES = ("nvidia-", "cuda-", "cupy", "flashinfer", "xformers", "sgl-kernel")
# ...but not these: pure-Python NVML bindings (ctypes, no library of their own) that loggers import to read GPU
# stats and that do nothing until asked (swanlab, via pynvml, in ROLL's list)
NOT_CUDA = ("nvidia-ml-py",)
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


def public(url: str) -> str:
    """A URL without credentials, for the lock header."""
    parts = urllib.parse.urlsplit(url)
    host = parts.hostname or ""
    if parts.port:
        host += f":{parts.port}"
    return urllib.parse.urlunsplit((parts.scheme, host, parts.path, "", ""))


def never(name: str) -> str:
    """An override that takes a requirement out of a resolution: its marker is never true."""
    return f"{name} ; sys_platform == 'never'"


def _uv_version() -> str:
    result = subprocess.run([uv_binary(), "--version"], capture_output=True, text=True)
    return result.stdout.strip() or "uv"


def _sdist(files: list[IndexFile], name: str, version: str) -> IndexFile | None:
    try:
        return find_sdist(files, name, version)
    except PackageIndexError:
        return None


class LockMaker:
    def __init__(self, out: Out, cache_dir: Path, index_url: str = PYPI_SIMPLE, torch_index_url: str | None = None,
                 extra_index_urls: tuple[str, ...] = (), pins: Mapping[str, Pin] | None = None,
                 find_links: tuple[Path, ...] = ()):
        self.out = out
        self.cache_dir = cache_dir
        self.index_url = index_url
        self.extra_index_urls = extra_index_urls
        self.torch_index_url = torch_index_url
        self.find_links = find_links
        self.pins = dict(pins or {})  # the committed pin file's entries
        self._files: dict[tuple[str, str], list[IndexFile]] = {}

    # --- where files are -------------------------------------------------------------------------------------------
    def indexes(self, spec: LockSpec) -> list[str]:
        torch_index = spec.torch_index_url if self.torch_index_url is None else self.torch_index_url
        return [self.index_url, *(u for u in (torch_index, *self.extra_index_urls) if u)]

    def files(self, project: str, index: str | None = None) -> list[IndexFile]:
        key = (index or self.index_url, normalize(project))
        if key not in self._files:
            self._files[key] = index_files(key[0], project)
        return self._files[key]

    def local_files(self, project: str) -> list[IndexFile]:
        """The find-links directories' files of a project, with their sha256 (computed: a directory publishes none)."""
        from ascend_images.inputs.download import sha256_file

        stem = normalize(project)
        return [IndexFile(p.name, p.as_uri(), sha256_file(p)) for d in self.find_links if d.is_dir()
                for p in sorted(d.iterdir()) if p.is_file() and normalize(p.name.split("-")[0]) == stem]

    def target_file(self, spec: LockSpec, name: str, version: str, sdist: bool) -> IndexFile:
        """The file the target installs for a pin: its best wheel for the platform (the tag pip and uv prefer), or
        the sdist it is built from; from a find-links directory or the first index that has it."""
        candidates = [self.local_files(name)]
        for index in self.indexes(spec):
            try:
                candidates.append(self.files(name, index))
            except PackageIndexError:
                continue
        for files in candidates:
            found = _sdist(files, name, version) if sdist else target_file(files, name, version, spec.arch,
                                                                            spec.python_tag)
            if found is not None:
                if not found.sha256:
                    raise LockError(f"{found.url}: the index publishes no sha256 for it")
                return found
        what = "sdist" if sdist else f"wheel for {spec.platform}"
        raise LockError(f"{name}=={version}: no {what} on {', '.join(public(u) for u in self.indexes(spec))}")

    # --- resolution ------------------------------------------------------------------------------------------------
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
                raise LockError(f"{name}=={version} is not on {public(self.index_url)} for {spec.platform}, and "
                                f"matrix.yaml {where} has no no_deps: say (with upstream's source) that it is "
                                "installed --no-deps, so the lock can be resolved without its metadata")
            candidates = [IndexFile(p.file, p.url, p.sha256) for p in self.pins.values()]
            pinned = find_wheel(candidates, name, version, spec.arch, spec.python_tag)
            entry = (OffPypiFile(normalize(name), version, pinned.file, pinned.url, pinned.sha256) if pinned
                     else OffPypiFile(normalize(name), version))
            self.out(f"[lock]   {name} {version} is not on {public(self.index_url)}: resolved without it "
                     f"({where}.no_deps), installed --no-deps from "
                     + (f"{pinned.file} (pins.yaml)" if pinned else "the file fetch records on first use"))
            out.append(entry)
        return out

    def _resolve(self, spec: LockSpec, lines: list[str], work: Path, held_out: list[str],
                 previous: Lock | None) -> dict[str, str]:
        (work / "requirements.in").write_text("\n".join(lines) + "\n", encoding="utf-8")
        overridden = {pinned_name(o) for o in spec.overrides}
        below = spec.over.pins if spec.over is not None else {}
        (work / "constraints.txt").write_text("".join(f"{n}=={v}\n" for n, v in below.items()
                                                      if n not in held_out and n not in overridden), encoding="utf-8")
        (work / "overrides.txt").write_text("".join(o + "\n" for o in (*spec.overrides, *map(never, held_out))),
                                            encoding="utf-8")
        if previous is not None and not (work / "resolved.txt").exists():
            # uv keeps the versions of an existing output file where they still fit: a lock made again moves only
            # what its inputs move
            (work / "resolved.txt").write_text("".join(f"{n}=={v}\n" for n, v in previous.pins.items()),
                                               encoding="utf-8")
        cmd = [uv_binary(), "pip", "compile", "requirements.in", "-c", "constraints.txt", "--override",
               "overrides.txt", "-o", "resolved.txt", "--quiet", "--python-platform", spec.platform,
               "--python-version", spec.python_version, "--no-header", "--annotation-style", "line",
               "--index-url", self.index_url]
        for url in self.indexes(spec)[1:]:
            cmd += ["--extra-index-url", url]
        for directory in self.find_links:
            cmd += ["--find-links", str(directory)]
        if len(self.indexes(spec)) > 1 or self.find_links:
            cmd += ["--index-strategy", "unsafe-best-match"]
        result = subprocess.run(cmd, cwd=work, capture_output=True, text=True)
        if result.returncode != 0:
            torch_index = self.indexes(spec)[1] if len(self.indexes(spec)) > 1 else ""
            hint = (f" (the x86_64 torch CPU build is on {torch_index}; pass --torch-index-url for a mirror)"
                    if torch_index and spec.layer in ("torch", "backend") else "")
            over = f" over {spec.over.path.name} (every pin of it held)" if spec.over is not None else ""
            raise LockError(f"uv could not resolve {spec.name}{over}{hint}:\n"
                            + (result.stderr.strip() or result.stdout.strip()))
        return parse_lock(work / "resolved.txt").pins

    def _needs_build(self, spec: LockSpec, pins: Mapping[str, str], skip: set[str]) -> list[str]:
        def has_one(name: str) -> bool:
            local = target_file(self.local_files(name), name, pins[name], spec.arch, spec.python_tag)
            return local is not None or has_wheel(self.files(name), name, pins[name], spec.arch, spec.python_tag)

        names = [n for n in pins if n not in skip]
        with ThreadPoolExecutor(8) as pool:
            wheels = dict(zip(names, pool.map(has_one, names), strict=True))
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

    def source_requirements(self, source: SourcePackage, tree: Path | None) -> tuple[list[str], list[str], str]:
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

    def build_requirements_of(self, spec: LockSpec, name: str, version: str, pins: Mapping[str, str],
                              relaxed: list[str]) -> list[str]:
        """An sdist's build requirements. Sdists build without isolation, against the image's packages: as torch's,
        a build requirement's pin on a package the runtime set already has yields to the runtime's version
        (arctic-inference 0.1.1 pins protobuf==5.29.5 to build, vLLM 0.18.0 needs protobuf>=5.29.6 to run)."""
        extra = sdist_build_requirements(download(find_sdist(self.files(name), name, version), self.cache_dir))
        self.out(f"[lock]   {name} {version} has no {spec.platform} wheel: built in the image "
                 f"(build requirements: {', '.join(extra)})")
        for i, requirement in enumerate(extra):
            req = Requirement(requirement)
            have = pins.get(normalize(req.name))
            if have is not None and not req.specifier.contains(have, prereleases=True):
                relaxed.append(f"{requirement.replace(' ', '')}({name})")
                extra[i] = req.name
                self.out(f"[lock]     {requirement} yields to the runtime's {req.name}=={have} (no build isolation)")
        return extra

    # --- the lock --------------------------------------------------------------------------------------------------
    def make(self, spec: LockSpec, root: Path) -> Path:
        # an index that does not answer is named as such before the resolver words it its own way
        first = spec.source.name if spec.source else next(iter(spec.requirements), "pip")
        self.files(first.split("==")[0].split("<")[0].split(">")[0].strip())
        path = lock_path(root, spec)
        previous = parse_lock(path) if path.is_file() else None
        header: list[str] = []
        lines = [f"# {spec.name}: what the layer asks for", *spec.requirements]
        for listed in spec.listed:
            lines += [f"# {spec.framework} {spec.version}: {listed.path} ({listed.upstream})", *listed.requirements]
        no_deps = {normalize(p.partition("==")[0]): p.partition("==")[2] for p in spec.installed_no_deps}
        held_out = sorted({*no_deps, *(f.name for f in spec.over.off_pypi)} if spec.over is not None else no_deps)
        off_pypi = self.off_pypi(spec)
        held_out = sorted({*held_out, *(f.name for f in off_pypi)})
        build: list[str] = []
        from_source: list[str] = []
        relaxed: list[str] = []
        if spec.source is not None:
            sdist_item, tree = self.source_archive(spec.source)
            pinned = sdist_item.sha256[:12] or "recorded on first fetch"
            self.out(f"[lock] {spec.name}: {sdist_item.file} (sha256 {pinned})")
            runtime, build, listed_from = self.source_requirements(spec.source, tree)
            lines += [f"# {spec.source.name} {spec.source.version}: runtime requirements as its build reads them",
                      *runtime]
            header += [f"# source-package: {spec.source.name}=={spec.source.version}"
                       + (f" ({spec.source.project_file})" if spec.source.project_file else ""),
                       f"# source-sdist: {sdist_item.file} {sdist_item.url} "
                       + (f"sha256:{sdist_item.sha256}" if sdist_item.sha256 else FIRST_FETCH),
                       f"# source-requirements: {listed_from}",
                       *([f"# source-subdir: {spec.source.subdir}"] if spec.source.subdir else [])]
        else:
            self.out(f"[lock] {spec.name}" + (f": over {spec.over.path.name} ({len(spec.over.pins)} pins)"
                                             if spec.over is not None else ""))
        build = sorted({*build, *spec.device_build_requirements})  # the device build's, in the image, no isolation
        below = spec.over.pins if spec.over is not None else {}
        with tempfile.TemporaryDirectory(prefix="ascend-lock.") as tmp:
            work = Path(tmp)
            for _ in range(MAX_ROUNDS):
                asked = [*lines, "# build requirements (installed first; sdists build without isolation)", *build]
                pins = self._resolve(spec, asked, work, held_out, previous)
                added = {n: v for n, v in pins.items() if below.get(n) != v}
                new = [n for n in self._needs_build(spec, added, set(held_out)) if n not in from_source]
                if not new:
                    break
                if spec.layer != "backend":  # a framework's sdists build against the backend's tools, pinned there
                    for name in new:
                        needs = [normalize(Requirement(r).name) for r in self.build_requirements_of(
                            spec, name, added[name], pins, relaxed)]
                        if missing := [n for n in needs if n not in below and n not in added]:
                            raise LockError(f"{spec.name}: {name}=={added[name]} has no {spec.platform} wheel, and "
                                            f"its sdist needs {', '.join(missing)} to build, which no lock pins")
                    from_source += new
                    break
                for name in new:
                    build = sorted({*build, *self.build_requirements_of(spec, name, pins[name], pins, relaxed)})
                from_source += new
            else:
                raise LockError(f"{spec.name}: build requirements did not settle after {MAX_ROUNDS} rounds (from "
                                f"source: {', '.join(from_source)})")
            annotations = {normalize(line.split("==", 1)[0]): line.split("#", 1)[1].strip()
                           for line in (work / "resolved.txt").read_text(encoding="utf-8").splitlines()
                           if "==" in line and "#" in line}
        cuda = sorted(n for n in added if n.startswith(CUDA_PREFIXES) and n not in NOT_CUDA)
        if cuda:
            raise LockError(f"{spec.name}: the resolution pulls CUDA packages ({', '.join(cuda)}); an NPU image must "
                            "not carry them")
        body = [pin_line(n, v, self.target_file(spec, n, v, n in from_source).sha256, annotations.get(n, ""))
                for n, v in sorted(added.items())]
        body += [pin_line(f.name, f.version, None, "not on PyPI: installed --no-deps from the off-pypi file above")
                 for f in off_pypi]
        body += [pin_line(n, v, self.target_file(spec, n, v, False).sha256, "installed --no-deps, as upstream does "
                          "(matrix.yaml frameworks)") for n, v in sorted(no_deps.items())]
        if spec.device_sdist:
            name = normalize(spec.device_sdist)
            item = find_sdist(self.files(name), name, pins[name])
            self.out(f"[lock]   {name} {pins[name]} for {', '.join(spec.device_sdist_devices)}: built in the image "
                     f"from {item.file} (sha256 {item.sha256[:12]})")
            header.append(f"# device-build: {name}=={pins[name]} {item.file} {item.url} sha256:{item.sha256} for "
                          + " ".join(spec.device_sdist_devices))
        header = self.header(spec, header, build, from_source, relaxed, off_pypi, held_out) + moves(spec, added)
        return write_lock(spec, root, "\n".join(header) + "\n" + "\n".join(body) + "\n")

    def header(self, spec: LockSpec, source_lines: list[str], build: list[str], from_source: list[str],
               relaxed: list[str], off_pypi: list[OffPypiFile], held_out: list[str]) -> list[str]:
        over = ([f"# over: {spec.over.path.name} sha256:{spec.over_sha256}"] if spec.over is not None else [])
        header = [
            f"# ascend-images {spec.layer} lock for {spec.name}, Python {spec.python_version}",
            "# Resolved for the target platform by `invoke lock`" + (f" over the {OVER[spec.layer]} lock (each of its "
                                                                      "pins held)" if spec.over is not None else "")
            + "; do not edit, regenerate with the command below.",
            f"# format: {LOCK_FORMAT}", f"# layer: {spec.layer}",
            *([f"# release: {spec.release}"] if spec.release else []),
            *([f"# backend: {spec.backend}"] if spec.backend else []),
            *([f"# framework: {spec.framework}=={spec.version}"] if spec.framework else []),
            f"# arch: {spec.arch}", f"# python: {spec.python_version}", f"# platform: {spec.platform}",
            f"# inputs-sha256: {spec.inputs_sha256()}", *over, f"# regenerate: {spec.command}",
            f"# resolver: {_uv_version()} pip compile",
            f"# index: {' '.join(public(u) for u in self.indexes(spec))}",
            "# hashes: the sha256 of the file the target installs (its best wheel for the platform, or the sdist it "
            "is built from)",
            *source_lines,
        ]
        if spec.source is not None or build:
            header.append(f"# build-requirements: {' '.join(sorted({normalize(Requirement(r).name) for r in build}))}")
        header.append(f"# from-source: {' '.join(sorted(from_source))}")
        if relaxed:
            header.append(f"# build-pins-relaxed: {' '.join(relaxed)}")
        if off_pypi:
            header.append("# off-pypi: " + ", ".join(
                f"{f.name}=={f.version} {f.file} {f.url} sha256:{f.sha256}" if f.file else f"{f.name}=={f.version} "
                f"{FIRST_FETCH}" for f in off_pypi))
        if held_out:
            header.append("# resolved-without: " + " ".join(held_out) + " (uv --override NAME ; sys_platform == "
                          "'never': installed --no-deps, as matrix.yaml says upstream does; the resolver never read "
                          "their metadata)")
        if spec.installed_no_deps:
            header.append(f"# no-deps: {' '.join(spec.installed_no_deps)}")
        if spec.overrides:
            header.append(f"# overrides: {' '.join(spec.overrides)}")
        if spec.archives:
            header.append("# archives: " + ", ".join(f"{a.name}=={a.version} {a.file} {a.url}" for a in spec.archives))
        return header


def moves(spec: LockSpec, pins: Mapping[str, str]) -> list[str]:
    """The header lines of a lock made over another that say what it moves there (old -> new, and matrix.yaml's
    source), and, for a framework, the version chosen for each requirement its upstream list leaves unpinned."""
    below = spec.over.pins if spec.over is not None else {}
    lines = []
    for requirement, source in zip(spec.overrides, spec.override_sources, strict=False):
        name = pinned_name(requirement)
        if below.get(name) not in (None, pins.get(name)) and name in pins:
            lines.append(f"# moved: {name} {below[name]} -> {pins[name]} ({' '.join(source.split())})")
    unpinned = sorted({pinned_name(Requirement(r).name) for listed in spec.listed for r in listed.requirements
                       if not any(op in r for op in ("==", "<", ">", "~=", "!="))})
    if unpinned:
        chosen = " ".join(f"{n}=={pins.get(n, below.get(n))}" for n in unpinned)
        lines.append(f"# unpinned-upstream: {chosen} (the list names no version: each is the newest that agrees with "
                     "every other pin here and below, as the resolver takes it)")
    return lines


def write_lock(spec: LockSpec, root: Path, text: str) -> Path:
    """Atomic: a lock that fails its own check is never left in place."""
    path = lock_path(root, spec)
    check_lock(spec, parse_lock_text(text, path))
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(text, encoding="utf-8")
    tmp.replace(path)
    return path
