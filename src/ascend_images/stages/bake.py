"""A plan as a buildx bake file (DESIGN 23): one target per stage, each over its parent target (a named context that
replaces the parent's image reference), so `docker buildx bake -f rendered/docker-bake.json TARGET` builds a variant
and the stages below it with no code of ours, in the order and parallelism BuildKit chooses.

What a build is given comes in as bake variables (each also an environment variable of the same name) or `--set`:
where the build inputs are (BAKE_INPUTS: each target's named contexts `wheels`, `cann`, `artifacts` are the
directories `<BAKE_INPUTS>/<target>/<name>`, which `invoke fetch --bake-inputs DIR` lays out with exactly the files
the target's Dockerfile names, as `invoke build` gives them: a mount's content is part of its step's cache key, so a
whole wheel store would make every stage's key change with each wheel added to it, and bake would share no cache
with `invoke build`), SOURCE_DATE_EPOCH (the matrix release's date), the native stages' base image, the network.
The sha256 of each download PyPI does not carry is a build arg of its target with pins.yaml's as its default (`--set
TARGET.args.SHA256_<FILE>=...` builds from other files, which the image's labels then name). Secrets (an extra CA
bundle, a pip config, a netrc, the OS mirror) are `--set TARGET.secrets=id=ca,src=FILE`."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from ascend_images.stages.plan import BuildPlan
from ascend_images.stages.render import NAMED_CONTEXTS
from ascend_images.stages.stage import Stage

# the directory of every target's named contexts, as `invoke fetch --bake-inputs` leaves it
INPUTS_VARIABLE = "BAKE_INPUTS"
INPUTS_DEFAULT = "build/bake-inputs"
_MOUNTED = re.compile(r"--mount=type=bind,from=(?P<name>[\w-]+),")


def target_name(stage: Stage) -> str:
    """A bake target's name (letters, digits, `-` and `_`): the stage's directory name in rendered/."""
    return re.sub(r"[^A-Za-z0-9_-]", "_", stage.slug)


def bake_file(plan: BuildPlan, dockerfiles: Mapping[str, str], context_root: str, epoch: int, created: str,
              installer_base: str) -> dict[str, Any]:
    """The bake definition of `plan`: `dockerfiles` maps each stage's slug to its Dockerfile (what it mounts decides
    its contexts), `context_root` is where the stages' contexts are, relative to where bake runs."""
    targets: dict[str, Any] = {}
    for stage in plan.stages:
        dockerfile = dockerfiles[stage.slug]
        mounted = sorted({m["name"] for m in _MOUNTED.finditer(dockerfile)} & set(NAMED_CONTEXTS))
        contexts = {name: f"${{{INPUTS_VARIABLE}}}/{target_name(stage)}/{name}" for name in mounted}
        if stage.parent is not None:
            contexts[stage.parent.tag] = f"target:{target_name(stage.parent)}"
        args = {"SOURCE_DATE_EPOCH": "${SOURCE_DATE_EPOCH}"}
        if "ARG INSTALLER_BASE=" in dockerfile:
            args["INSTALLER_BASE"] = "${INSTALLER_BASE}"
        targets[target_name(stage)] = {
            "context": f"{context_root}/{stage.slug}",
            "dockerfile": "Dockerfile",
            "contexts": contexts,
            "args": args,
            "platforms": [stage.variant.arch_spec.docker_platform],
            "tags": [stage.tag],
            "labels": {"org.opencontainers.image.created": "${CREATED}"},
            "network": "${NETWORK}",
            # buildx's own provenance names the build's time and host (and makes the image an index): ours is
            # attached at publish time (release/), from the image
            "attest": ["type=provenance,disabled=true", "type=sbom,disabled=true"],
        }
    tops = sorted({target_name(top) for top in plan.tops.values()})
    return {
        "variable": {
            INPUTS_VARIABLE: {"default": INPUTS_DEFAULT},
            "SOURCE_DATE_EPOCH": {"default": str(epoch)},
            "CREATED": {"default": created},
            "INSTALLER_BASE": {"default": installer_base},
            "NETWORK": {"default": "default"},
        },
        "group": {"default": {"targets": tops}},
        "target": targets,
    }
