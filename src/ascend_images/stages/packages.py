"""What a stage installs from its locks (DESIGN 19, 20): the lock layers it is the stage of, and against the layers the
stages below it installed, which pins it installs (natively, from the wheel store, each checked by its sha256), which
it replaces (the image below has them at another version), which it builds from sdists on the target, and the build
requirements those builds need, and which it builds from sdists for its device (the lock's `device-build`). Computed
from the locks and the stage's device alone, so the rendered Dockerfile says it all."""

from __future__ import annotations

from dataclasses import dataclass, field

from ascend_images.inputs.lockfile import Lock, installed_below
from ascend_images.inputs.lockspec import LAYERS
from ascend_images.stages.stage import Stage


@dataclass(frozen=True)
class SourceBuild:
    """A locked package with no wheel for the target: built there from its sdist (the lock's hash is the sdist's)."""

    name: str
    version: str
    sha256: str


@dataclass(frozen=True)
class StagePackages:
    layers: tuple[str, ...]  # the lock layers this stage installs, lowest first
    locks: dict[str, Lock]  # layer -> its lock
    install: tuple[str, ...]  # `name==version --hash=sha256:...`, installed natively from the wheel store
    replaces: tuple[str, ...]  # names the image below has at another version: removed before the copy
    builds: tuple[SourceBuild, ...] = ()
    # built from their sdists for the stage's device (its SOC_VERSION), where the lock's wheel is another device's
    device_builds: tuple[SourceBuild, ...] = ()
    build_requirements: tuple[str, ...] = ()  # hashed lines, installed where the sdists build
    below_unknown: bool = False  # the stage is the first of ours over an image we did not build (official CANN)
    waived: tuple[str, ...] = field(default=())  # NAME==VERSION installed --no-deps: `pip check` waives their lines

    @property
    def wanted(self) -> tuple[str, ...]:
        """Every file the stage takes from the wheel store (installs, sdists, build requirements)."""
        sdists = tuple(f"{b.name}=={b.version} --hash=sha256:{b.sha256}" for b in (*self.builds, *self.device_builds))
        return (*self.install, *sdists, *self.build_requirements)


def stage_layers(stage: Stage) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """(the layers this stage installs, the layers the stages below it installed). A stage installs its own layer,
    and any lower one no stage of its chain installs (the torch stage over an official CANN image installs the base
    layer too)."""
    own = stage.lock_layer
    if own is None:
        return (), ()
    below = [s.lock_layer for s in stage.chain()[:-1] if s.lock_layer]
    lower = [layer for layer in LAYERS[:LAYERS.index(own)] if layer not in below and layer in ("base", "torch")]
    return (*lower, own), tuple(below)


def stage_packages(stage: Stage) -> StagePackages:
    layers, below_layers = stage_layers(stage)
    locks = {layer: stage.lock(layer) for layer in layers}
    below_locks = [stage.lock(layer) for layer in below_layers]
    below = installed_below(below_locks)
    mine = installed_below(list(locks.values()))
    hashes = {n: h for lock in locks.values() for n, h in lock.hashes.items()}
    off_pypi = {f.name for lock in locks.values() for f in lock.off_pypi}
    from_source = {n for lock in locks.values() for n in lock.from_source}
    device = stage.variant.device
    for_device = {n: d for lock in locks.values() for n, d in lock.device_sdists.items() if device in d.devices}
    changed = {n: ver for n, ver in mine.items() if below.get(n) != ver}
    install = tuple(f"{n}=={ver} --hash=sha256:{hashes[n]}" for n, ver in sorted(changed.items())
                    if n not in off_pypi and n not in from_source and n not in for_device)
    builds = tuple(SourceBuild(n, changed[n], hashes[n]) for n in sorted(from_source) if n in changed)
    device_builds = tuple(SourceBuild(n, changed[n], d.sha256) for n, d in sorted(for_device.items()) if n in changed)
    every = {**below, **mine}
    every_hash = {n: h for lock in [*below_locks, *locks.values()]
                  for n, h in lock.hashes.items()}
    # what a build on the target needs first (a source package's too, so not only when a locked sdist builds), with
    # what those require within the lock: they go in --no-deps
    build_names = sorted(set().union(*(lock.closure(set(lock.build_requirements)) for lock in locks.values()
                                       if lock.build_requirements)))
    build_requirements = tuple(f"{n}=={every[n]} --hash=sha256:{every_hash[n]}" for n in build_names if n in every
                               and n in every_hash)
    waived = tuple(f"{f.name}=={f.version}" for lock in locks.values() for f in lock.off_pypi)
    waived += tuple(f"{n}=={ver}" for lock in locks.values() for n, ver in lock.no_deps.items())
    return StagePackages(layers, locks, install, tuple(sorted(n for n in changed if n in below)), builds,
                         device_builds, build_requirements,
                         below_unknown=not any(s.kind == "base" for s in stage.chain()), waived=waived)
