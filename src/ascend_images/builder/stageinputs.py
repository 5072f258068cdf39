"""What a stage's build is given besides its context (DESIGN 5, 23): its named build contexts and the secrets.

- Named contexts (`wheels`, `cann`, `artifacts`), bind-mounted read-only into the RUN steps that use them: each holds
  exactly the files the stage's Dockerfile names (hard links into the host's wheel store, CANN directory, artifacts
  directory; a copy where a link cannot be made). A mount's content is part of its step's cache key, so a stage sees
  only its own files: another stage's wheel arriving in the store never invalidates its cache.
- Secrets (`ca`, `pip-conf`, `netrc`, `os-mirror`): files of this process only (a 0700 directory), removed when the
  build ends; BuildKit mounts them as tmpfs files for one RUN step, so they reach no layer, no history, no cache key.

The named contexts are laid out one directory per bake target, by `invoke build` and by `invoke fetch --bake-inputs`
alike, from each stage's record (stages/record.py: what its render names in each context); the secrets go to a
scratch directory of the build's own, removed with it.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Callable, Mapping
from pathlib import Path

from ascend_images.errors import BuildError
from ascend_images.inputs.sources import INPUTS_DIR, BuildInputs, Sources
from ascend_images.inputs.wheelstore import WheelStore, stored_files
from ascend_images.stages.bake import target_name
from ascend_images.stages.plan import BuildPlan
from ascend_images.stages.record import StageRecord


def _link(source: Path, target: Path) -> None:
    target.parent.mkdir(parents=True, exist_ok=True)
    try:
        os.link(source, target)
    except OSError:  # another filesystem, or one without hard links
        shutil.copyfile(source, target)


def _secret(directory: Path, name: str, data: bytes) -> Path:
    path = directory / name
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "wb") as handle:
        handle.write(data)
    return path


def secret_documents(inputs: BuildInputs) -> dict[str, bytes]:
    """The secrets a build is given: those the flags set (the CA bundle, credentials, the OS mirror) and the pip
    config (index, extra indexes, trusted hosts, offline)."""
    documents = {"pip-conf": inputs.pip_conf().encode()}
    if inputs.ca_bundle is not None:
        documents["ca"] = inputs.ca_bundle.read_bytes()
    netrc = inputs.netrc_text()
    if netrc is not None:
        documents["netrc"] = netrc
    mirror = inputs.os_mirror_document()
    if mirror is not None:
        documents["os-mirror"] = mirror
    return documents


def lay_out_contexts(record: StageRecord, sources: Sources, store: WheelStore, directory: Path) -> dict[str, Path]:
    """The stage's named contexts, each a directory `directory/<name>` holding exactly the files its record names
    there (hard links): the wheel store's files by their sha256, the CANN directory's and the artifacts' by name."""
    contexts: dict[str, Path] = {}
    for name, paths in record.contexts.items():
        into = directory / name
        into.mkdir(parents=True)
        contexts[name] = into
        if name == "wheels":
            for sha256 in paths:
                found = store.path(sha256)
                if found is None:
                    raise BuildError(f"the wheel store ({store.root}) has no file with sha256 {sha256}, which "
                                     "the stage names: fill it first (invoke fetch)")
                _link(found, into / sha256 / found.name)
            continue
        source = sources.cann.directory or sources.cann.cache if name == "cann" else \
            sources.artifacts.directory or sources.artifacts.cache
        for rel in paths:
            if source is None or not (source / rel).is_file():
                raise BuildError(f"the build names {INPUTS_DIR}/{name}/{rel}, and no local directory holds it "
                                 f"({'--cann-dir' if name == 'cann' else '--artifacts-dir'}, or `invoke fetch`)")
            _link(source / rel, into / rel)
    return contexts


def write_secrets(inputs: BuildInputs, directory: Path) -> dict[str, Path]:
    """The secrets the build was given, each a file of this process only under `directory` (made 0700), for as long
    as the build runs: BuildKit mounts them as tmpfs files for one RUN step, so they reach no layer, no history and
    no cache key."""
    directory.mkdir(mode=0o700, parents=True)
    return {name: _secret(directory, name, data) for name, data in secret_documents(inputs).items()}


def lay_out_bake_inputs(plan: BuildPlan, records: Mapping[str, StageRecord], sources: Sources, store: WheelStore,
                        root: Path, login: Callable[[str], str] = str) -> list[Path]:
    """Each stage's named contexts under `root/<bake target>/<name>`, as the bake definition takes them
    (BAKE_INPUTS): exactly the files its Dockerfile names, so the steps that mount them have the same cache keys in
    every build of the same inputs. The stage's locked files are fetched into the store first when it lacks them
    (`login` adds an index's credentials to its URL). Each target's directory is written beside it and renamed into
    place, replacing what an earlier build left (the same paths each time: BuildKit sends again only what changed).
    Returns the targets' directories."""
    root.mkdir(parents=True, exist_ok=True)
    laid_out = []
    for stage in plan.stages:
        record = records[stage.slug]
        store.ensure(stored_files(record.wanted), [login(url) for url in record.indexes])
        target = root / target_name(stage)
        scratch = Path(tempfile.mkdtemp(prefix=f".{target.name}-", dir=root))
        try:
            lay_out_contexts(record, sources, store, scratch)
            shutil.rmtree(target, ignore_errors=True)
            scratch.rename(target)
        finally:
            shutil.rmtree(scratch, ignore_errors=True)
        laid_out.append(target)
    return laid_out
