"""Progress for long builds: which stage of how many, the current step, elapsed time; and the
full log of each stage on disk. The step and heartbeat lines are progress, so they go to stderr (console.note:
nothing with --quiet); what became of each stage (built, reused, pulled) and the image tags stay the build's
results on stdout."""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TextIO

from ascend_images.console import fmt_seconds, note

__all__ = ["HEARTBEAT_SECONDS", "StageProgress", "fmt_seconds", "printer"]
HEARTBEAT_SECONDS = 20.0
LOG_MARK = "[ascend-images]"  # a line of ours in a stage's log, among the engine's


@dataclass
class StageProgress:
    label: str  # e.g. "[3/7 cann-install ascend-images/cann-install:...]"
    log_path: Path
    out: Callable[[str], None] = note
    started: float = field(default_factory=time.monotonic)
    step: str = ""
    last_line: str = ""
    _last_print: float = field(default_factory=time.monotonic)
    _log: TextIO | None = None

    def __enter__(self) -> StageProgress:
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        self._log = self.log_path.open("w", encoding="utf-8")
        return self

    def __exit__(self, *exc: object) -> None:
        if self._log:
            self._log.write(f"{LOG_MARK} {fmt_seconds(self.elapsed)}: stage ended\n")
            self._log.close()

    @property
    def elapsed(self) -> float:
        return time.monotonic() - self.started

    def line(self, text: str) -> None:
        """One line of builder output: logged always, shown when it starts a step or on a heartbeat."""
        assert self._log is not None
        stripped = text.strip()
        starts_step = stripped.startswith("Step ") and " : " in stripped
        if starts_step:
            # the engine's log says no time: where a stage spent its minutes is read off these lines
            self._log.write(f"{LOG_MARK} {fmt_seconds(self.elapsed)}: {stripped.split(' : ', 1)[0].lower()}\n")
        self._log.write(text + "\n")
        self._log.flush()
        if not stripped:
            return
        now = time.monotonic()
        if starts_step:
            self.step = stripped.split(" : ", 1)[0].removeprefix("Step ")
            self.out(f"{self.label} step {self.step} ({fmt_seconds(self.elapsed)}): "
                     f"{_short(stripped.split(' : ', 1)[1])}")
            self._last_print = now
        elif now - self._last_print >= HEARTBEAT_SECONDS:
            self.out(f"{self.label} step {self.step or '?'} still running ({fmt_seconds(self.elapsed)}): "
                     f"{_short(stripped)}")
            self._last_print = now
        self.last_line = stripped

    def tail(self, lines: int = 25) -> str:
        text = self.log_path.read_text(encoding="utf-8", errors="replace").splitlines()
        return "\n".join(text[-lines:])


def _short(text: str, width: int = 110) -> str:
    text = " ".join(text.split())
    return text if len(text) <= width else text[: width - 1] + "…"


def printer(stream: TextIO = sys.stdout) -> Callable[[str], None]:
    def out(text: str) -> None:
        print(text, file=stream, flush=True)

    return out
