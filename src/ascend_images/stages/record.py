"""What rendering a stage gives its build (DESIGN 23): one frozen record. Jinja renders the stage's Dockerfile from
it, and the bake writer (stages/bake.py), the workspace and `invoke fetch --bake-inputs` (builder/stageinputs.py) read
it: its named contexts with the files each must hold, the wheel-store files it installs and the indexes that serve
them, its build args with their defaults, its labels and the secrets its steps may mount. No one parses a rendered
Dockerfile for them.

A stage's render fills a StageInputs as it goes (stages/contexts.py: every download and wheel-store file it names
goes through it), then freezes it into the record."""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from ascend_images.inputs.sources import INPUTS_DIR, Artifact
from ascend_images.inputs.wheelstore import stored_files

# The named build contexts a stage's RUN steps bind-mount read-only under INPUTS_DIR (the host's wheel store, CANN
# directory and artifacts, each holding exactly the stage's own files), and the secrets they may mount (an extra CA
# bundle, the pip config, a netrc, the OS mirror), which reach no layer, history or cache key (DESIGN 5)
NAMED_CONTEXTS = ("wheels", "cann", "artifacts")
SECRETS = ("ca", "pip-conf", "netrc", "os-mirror")


def store_url(sha256: str) -> str:
    """A file of the wheel store as the builds take it: the store's directory for that sha256, in the named build
    context `wheels` (fetch takes the one file there, and checks it)."""
    return f"{INPUTS_DIR}/wheels/{sha256}"


def pin_arg(file: str) -> str:
    """The build arg that holds a download's sha256 (pins.yaml's, or the local file's): its default is rendered into
    the Dockerfile, and a build of the committed Dockerfiles from other files (bake: `--set TARGET.args.NAME=...`)
    names what it installs instead, which its labels then record."""
    return "SHA256_" + re.sub(r"[^A-Za-z0-9]+", "_", file).strip("_").upper()


@dataclass(frozen=True)
class StageRecord:
    slug: str
    template: Mapping[str, Any]  # the stage's own template variables (its kind's part and every stage's)
    files: Mapping[str, bytes]  # its build context's files beside the Dockerfile
    # each named context its steps mount -> the paths it holds (wheels: sha256 directories)
    contexts: Mapping[str, tuple[str, ...]]
    wanted: tuple[str, ...]  # the wheel store's files it installs: `name==version --hash=sha256:...`
    indexes: tuple[str, ...]  # where beside the pip indexes those files are (x86_64's torch: its CPU index)
    download_args: Mapping[str, str]  # SHA256_<FILE> -> the download's sha256 (pins.yaml's, or the local file's)
    switches: Mapping[str, str]  # the build's switches: a build arg each, with its default
    installer_base: str | None  # INSTALLER_BASE's default where its native stages start FROM it, else None
    labels: Mapping[str, str]
    secrets: tuple[str, ...] = SECRETS

    def variables(self) -> dict[str, Any]:
        """What Jinja renders the Dockerfile from."""
        return {**self.template, "download_args": dict(self.download_args), "build_args": dict(self.switches),
                "labels": dict(self.labels)}


@dataclass
class StageInputs:
    """What a stage's render collects for its build beside the template's variables, frozen into its record."""

    paths: dict[str, set[str]] = field(default_factory=lambda: {name: set() for name in NAMED_CONTEXTS})
    wanted: list[str] = field(default_factory=list)
    indexes: list[str] = field(default_factory=list)
    download_args: dict[str, str] = field(default_factory=dict)
    switches: dict[str, str] = field(default_factory=dict)

    def wheel(self, sha256: str) -> str:
        """A wheel-store file the Dockerfile names by its sha256: its path in the `wheels` context."""
        self.paths["wheels"].add(sha256)
        return store_url(sha256)

    def download(self, artifact: Artifact) -> dict[str, str]:
        """A download PyPI does not carry, as the templates take it: its path in its named context, and its sha256
        as a build arg the Dockerfile declares with its default."""
        arg = pin_arg(artifact.file)
        self.download_args[arg] = artifact.sha256
        mount, _, rel = artifact.url.removeprefix(f"{INPUTS_DIR}/").partition("/")
        if artifact.url.startswith(f"{INPUTS_DIR}/") and mount in self.paths:
            self.paths[mount].add(rel)
        return {"file": artifact.file, "url": artifact.url, "sha256": artifact.sha256, "arg": arg}

    def spec(self, artifact: Artifact) -> str:
        """`PATH#SHA256` as fetch and the build scripts take it: a wheel-store file's own sha256, a download's build
        arg."""
        if artifact.url.startswith(store_url("")):
            return f"{self.wheel(artifact.url.removeprefix(store_url('')))}#{artifact.sha256}"
        item = self.download(artifact)
        return f"{item['url']}#${{{item['arg']}}}"

    def want(self, lines: Iterable[str]) -> None:
        self.wanted.extend(lines)

    def switch(self, name: str, default: str) -> None:
        self.switches[name] = default

    def freeze(self, slug: str, template: Mapping[str, Any], files: Mapping[str, bytes], installer_base: str | None,
               labels: Mapping[str, str]) -> StageRecord:
        paths = {**self.paths, "wheels": self.paths["wheels"] | {f.sha256 for f in stored_files(self.wanted)}}
        # a stage's native stages (those of a kind with a lock: INSTALLER_BASE) mount the wheel store and the
        # artifacts whatever they hold; any other context is mounted where the stage names a file of it
        native = ("wheels", "artifacts") if installer_base is not None else ()
        contexts = {name: tuple(sorted(paths[name])) for name in NAMED_CONTEXTS if paths[name] or name in native}
        return StageRecord(slug, dict(template), dict(files), contexts, tuple(self.wanted), tuple(self.indexes),
                           dict(self.download_args), dict(self.switches), installer_base, dict(labels))
