"""Environment layers with provenance: common < device < backend < allocator < framework < profile < user --env.

Each resolved variable remembers which layer set it and the source that layer cites, and which
lower layers it overrode, so `invoke env` can say why a value is what it is.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ascend_images.matrix.model import Variant
from ascend_images.matrix.schema import EnvTable


@dataclass(frozen=True)
class EnvValue:
    name: str
    value: str
    layer: str  # e.g. "common", "device:a3", "backend:vllm", "allocator:jemalloc", "profile:debug", "user"
    source: str
    overrides: tuple[tuple[str, str], ...] = field(default=())  # (layer, value) it replaced, lowest first

    def as_dict(self) -> dict[str, object]:
        return {
            "value": self.value,
            "layer": self.layer,
            "source": self.source,
            "overrides": [{"layer": layer, "value": value} for layer, value in self.overrides],
        }


def layers(variant: Variant, *, backend: bool = True, profile: str | None = None, user: bool = True,
           allocator: str | None = None, framework: bool = True) -> list[tuple[str, dict[str, tuple[str, str]]]]:
    """The layers of a variant, lowest first, as (layer name, {NAME: (value, source)}). The allocator layer
    (LD_PRELOAD) comes with the backend: `allocator` overrides the variant's. The framework's layer (RL training
    settings) sits on the backend's, under the profile."""
    env = variant.matrix.spec.env

    def table(t: EnvTable | None) -> dict[str, tuple[str, str]]:
        return {k: (e.value, e.source) for k, e in (t or {}).items()}

    profile = profile or variant.profile
    out = [
        ("common", table(env.common)),
        (f"device:{variant.device}", table(env.device.get(variant.device))),
    ]
    if backend:
        out.append((f"backend:{variant.backend}", table(env.backend.get(variant.backend))))
        out.extend(allocator_layer(variant, allocator or variant.allocator_name))
        if framework and variant.framework != "none":
            out.append((f"framework:{variant.framework}", table(env.framework.get(variant.framework))))
    out.append((f"profile:{profile}", table(env.profile.get(profile))))
    if user and variant.user_env:
        out.append(("user", {k: (v, "--env") for k, v in variant.user_env}))
    return out


def allocator_layer(variant: Variant, name: str) -> list[tuple[str, dict[str, tuple[str, str]]]]:
    """LD_PRELOAD for an allocator; none at all while nothing below preloads one (glibc's malloc)."""
    if name == "none" and variant.default_allocator == "none":
        return []
    spec = variant.matrix.spec.allocators[name]
    return [(f"allocator:{name}", {"LD_PRELOAD": (variant.allocator_library(name), spec.source)})]


def resolve(stack: list[tuple[str, dict[str, tuple[str, str]]]]) -> dict[str, EnvValue]:
    resolved: dict[str, EnvValue] = {}
    for layer_name, table in stack:
        for name, (value, source) in table.items():
            below = resolved.get(name)
            overrides = (*below.overrides, (below.layer, below.value)) if below else ()
            resolved[name] = EnvValue(name, value, layer_name, source, overrides)
    return dict(sorted(resolved.items()))


def effective_env(variant: Variant, **kwargs: object) -> dict[str, EnvValue]:
    """The tuned defaults a variant's image carries (not including what set_env.sh adds)."""
    return resolve(layers(variant, **kwargs))  # type: ignore[arg-type]


def baked_env(variant: Variant, *, backend: bool, framework: bool = False) -> dict[str, EnvValue]:
    """What a heavy stage bakes: every layer but the user's, with the matrix's default profile.

    A non-default profile, allocator and user --env go into a thin overlay image on top, so that choosing
    `--profile debug` never rebuilds CANN or torch.
    """
    default_profile = variant.matrix.spec.defaults.profile
    return resolve(layers(variant, backend=backend, profile=default_profile, user=False,
                          allocator=variant.default_allocator, framework=framework))
