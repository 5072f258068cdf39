"""The stage kinds, in one table: for each, when a variant has it, what it is built on, the labels it adds, how it
is described, and what its build context holds beyond the template's common variables. `plan`, `render` and
`build` consult this table instead of branching on the kind.

    base -> cann-install -> cann -> torch [-> vllm | sglang [-> framework]] [-> overlay]

- base: the OS with Python, tini and the entrypoint (FROM the OS image); skipped when CANN comes from an official
  image, which is then cann-install's parent.
- cann-install: CANN's packages installed; cann: the same plus the ENV its env scripts set (matrix.yaml
  cann.env_sets, checked against the scripts in the same build).
- torch: torch and torch_npu; vllm / sglang: the backend from its lock; framework: an RL framework (verl, ROLL)
  from its lock over the backend's, and its tag archives; overlay: a non-default profile, allocator
  or user --env over the image below (a thin image, so such a choice never rebuilds CANN or torch).
Rows with a `lock_layer` install that lock's layer, natively for the target, in build stages of the build host's own
platform inside the stage's build (DESIGN 19).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

from ascend_images.inputs.sources import Sources
from ascend_images.matrix.model import Variant
from ascend_images.matrix.schema import SglangPins, VllmPins
from ascend_images.stages import contexts as ctxs
from ascend_images.stages.contexts import DOWNLOADS_LABEL, LABEL_PREFIX, PARENT_LABEL, TEST_DOUBLE_LABEL
from ascend_images.stages.envreaders import KindEnv
from ascend_images.stages.record import StageInputs
from ascend_images.stages.stage import Stage

__all__ = ["DOWNLOADS_LABEL", "KINDS", "LABEL_PREFIX", "PARENT_LABEL", "TEST_DOUBLE_LABEL", "StageKind"]
# a kind's part of the build context: (stage, sources, template variables, extra files, what its build is given) -> None
ContextPart = Callable[["Stage", Sources, dict[str, Any], dict[str, bytes], StageInputs], None]


# What a stage's tag says after its leading version (names.py spells it out):
#   os: <os>-py<python>[-<arch>]; device: <version>-<device>-<os>-...; release: <version>-cann<cann>-<device>-...;
#   over: the tag of the image below with the overlay suffix (the stage is that image with other settings)
TagScope = Literal["os", "device", "release", "over"]
# Inputs that may be test doubles: "cann" (--cann-dir with the marker), "artifacts" (--artifacts-dir with it),
# "off-pypi" (a wheel the lock takes from a vendor index, served from such an --artifacts-dir)
DoubleInput = Literal["cann", "artifacts", "off-pypi"]
OWN_KIND_ENV = KindEnv("framework", "base")  # a kind of its own (register_kind) ships every layer


@dataclass(frozen=True)
class StageKind:
    name: str
    applies: Callable[[Variant], bool]  # does a variant's chain have this stage
    labels: Callable[[Stage], dict[str, str]]  # the io.ascend-images.* labels it adds (parents' are inherited)
    description: Callable[[Stage], str]
    context: ContextPart
    repo: str  # the repository under the namespace ("" for an over-scoped kind: the image below's)
    tag_scope: TagScope
    version: Callable[[Variant], str] | None = None  # the tag's leading version and the OCI version label
    # the OCI version label where it is spelt otherwise than in the tag (CANN's: 8.3.RC1, not the tag's 8.3.rc1)
    label_version: Callable[[Variant], str] | None = None
    # (input, label value) of each input that, when a double, makes this image a test double; labels are
    # inherited, but the image that sets the label names every double below it too
    doubles: tuple[tuple[DoubleInput, str], ...] = ()
    on_official_image: bool = True  # False: skipped when CANN comes FROM an official image (its parent instead)
    # said when the stage's external parent (an image we do not build) can be neither found nor pulled
    missing_parent_hint: Callable[[Variant], str] | None = None

    # the repository when it depends on the variant (a framework's is its name), else `repo`
    repo_of: Callable[[Variant], str] | None = None
    # the kind whose doubles this one's test-double label names too (a framework's: its backend's)
    doubles_below: Callable[[Variant], str] | None = None
    # the lock layer (inputs/lockspec.LAYERS) whose packages this kind installs; None: no Python package
    lock_layer: str | None = None
    # what its image ships that may read a tuned variable, and which tuned layers it bakes (DESIGN 26); a kind of its
    # own (register_kind) ships every layer and bakes the common and device ones
    env: KindEnv = OWN_KIND_ENV

    def repo_for(self, v: Variant) -> str:
        return self.repo_of(v) if self.repo_of else self.repo

    def row_for(self, v: Variant) -> StageKind:
        """The row that names this stage: its own, or for an over-scoped kind the variant's top kind's."""
        return KINDS[top_kind(v)] if self.tag_scope == "over" else self


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
    """The heavy stage a variant's image is (or its overlay sits on): the last kind of its chain that is not
    over-scoped."""
    return [k.name for k in KINDS.values() if k.tag_scope != "over" and k.applies(v)][-1]


def image_kind(v: Variant) -> str:
    """The kind of a variant's image: the last kind of its chain."""
    return [k.name for k in KINDS.values() if k.applies(v)][-1]


