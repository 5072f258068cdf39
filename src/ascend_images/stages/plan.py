"""A selection of variants becomes one plan: a list of stages, parents first, each built once.

Which stages a variant has, and in what order, is stagekinds' table (KINDS, CHAIN):
    base -> cann-install -> cann -> torch [-> vllm | sglang] [-> overlay]
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ascend_images.inputs.sources import CannSource
from ascend_images.matrix.model import Variant
from ascend_images.stages.kinds import CHAIN, KINDS
from ascend_images.stages.names import DEFAULT_NAMESPACE, stage_tag


@dataclass(frozen=True)
class PlanOptions:
    cann_source: CannSource
    namespace: str = DEFAULT_NAMESPACE
    # (os, arch) -> the image the base stage starts FROM; default: the matrix's image for the OS
    base_images: dict[tuple[str, str], str] = field(default_factory=dict)


@dataclass(eq=False)
class Stage:
    kind: str  # base | cann-install | cann | torch | vllm | sglang | overlay
    tag: str
    variant: Variant  # the first variant that needs it; every user shares the same facts
    parent: Stage | None
    external_parent: str | None = None  # an image we do not build (OS image, official CANN image)
    users: list[Variant] = field(default_factory=list)

    @property
    def parent_ref(self) -> str:
        if self.parent is not None:
            return self.parent.tag
        assert self.external_parent is not None
        return self.external_parent

    @property
    def slug(self) -> str:
        return self.tag.rsplit("/", 1)[-1].replace(":", "--")

    @property
    def repo(self) -> str:
        return self.tag.rsplit(":", 1)[0]

    def chain(self) -> list[Stage]:
        out: list[Stage] = []
        node: Stage | None = self
        while node is not None:
            out.append(node)
            node = node.parent
        return out[::-1]


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

    def add(kind: str, tag: str, v: Variant, parent: Stage | None, external: str | None = None) -> Stage:
        stage = stages.get(tag)
        if stage is None:
            stage = Stage(kind, tag, v, parent, external)
            stages[tag] = stage
        stage.users.append(v)
        return stage

    ns = options.namespace
    from_image = options.cann_source.kind == "image"
    for v in variants:
        parent: Stage | None = None
        for kind in CHAIN:
            if (kind == "base" and from_image) or not KINDS[kind].applies(v):
                continue  # FROM an official CANN image there is no base stage
            external = None
            if parent is None:
                external = (options.cann_source.official_image(v) if from_image
                            else options.base_images.get((v.os, v.arch), v.os_spec.image))
            parent = add(kind, stage_tag(kind, v, ns), v, parent, external)
        assert parent is not None
        tops[v] = parent
    # dict order is insertion order, and a parent is always added before its children
    return BuildPlan(list(stages.values()), tops, options)
