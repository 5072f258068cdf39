"""`invoke rebuild IMAGE`: is this image what its revision builds (DESIGN 24)? Its labels say which variant it is and
which revision of this repository it was built at; that revision (a worktree of it) builds the same variant again
from nothing (`--no-cache`) on another engine (`--engine`: a build host, or a second dockerd of this one), and
the two images are compared: the same digest, or which layers differ and how (diffoscope)."""

from __future__ import annotations

import dataclasses
import json
import os
import re
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

from ascend_images.checkout import ROOT as CHECKOUT
from ascend_images.cli.options import InputFlags, SourceFlags, output_path
from ascend_images.cli.taskdef import INPUTS, SOURCES, exit_with, run_body, task
from ascend_images.errors import AscendImagesError, SelectionError
from ascend_images.stages.names import LABEL_PREFIX

Out = Callable[[str], None]
REVISION = "org.opencontainers.image.revision"


@task(groups=(SOURCES, INPUTS),
      help={"image": "the image to check: local, or HOST[:PORT]/REPO:TAG (pulled first)",
            "engine": "the engine to rebuild on, not this one (a DOCKER_HOST value: ssh://USER@HOST, "
                      "unix:///PATH, tcp://HOST:PORT); required",
            "from_tree": "rebuild from this checkout as it is, not from the revision the image records (a tree with "
                         "uncommitted changes to the definition records `-dirty`)",
            "work_dir": "where the worktree, logs and the rebuild's contexts go (default: the project's "
                        "build/rebuild)"})
def rebuild(c, sources, inputs, image, engine=None, from_tree=False, work_dir=None):
    """Rebuild an image from nothing at the revision it records, on another engine, and compare digests."""
    exit_with(run_body(rebuild_image, image, sources, inputs, print, engine=engine, from_tree=from_tree,
                       work_dir=run_body(output_path, "--work-dir", work_dir, "build/rebuild")))


def _labels(image: str) -> dict[str, str]:
    found = subprocess.run(["docker", "image", "inspect", image], capture_output=True, text=True)
    if found.returncode != 0:
        pulled = subprocess.run(["docker", "pull", "-q", image], capture_output=True, text=True)
        if pulled.returncode != 0:
            raise SelectionError(f"IMAGE {image}: not on this engine, and pulling it failed: "
                                 f"{pulled.stderr.strip() or pulled.returncode}")
        found = subprocess.run(["docker", "image", "inspect", image], capture_output=True, text=True, check=True)
    (facts,) = json.loads(found.stdout)
    return (facts.get("Config") or {}).get("Labels") or {}


def image_namespace(image: str) -> str:
    """What stands before `/<repo>:<tag>` in an image reference (a registry host included)."""
    name = image.split("@", 1)[0]
    repo = name.rsplit(":", 1)[0] if ":" in name.rsplit("/", 1)[-1] else name
    if "/" not in repo:
        raise SelectionError(f"IMAGE {image}: no namespace before its repository (NAMESPACE/REPO:TAG): ascend-images "
                             "tags every stage under one")
    return repo.rsplit("/", 1)[0]


def selection_argv(labels: dict[str, str], image: str) -> list[str]:
    """The build flags that select the image's variant again, from its labels."""
    def label(key: str) -> str:
        return labels.get(f"{LABEL_PREFIX}.{key}", "")

    needed = ("release", "device", "backend", "os", "arch", "python")
    missing = [f"{LABEL_PREFIX}.{k}" for k in needed if not label(k)]
    if missing:
        raise SelectionError(f"IMAGE {image} is not an ascend-images variant image: no {', '.join(missing)} label")
    argv = [arg for key in needed for arg in (f"--{key}", label(key))]
    for key in ("framework", "profile", "allocator"):
        if label(key) and label(key) != "none":
            argv += [f"--{key}", label(key)]
    for name, value in json.loads(label("user-env") or "{}").items():
        argv += ["--env", f"{name}={value}"]
    return argv


def flag_argv(*groups: object) -> list[str]:
    """The source and input flags given to this command, for the rebuild's own `invoke build`."""
    argv: list[str] = []
    for group in groups:
        for item in dataclasses.fields(group):  # type: ignore[arg-type]
            if item.metadata.get("flag", True) is False:  # how a task spells a flag, not one itself
                continue
            value = getattr(group, item.name)
            flag = f"--{item.name.replace('_', '-')}"
            if value is True:
                argv.append(flag)
            elif isinstance(value, list):
                argv += [arg for one in value for arg in (flag, one)]
            elif value not in (None, False, ""):
                argv += [flag, str(Path(value).absolute()) if item.name.endswith(("_dir", "_bundle", "netrc",
                                                                                  "checksums", "wheelhouse",
                                                                                  "_store")) else value]
    return argv


