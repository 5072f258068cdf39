"""Progress for long builds: which stage of how many, the current step, elapsed time; and the full log of each stage
on disk. BuildKit reports a build as vertices (one per Dockerfile step and per internal job) with their start, end,
cache state, error and output; buildx's `--progress rawjson` streams that record as JSON objects, which `StageProgress`
turns into the stage's log (numbered like buildx's plain output: `#7 [packages 3/5] RUN ...`, `#7 0.52 output`, `#7
DONE 3.1s`) and into step and heartbeat lines. Those go to stderr (console.note: nothing with --quiet); what became of
each stage (built, reused, pulled) and the image tags stay the build's results on stdout."""

from __future__ import annotations

import base64
import datetime as dt
import json
import re
import sys
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

from ascend_images.console import fmt_seconds, note

__all__ = ["HEARTBEAT_SECONDS", "BakeProgress", "StageProgress", "fmt_seconds", "printer", "rawjson_events"]
HEARTBEAT_SECONDS = 20.0
LOG_MARK = "[ascend-images]"  # a line of ours in a stage's log, among the engine's
# a Dockerfile step's vertex: `[stage n/m] INSTRUCTION ...` (`[n/m]` when the Dockerfile has one unnamed stage)
EXPORTING = "exporting to "  # the last vertex of a target: its image named (or pushed, or loaded)
STEP = re.compile(r"^\[(?:(?P<stage>[^\]\s]+) )?(?P<n>\d+)/(?P<m>\d+)\] (?P<what>.*)$", re.DOTALL)


def _counted(name: str) -> bool:
    """Whether a vertex is a step that runs or comes from a cache: a FROM only resolves its image (never CACHED,
    whatever the cache holds), so a stage made wholly from a cache would count one step run."""
    step = STEP.match(name)
    return bool(step) and not step["what"].startswith("FROM ")


def rawjson_events(stream: Iterable[str]) -> Iterator[dict[str, Any] | str]:
    """The JSON objects of buildx's `--progress rawjson` (concatenated, pretty-printed) as dicts, and any other text
    it writes between them (its final `ERROR: ...`) as lines."""
    decoder = json.JSONDecoder()
    buffer = ""
    for chunk in stream:
        buffer += chunk
        while buffer:
            stripped = buffer.lstrip()
            if not stripped:
                buffer = ""
                break
            if stripped[0] != "{":
                line, newline, rest = stripped.partition("\n")
                if not newline:  # a line still arriving
                    buffer = stripped
                    break
                yield line
                buffer = rest
                continue
            try:
                obj, end = decoder.raw_decode(stripped)
            except json.JSONDecodeError:
                buffer = stripped  # an object still arriving
                break
            yield obj
            buffer = stripped[end:]
    if buffer.strip():
        yield buffer.strip()


def _time(value: str | None) -> float | None:
    if not value:
        return None
    # BuildKit writes nanoseconds; Python parses microseconds
    value = re.sub(r"(\.\d{6})\d+", r"\1", value).replace("Z", "+00:00")
    return dt.datetime.fromisoformat(value).timestamp()


@dataclass
class _Vertex:
    number: int
    name: str
    started: float | None = None
    done: bool = False
    cached: bool = False
    ran: bool = False
    error: str = ""
    began: float | None = None  # when this process saw it start (monotonic)


