"""The requirements a source tree declares, read the way its build reads them: vLLM's requirements/common.txt and
pyproject (VLLM_TARGET_DEVICE=empty), SGLang's NPU project file with its srt_npu extra, an sdist's PEP 518 build
requirements; and where a committed transcription differs from the tree."""

from __future__ import annotations

import tarfile
import tomllib
from dataclasses import dataclass
from pathlib import Path

from packaging.requirements import Requirement

from ascend_images.inputs.lockfile import LockError
from ascend_images.inputs.pypi import normalize
from ascend_images.inputs.upstream import ListedRequirements

# Installed by the torch stage; a backend lock pins them to the release's versions, never a build's requirement.
HELD = ("torch", "torch-npu")


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


