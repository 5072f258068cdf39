"""One image built by BuildKit: `docker buildx build` on the engine's own builder (buildx's `docker` driver, BuildKit
inside dockerd >= 26), its progress read from `--progress rawjson`.

The image goes straight into the engine's image store, named only when the build has succeeded (so a failed or
interrupted build never moves a tag), with OCI media types on a containerd image store: its id there is the manifest
digest a registry shows once it is pushed. Its file times are the build's SOURCE_DATE_EPOCH already: each step that
writes clamps them itself (clamp-mtimes, DESIGN 24), which costs a step a second; BuildKit's `rewrite-timestamp`
would rewrite every layer of the image at every export instead (46 s against 1 s for the base image here) and, in
0.13, is refused by the image exporter.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

from ascend_images.builder.progress import StageProgress, rawjson_events
from ascend_images.errors import BuildError

# how long buildx gets to cancel its build (and BuildKit to stop the step's container) after Ctrl-C
CANCEL_SECONDS = 30


@dataclass(frozen=True)
class BuildxBuild:
    context: Path
    platform: str  # linux/arm64: the target; the native stages ask for $BUILDPLATFORM themselves
    contexts: dict[str, Path] = field(default_factory=dict)  # named build contexts (the inputs, DESIGN 23)
    secrets: dict[str, Path] = field(default_factory=dict)  # id -> file (never a layer, the history or a cache key)
    args: dict[str, str] = field(default_factory=dict)
    labels: dict[str, str] = field(default_factory=dict)
    source_date_epoch: int | None = None
    no_cache: bool = False
    network: str = "host"  # this machine's builds reach their package mirrors only through the host's network
    target: str | None = None  # a build stage of the Dockerfile (its last by default)
    cache: tuple[str, ...] = ()  # --cache-from / --cache-to flags (the stage cache: builder/stagecache.py)

    def argv(self) -> list[str]:
        argv = ["docker", "buildx", "build", "--progress", "rawjson", "--platform", self.platform,
                "--network", self.network, "--provenance=false", "--sbom=false"]
        for name, path in sorted(self.contexts.items()):
            argv += ["--build-context", f"{name}={path}"]
        for name, path in sorted(self.secrets.items()):
            argv += ["--secret", f"id={name},src={path}"]
        args = dict(self.args)
        if self.source_date_epoch is not None:
            args["SOURCE_DATE_EPOCH"] = str(self.source_date_epoch)
        for name, value in sorted(args.items()):
            argv += ["--build-arg", f"{name}={value}"]
        for name, value in sorted(self.labels.items()):
            argv += ["--label", f"{name}={value}"]
        if self.no_cache:
            argv.append("--no-cache")
        if self.target:
            argv += ["--target", self.target]
        return [*argv, *self.cache, str(self.context)]


class Running:
    """The build's processes, so another thread can stop them (Ctrl-C in a parallel build)."""

    def __init__(self) -> None:
        self.processes: list[subprocess.Popen] = []
        self.lock = threading.Lock()
        self.cancelled = False

    def cancel(self) -> None:
        with self.lock:
            self.cancelled = True
            for process in self.processes:
                with contextlib.suppress(ProcessLookupError):
                    process.send_signal(signal.SIGINT)


def run(build: BuildxBuild, name: str, progress: StageProgress, running: Running | None = None,
        oci: bool = True) -> str:
    """Build and name the image `name`; returns its id. Raises BuildError (with the step and the error BuildKit gave)
    or KeyboardInterrupt (the build cancelled: nothing named)."""
    running = running or Running()
    output = f"type=image,name={name}" + (",oci-mediatypes=true" if oci else "")
    argv = [*build.argv()[:-1], "--output", output, build.argv()[-1]]
    progress.line(" ".join(argv))
    # our own provenance and SBOM are attached at publish time (release/); buildx's would make the image an index
    env = {**os.environ, "BUILDX_NO_DEFAULT_ATTESTATIONS": "1"}
    builder = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env)
    assert builder.stderr is not None
    with running.lock:
        running.processes.append(builder)
    try:
        for item in rawjson_events(_text(builder.stderr)):
            progress.event(item)
        builder.wait()
    except KeyboardInterrupt:
        _stop(builder)
        raise
    finally:
        with running.lock:
            if builder in running.processes:
                running.processes.remove(builder)
    if running.cancelled:
        raise KeyboardInterrupt
    if builder.returncode != 0:
        raise BuildError(progress.error or _last_error(progress) or f"docker buildx build exited {builder.returncode}")
    return name


def _text(stream: IO[bytes]) -> Iterator[str]:
    for chunk in iter(lambda: stream.read1(65536), b""):
        yield chunk.decode("utf-8", "replace")


def _stop(builder: subprocess.Popen) -> None:
    """buildx cancels its build on SIGINT (BuildKit stops the running step's container); give it time, then kill."""
    with contextlib.suppress(ProcessLookupError):
        builder.send_signal(signal.SIGINT)
    try:
        builder.wait(timeout=CANCEL_SECONDS)
    except subprocess.TimeoutExpired:
        builder.kill()
        builder.wait()


def _last_error(progress: StageProgress) -> str:
    lines = [line for line in progress.tail(40).splitlines() if "ERROR" in line or "error:" in line]
    return lines[-1].split("ERROR:", 1)[-1].strip() if lines else ""
