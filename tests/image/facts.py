"""What an image says of itself, asked once, whichever xdist worker asks first: an emulated Python importing torch
takes most of a minute, a `pip check` or a walk of the filesystem seconds, and the checks of one image may run on any
worker. Each answer is kept as JSON, written by one process at a time, named by what decides it: the image's ID (its
content) and the code that asks (the asking function's source, or probe.py's). Every change's tier keeps the answers
on the host (~/.cache/ascend-images/test/facts/), so an image a run has asked before is not asked again until it or
the asking code changes, as the reproducibility proof is kept; the full tier (ASCEND_IMAGES_FRESH_FACTS=1, which
`invoke test --ci --full` sets) asks every image again and keeps what it hears."""

from __future__ import annotations

import fcntl
import functools
import hashlib
import inspect
import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

KEPT = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "ascend-images" / "test" / "facts"
# every worker of one session shares xdist's run id; a session without xdist has one of its own
SESSION = os.environ.get("PYTEST_XDIST_TESTRUNUID") or os.urandom(16).hex()
FRESH = os.environ.get("ASCEND_IMAGES_FRESH_FACTS") == "1"


@functools.cache
def inspected(container_id: str) -> dict:
    """The engine's record of a container (its image and first process stay what they were for its life)."""
    import docker

    return docker.from_env().api.inspect_container(container_id)


def image_of(container_id: str) -> str:
    return inspected(container_id)["Image"]


def code_key(*code: str) -> str:
    return hashlib.sha256("\0".join(code).encode()).hexdigest()[:16]


def session_fact(image_id: str, name: str, compute: Callable[[], Any], code: str) -> Any:
    """`compute()`'s answer for `image_id`, asked once for this image and this `code` (the source that decides the
    answer); with FRESH, asked once in this session and kept for the next."""
    directory = KEPT / image_id.removeprefix("sha256:")[:32]
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"{name}-{code_key(code)}.json"
    with (directory / f".{name}.lock").open("a+") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        asked = path.with_name(f".{path.name}.{SESSION}")  # this session asked it (FRESH: only such answers count)
        if path.is_file() and (not FRESH or asked.exists()):
            return json.loads(path.read_text(encoding="utf-8"))
        value = compute()
        tmp = path.with_name(f".{path.name}.tmp")
        tmp.write_text(json.dumps(value), encoding="utf-8")
        tmp.replace(path)
        for old in directory.glob(f".{path.name}.*"):
            old.unlink()
        asked.touch()
        return value


def image_fact(fn: Callable[..., Any]) -> Callable[..., Any]:
    """functools.cache for a fact of the image a testinfra `host` (a container of it) runs: keyed by the image and the
    other arguments, kept for the session (the answer must be JSON)."""
    @functools.wraps(fn)
    def asked(host, *args: Any) -> Any:
        key = code_key(json.dumps([fn.__name__, *args], default=str))
        return session_fact(image_of(host.backend.name), f"{fn.__name__}-{key}", lambda: fn(host, *args),
                            inspect.getsource(fn))

    return asked
