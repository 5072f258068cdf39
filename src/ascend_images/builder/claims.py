"""One build of a stage at a time, across every process on this host that uses the same engine.

A process claims a content key before it builds the stage: an exclusive `flock` on a file named after the
engine and the key. A second process that wants the same key waits (saying for whom: the holder writes its
pid, command and stage into the file) and then finds the image the first one built. The kernel drops a
flock when its holder dies, SIGKILL included, so a claim is never left stale: the next process takes it
over at once.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path


def claims_dir(engine_id: str) -> Path:
    base = Path(os.environ.get("ASCEND_IMAGES_CLAIMS_DIR") or Path(os.environ.get("XDG_RUNTIME_DIR") or "/tmp"))
    safe = "".join(c if c.isalnum() else "-" for c in engine_id)[:80] or "engine"
    return base / "ascend-images-claims" / safe


@contextlib.contextmanager
def claim(directory: Path, key: str, what: str, out: Callable[[str], None],
          poll: float = 2.0, report_every: float = 30.0) -> Iterator[bool]:
    """Hold the claim on `key` for the block; yields True if another process held it first (so the caller
    should look for its result before building)."""
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"{key}.claim"
    with path.open("a+") as handle:
        waited = False
        started = last = time.monotonic()
        while True:
            try:
                fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                now = time.monotonic()
                if not waited or now - last >= report_every:
                    handle.seek(0)
                    holder = handle.read().strip() or "another process"
                    out(f"{what}: waiting for {holder} ({int(now - started)}s)")
                    last = now
                waited = True
                time.sleep(poll)
        try:
            handle.seek(0)
            handle.truncate()
            handle.write(f"pid {os.getpid()} ({' '.join(sys.argv[:3])[:120]}) building {what}")
            handle.flush()
            yield waited
        finally:
            handle.seek(0)
            handle.truncate()
            fcntl.flock(handle, fcntl.LOCK_UN)
