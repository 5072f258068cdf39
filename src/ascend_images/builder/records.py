"""BuildKit's cache records on the builder, by when each was made: what one build added can be taken off the engine
again (its records, then the disk its snapshots held) while every record made before it stays, and with it the cache
hits of the builds that made those. A build's records are the ones made while it ran, when nothing else builds."""

from __future__ import annotations

import datetime as dt
import json
import subprocess
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

# a cache mount (`RUN --mount=type=cache`) holds what a step compiled on the target, which no record or image keeps
KEPT_TYPES = ("exec.cachemount",)

Runner = Callable[[Sequence[str]], str]


@dataclass(frozen=True)
class CacheRecord:
    id: str
    created: dt.datetime
    type: str
    parents: tuple[str, ...] = ()


def _buildx(argv: Sequence[str]) -> str:
    done = subprocess.run(["docker", "buildx", *argv], capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"docker buildx {' '.join(argv)}: exit {done.returncode}: {done.stderr.strip()}")
    return done.stdout


def parse_time(text: str) -> dt.datetime:
    """buildx's `CreatedAt` ("2026-12-05 23:05:47.056768961 +0000 UTC"): to the microsecond, as Python keeps it."""
    day, clock, offset = text.split()[:3]
    whole, _, fraction = clock.partition(".")
    return dt.datetime.strptime(f"{day} {whole}.{(fraction or '0')[:6]:0<6} {offset}", "%Y-%m-%d %H:%M:%S.%f %z")


def cache_records(run: Runner = _buildx) -> list[CacheRecord]:
    """Every record of the current builder's cache (`docker buildx du`)."""
    records = []
    for line in run(["du", "--format", "json"]).splitlines():
        if not line.strip():
            continue
        entry = json.loads(line)
        records.append(CacheRecord(entry["ID"], parse_time(entry["CreatedAt"]), entry.get("Type") or "",
                                   tuple(entry.get("Parents") or ())))
    return records


def made_since(records: Iterable[CacheRecord], since: dt.datetime) -> list[CacheRecord]:
    """The records made at or after `since`, but cache mounts (KEPT_TYPES), each before its parents: a record is
    pruned only once nothing made after it refers to it."""
    chosen = [r for r in records if r.created >= since and r.type not in KEPT_TYPES]
    return sorted(chosen, key=lambda r: r.created, reverse=True)


def prune(records: Sequence[CacheRecord], run: Runner = _buildx) -> None:
    """Prune exactly these records, each by its id (BuildKit takes one id per filter)."""
    for record in records:
        run(["prune", "--force", "--filter", f"id={record.id}"])
