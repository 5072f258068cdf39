"""Every name an image gets, decided here and nowhere else: stage tags, a variant's image tag, its manifest-list
tag and moving alias, and the label keys (read back by imagemeta).

    <namespace>/<repo>:<version>-cann<cann>-<device>-<os>-py<python>[-<flavour>]-<arch>[-<overlay suffix>]

A manifest list is the same tag without `-<arch>`; the default image of a (device, backend) also gets the moving
alias `latest-<device>-<backend>`."""

from __future__ import annotations

import hashlib

from ascend_images.matrix.model import Variant
from ascend_images.matrix.schema import SglangPins, VllmPins

DEFAULT_NAMESPACE = "ascend-images"
LABEL_PREFIX = "io.ascend-images"
CONTENT_KEY_LABEL = f"{LABEL_PREFIX}.content-key"
TEST_DOUBLE_LABEL = f"{LABEL_PREFIX}.test-double"
BACKEND_REPOS = {"none": "torch-npu", "vllm": "vllm-ascend", "sglang": "sglang"}


def label(key: str) -> str:
    return f"{LABEL_PREFIX}.{key}"


def docker_arch(v: Variant) -> str:
    return v.arch_spec.debian_arch


def _py(v: Variant) -> str:
    return f"py{v.python_version}" + ("" if v.python == "system" else f"-{v.python}")


def stage_version(kind: str, v: Variant) -> str:
    """The leading version of a stage's tag: what the stage adds."""
    if kind in ("cann-install", "cann"):
        return v.cann_version.tag
    if kind == "torch":
        return v.torch_npu
    pins = v.backend_pins
    if kind == "vllm" and isinstance(pins, VllmPins):
        return pins.vllm_ascend
    if kind == "sglang" and isinstance(pins, SglangPins):
        return pins.sglang
    raise ValueError(f"no version for stage kind {kind!r} of {v.name}")


def _repo(kind: str) -> str:
    return {"torch": BACKEND_REPOS["none"], "vllm": BACKEND_REPOS["vllm"], "sglang": BACKEND_REPOS["sglang"]}.get(
        kind, kind)


def _tag_body(kind: str, v: Variant, arch: bool = True) -> str:
    """The tag of a stage after the colon, with or without its arch."""
    end = f"-{docker_arch(v)}" if arch else ""
    if kind == "base":
        return f"{v.os}-{_py(v)}{end}"
    tail = f"{v.device}-{v.os}-{_py(v)}{end}"
    if kind in ("cann-install", "cann"):
        return f"{stage_version(kind, v)}-{tail}"
    return f"{stage_version(kind, v)}-cann{v.cann_version.tag}-{tail}"


def stage_tag(kind: str, v: Variant, namespace: str) -> str:
    if kind == "overlay":
        return f"{stage_tag(top_kind(v), v, namespace)}-{overlay_suffix(v)}"
    if kind not in ("base", "cann-install", "cann", "torch", "vllm", "sglang"):
        raise ValueError(f"unknown stage kind {kind!r}")
    return f"{namespace}/{_repo(kind)}:{_tag_body(kind, v)}"


def overlay_suffix(v: Variant) -> str:
    """What a variant sets over its image below: a non-default profile, allocator, user --env ("" for none)."""
    parts = []
    if v.profile != v.matrix.spec.defaults.profile:
        parts.append(v.profile)
    if v.allocator is not None:
        parts.append("nopreload" if v.allocator == "none" else v.allocator)
    if v.user_env:
        digest = hashlib.sha256(repr(v.user_env).encode()).hexdigest()[:8]
        parts.append(f"env{digest}")
    return "-".join(parts)


def top_kind(v: Variant) -> str:
    """The heavy stage a variant's image is (or its overlay sits on)."""
    return "torch" if v.backend == "none" else v.backend


def image_tag(v: Variant, namespace: str = DEFAULT_NAMESPACE) -> str:
    """A variant's image, known without a plan or an engine."""
    return stage_tag("overlay" if overlay_suffix(v) else top_kind(v), v, namespace)


def list_tag(v: Variant) -> str:
    """The manifest list's tag: the image tag without its arch (every arch of the variant shares it)."""
    suffix = overlay_suffix(v)
    return _tag_body(top_kind(v), v, arch=False) + (f"-{suffix}" if suffix else "")


def repo_name(v: Variant) -> str:
    return _repo(top_kind(v))


def is_default(v: Variant) -> bool:
    """The image a user gets for (device, backend) without choosing anything else."""
    d = v.matrix.spec.defaults
    return (d.release.get(v.device, {}).get(v.backend) == v.release_name and v.os == d.os
            and v.python == d.python and not overlay_suffix(v))


def alias(v: Variant) -> str | None:
    return f"latest-{v.device}-{v.backend}" if is_default(v) else None