@dataclass
class StageProgress:
    label: str  # e.g. "[3/7 cann-install]"
    log_path: Path
    out: Callable[[str], None] = note
    started: float = field(default_factory=time.monotonic)
    step: str = ""  # the Dockerfile step running now, e.g. "packages 3/5"
    last_line: str = ""
    error: str = ""  # the first step error BuildKit reported
    _last_print: float = field(default_factory=time.monotonic)
    _log: TextIO | None = None
    _vertices: dict[str, _Vertex] = field(default_factory=dict)
    _statuses: set[str] = field(default_factory=set)
    exported: bool = False  # the image was exported (named, or pushed): the stage is done
    finished: float | None = None  # when its export ended (monotonic)
    # the vertices of the stages below it: a bake target's build holds its parents' steps too (the same digests
    # as theirs), which are theirs to count (BakeProgress sets this once the build is over)
    inherited: set[str] = field(default_factory=set)
    loud: bool = True  # print step and heartbeat lines (off for a vertex another stage announces)

    def _own(self) -> list[_Vertex]:
        return [v for digest, v in self._vertices.items() if digest not in self.inherited]

    @property
    def steps_run(self) -> int:
        """Its own Dockerfile steps BuildKit ran (not taken from its cache)."""
        return sum(v.ran and _counted(v.name) for v in self._own())

    @property
    def steps_cached(self) -> int:
        return sum(v.cached and _counted(v.name) for v in self._own())

    def failed_steps(self) -> list[tuple[str, str, str]]:
        """(vertex digest, step, error) of each step of its build that failed, in the order they began."""
        return [(digest, _step_name(v.name), v.error) for digest, v in self._vertices.items() if v.error]

    def has(self, digest: str) -> bool:
        return digest in self._vertices

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
        """A line of ours (or of buildx's outside its JSON) into the log."""
        assert self._log is not None
        self._log.write(text + "\n")
        self._log.flush()
        if text.strip():
            self.last_line = text.strip()

    def event(self, item: dict[str, Any] | str) -> None:
        """One of buildx's rawjson objects (or a line of text beside them)."""
        if isinstance(item, str):
            self.line(item)
            return
        for vertex in item.get("vertexes") or []:
            self._vertex(vertex)
        for status in item.get("statuses") or []:
            self._status(status)
        for log in item.get("logs") or []:
            self._output(log)
        for warning in item.get("warnings") or []:
            text = base64.b64decode(warning.get("short") or b"").decode("utf-8", "replace").strip()
            if text:
                self.line(f"WARNING: {text}")

    def _vertex(self, vertex: dict[str, Any]) -> None:
        digest = vertex.get("digest", "")
        seen = self._vertices.get(digest)
        if seen is None:
            seen = self._vertices[digest] = _Vertex(len(self._vertices) + 1, vertex.get("name", ""),
                                                    began=time.monotonic())
        started, completed = _time(vertex.get("started")), _time(vertex.get("completed"))
        if started is not None and seen.started is None:
            seen.started = started
            self.line(f"#{seen.number} {seen.name}")
            self._step(seen)
        if seen.done or (completed is None and not vertex.get("cached")):
            return
        seen.done = True
        if vertex.get("error"):
            self.line(f"#{seen.number} ERROR: {vertex['error']}")
            seen.error = vertex["error"]
            self.error = self.error or f"{seen.name}: {vertex['error']}"
        elif vertex.get("cached"):
            self.line(f"#{seen.number} CACHED")
            seen.cached = True
        else:
            took = completed - (seen.started or completed) if completed is not None else 0.0
            self.line(f"#{seen.number} DONE {took:.1f}s")
            seen.ran = True
        if seen.name.startswith(EXPORTING) and not vertex.get("error"):
            self.exported, self.finished = True, time.monotonic()

    @property
    def seconds(self) -> float:
        """From when its first own step was seen to its export (or to now, for a stage that did not finish)."""
        began = [v.began for v in self._own() if v.began is not None]
        if not began:
            return 0.0
        return (self.finished or time.monotonic()) - min(began)

    def _status(self, status: dict[str, Any]) -> None:
        """A vertex's sub-task (exporting layers, unpacking, a transfer): logged once, when it completes, with its
        time, so where an export spends its seconds is read off the log."""
        completed, started = _time(status.get("completed")), _time(status.get("started"))
        if completed is None or status.get("id") in self._statuses:
            return
        self._statuses.add(status["id"])
        vertex = self._vertices.get(status.get("vertex", ""))
        took = completed - started if started is not None else 0.0
        self.line(f"#{vertex.number if vertex else 0} {status['id']} {took:.1f}s")

    def _step(self, vertex: _Vertex) -> None:
        match = STEP.match(vertex.name)
        if match is None:
            return
        self.step = " ".join(filter(None, (match["stage"], f"{match['n']}/{match['m']}")))
        # the engine's log says no time: where a stage spent its minutes is read off these lines
        self.line(f"{LOG_MARK} {fmt_seconds(self.elapsed)}: step {self.step}")
        if self.loud:
            self.out(f"{self.label} step {self.step} ({fmt_seconds(self.elapsed)}): {_short(match['what'])}")
        self._last_print = time.monotonic()

    def _output(self, log: dict[str, Any]) -> None:
        vertex = self._vertices.get(log.get("vertex", ""))
        number = vertex.number if vertex else 0
        text = base64.b64decode(log.get("data") or b"").decode("utf-8", "replace")
        for piece in text.splitlines():
            self.line(f"#{number} {piece}")
        now = time.monotonic()
        if self.loud and self.last_line and now - self._last_print >= HEARTBEAT_SECONDS:
            self.out(f"{self.label} step {self.step or '?'} still running ({fmt_seconds(self.elapsed)}): "
                     f"{_short(self.last_line.split(' ', 1)[-1])}")
            self._last_print = now

    def tail(self, lines: int = 25) -> str:
        text = self.log_path.read_text(encoding="utf-8", errors="replace").splitlines()
        return "\n".join(text[-lines:])


