"""A plan as a buildx bake definition (DESIGN 23, 25): one target per stage, each over its parent target (a named
context that replaces the parent's name in FROM), so `docker buildx bake` builds a variant and the stages below it
with no code of ours, in the order and parallelism BuildKit chooses. `invoke build` writes its plan's definition with
this writer and runs it; `rendered/docker-bake.json` is the same writer's output for what CI builds and publishes.

What a build is given comes in as bake variables (each also an environment variable of the same name):
- NAMESPACE: `[REGISTRY/]NAMESPACE` of every tag (the images themselves name none: DESIGN 27);
- PUSH: `true` pushes every stage to NAMESPACE's registry (a builder whose images do not land in an engine);
- CACHE: `REGISTRY/NAMESPACE` of a registry cache (`type=registry,mode=max`, one ref per target), "" for none;
  CACHE_READ_ONLY=true imports from it and exports nothing (pull requests);
- CONTEXTS: where the stages' contexts are (rendered/ for the committed file);
- BAKE_INPUTS: each target's named contexts `wheels`, `cann`, `artifacts` are `<BAKE_INPUTS>/<target>/<name>`, which
  `invoke fetch --bake-inputs DIR` lays out with exactly the files the target's Dockerfile names, as `invoke build`
  does (a mount's content is part of its step's cache key: a whole wheel store would change every key as it grows);
- SOURCE_DATE_EPOCH and CREATED (the matrix release's date), REVISION (the commit the images are of: the last one
  that changed the build definition, `git log -1 --format=%H -- <checkout.BUILD_DEFINITION>`), INSTALLER_BASE (the
  native stages' base image), NETWORK.
The sha256 of each download PyPI does not carry is a build arg of its target with pins.yaml's as its default (`--set
TARGET.args.SHA256_<FILE>=...` builds from other files, which the image's labels then name). Secrets (an extra CA
bundle, a pip config, a netrc, the OS mirror) are `--set TARGET.secrets=id=ca,src=FILE`."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ascend_images import DEFAULT_NAMESPACE
from ascend_images.inputs.sources import Sources
from ascend_images.stages.plan import BuildPlan
from ascend_images.stages.record import StageRecord
from ascend_images.stages.render import Renderer
from ascend_images.stages.stage import Stage

# the directory of every target's named contexts, as `invoke fetch --bake-inputs` leaves it
INPUTS_VARIABLE = "BAKE_INPUTS"
INPUTS_DEFAULT = "build/bake-inputs"
CONTEXTS_VARIABLE = "CONTEXTS"
# the registry cache: a ref per target, under CACHE, both ways unless CACHE_READ_ONLY
_CACHE_ON = 'CACHE != ""'
_CACHE_WRITE = 'CACHE != "" && CACHE_READ_ONLY != "true"'


def target_name(stage: Stage) -> str:
    """A bake target's name (letters, digits, `-` and `_`): the stage's directory name in rendered/."""
    return re.sub(r"[^A-Za-z0-9_-]", "_", stage.slug)


def _cache(condition: str, entry: str) -> str:
    """A list attribute that holds `entry` when `condition` holds, else nothing (an HCL expression: bake reads the
    JSON file's strings as templates)."""
    return f'${{{condition} ? [{_quoted(entry)}] : []}}'


def _quoted(text: str) -> str:
    return '"' + text.replace('"', '\\"') + '"'


def bake_file(plan: BuildPlan, records: Mapping[str, StageRecord], epoch: int, created: str, installer_base: str,
              groups: Mapping[str, list[Stage]] | None = None) -> dict[str, Any]:
    """The bake definition of `plan`: `records` holds each stage's record, by slug (its named contexts and build
    args). Its default group is the plan's variant images; `groups` adds named ones (their top stages)."""
    targets: dict[str, Any] = {}
    for stage in plan.stages:
        record = records[stage.slug]
        name = target_name(stage)
        contexts = {context: f"${{{INPUTS_VARIABLE}}}/{name}/{context}" for context in sorted(record.contexts)}
        if stage.parent is not None:
            contexts[stage.parent_ref] = f"target:{target_name(stage.parent)}"
        args = {"SOURCE_DATE_EPOCH": "${SOURCE_DATE_EPOCH}"}
        if record.installer_base is not None:
            args["INSTALLER_BASE"] = "${INSTALLER_BASE}"
        cache = f"type=registry,ref=${{CACHE}}/{name}:buildcache"
        targets[name] = {
            "context": f"${{{CONTEXTS_VARIABLE}}}/{stage.slug}",
            "dockerfile": "Dockerfile",
            "contexts": contexts,
            "args": args,
            "platforms": [stage.variant.arch_spec.docker_platform],
            "tags": [f"${{NAMESPACE}}/{stage.name}"],
            "labels": {"org.opencontainers.image.created": "${CREATED}",
                       "org.opencontainers.image.revision": "${REVISION}"},
            "network": "${NETWORK}",
            # buildx's own provenance names the build's time and host (and makes the image an index): ours is
            # attached at publish time (release/), from the image
            "attest": ["type=provenance,disabled=true", "type=sbom,disabled=true"],
            # OCI media types: on a containerd image store the image's id is then the manifest digest a registry
            # shows once it is pushed (DESIGN 24)
            "output": ["type=image,oci-mediatypes=true,push=${PUSH}"],
            "cache-from": _cache(_CACHE_ON, cache),
            "cache-to": _cache(_CACHE_WRITE, f"{cache},mode=max,oci-mediatypes=true,image-manifest=true,"
                                             "ignore-error=true"),
        }
    named = {"default": list(plan.tops.values()), **(groups or {})}
    return {
        "variable": {
            "NAMESPACE": {"default": DEFAULT_NAMESPACE},
            "PUSH": {"default": "false"},
            "CACHE": {"default": ""},
            "CACHE_READ_ONLY": {"default": "false"},
            CONTEXTS_VARIABLE: {"default": "rendered"},
            INPUTS_VARIABLE: {"default": INPUTS_DEFAULT},
            "SOURCE_DATE_EPOCH": {"default": str(epoch)},
            "CREATED": {"default": created},
            "REVISION": {"default": ""},
            "INSTALLER_BASE": {"default": installer_base},
            "NETWORK": {"default": "default"},
        },
        "group": {group: {"targets": sorted({target_name(top) for top in tops})} for group, tops in named.items()},
        "target": targets,
    }


@dataclass(frozen=True)
class RenderedStage:
    record: StageRecord
    dockerfile: str


def render_plan(plan: BuildPlan, sources: Sources, out_dir: Path | None = None, header: str = "",
                renderer: Renderer | None = None) -> dict[str, RenderedStage]:
    """Every stage's record and Dockerfile, by slug, all rendered in memory first (a missing download or stale lock
    fails before any file is touched); with `out_dir`, each stage's context is then written under `out_dir/<slug>`."""
    renderer = renderer or Renderer()
    rendered = {}
    for stage in plan.stages:
        record = renderer.record(stage, sources)
        rendered[stage.slug] = RenderedStage(record, header + renderer.render_text(stage, record))
    if out_dir is not None:
        for stage in plan.stages:
            renderer.write(stage, out_dir, rendered[stage.slug].record, rendered[stage.slug].dockerfile)
    return rendered
