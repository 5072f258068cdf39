"""A selection of variants becomes one plan: a list of stages, parents first, each built once.

Which stages a variant has, and in what order, is the stage-kind table (stages/kinds.py, KINDS):
    base -> cann-install -> cann -> torch [-> vllm | sglang [-> framework]] [-> overlay]
"""

from __future__ import annotations

import platform
from dataclasses import dataclass, field

from ascend_images import DEFAULT_NAMESPACE
from ascend_images.inputs.lockspec import VariantLocks, variant_locks
from ascend_images.inputs.sources import CannSource
from ascend_images.matrix.model import Variant
from ascend_images.stages.kinds import KINDS, overlay_suffix, top_kind
from ascend_images.stages.names import check_namespace, stage_tag
from ascend_images.stages.stage import Stage


def host_arch() -> str:
    """The build host's arch, as the matrix names arches."""
    machine = platform.machine().lower()
    return {"amd64": "x86_64", "arm64": "aarch64"}.get(machine, machine)




@dataclass(frozen=True)
class PlanOptions:
    cann_source: CannSource
    namespace: str = DEFAULT_NAMESPACE
    # (os, arch) -> the image the base stage starts FROM; default: the matrix's image for the OS. The native stages
    # start FROM (INSTALLER_OS, host arch)'s (the build arg INSTALLER_BASE)
    base_images: dict[tuple[str, str], str] = field(default_factory=dict)
    host_arch: str = field(default_factory=host_arch)

    def __post_init__(self) -> None:
        check_namespace(self.namespace)


@dataclass
class BuildPlan:
    stages: list[Stage]  # parents before children
    tops: dict[Variant, Stage]  # the stage that is each variant's image
    options: PlanOptions

    def top(self, variant: Variant) -> Stage:
        return self.tops[variant]


def make_plan(variants: list[Variant], options: PlanOptions) -> BuildPlan:
    stages: dict[str, Stage] = {}
    tops: dict[Variant, Stage] = {}
    locks: dict[Variant, VariantLocks] = {}  # the stages of a variant share its locks, loaded once

    def add(kind: str, tag: str, v: Variant, parent: Stage | None, external: str | None = None) -> Stage:
        stage = stages.get(tag)
        if stage is None:
            if v not in locks:
                locks[v] = variant_locks(v)
            stage = Stage(kind, tag, v, parent, external, lock_layer=KINDS[kind].lock_layer, env=KINDS[kind].env,
                          locks=locks[v])
            stages[tag] = stage
        stage.users.append(v)
        return stage

    ns = options.namespace
    from_image = options.cann_source.kind == "image"
    for v in variants:
        parent: Stage | None = None
        for kind, row in KINDS.items():  # parents first: a stage's parent is the nearest kind before it
            if (from_image and not row.on_official_image) or not row.applies(v):
                continue
            external = None
            if parent is None:
                external = (options.cann_source.official_image(v) if from_image
                            else options.base_images.get((v.os, v.arch), v.os_spec.image))
            parent = add(kind, stage_tag(kind, v, ns), v, parent, external)
        assert parent is not None
        tops[v] = parent
    # dict order is insertion order: a parent is always added before the stages over it
    return BuildPlan(list(stages.values()), tops, options)


def overlay_plan(v: Variant, options: PlanOptions, parent_doubles: tuple[str, ...] = ()) -> BuildPlan:
    """The overlay of `v` alone, FROM the image below it as an image already built (whose test-double label is
    `parent_doubles`): the same stage and context a whole plan gives it (so the same BuildKit cache keys), so that
    `invoke build` later reuses what this builds."""
    if not overlay_suffix(v):
        raise ValueError(f"{v.name} has no overlay (no --env, non-default --profile or --allocator)")
    stage = Stage("overlay", stage_tag("overlay", v, options.namespace), v, None,
                  external_parent=stage_tag(top_kind(v), v, options.namespace), users=[v],
                  parent_doubles=parent_doubles, env=KINDS["overlay"].env)
    return BuildPlan([stage], {v: stage}, options)