def _step_name(name: str) -> str:
    """`packages 3/5` of `[packages 3/5] RUN ...`; the vertex's name itself when it is no Dockerfile step."""
    match = STEP.match(name)
    return " ".join(filter(None, (match["stage"], f"{match['n']}/{match['m']}"))) if match else _short(name, 60)


def _short(text: str, width: int = 110) -> str:
    text = " ".join(text.split())
    return text if len(text) <= width else text[: width - 1] + "…"


def printer(stream: TextIO = sys.stdout) -> Callable[[str], None]:
    def out(text: str) -> None:
        print(text, file=stream, flush=True)

    return out


class BakeProgress:
    """One bake's rawjson, told apart by target: buildx names each vertex `[<target> ...]` (`[<target> packages 3/5]
    RUN ...`, `[<target> internal] load ...`, `[<target>] exporting to image`), and each target's StageProgress gets
    its own vertices with the prefix taken off. A target's build holds its parents' steps too, and a step two
    Dockerfiles share (the native tool every stage builds) is one digest under several targets' names: its output
    goes to the log of each target that has it, once each, and only the first target to name it says so on stderr.
    Anything else buildx writes (its final `ERROR: ...`) goes to the bake's own log."""

    def __init__(self, stages: dict[str, StageProgress], log: StageProgress):
        self.stages = stages  # target -> its progress
        self.log = log
        self._owners: dict[str, list[str]] = {}  # vertex digest -> the targets that named it, first first
        self._seen_logs: set[tuple] = set()
        # longest first: a target named like the start of another never takes the other's vertices
        self._names = sorted(stages, key=len, reverse=True)

    def _target(self, name: str) -> tuple[str | None, str]:
        if len(self._names) == 1:  # buildx names the target only when a bake builds several
            return self._names[0], name
        for target in self._names:
            if name.startswith(f"[{target} "):
                return target, "[" + name[len(target) + 2:]
            if name.startswith(f"[{target}]"):
                return target, name[len(target) + 2:].lstrip()
        return None, name

    def _deliver(self, target: str, item: dict[str, Any], loud: bool) -> None:
        stage = self.stages[target]
        stage.loud = loud
        try:
            stage.event(item)
        finally:
            stage.loud = True

    def event(self, item: dict[str, Any] | str) -> None:
        if isinstance(item, str):
            self.log.line(item)
            return
        for vertex in item.get("vertexes") or []:
            target, name = self._target(vertex.get("name", ""))
            if target is None:
                self.log.event({"vertexes": [vertex]})
                continue
            owners = self._owners.setdefault(vertex.get("digest", ""), [])
            if target not in owners:
                owners.append(target)
            self._deliver(target, {"vertexes": [{**vertex, "name": name}]}, owners[0] == target)
        for key in ("statuses", "logs", "warnings"):
            for entry in item.get(key) or []:
                if key == "logs":
                    mark = (entry.get("vertex"), entry.get("timestamp"), entry.get("stream"), entry.get("data"))
                    if mark in self._seen_logs:
                        continue
                    self._seen_logs.add(mark)
                owners = self._owners.get(entry.get("vertex", ""), [])
                for target in owners:
                    self._deliver(target, {key: [entry]}, target == owners[0])

    def finish(self, parents: dict[str, str | None]) -> None:
        """Once the build is over: each target's steps that a target below it has too are that one's (`parents`:
        target -> its parent's target, or None)."""
        for target, stage in self.stages.items():
            below: set[str] = set()
            parent = parents.get(target)
            while parent is not None:
                below |= set(self.stages[parent]._vertices)
                parent = parents.get(parent)
            stage.inherited = below & set(stage._vertices)
