"""Every name an image gets, decided here and nowhere else: stage tags, a variant's image tag, its manifest-list
tag and moving alias, and the label keys (read back by imagemeta).

    <namespace>/<repo>:<version>-cann<cann>-<device>-<os>-py<python>[-<flavour>]-<arch>[-<overlay suffix>]

A manifest list is the same tag without `-<arch>`; the default image of a (device, backend) also gets the moving
alias `latest-<device>-<backend>`."""

from __future__ import annotations

import re

from ascend_images import DEFAULT_NAMESPACE
from ascend_images.errors import SelectionError
from ascend_images.matrix.model import Variant
from ascend_images.stages.kinds import (
    KINDS,
    LABEL_PREFIX,
    PARENT_LABEL,
    TEST_DOUBLE_LABEL,
    image_kind,
    overlay_suffix,
    stage_version,
    top_kind,
)

__all__ = ["DEFAULT_NAMESPACE", "LABEL_PREFIX", "PARENT_LABEL", "TEST_DOUBLE_LABEL", "overlay_suffix", "stage_version",
           "top_kind"]
# Docker's reference grammar (distribution/reference): an optional registry host[:port], then path components of
# lowercase letters and digits joined by one '.', one or two '_', or any number of '-'
_DOMAIN = re.compile(r"(?:[A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?)(?:\.[A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?)*"
                     r"(?::[0-9]+)?")
_COMPONENT = re.compile(r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*")


def check_namespace(namespace: str, flag: str = "--namespace") -> str:
    """The namespace, if Docker accepts it in front of `/<repo>:<tag>`; else an error naming the part and the rule."""
    parts = namespace.split("/")
    first = parts[0]
    if len(parts) > 1 and ("." in first or ":" in first or first == "localhost"):
        if not _DOMAIN.fullmatch(first):
            raise SelectionError(f"{flag} {namespace!r}: {first!r} is not a registry host[:port]")
        parts = parts[1:]
    for part in parts:
        if not _COMPONENT.fullmatch(part):
            raise SelectionError(
                f"{flag} {namespace!r}: {part!r} is not a repository path component (Docker's rule: lowercase letters "
                "and digits, joined by '.', '_', '__' or dashes; e.g. ascend-images or registry.example.com:5000/ai)")
    if len(namespace) > 200:
        raise SelectionError(f"{flag}: {len(namespace)} characters; a repository name has at most 255 with its repo")
    return namespace


def label(key: str) -> str:
    return f"{LABEL_PREFIX}.{key}"


def docker_arch(v: Variant) -> str:
    return v.arch_spec.debian_arch


def _py(v: Variant) -> str:
    return f"py{v.python_version}" + ("" if v.python == "system" else f"-{v.python}")


def _kind(kind: str):
    try:
        return KINDS[kind]
    except KeyError:
        raise ValueError(f"unknown stage kind {kind!r}; the table has: {', '.join(KINDS)}") from None


def _tag_body(kind: str, v: Variant, arch: bool = True) -> str:
    """The tag of a stage after the colon, with or without its arch, as its row's tag scope says."""
    row = _kind(kind)
    if row.tag_scope == "over":
        return f"{_tag_body(top_kind(v), v, arch)}-{overlay_suffix(v)}"
    end = f"-{docker_arch(v)}" if arch else ""
    tail = f"{v.os}-{_py(v)}{end}"
    if row.tag_scope == "os":
        return tail
    tail = f"{v.device}-{tail}"
    if row.tag_scope == "device":
        return f"{stage_version(kind, v)}-{tail}"
    return f"{stage_version(kind, v)}-cann{v.cann_version.tag}-{tail}"


def stage_tag(kind: str, v: Variant, namespace: str) -> str:
    return f"{namespace}/{_kind(kind).row_for(v).repo_for(v)}:{_tag_body(kind, v)}"


def image_tag(v: Variant, namespace: str = DEFAULT_NAMESPACE) -> str:
    """A variant's image, known without a plan or an engine."""
    return stage_tag(image_kind(v), v, check_namespace(namespace))


def list_tag(v: Variant) -> str:
    """The manifest list's tag: the image tag without its arch (every arch of the variant shares it)."""
    return _tag_body(image_kind(v), v, arch=False)


def repo_name(v: Variant) -> str:
    return KINDS[top_kind(v)].repo_for(v)


def is_default(v: Variant) -> bool:
    """The image a user gets for (device, backend) without choosing anything else."""
    d = v.matrix.spec.defaults
    return (d.release.get(v.device, {}).get(v.backend) == v.release_name and v.os == d.os
            and v.python == d.python and not overlay_suffix(v))


def alias(v: Variant) -> str | None:
    return f"latest-{v.device}-{v.backend}" if is_default(v) else None
