"""Environment layers with provenance: common < device < backend < allocator < framework < profile < user --env.

Each resolved variable remembers which layer set it and the source that layer cites, which lower layers it
overrode, and what reads it (DESIGN 26), so `invoke env` can say why a value is what it is and who reads it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from packaging.specifiers import SpecifierSet
from packaging.utils import canonicalize_name
from packaging.version import InvalidVersion, Version

from ascend_images.matrix.model import Variant
from ascend_images.matrix.schema import EnvEntry, EnvSpec, EnvTable

Reader = dict[str, str]  # {"package": NAME, "versions": SPEC, "source": ...} | {"cann": ...} | {"loader": ...} | {}
# does the image read a variable by this reader: what a stage ships decides (stages/envreaders.py); None: every one
Reads = Callable[[Reader], bool] | None
# LD_PRELOAD: what reads it is the dynamic loader, before any program of the image runs
LOADER: Reader = {"loader": "ld.so", "source": "glibc's dynamic loader (ld.so(8): LD_PRELOAD)"}


@dataclass(frozen=True)
class EnvValue:
    name: str
    value: str
    layer: str  # e.g. "common", "device:a3", "backend:vllm", "allocator:jemalloc", "profile:debug", "user"
    source: str
    overrides: tuple[tuple[str, str], ...] = field(default=())  # (layer, value) it replaced, lowest first
    reader: tuple[tuple[str, str], ...] = ()  # what reads it, as reader_dict has it ({} for a user's --env)

    @property
    def reader_dict(self) -> Reader:
        return dict(self.reader)

    def as_dict(self) -> dict[str, object]:
        return {
            "value": self.value,
            "layer": self.layer,
            "source": self.source,
            "overrides": [{"layer": layer, "value": value} for layer, value in self.overrides],
            "reader": self.reader_dict,
        }


def reader_text(reader: Reader) -> str:
    """A reader in a few words: `torch-npu`, `vllm-ascend >=0.11,<0.30.0rc2`, `CANN hccl`, `ld.so`."""
    if "package" in reader:
        return f"{reader['package']} {reader.get('versions', '')}".strip()
    if "cann" in reader:
        return f"CANN {reader['cann']}"
    return reader.get("loader", "")


Layer = tuple[str, dict[str, tuple[str, str, Reader]]]  # (name, {NAME: (value, source, reader)})


def in_range(version: str, versions: str) -> bool:
    """Is `version` one of a reader's `versions` (a PEP 440 specifier, pre-releases included)?"""
    try:
        parsed = Version(version)
    except InvalidVersion:
        return False
    return SpecifierSet(versions).contains(parsed, prereleases=True)


def env_tables(env: EnvSpec) -> list[EnvTable]:
    """Every layer's table of the matrix, lowest first."""
    return [env.common, *env.device.values(), *env.backend.values(), *env.framework.values(), *env.profile.values()]


def baked_for(env: EnvSpec, package: str, version: str) -> set[str]:
    """The variables the matrix bakes for `package` at `version` (its reader, in range)."""
    return {name for table in env_tables(env) for name, e in table.items()
            if e.reader.package and canonicalize_name(e.reader.package) == canonicalize_name(package)
            and in_range(version, e.reader.versions)}


def entry_reader(entry: EnvEntry) -> Reader:
    return entry.reader.model_dump(exclude_none=True, exclude_defaults=True) | {"source": entry.reader.source}


def layers(variant: Variant, *, backend: bool = True, profile: str | None = None, user: bool = True,
           allocator: str | None = None, framework: bool = True, reads: Reads = None) -> list[Layer]:
    """The layers of a variant, lowest first, as (layer name, {NAME: (value, source, reader)}). The allocator layer
    (LD_PRELOAD) comes with the backend: `allocator` overrides the variant's. The framework's layer (RL training
    settings) sits on the backend's, under the profile. With `reads`, a layer keeps only what the image reads: an
    entry whose reader is not shipped is not in it, so it neither sets nor overrides anything."""
    env = variant.matrix.spec.env

    def table(t: EnvTable | None) -> dict[str, tuple[str, str, Reader]]:
        rows = {k: (e.value, e.source, entry_reader(e)) for k, e in (t or {}).items()}
        return {k: row for k, row in rows.items() if reads is None or reads(row[2])}

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
        out.append(("user", {k: (v, "--env", {}) for k, v in variant.user_env}))
    return out


def allocator_layer(variant: Variant, name: str) -> list[Layer]:
    """LD_PRELOAD for an allocator; none at all while nothing below preloads one (glibc's malloc)."""
    if name == "none" and variant.default_allocator == "none":
        return []
    spec = variant.matrix.spec.allocators[name]
    return [(f"allocator:{name}", {"LD_PRELOAD": (variant.allocator_library(name), spec.source, LOADER)})]


def resolve(stack: list[Layer]) -> dict[str, EnvValue]:
    resolved: dict[str, EnvValue] = {}
    for layer_name, table in stack:
        for name, (value, source, reader) in table.items():
            below = resolved.get(name)
            overrides = (*below.overrides, (below.layer, below.value)) if below else ()
            resolved[name] = EnvValue(name, value, layer_name, source, overrides, tuple(reader.items()))
    return dict(sorted(resolved.items()))


def effective_env(variant: Variant, **kwargs: object) -> dict[str, EnvValue]:
    """The tuned defaults a variant's image carries (not including what set_env.sh adds)."""
    return resolve(layers(variant, **kwargs))  # type: ignore[arg-type]


def baked_env(variant: Variant, *, backend: bool, framework: bool = False, reads: Reads = None) -> dict[str, EnvValue]:
    """What a heavy stage bakes: every layer but the user's, with the matrix's default profile.

    A non-default profile, allocator and user --env go into a thin overlay image on top, so that choosing
    `--profile debug` never rebuilds CANN or torch.
    """
    default_profile = variant.matrix.spec.defaults.profile
    return resolve(layers(variant, backend=backend, profile=default_profile, user=False,
                          allocator=variant.default_allocator, framework=framework, reads=reads))
