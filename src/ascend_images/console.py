"""How loud a task is, and what long work shows while it runs (DESIGN 18: stdout carries results, stderr notes and
progress). `-q/--quiet` and `--verbose` mean the same in every task: one process-wide level, set once by the task
wrapper before the task body runs, so no function between the flag and the line that prints has to pass it along.
`Steps` is the one progress mechanism of lint, lock, fetch, publish and bench."""

from __future__ import annotations

import io
import os
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, TextIO

from ascend_images.errors import SelectionError

QUIET, NORMAL, VERBOSE = 0, 1, 2
_level = NORMAL


def configure(quiet: bool = False, verbose: bool = False) -> None:
    global _level
    if quiet and verbose:
        raise SelectionError("--quiet and --verbose contradict each other: pass one of them")
    _level = QUIET if quiet else VERBOSE if verbose else NORMAL


def is_quiet() -> bool:
    return _level == QUIET


def is_verbose() -> bool:
    return _level == VERBOSE


def note(line: str) -> None:
    """A note or a progress line: stderr, nothing with --quiet."""
    if not is_quiet():
        print(line, file=sys.stderr, flush=True)


def progress_stream() -> TextIO:
    """Where progress is drawn: stderr, or nowhere with --quiet."""
    return io.StringIO() if is_quiet() else sys.stderr


_drawing: set[Any] = set()  # live lines on the terminal now: a task that fails mid-step must not leave one behind


def draws_live(stream: TextIO) -> bool:
    """Whether a live line (rich) may be drawn on `stream`: a terminal that takes cursor movement (not TERM=dumb, as
    Emacs' shell and some CI consoles set), and not --quiet. Elsewhere progress is plain lines, no terminal codes."""
    return not is_quiet() and stream.isatty() and os.environ.get("TERM", "") != "dumb"


def live(stream: TextIO, *columns: Any, label: str = "", total: float | None = None) -> Any:
    """A live line drawn by rich on `stream` with these columns and one task (`label`, `total`); stop_live or
    end_live takes it away (transient: it leaves no trace, the caller prints the plain line)."""
    from rich.console import Console
    from rich.progress import Progress

    progress = Progress(*columns, console=Console(file=stream), transient=True)
    progress.add_task(label, total=total)
    progress.start()
    _drawing.add(progress)
    return progress


def end_live(progress: Any) -> None:
    progress.stop()
    _drawing.discard(progress)


def stop_live() -> None:
    """Stop every live line still drawn (rich hides the cursor while it draws). The task wrapper calls it when a
    task ends, however it ends; a step's plain line is not printed then, since the step did not finish."""
    for live in list(_drawing):
        live.stop()
        _drawing.discard(live)


def fmt_seconds(seconds: float) -> str:
    minutes, secs = divmod(int(seconds), 60)
    return f"{minutes}m{secs:02d}s" if minutes else f"{seconds:.1f}s"


class Steps:
    """What a long task is doing and how far it is, on stderr: on a terminal (draws_live) a live line (rich) with the
    step, its number and its time; everywhere one plain line per finished step, e.g. `lock 3/9 NAME (12.3s)`; nothing
    with --quiet. Warnings are counted and the count said by `end()`; --verbose shows each in full as it comes.

    `task` "" leaves the label as the step's name (lint's steps are named, not counted). `live=False` where the task
    draws a live line of its own (fetch's download bar), so two never fight over the terminal's last line."""

    def __init__(self, task: str = "", total: int | None = None, stream: TextIO | None = None,
                 live: bool | None = None):
        self.stream = stream or sys.stderr
        self.task = task
        self.total = total
        self.live = draws_live(self.stream) and live is not False
        self.times: dict[str, float] = {}
        self.warnings: list[str] = []
        self.done = 0
        self._open: tuple[str, float, Any] | None = None
        self._label_open = ""

    def _label(self, name: str) -> str:
        if not self.task:
            return name
        number = f"{self.done + 1}/{self.total}" if self.total else str(self.done + 1)
        return f"{self.task} {number} {name}"

    def begin(self, name: str) -> None:
        """Start a step; the open one, if any, finishes first (for sequential code such as bench's)."""
        self.finish()
        label = self._label(name)
        drawn = None
        if self.live:
            from rich.progress import SpinnerColumn, TextColumn, TimeElapsedColumn

            # transient: the live line gives way to the plain one when the step ends
            drawn = live(self.stream, SpinnerColumn(), TextColumn("{task.description}"), TimeElapsedColumn(),
                         label=label)
        self._open = (name, time.monotonic(), drawn)
        self._label_open = label

    def finish(self, detail: str = "") -> None:
        """End the open step: its plain line, with `detail` (e.g. a size) before the time."""
        if self._open is None:
            return
        name, started, drawn = self._open
        self._open = None
        if drawn is not None:
            end_live(drawn)
        self.times[name] = time.monotonic() - started
        self.done += 1
        if not is_quiet():
            extra = f" {detail}" if detail else ""
            print(f"{self._label_open}{extra} ({fmt_seconds(self.times[name])})", file=self.stream, flush=True)

    @contextmanager
    def step(self, name: str) -> Iterator[dict[str, str]]:
        """One step around a block; the block may set `["detail"]` on what it is given."""
        self.begin(name)
        said = {"detail": ""}
        try:
            yield said
        finally:
            self.finish(said["detail"])

    def warn(self, text: str) -> None:
        """A warning: counted; shown in full with --verbose (the count alone otherwise, by `end`)."""
        self.warnings.append(text)
        if is_verbose():
            print(text, file=self.stream, flush=True)

    def end(self) -> None:
        """Finish the open step and say how many warnings there were (if any)."""
        self.finish()
        if self.warnings and not is_quiet():
            hidden = "" if is_verbose() else " (--verbose shows them)"
            print(f"{self.task or 'done'}: {len(self.warnings)} warning(s){hidden}", file=self.stream, flush=True)
