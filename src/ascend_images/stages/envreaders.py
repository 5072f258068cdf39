"""What an image reads of the tuned environment (DESIGN 26): a variable is baked in the first stage that ships its
reader, and an image never carries one that nothing in it reads.

A stage ships the packages of the locks of its chain (by the lock's pins, and its source package, built from source)
and, from the cann stage up, CANN. A reader is read when it is a shipped package at a version in its range, a CANN
component over CANN, or the dynamic loader (LD_PRELOAD); a user's --env is always baked, as asked.
"""

from __future__ import annotations

import difflib
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal

from packaging.utils import canonicalize_name

from ascend_images.inputs.lockfile import LockError
from ascend_images.inputs.lockspec import LAYERS, VariantLocks, variant_layers, variant_locks
from ascend_images.matrix.envs import (
    EnvValue,
    Reader,
    baked_env,
    effective_env,
    entry_reader,
    env_tables,
    in_range,
    reader_text,
)
from ascend_images.matrix.model import Variant
from ascend_images.matrix.schema import EnvSpec


@dataclass(frozen=True)
class KindEnv:
    """A stage kind's column of the kind table (stages/kinds.py) for its environment: the lock layer its image has
    installed up to (what may read a variable there), and which of the tuned layers it bakes: none, the common and
    device ones (cann and torch), the backend's too, the framework's too, or all (an overlay: the profile, the
    allocator and a user's --env besides)."""

    ships: str  # a layer of inputs.lockspec.LAYERS
    bakes: Literal["none", "base", "backend", "framework", "all"]
    cann: bool = True  # its image has CANN (the base stage's has not)


@dataclass(frozen=True)
class Shipped:
    """What an image of a stage kind ships that may read a variable."""

    packages: Mapping[str, str]  # canonical name -> version
    cann: bool
    unlocked: tuple[str, ...] = ()  # lock layers with no lock yet: their packages are the matrix's pins only

    def reads(self, reader: Reader) -> bool:
        if "package" in reader:
            version = self.packages.get(canonicalize_name(reader["package"]))
            return version is not None and in_range(version, reader.get("versions", ""))
        if "cann" in reader:
            return self.cann
        return True  # the loader, or a user's --env

    def version_of(self, reader: Reader) -> str | None:
        return self.packages.get(canonicalize_name(reader["package"])) if "package" in reader else None


def shipped(v: Variant, env: KindEnv, locks: VariantLocks | None = None) -> Shipped:
    """What a stage of a kind (`env`, its row's column) in the variant's chain ships: its locks' packages up to its
    layer. `locks`: the variant's, loaded with its plan (else read here)."""
    locks = locks if locks is not None else variant_locks(v)
    top = LAYERS.index(env.ships)
    layers = [layer for layer in variant_layers(v) if LAYERS.index(layer) <= top]
    packages: dict[str, str] = {}
    unlocked: list[str] = []
    for layer in layers:
        try:
            lock = locks.lock(layer)
        except LockError:  # a preview render of a variant with no lock yet: the versions the matrix names
            unlocked.append(layer)
            packages.update(matrix_pins(v, layer))
            continue
        packages.update(lock.pins)
        source = lock.header.get("source-package", "").split()  # e.g. `sglang==0.5.17 (pyproject_npu.toml)`
        if source and "==" in source[0]:
            name, version = source[0].split("==", 1)
            packages[canonicalize_name(name)] = version
    return Shipped(packages, cann=env.cann, unlocked=tuple(unlocked))


def matrix_pins(v: Variant, layer: str) -> dict[str, str]:
    """The versions matrix.yaml names for a layer, for a variant whose lock is not made yet."""
    if layer == "torch":
        return {"torch": v.torch, "torch-npu": v.torch_npu}
    if layer == "backend" and v.backend_pins is not None:
        pins = v.backend_pins.model_dump()
        names = ("vllm", "vllm_ascend", "sglang")
        return {canonicalize_name(k): pins[k] for k in names if isinstance(pins.get(k), str)}
    if layer == "framework" and v.framework_pins is not None:
        return {canonicalize_name(v.framework): v.framework_pins.version}
    return {}


def shipped_env(v: Variant, env: KindEnv, locks: VariantLocks | None = None) -> dict[str, EnvValue]:
    """The tuned environment an image of a kind (`env`) in the variant's chain carries: the layers its kind bakes,
    each variable only where that image reads it."""
    if env.bakes == "none":
        return {}
    reads = shipped(v, env, locks).reads
    if env.bakes == "all":
        return effective_env(v, reads=reads)
    return baked_env(v, backend=env.bakes in ("backend", "framework"), framework=env.bakes == "framework", reads=reads)


