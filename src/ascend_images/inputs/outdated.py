"""`invoke outdated`: what is newer on the index than what matrix.yaml pins, and whether it can be built.

For each package the matrix pins, every newer release on the (PEP 503) index, read from the index itself:
which platforms have a CPython 3.11 wheel, whether an sdist exists, what the wheel's metadata pins (torch,
torch-npu, triton-ascend, vllm) and its Python range, and what stands in the way of a release built on it.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import asdict, dataclass, field

from packaging.requirements import InvalidRequirement, Requirement
from packaging.specifiers import SpecifierSet
from packaging.utils import InvalidSdistFilename, InvalidWheelFilename, parse_sdist_filename, parse_wheel_filename
from packaging.version import InvalidVersion, Version

from ascend_images.inputs.envregistry import REGISTRIES, env_change, read_registry
from ascend_images.inputs.pypi import IndexFile, IndexUnreachableError, PackageIndexError, index_files, normalize
from ascend_images.inputs.sglangline import CUDA_WHEEL, PROJECT_FILE, LineVerdict, judge, tag_files
from ascend_images.inputs.wheelmeta import WheelMetadataError, read_member, read_metadata
from ascend_images.matrix.envs import baked_for
from ascend_images.matrix.model import Matrix
from ascend_images.matrix.schema import SglangPins, VllmPins

ARCHES = ("x86_64", "aarch64")
PINS_OF_INTEREST = ("torch", "torch-npu", "triton-ascend", "vllm")
PYTHON = "3.11"


@dataclass
class Candidate:
    package: str
    version: str
    wheels: dict[str, bool]  # arch -> a cp311 (or abi3/py3) Linux wheel exists
    sdist: bool
    pins: dict[str, str] = field(default_factory=dict)  # name -> specifier, from the wheel's metadata
    requires_python: str | None = None
    problems: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)  # what does not block it, but a reader must know
    env_gone: list[str] = field(default_factory=list)  # baked for the package, and this release names them no more
    env_added: list[str] = field(default_factory=list)  # its env registry's new variables
    env_notes: list[str] = field(default_factory=list)  # those two said, blocked or not
    # what the pins, the Python range and the platforms were read from, where that is not what the image installs
    read_from: str = "the wheel the image installs"

    @property
    def verdict(self) -> str:
        return "; ".join([*(self.problems or ["ok", *self.notes]), *self.env_notes])


def pinned_versions(matrix: Matrix) -> dict[str, set[str]]:
    """package -> every version matrix.yaml pins for it."""
    spec = matrix.spec
    out: dict[str, set[str]] = {name: set() for name in ("torch-npu", "torch", "vllm", "vllm-ascend",
                                                         "triton-ascend", "sglang")}
    for version, pair in spec.torch.pairs.items():
        out["torch-npu"].add(version)
        out["torch"].add(pair.torch)
    for release in spec.releases.values():
        if release.blocked:  # named, not built: a newer release is still news, and this one says why (blocked_releases)
            continue
        for backend in release.backends.model_fields_set:
            pins = getattr(release.backends, backend)
            if isinstance(pins, VllmPins):
                out["vllm"].add(pins.vllm)
                out["vllm-ascend"].add(pins.vllm_ascend)
                if pins.triton_ascend:
                    out["triton-ascend"].add(pins.triton_ascend)
            elif isinstance(pins, SglangPins):
                out["sglang"].add(pins.sglang)
    return out


def blocked_releases(matrix: Matrix) -> dict[tuple[str, str], str]:
    """(package, version) -> why the release that pins it is blocked, for the backend packages of blocked releases."""
    out = {}
    for name, release in matrix.spec.releases.items():
        if not release.blocked:
            continue
        for backend in release.backends.model_fields_set:
            pins = getattr(release.backends, backend)
            if isinstance(pins, VllmPins):
                out["vllm-ascend", pins.vllm_ascend] = f"release {name} is blocked: {release.blocked}"
            elif isinstance(pins, SglangPins):
                out["sglang", pins.sglang] = f"release {name} is blocked: {release.blocked}"
    return out


def _version(file: str) -> tuple[Version, str] | None:
    """(version, kind: wheel|sdist) from a distribution file name, or None for anything else."""
    try:
        if file.endswith(".whl"):
            _, version, _, _ = parse_wheel_filename(file)
            return version, "wheel"
        _, version = parse_sdist_filename(file)
        return version, "sdist"
    except (InvalidWheelFilename, InvalidSdistFilename, InvalidVersion):
        return None


def _wheel_arches(file: str) -> set[str]:
    _, _, _, tags = parse_wheel_filename(file)
    arches = set()
    for tag in tags:
        python_ok = tag.interpreter in ("cp311", "py3") or tag.abi == "abi3"
        if not python_ok or (not tag.platform.startswith(("manylinux", "linux")) and tag.platform != "any"):
            continue
        arches |= {a for a in ARCHES if tag.platform.endswith(a) or tag.platform == "any"}
    return arches


def candidates(files: list[IndexFile], package: str, newer_than: Version, pre: bool = False) -> dict[str, list]:
    """Every release newer than `newer_than`, newest first; without `pre`, of the pre-releases newer than every final
    only the newest of each line (upstream's rc lines: vllm-ascend 0.30.0rc2, ..., 0.26.0rc1 above 0.23.0)."""
    by_version: dict[Version, list[tuple[IndexFile, str]]] = {}
    for f in files:
        parsed = _version(f.file)
        if parsed is None:
            continue
        version, kind = parsed
        if version > newer_than:
            by_version.setdefault(version, []).append((f, kind))
    finals = [v for v in by_version if not v.is_prerelease]
    if not pre:
        lines: dict[str, Version] = {}
        for v in by_version:
            if v.is_prerelease and all(v > f for f in finals):
                lines[v.base_version] = max(v, lines.get(v.base_version, v))
        by_version = {v: e for v, e in by_version.items() if not v.is_prerelease or v in lines.values()}
    return {str(v): by_version[v] for v in sorted(by_version, reverse=True)}


def _pins(requires: list[str]) -> dict[str, str]:
    out = {}
    for text in requires:
        try:
            req = Requirement(text)
        except InvalidRequirement:
            continue
        if req.marker is not None and "extra" in str(req.marker):
            continue
        name = normalize(req.name)
        if name in PINS_OF_INTEREST:
            out[name] = str(req.specifier)
    return out


# (name, version) -> where else the pin is published: "<vendor index URL>" when it has it, "" when it does not,
# "unreachable <URL>" when it did not answer, None when matrix.yaml names no vendor index for the package
Elsewhere = Callable[[str, str], str | None]


def assess(package: str, version: str, entries: list[tuple[IndexFile, str]], on_index: Callable[[str, str], bool],
           metadata: Callable[[str], tuple[dict[str, str], str | None]],
           vllm_exceptions: dict[str, list[str]] | None = None,
           elsewhere: Elsewhere = lambda name, version: None, sglang_tag_url: str | None = None,
           no_deps: frozenset[str] = frozenset(), blocked: dict[tuple[str, str], str] | None = None,
           sglang_line: Callable[[str], LineVerdict] | None = None) -> Candidate:
    wheels = [f for f, kind in entries if kind == "wheel"]
    arches = set().union(*(_wheel_arches(f.file) for f in wheels)) if wheels else set()
    cand = Candidate(package, version, {a: a in arches for a in ARCHES}, any(k == "sdist" for _, k in entries))
    cp311 = [f for f in wheels if _wheel_arches(f.file)]
    if cp311:
        # prefer the aarch64 wheel: most Ascend hosts are Kunpeng
        chosen = sorted(cp311, key=lambda f: "aarch64" not in f.file)[0]
        cand.pins, cand.requires_python = metadata(chosen.url)
    wheel_problems = []
    if cand.requires_python and not SpecifierSet(cand.requires_python).contains(PYTHON + ".0"):
        wheel_problems.append(f"Python {PYTHON} excluded ({cand.requires_python})")
    if not cand.wheels["aarch64"]:
        wheel_problems.append("no aarch64 wheel" + (": built from the sdist" if cand.sdist else ", no sdist"))
    if package == "sglang" and sglang_line is not None:
        # the NPU install is the tag's tree on its line's stack: the wheel's findings are said, and judge nothing
        cand.read_from = "PyPI's CUDA wheel (pins, python, platforms); the verdict: the NPU line"
        if wheel_problems:
            cand.notes.append(f"{CUDA_WHEEL}: {'; '.join(wheel_problems)}")
        line = sglang_line(version)
        cand.problems += line.problems
        cand.notes += line.notes
        pins = {}
    else:
        cand.problems += wheel_problems
        pins = cand.pins
    if package == "torch-npu":
        want = Version(version).base_version  # 2.10.0.post4 and 2.13.0rc1 pin torch 2.10.0 and 2.13.0
        torch = cand.pins.get("torch")
        if torch and f"=={want}" not in torch.replace(" ", ""):
            cand.problems.append(f"pins torch{torch}, not =={want} (PT's rule)")
    for name, spec in pins.items():
        if spec.startswith("==") and name != "torch" and not on_index(name, spec[2:]):
            # resolved out of the lock and installed --no-deps from a file pins.yaml pins: it locks here
            locks = f"; locked without it, installed --no-deps (package_indexes.{name}.no_deps)" if name in no_deps \
                else ""
            where = elsewhere(name, spec[2:])
            if where and not where.startswith("unreachable"):
                cand.notes.append(f"{name}{spec} is not on this index but on {where} (package_indexes){locks}")
            elif where:
                cand.notes.append(f"{name}{spec} is not on this index; package_indexes names {where.split()[1]}, "
                                  "which did not answer here (check it on a connected host)" + locks)
            else:
                cand.problems.append(f"pins {name}{spec}, which this index does not have")
    if package == "vllm-ascend":
        # vllm-ascend A.B.C[.postN] needs vllm A.B.C, or one of the matrix's known exceptions (VA)
        wanted = (vllm_exceptions or {}).get(version) or [Version(version).base_version]
        if not any(on_index("vllm", v) for v in wanted):
            cand.problems.append(f"vllm {' or '.join(wanted)} (vllm-ascend's rule) is not on this index")
    if (package, version) in (blocked or {}):
        cand.problems.append(f"matrix.yaml: {(blocked or {})[package, version]}")
    if package == "sglang" and not cand.sdist:
        if sglang_tag_url:  # backends.sglang.artifacts.source_tag: releases say `tree: git-tag`
            cand.notes.append(f"no sdist: build it from its git tag, {sglang_tag_url.format(version=version)}, with "
                              "its python/pyproject_npu.toml transcribed under upstream/ (npu_requirements)")
        else:
            cand.problems.append("no sdist: the NPU build needs the tagged source tree")
    return cand


def outdated(matrix: Matrix, index_url: str, out: Callable[[str], None], *, packages: list[str] | None = None,
             pre: bool = False, limit: int = 5) -> list[Candidate]:
    pinned = pinned_versions(matrix)
    listing: dict[str, list[IndexFile]] = {}
    missing: list[str] = []  # projects the index answered for with "not here"

    def files(name: str) -> list[IndexFile]:
        if name not in listing:
            try:
                listing[name] = index_files(index_url, name)
            except IndexUnreachableError:
                # an index that does not answer must not read as "nothing newer"
                raise
            except PackageIndexError:
                listing[name] = []
                missing.append(name)
        return listing[name]

    def on_index(name: str, version: str) -> bool:
        return any((_version(f.file) or (None, ""))[0] == Version(version) for f in files(name))

    def metadata(url: str) -> tuple[dict[str, str], str | None]:
        try:
            meta = read_metadata(url)
        except WheelMetadataError as exc:
            out(f"warning: {exc}")
            return {}, None
        return _pins(meta.requires_dist), meta.requires_python

    vendors = {normalize(n): s.urls for n, s in matrix.spec.package_indexes.items()}
    vendor_listing: dict[str, list[IndexFile] | None] = {}

    def elsewhere(name: str, version: str) -> str | None:
        unreachable = ""
        for url in vendors.get(normalize(name), []):
            if url not in vendor_listing:
                try:
                    vendor_listing[url] = index_files(url, name)
                except PackageIndexError:
                    vendor_listing[url] = None
            listed = vendor_listing[url]
            if listed is None:
                unreachable = unreachable or f"unreachable {url}"
            elif any((_version(f.file) or (None, ""))[0] == Version(version) for f in listed):
                return url
        return unreachable if normalize(name) in vendors else None

    no_deps = frozenset(normalize(n) for n, spec in matrix.spec.package_indexes.items() if spec.no_deps)
    blocked = blocked_releases(matrix)
    registries: dict[str, str | None] = {}

    def registry(package: str, version: str) -> str | None:
        """The env registry of `package` at `version`, from one of its wheels on the index (aarch64 first)."""
        if (package, version) not in registries:
            wheels = [f for f in files(package) if f.file.endswith(".whl")
                      and (_version(f.file) or (None, ""))[0] == Version(version)]
            text = None
            for f in sorted(wheels, key=lambda f: "aarch64" not in f.file)[:1]:
                try:
                    text = read_registry(f.url, package, read_member)
                except WheelMetadataError as exc:
                    out(f"warning: {exc}")
            registries[package, version] = text
        return registries[package, version]

    sglang = matrix.spec.backends["sglang"]
    # the devices the matrix builds SGLang for (the 950 has none here: devices.a5.support)
    chips = {name: device.chip for name, device in matrix.spec.devices.items()
             if device.support is None or device.support.backends is None or "sglang" in device.support.backends}
    project_file = sglang.artifacts.get("npu_project_file")
    read_tag = tag_files(project_file)

    def sglang_line(version: str) -> LineVerdict:
        read = (lambda v: read_tag(v, PROJECT_FILE)) if project_file else None
        return judge(version, sglang.npu_lines, PYTHON, chips, read)

    found = []
    for package, versions in pinned.items():
        if packages and package not in packages:
            continue
        newest = max(Version(v) for v in versions)
        newer = candidates(files(package), package, newest, pre)
        for version, entries in list(newer.items())[:limit]:
            tag = matrix.spec.backends["sglang"].artifacts.get("source_tag")
            cand = assess(package, version, entries, on_index, metadata,
                          matrix.spec.backends["vllm"].vllm_exceptions, elsewhere, tag.url if tag else None,
                          no_deps, blocked, sglang_line)
            if package in REGISTRIES and (text := registry(package, version)) is not None:
                change = env_change(package, text, baked_for(matrix.spec.env, package, str(newest)),
                                    registry(package, str(newest)))
                cand.env_gone, cand.env_added = list(change.gone), list(change.added)
                cand.env_notes = change.notes(package, version)
            found.append(cand)
    if listing and len(missing) == len(listing):
        # an index that has none of them is no index of these packages: "nothing newer" would be a false all-clear
        raise PackageIndexError(f"the index at {index_url} has none of the packages asked for ({', '.join(missing)}: "
                                "not found on it); is it a PEP 503 simple index holding them? (PyPI's is "
                                "https://pypi.org/simple)")
    return found


def table(rows: list[Candidate], pinned: dict[str, set[str]]) -> str:
    lines = [f"{'package':14} {'newer':14} {'matrix has':12} {'x86_64':6} {'aarch64':7} {'sdist':5} "
             f"{'python':12} {'pins':48} verdict"]
    for c in rows:
        pins = ", ".join(f"{k}{v}" for k, v in sorted(c.pins.items())) or "-"
        if c.read_from != Candidate.read_from:  # e.g. sglang's CUDA wheel: said, and judging nothing
            pins += f" [{c.read_from.split(' (')[0]}]"
        newest = str(max(Version(v) for v in pinned[c.package]))
        yes = {True: "yes", False: "no"}
        lines.append(f"{c.package:14} {c.version:14} {newest:12} {yes[c.wheels['x86_64']]:6} "
                     f"{yes[c.wheels['aarch64']]:7} {yes[c.sdist]:5} {c.requires_python or '-':12} {pins:48} "
                     f"{c.verdict}")
    return "\n".join(lines)


def as_json(rows: list[Candidate]) -> str:
    return json.dumps([asdict(c) | {"verdict": c.verdict} for c in rows], indent=2)