def image_env_of(v: Variant) -> KindEnv:
    """The environment column of a variant's image's kind (stages.envreaders takes it)."""
    return KINDS[image_kind(v)].env


def stage_version(kind: str, v: Variant) -> str:
    """The leading version of a stage's tag, and its OCI version label: what the stage adds."""
    row = KINDS[kind].row_for(v)
    if row.version is None:
        raise ValueError(f"stage kind {row.name!r} has no version")
    return row.version(v)


def stage_label_version(kind: str, v: Variant) -> str:
    """org.opencontainers.image.version of a stage: its tag's version, unless its row spells it otherwise."""
    row = KINDS[kind].row_for(v)
    return row.label_version(v) if row.label_version else stage_version(kind, v)


def stage_doubles(stage: Stage, doubles: Mapping[DoubleInput, bool]) -> list[str]:
    """The test-double label values of a stage, given which inputs are doubles: its own row's, after those of the
    kind it is built over where its row says so (the label is set anew, so it must name every double below)."""
    row = KINDS[stage.kind].row_for(stage.variant)
    below = KINDS[row.doubles_below(stage.variant)].doubles if row.doubles_below else ()
    return list(dict.fromkeys(value for source, value in (*below, *row.doubles) if doubles.get(source)))


def _label(**values: str) -> dict[str, str]:
    return {f"{LABEL_PREFIX}.{k.replace('_', '-')}": v for k, v in values.items()}


def _image_labels(v: Variant) -> dict[str, str]:
    return _label(os=v.os, arch=v.arch, python=v.python, python_version=v.python_version)


# --- cann-install ------------------------------------------------------------------------------------------------
def _cann_install_labels(stage: Stage) -> dict[str, str]:
    v = stage.variant
    # FROM an official CANN image there is no base stage: this one says what the image is built on
    own = _image_labels(v) if stage.external_parent else {}
    return own | _label(device=v.device, soc_version=v.device_spec.soc_version, cann=v.release.cann,
                        cann_layout=v.cann.layout, hdk_floor=str(v.hdk_floor))


# --- torch ---------------------------------------------------------------------------------------------------------
def _torch_labels(stage: Stage) -> dict[str, str]:
    v = stage.variant
    return _label(release=v.release_name, backend="none", torch=v.torch, torch_npu=v.torch_npu,
                  profile=v.matrix.spec.defaults.profile)


# --- the backends: vllm and sglang -----------------------------------------------------------------------------------
def _vllm_labels(stage: Stage) -> dict[str, str]:
    v, pins = stage.variant, stage.variant.backend_pins
    if not isinstance(pins, VllmPins):
        return {}
    return _label(backend="vllm", vllm=pins.vllm, vllm_ascend=pins.vllm_ascend,
                  triton_ascend=pins.triton_ascend or "", allocator=v.default_allocator)


def _sglang_labels(stage: Stage) -> dict[str, str]:
    v, pins = stage.variant, stage.variant.backend_pins
    if not isinstance(pins, SglangPins):
        return {}
    return _label(backend="sglang", sglang=pins.sglang, sgl_kernel_npu=pins.sgl_kernel_npu.tag,
                  allocator=v.default_allocator)


def _vllm_version(v: Variant) -> str:
    assert isinstance(v.backend_pins, VllmPins)
    return v.backend_pins.vllm_ascend


def _sglang_version(v: Variant) -> str:
    assert isinstance(v.backend_pins, SglangPins)
    return v.backend_pins.sglang


# --- framework -------------------------------------------------------------------------------------------------------
def _framework_labels(stage: Stage) -> dict[str, str]:
    v, pins = stage.variant, stage.variant.framework_pins
    if pins is None:
        return {}
    return _label(framework=v.framework, framework_version=pins.version)


def _framework_version(v: Variant) -> str:
    assert v.framework_pins is not None
    return f"{v.framework_pins.version}-{v.backend}{stage_version(v.backend, v)}"


# --- overlay ---------------------------------------------------------------------------------------------------------
def _overlay_labels(stage: Stage) -> dict[str, str]:
    v = stage.variant
    labels = _label(profile=v.profile)
    if v.allocator is not None:
        labels |= _label(allocator=v.allocator)
    if v.user_env:
        # the values too (they are in the image's ENV anyway): the image tests read their expectations here
        labels |= _label(user_env=json.dumps(dict(v.user_env), sort_keys=True))
    return labels


# --- the table -------------------------------------------------------------------------------------------------------
def _os_image_hint(v: Variant) -> str:
    return (f"With no registry, make the OS image locally: invoke os-image --os {v.os} --arch {v.arch} "
            "(then build again, or pass --base-image REF)")


