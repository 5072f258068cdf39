"""One `docker buildx bake` of a written definition, on whichever BuildKit builder is named: its progress read from
`--progress rawjson` (progress.BakeProgress, a log per target), what each target made from `--metadata-file`.

BuildKit orders the targets, builds what two share once, takes what it can from its cache and names each image only
when its target has finished, so a failed or interrupted target never moves a tag. Ctrl-C (SIGINT to our process
group, as a terminal sends it) is ours to handle: buildx runs in a process group of its own, is told once, and given
CANCEL_SECONDS to stop its build before it is killed; it also gets SIGINT if this process dies (PR_SET_PDEATHSIG),
so no buildx outlives the build it ran.
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import os
import signal
import subprocess
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from ascend_images.builder.progress import BakeProgress, rawjson_events
from ascend_images.errors import BuildError, Interrupted

CANCEL_SECONDS = 30  # how long buildx gets to cancel its build (and BuildKit to stop a step's container)
_PR_SET_PDEATHSIG = 1


@dataclass(frozen=True)
class BakeCommand:
    files: tuple[Path, ...]  # the definition, then the build's own overrides (secrets, outputs)
    targets: tuple[str, ...]
    variables: dict[str, str]  # the definition's variables, given as bake takes them: the environment
    metadata: Path  # where buildx writes what each target made
    builder: str | None = None  # None: buildx's choice (BUILDX_BUILDER, else the current one)
    no_cache: bool = False
    context: str | None = None  # the docker context to build from (a `docker` driver builder of another context)

    def argv(self) -> list[str]:
        argv = ["docker", *(["--context", self.context] if self.context else []), "buildx", "bake",
                "--progress", "rawjson", "--metadata-file", str(self.metadata)]
        if self.builder and not self.context:
            argv += ["--builder", self.builder]
        for path in self.files:
            argv += ["-f", str(path)]
        if self.variables.get("NETWORK") == "host":  # the definition's targets ask for it: granted, as buildx wants
            argv += ["--allow", "network.host"]
        if self.no_cache:
            argv.append("--no-cache")
        return [*argv, *self.targets]


@dataclass
class BakeOutcome:
    returncode: int
    interrupted: bool
    metadata: dict[str, dict[str, Any]] = field(default_factory=dict)  # target -> what buildx says it made


def _die_with_parent() -> None:
    """In the child, before exec: SIGINT when the parent dies, however it dies (kill -9 included)."""
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGINT)


class _Cancel:
    """Tells buildx once to cancel (SIGINT), and kills it if it has not exited CANCEL_SECONDS later, or at a second
    Ctrl-C."""

    def __init__(self, process: subprocess.Popen):
        self.process = process
        self.told = False
        self._timer: threading.Timer | None = None

    def __call__(self, *_: object) -> None:
        if self.told:
            self._kill()
            return
        self.told = True
        with contextlib.suppress(ProcessLookupError):
            self.process.send_signal(signal.SIGINT)
        self._timer = threading.Timer(CANCEL_SECONDS, self._kill)
        self._timer.daemon = True
        self._timer.start()

    def _kill(self) -> None:
        with contextlib.suppress(ProcessLookupError):
            self.process.kill()

    def done(self) -> None:
        if self._timer is not None:
            self._timer.cancel()


@contextlib.contextmanager
def _sigint_told(cancel: _Cancel) -> Iterator[None]:
    """While buildx runs, SIGINT to us is told to it (it cancels its build and exits), not raised here: what it says
    until it exits is still read and logged. Off the main thread (no handler can be set there), a KeyboardInterrupt
    in the read loop does the same."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(signal.SIGINT, cancel)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)


def _text(stream: IO[bytes]) -> Iterator[str]:
    for chunk in iter(lambda: stream.read1(65536), b""):
        yield chunk.decode("utf-8", "replace")


def run(command: BakeCommand, progress: BakeProgress) -> BakeOutcome:
    """Run the bake to its end (or its cancellation) and say how it ended."""
    argv = command.argv()
    progress.log.line(" ".join(argv))
    # our own provenance and SBOM are attached at publish time (release/); buildx's would make each image an index
    env = {**os.environ, **command.variables, "BUILDX_NO_DEFAULT_ATTESTATIONS": "1"}
    if command.context:  # the context names the engine: DOCKER_HOST would override it
        env.pop("DOCKER_HOST", None)
    try:
        process = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env,
                                   process_group=0, preexec_fn=_die_with_parent)
    except FileNotFoundError:
        raise BuildError("no `docker` command on PATH: install the Docker CLI with its buildx plugin") from None
    assert process.stderr is not None
    cancel = _Cancel(process)
    with _sigint_told(cancel):
        while True:
            try:
                for item in rawjson_events(_text(process.stderr)):
                    progress.event(item)
                process.wait()
                break
            except KeyboardInterrupt:  # off the main thread, or a second Ctrl-C: told (once), then read on
                cancel()
    cancel.done()
    metadata = {}
    if command.metadata.is_file():
        with contextlib.suppress(json.JSONDecodeError):
            metadata = json.loads(command.metadata.read_text(encoding="utf-8"))
    return BakeOutcome(process.returncode, cancel.told, metadata)


__all__ = ["CANCEL_SECONDS", "BakeCommand", "BakeOutcome", "Interrupted", "run"]
