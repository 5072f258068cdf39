"""A registry as the shared stage cache (`--stage-cache REGISTRY/NAMESPACE`), through BuildKit's own registry cache
(DESIGN 14, 23): each stage's build imports its cache from there (`--cache-from type=registry`) and, unless read-only,
exports every step of it there (`--cache-to type=registry,mode=max`), so a stage built once on any machine of a farm
is built by no other: their builds take every step from the cache, and, the builds being reproducible, make the same
image. One cache ref per stage, named by the stage's tag without its namespace, so any namespace shares it:

    <cache>/<stage repo>:<tag>-buildcache     e.g. registry.example.com/ascend-cache/cann:9.1.0-a3-...-arm64-buildcache

These are not release tags: `invoke publish` never writes them, and any of them may be pruned. BuildKit speaks to
the registry with the engine's credentials (`docker login`). A cache that does not answer costs a warning in the
build's log, never the build (`ignore-error`). Images built from test doubles export only to a cache whose name
says so (`test-double` in it)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from ascend_images.stages.names import check_namespace
from ascend_images.stages.stage import Stage

Out = Callable[[str], None]
SUFFIX = "-buildcache"


@dataclass
class StageCache:
    name: str  # REGISTRY[:PORT]/NAMESPACE
    out: Out
    read_only: bool = False  # import only (CI's pull requests: no write access)

    def __post_init__(self) -> None:
        check_namespace(self.name, "--stage-cache")

    def ref(self, stage: Stage) -> str:
        repo, _, tag = stage.tag.rpartition(":")
        return f"{self.name}/{repo.rsplit('/', 1)[-1]}:{tag}{SUFFIX}"

    def exports(self, doubles: str) -> bool:
        """Whether a stage whose test-double label is `doubles` goes to this cache."""
        return not self.read_only and (not doubles or "test-double" in self.name)

    def args(self, stage: Stage, doubles: str) -> list[str]:
        """The buildx flags of a stage's build: import from the cache, and export to it when it may."""
        ref = self.ref(stage)
        flags = ["--cache-from", f"type=registry,ref={ref}"]
        if self.exports(doubles):
            flags += ["--cache-to", f"type=registry,ref={ref},mode=max,oci-mediatypes=true,image-manifest=true,"
                                    "ignore-error=true"]
        elif doubles and not self.read_only:
            self.out(f"note: {stage.tag} is built from test doubles ({doubles}); its steps go only to a stage cache "
                     f"named as such (with test-double in it), not {self.name}")
        return flags
