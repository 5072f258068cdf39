"""A stage: one image of a plan, with its parent and the variants that use it. Its own module, below both the
stage-kind table and the plan, so each can import it."""

from __future__ import annotations

from dataclasses import dataclass, field

from ascend_images import DEFAULT_NAMESPACE
from ascend_images.inputs.lockfile import Lock
from ascend_images.inputs.lockspec import VariantLocks, variant_locks
from ascend_images.matrix.model import Variant
from ascend_images.stages.envreaders import KindEnv


@dataclass(eq=False)
class Stage:
    kind: str  # base | cann-install | cann | torch | vllm | sglang | framework | overlay
    tag: str
    variant: Variant  # the first variant that needs it; every user shares the same facts
    parent: Stage | None
    external_parent: str | None = None  # an image we do not build (OS image, official CANN image)
    users: list[Variant] = field(default_factory=list)
    # set only when the external parent is a stage of ours built before (`run --build`'s overlay): that image's
    # test-double label, which this stage repeats (the sources that made it are not known here)
    parent_doubles: tuple[str, ...] | None = None
    lock_layer: str | None = None  # the lock layer it installs (its kind's row says which), None for none
    env: KindEnv | None = None  # what its image ships and bakes of the tuned environment (its kind's row)
    # its variant's locks, loaded with the plan (one load for every stage of a variant); a stage made on its own
    # loads them itself
    locks: VariantLocks | None = None

    def __post_init__(self) -> None:
        if self.locks is None and self.variant is not None:
            self.locks = variant_locks(self.variant)

    def lock(self, layer: str = "backend") -> Lock:
        """Its variant's lock of a layer (LockError when there is none, saying why)."""
        assert self.locks is not None, f"{self.tag} has no variant, so no locks"
        return self.locks.lock(layer)

    @property
    def off_pypi(self) -> tuple[str, ...]:
        """The names of the wheels its variant's backend lock takes from a vendor index, not PyPI."""
        return self.locks.off_pypi if self.locks is not None else ()

    @property
    def starts_chain(self) -> bool:
        """The first stage of ours in its image (base, or cann-install on an official image): it adds the rootfs."""
        return self.parent is None and self.parent_doubles is None

    @property
    def parent_ref(self) -> str:
        """What the stage's Dockerfile says FROM: an image from outside the plan as it is named, a parent of the plan
        by its name under the default namespace, whatever namespace the plan tags (DESIGN 27). A build gives that
        name the parent's own build (bake: `target:`), so the context, like the image, is the same under every
        namespace."""
        if self.parent is not None:
            return f"{DEFAULT_NAMESPACE}/{self.parent.name}"
        assert self.external_parent is not None
        return self.external_parent

    @property
    def below_name(self) -> str:
        """The stage below as `<repo>:<tag>`, when it is one of ours (a parent of the plan, or the image an overlay is
        built over alone); "" over an image we do not build."""
        if self.parent is not None:
            return self.parent.name
        if self.parent_doubles is not None and self.external_parent:
            return self.external_parent.rsplit("/", 1)[-1]
        return ""

    @property
    def name(self) -> str:
        """`<repo>:<tag>` without the namespace: what the stage is, whichever namespace names it."""
        return self.tag.rsplit("/", 1)[-1]

    @property
    def slug(self) -> str:
        return self.tag.rsplit("/", 1)[-1].replace(":", "--")

    @property
    def repo(self) -> str:
        return self.tag.rsplit(":", 1)[0]

    @property
    def namespace(self) -> str:
        return self.repo.rsplit("/", 1)[0]

    def chain(self) -> list[Stage]:
        out: list[Stage] = []
        node: Stage | None = self
        while node is not None:
            out.append(node)
            node = node.parent
        return out[::-1]
