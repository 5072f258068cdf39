"""Dependency lists transcribed from upstream trees this machine cannot download (GitHub tag archives), committed
under upstream/ with the repository, path and commit they were read at: a backend's source package lists (SGLang's
pyproject_npu.toml) and a framework's requirement files (verl's requirements-npu.txt, ROLL's requirements_common.txt).
A lock is made from them; each is checked for its shape here."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from packaging.requirements import InvalidRequirement, Requirement

from ascend_images.inputs.lockfile import LockError
from ascend_images.matrix.yamlfile import YamlFileError, load_yaml_file

FRAMEWORK_LIST_KEYS = {"project", "version", "upstream", "requirements"}


def _load(path: Path, what: str) -> object:
    if not path.is_file():
        raise LockError(f"{what}: {path} does not exist")
    try:
        return load_yaml_file(path)
    except YamlFileError as exc:
        raise LockError(str(exc)) from None


def _requirements(path: Path, key: str, items: object) -> tuple[str, ...]:
    if not isinstance(items, list) or not all(isinstance(i, str) for i in items):
        raise LockError(f"{path}: {key} must be a list of requirement strings")
    for item in items:
        try:
            Requirement(item)
        except InvalidRequirement as exc:
            raise LockError(f"{path}: {key}: {item!r} is not a requirement ({exc})") from None
    return tuple(items)


def _upstream(path: Path, doc: dict) -> str:
    upstream = doc["upstream"]
    if not isinstance(upstream, dict) or not {"repository", "path", "commit"} <= set(upstream):
        raise LockError(f"{path}: upstream must name repository, path and commit")
    return f"{upstream['repository']} {upstream['path']} at {upstream['commit']}"


@dataclass(frozen=True)
class ListedRequirements:
    """A source package's dependency lists as a committed file transcribes them from the upstream tree (SGLang's
    python/pyproject_npu.toml), with the commit they were read at: what a lock is resolved from when the tree
    itself (a tag archive on GitHub) cannot be downloaded."""

    path: str  # relative to matrix.yaml's directory
    upstream: str  # repository, path and commit it was read from
    runtime: tuple[str, ...]  # the project's dependencies and its srt_npu extra, as the lock reads them
    build: tuple[str, ...]


def read_listed_requirements(root: Path, rel: str, version: str) -> ListedRequirements:
    """The committed dependency lists of a source package (matrix: npu_requirements), checked for their shape."""
    path = root / rel
    doc = _load(path, f"npu_requirements (the committed dependency list of SGLang {version})")
    keys = {"project", "version", "upstream", "dependencies", "srt_npu", "build-system-requires"}
    if not isinstance(doc, dict) or set(doc) != keys:
        raise LockError(f"{path}: expected exactly the keys {', '.join(sorted(keys))}")
    if str(doc["version"]) != version:
        raise LockError(f"{path}: lists version {doc['version']}, the release pins {version}")
    lists = {key: _requirements(path, key, doc[key]) for key in ("dependencies", "srt_npu", "build-system-requires")}
    return ListedRequirements(rel, _upstream(path, doc), lists["dependencies"] + lists["srt_npu"],
                              lists["build-system-requires"])


@dataclass(frozen=True)
class FrameworkRequirements:
    """One upstream requirement file of a framework, transcribed into a committed file with the commit it was read
    at (GitHub is out of reach here, so the lock is made from the transcription)."""

    path: str  # relative to matrix.yaml's directory
    upstream: str  # repository, path and commit
    requirements: tuple[str, ...]


def read_framework_requirements(root: Path, rel: str) -> FrameworkRequirements:
    path = root / rel
    doc = _load(path, "frameworks requirements (a transcribed upstream requirement file)")
    if not isinstance(doc, dict) or set(doc) != FRAMEWORK_LIST_KEYS:
        raise LockError(f"{path}: expected exactly the keys {', '.join(sorted(FRAMEWORK_LIST_KEYS))}")
    return FrameworkRequirements(rel, _upstream(path, doc), _requirements(path, "requirements", doc["requirements"]))
