"""How loud a task is: `-q/--quiet` and `--verbose` mean the same in every task (DESIGN 18: stdout carries results,
stderr notes and progress). One process-wide level, set once by the task wrapper before the task body runs, so no
function between the flag and the line that prints has to pass it along."""

from __future__ import annotations

import io
import sys
from typing import TextIO

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