def _tree(revision: str, from_tree: bool, work_dir: Path) -> Path:
    """The checkout that builds the image again: a worktree of the recorded revision, or this one."""
    if from_tree:
        return CHECKOUT
    if not revision or revision.endswith("-dirty"):
        raise SelectionError(f"the image records {REVISION}={revision or '(none)'}: no commit rebuilds it (built from "
                             "uncommitted changes, or outside a git checkout); --from-tree rebuilds it from this "
                             "checkout as it is")
    known = subprocess.run(["git", "-C", str(CHECKOUT), "cat-file", "-e", f"{revision}^{{commit}}"],
                           capture_output=True)
    if known.returncode != 0:
        raise SelectionError(f"the image records {REVISION}={revision}, which this checkout does not have: `git fetch` "
                             "the repository it was built from")
    tree = work_dir / f"tree-{revision[:12]}"
    if not tree.is_dir():
        work_dir.mkdir(parents=True, exist_ok=True)
        subprocess.run(["git", "-C", str(CHECKOUT), "worktree", "add", "--detach", str(tree), revision],
                       capture_output=True, text=True, check=True)
    return tree


def rebuild_image(image: str, sources: SourceFlags, inputs: InputFlags, out: Out, *, engine: str | None = None,
                  from_tree: bool = False, work_dir: Path = Path("build/rebuild")) -> int:
    from ascend_images.release.reproduce import ImageOn, compare

    if not image.strip():
        raise SelectionError("IMAGE is empty: give the image to check (REPO:TAG, or HOST[:PORT]/REPO:TAG)")
    host = other_engine(engine, image)
    labels = _labels(image)
    argv = selection_argv(labels, image)
    # the image names no namespace (DESIGN 27): the rebuild is tagged as the image was given, so both sides of the
    # comparison carry the name asked about
    namespace = image_namespace(image)
    tree = _tree(labels.get(REVISION, ""), from_tree, work_dir.absolute())
    out(f"rebuilding {image} ({' '.join(argv)}) from {tree} at {labels.get(REVISION) or 'this tree'}, "
        f"with no cache, on {engine}")
    build = subprocess.run(
        [sys.executable, "-m", "invoke", "build", *argv, *flag_argv(sources, inputs), "--namespace", namespace,
         "--no-cache", "--work-dir", str(work_dir.absolute() / "work")],
        cwd=tree, text=True, capture_output=True,
        env={**os.environ, "DOCKER_HOST": host, "PYTHONPATH": str(tree / "src")})
    if build.returncode != 0:
        raise AscendImagesError(f"the rebuild failed (exit {build.returncode}):\n{build.stdout[-3000:]}"
                                f"{build.stderr[-2000:]}")
    found = re.findall(r"^image for \S+: (\S+)$", build.stdout, flags=re.MULTILINE)
    if len(found) != 1:
        raise AscendImagesError(f"the rebuild named no one image:\n{build.stdout[-2000:]}")
    result = compare(ImageOn(image), ImageOn(found[0], host), work_dir)
    out(result.summary())
    return 0 if result.same else 1


def engine_id(host: str | None) -> str:
    """The engine's ID (`docker info`), or an error naming the engine that did not answer."""
    env = {**os.environ, "DOCKER_HOST": host} if host else os.environ
    found = subprocess.run(["docker", "info", "--format", "{{.ID}}"], capture_output=True, text=True, env=env)
    if found.returncode != 0 or not found.stdout.strip():
        raise SelectionError(f"--engine {host}: no Docker engine answers there: "
                             f"{found.stderr.strip() or found.returncode}" if host else
                             f"no Docker engine answers here: {found.stderr.strip() or found.returncode}")
    return found.stdout.strip()


def other_engine(engine: str | None, image: str) -> str:
    """The engine the rebuild runs on: given, answering, and not the one that holds IMAGE (the rebuild is tagged
    under IMAGE's own name, so on this engine it would replace the image it is compared with)."""
    if not engine or not engine.strip():
        raise SelectionError("--engine is required: the engine to rebuild on, another than this one (a DOCKER_HOST "
                             "value: ssh://USER@HOST, unix:///PATH, tcp://HOST:PORT); it needs the OS images the "
                             "variant starts from (`invoke os-image` there)")
    if engine_id(engine) == engine_id(os.environ.get("DOCKER_HOST")):
        raise SelectionError(f"--engine {engine} is the engine that holds {image}: the rebuild, tagged under the "
                             "image's name, would replace it; give another engine")
    return engine