def stage_defaults(v: Variant, env: KindEnv, below: KindEnv | None,
                   locks: VariantLocks | None = None) -> tuple[dict[str, EnvValue], dict[str, EnvValue]]:
    """(the tuned environment of a stage's image, what its Dockerfile sets: what differs from the image below's,
    `below` that image's kind's column, None for one we do not build). Readers only join going up a chain (a stage adds
    packages), so nothing baked below is unread above; were a lock to move a reader out of its range, the check of
    tests/image/test_env_readers.py names it (ENV cannot unset a variable)."""
    locks = locks if locks is not None else variant_locks(v)
    baked = shipped_env(v, env, locks)
    under = shipped_env(v, below, locks) if below else {}
    return baked, {k: e for k, e in baked.items() if k not in under or under[k].value != e.value}


def image_env(v: Variant, env: KindEnv) -> dict[str, EnvValue]:
    """The tuned environment of the variant's image (its last kind's column: stages.kinds.image_env_of), as `invoke
    env` shows it."""
    return shipped_env(v, env)


@dataclass(frozen=True)
class Unread:
    """A variable a layer of the variant sets that its image does not bake, and why."""

    name: str
    layer: str
    value: str
    why: str
    instead: str = ""  # the variable to set instead, where the matrix has one for these versions

    def as_dict(self) -> dict[str, str]:
        return {"layer": self.layer, "value": self.value, "why": self.why, "instead": self.instead}


def unread_env(v: Variant, env: KindEnv) -> dict[str, Unread]:
    """What the references set for the variant that its image does not bake: a reader it does not ship, or not at a
    version that reads it (out of range), or a variable the matrix drops (matrix.yaml env.dropped)."""
    have = shipped(v, env)
    baked = effective_env(v, user=False, reads=have.reads)  # the image's, but for a user's --env
    out: dict[str, Unread] = {}
    for name, e in effective_env(v, user=False).items():
        if name in baked:
            continue
        reader = e.reader_dict
        version = have.version_of(reader)
        if version is not None:
            why = f"read by {reader_text(reader)}; this image has {reader['package']} {version}"
        else:
            why = f"read by {reader_text(reader)}, which this image does not ship"
        out[name] = Unread(name, e.layer, e.value, why, instead=nearest(name, baked) or "")
    for dropped in v.matrix.spec.env.dropped:
        layer_applies = dropped.layer in ("common", f"device:{v.device}", f"backend:{v.backend}",
                                          f"framework:{v.framework}")
        if layer_applies and dropped.name not in baked:
            out.setdefault(dropped.name, Unread(dropped.name, dropped.layer, dropped.value, dropped.why))
    return dict(sorted(out.items()))


def nearest(name: str, known: Mapping[str, object] | list[str]) -> str | None:
    """The known variable a mistyped `name` most likely means (one character off, a letter doubled or dropped)."""
    others = [k for k in known if k != name]
    found = difflib.get_close_matches(name, others, n=1, cutoff=0.85)
    return found[0] if found else None


def read_anywhere(matrix_env: EnvSpec) -> dict[str, Reader]:
    """Every variable some image of the matrix reads, with its reader (the last layer's that names it)."""
    return {name: entry_reader(e) for table in env_tables(matrix_env) for name, e in table.items()}


def user_env_warnings(names: list[str], v: Variant | None, env: KindEnv | None, matrix_env: EnvSpec,
                      image: str) -> list[str]:
    """One line for each name of a user's --env that nothing in `image` reads as far as matrix.yaml knows: one the
    image does not read (a reader it does not ship, a version out of range, a dropped variable), or one a character
    or two from a variable something reads (a typo). A name the matrix knows nothing of (HF_TOKEN, the user's own)
    passes in silence: that nothing reads it cannot be known here. `v` None: an image the matrix did not select
    (run --image), checked against every variable of the matrix."""
    anywhere = read_anywhere(matrix_env)
    if v is not None and env is not None:
        read = effective_env(v, user=False, reads=shipped(v, env).reads)  # what it reads, the user's own aside
        known, unread = {n: e.reader_dict for n, e in read.items()}, unread_env(v, env)
    else:
        known, unread = anywhere, {}
    out = []
    for name in names:
        if name in known:
            continue
        if name in unread:
            u = unread[name]
            better = nearest(name, [n for n in known if n not in names])
            instead = f"; did you mean {better} ({reader_text(known[better])} reads it)?" if better else ""
            out.append(f"warning: --env {name}: nothing in {image} reads it ({u.why}){instead}")
            continue
        better = nearest(name, list(known))
        if better is not None:
            out.append(f"warning: --env {name}: nothing in {image} reads it as far as matrix.yaml knows; did you "
                       f"mean {better} ({reader_text(known[better])} reads it)?")
    return out
