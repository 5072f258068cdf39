"""A registry as the shared stage store (`--stage-cache REGISTRY/NAMESPACE`): a stage is looked up there by its
content key before it is built, pulled instead when present, and pushed after, so each stage of a change is built
once across CI's jobs and a team's build hosts.

    <cache>/<stage repo>:ck-<content key>     e.g. registry.example.com/ascend-cache/cann:ck-3f2a...

These are not release tags: `invoke publish` never writes them, and any of them may be pruned. The engine does the
registry work (its own credentials from `docker login`), so this module asks it: a manifest lookup, a pull, a push.
An unreachable cache is a warning and a local build, never a failure. A pulled stage is checked before use: the key
label is the key asked for, and its layers start with its parent's, so it sits on the parent this plan has. Images
built from test doubles go only to a cache whose name says so (`test-double` in it)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import docker

from ascend_images.stages.names import CONTENT_KEY_LABEL, TEST_DOUBLE_LABEL, check_namespace
from ascend_images.stages.stage import Stage

Out = Callable[[str], None]
TAG_PREFIX = "ck-"


@dataclass
class StageCache:
    name: str  # REGISTRY[:PORT]/NAMESPACE
    client: docker.DockerClient
    out: Out
    read_only: bool = False  # pull only (CI's pull requests: no write access)

    def __post_init__(self) -> None:
        check_namespace(self.name, "--stage-cache")

    def ref(self, stage: Stage, key: str) -> tuple[str, str]:
        """(repository, tag) of a stage in the cache."""
        return f"{self.name}/{stage.repo.rsplit('/', 1)[-1]}", f"{TAG_PREFIX}{key}"

    def _has(self, repo: str, tag: str) -> bool | None:
        """True / False, or None when the cache does not answer."""
        try:
            self.client.api.inspect_distribution(f"{repo}:{tag}")
            return True
        except docker.errors.NotFound:
            return False
        except docker.errors.APIError as exc:
            text = str(exc).lower()
            if "manifest unknown" in text or "not found" in text or "404" in text:
                return False
            self.out(f"warning: stage cache {self.name} does not answer ({exc.explanation or exc}); building locally")
            return None

    def pull(self, stage: Stage, key: str, platform: str, parent_id: str, label: str) -> str | None:
        """The image id of the stage pulled from the cache and checked, or None (absent, unreachable or not the
        stage this plan needs: then it is built)."""
        repo, tag = self.ref(stage, key)
        if not self._has(repo, tag):
            return None
        self.out(f"{label} {stage.tag}: pulling {repo}:{tag} from the stage cache")
        try:
            self.client.api.pull(repo, tag=tag, platform=platform)
            image = self.client.api.inspect_image(f"{repo}:{tag}")
            parent = self.client.api.inspect_image(parent_id)
        except docker.errors.APIError as exc:
            self.out(f"warning: {repo}:{tag} could not be pulled ({exc.explanation or exc}); building locally")
            return None
        labels = image["Config"].get("Labels") or {}
        layers, below = image["RootFS"].get("Layers", []), parent["RootFS"].get("Layers", [])
        problem = None
        if labels.get(CONTENT_KEY_LABEL) != key:
            problem = f"its content key is {labels.get(CONTENT_KEY_LABEL)}, not {key}"
        elif layers[:len(below)] != below:
            problem = "it is not built on the parent image this plan has"
        if problem:
            self.out(f"warning: {repo}:{tag} from the stage cache is refused: {problem}; building locally")
            self.client.api.remove_image(f"{repo}:{tag}", noprune=False)
            return None
        return image["Id"]

    def push(self, stage: Stage, key: str, image_id: str) -> None:
        """Put the stage in the cache unless it is there already; a failure only warns."""
        if self.read_only:
            return
        repo, tag = self.ref(stage, key)
        labels = self.client.api.inspect_image(image_id)["Config"].get("Labels") or {}
        if labels.get(TEST_DOUBLE_LABEL) and "test-double" not in self.name:
            self.out(f"warning: {stage.tag} is built from test doubles ({labels[TEST_DOUBLE_LABEL]}); it goes only to "
                     f"a stage cache named as such (with test-double in it), not {self.name}")
            return
        if self._has(repo, tag) is not False:
            return
        self.client.api.tag(image_id, repo, tag, force=True)
        errors = [chunk.get("error") for chunk in self.client.api.push(repo, tag=tag, stream=True, decode=True)
                  if chunk.get("error")]
        if errors:
            self.out(f"warning: pushing {repo}:{tag} to the stage cache failed: {errors[-1]}")
        else:
            self.out(f"  {stage.tag}: pushed to the stage cache as {repo}:{tag}")