KINDS: dict[str, StageKind] = {k.name: k for k in (
    StageKind("base", lambda v: True,
              lambda s: _image_labels(s.variant),
              lambda s: f"{s.variant.os} with Python {s.variant.python_version} ({s.variant.python}), tini and "
                        "the ascend-images entrypoint",
              ctxs.base_context, repo="base", tag_scope="os",
              version=lambda v: f"{v.os}-py{v.python_version}",
              on_official_image=False, missing_parent_hint=_os_image_hint, lock_layer="base",
              env=KindEnv("base", "none", cann=False)),
    StageKind("cann-install", lambda v: True, _cann_install_labels,
              lambda s: f"CANN {s.variant.release.cann} for {s.variant.device} installed, environment not yet baked",
              ctxs.cann_install_context, repo="cann-install", tag_scope="device",
              version=lambda v: v.cann_version.tag, label_version=lambda v: v.release.cann,
              doubles=(("cann", "cann"),), env=KindEnv("base", "none")),
    StageKind("cann", lambda v: True, lambda s: {},
              lambda s: f"CANN {s.variant.release.cann} for {s.variant.device} with its environment baked into ENV",
              ctxs.cann_context, repo="cann", tag_scope="device", version=lambda v: v.cann_version.tag,
              label_version=lambda v: v.release.cann, doubles=(("cann", "cann"),), env=KindEnv("base", "base")),
    StageKind("torch", lambda v: True, _torch_labels,
              lambda s: f"torch {s.variant.torch} + torch_npu {s.variant.torch_npu} on CANN {s.variant.release.cann} "
                        f"for {s.variant.device}",
              ctxs.torch_context, repo="torch-npu", tag_scope="release", version=lambda v: v.torch_npu,
              doubles=(("cann", "cann"),), lock_layer="torch", env=KindEnv("torch", "base")),
    StageKind("vllm", lambda v: v.backend == "vllm", _vllm_labels,
              lambda s: f"vLLM-Ascend on CANN {s.variant.release.cann} for {s.variant.device}",
              ctxs.backend_context, repo="vllm-ascend", tag_scope="release", version=_vllm_version,
              doubles=(("cann", "cann"), ("off-pypi", "off-pypi-wheels")), lock_layer="backend",
              env=KindEnv("backend", "backend")),
    StageKind("sglang", lambda v: v.backend == "sglang", _sglang_labels,
              lambda s: f"SGLang on CANN {s.variant.release.cann} for {s.variant.device}",
              ctxs.backend_context, repo="sglang", tag_scope="release", version=_sglang_version,
              doubles=(("cann", "cann"), ("artifacts", "sgl-kernel-npu"), ("off-pypi", "off-pypi-wheels")),
              lock_layer="backend", env=KindEnv("backend", "backend")),
    StageKind("framework", lambda v: v.framework != "none", _framework_labels,
              lambda s: f"{s.variant.framework} over {s.variant.backend} on CANN {s.variant.release.cann} for "
                        f"{s.variant.device}",
              ctxs.framework_context, repo="framework", tag_scope="release", version=_framework_version,
              doubles=(("artifacts", "framework-archives"),),
              repo_of=lambda v: v.framework, doubles_below=lambda v: v.backend, lock_layer="framework",
              env=KindEnv("framework", "framework")),
    StageKind("overlay", lambda v: bool(overlay_suffix(v)), _overlay_labels,
              lambda s: f"{s.parent_ref.rsplit('/', 1)[-1]} with profile {s.variant.profile}"
                        + (f" and allocator {s.variant.allocator}" if s.variant.allocator is not None else ""),
              ctxs.overlay_context, repo="", tag_scope="over", env=KindEnv("framework", "all")),
)}


def register_kind(kind: StageKind, after: str) -> None:
    """Add a kind to the table right after `after` in the chain (parents first). The table stays one object,
    so every module that imported it sees the new row."""
    if kind.name in KINDS:
        raise ValueError(f"stage kind {kind.name!r} exists already")
    rows = list(KINDS.values())
    rows.insert([r.name for r in rows].index(after) + 1, kind)
    KINDS.clear()
    KINDS.update((r.name, r) for r in rows)


def unregister_kind(name: str) -> None:
    del KINDS[name]


def stage_labels(stage: Stage) -> dict[str, str]:
    """The io.ascend-images.* labels a stage adds (its parents' labels are inherited)."""
    return _label(stage=stage.kind) | KINDS[stage.kind].labels(stage)


def image_labels(stage: Stage, doubles: list[str]) -> dict[str, str]:
    """Every label a stage's image sets: the OCI ones, the stage below, its row's, and the test doubles it holds."""
    v = stage.variant
    labels = {
        "org.opencontainers.image.title": stage.repo.rsplit("/", 1)[-1],
        "org.opencontainers.image.description": KINDS[stage.kind].description(stage),
        "org.opencontainers.image.version": stage_label_version(stage.kind, v),
        "org.opencontainers.image.vendor": "ascend-images",
        "org.opencontainers.image.licenses": "Apache-2.0",
        "org.opencontainers.image.source": v.matrix.spec.repository,
        # nothing here names a namespace (DESIGN 27): the parent is `<repo>:<tag>` beside the image's own name, and
        # the registry path of what is published goes on at publish time (base.name)
        **({PARENT_LABEL: stage.below_name} if stage.below_name else {}),
        **stage_labels(stage),
    }
    if doubles:
        labels[TEST_DOUBLE_LABEL] = ",".join(doubles)
    return labels
