"""What an image says of itself, asked once per test session, whichever xdist worker asks first: an emulated Python
importing torch takes most of a minute, a `pip check` or a walk of the filesystem seconds, and the checks of one
image may run on any worker. Each answer is kept as JSON under build/test/facts/<session>/<image>/, for this session
only (the next session asks the image again), written by one process at a time."""

from __future__ import annotations

import fcntl
import functools
import hashlib
import json
import os
import uuid
from collections.abc import Callable
from typing import Any

from tests.conftest import ROOT

# every worker of one session shares xdist's run id; a session without xdist has one of its own
SESSION = os.environ.get("PYTEST_XDIST_TESTRUNUID") or uuid.uuid4().hex


@functools.cache
def inspected(container_id: str) -> dict:
    """The engine's record of a container (its image and first process stay what they were for its life)."""
    import docker

    return docker.from_env().api.inspect_container(container_id)


def image_of(container_id: str) -> str:
    return inspected(container_id)["Image"]


def session_fact(image_id: str, name: str, compute: Callable[[], Any]) -> Any:
    """`compute()`'s answer for `image_id`, computed once in this session."""
    directory = ROOT / "build" / "test" / "facts" / SESSION / image_id.removeprefix("sha256:")[:32]
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"{name}.json"
    with (directory / f".{name}.lock").open("a+") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if path.is_file():
            return json.loads(path.read_text(encoding="utf-8"))
        value = compute()
        tmp = path.with_name(f".{path.name}.tmp")
        tmp.write_text(json.dumps(value), encoding="utf-8")
        tmp.replace(path)
        return value


def image_fact(fn: Callable[..., Any]) -> Callable[..., Any]:
    """functools.cache for a fact of the image a testinfra `host` (a container of it) runs: keyed by the image and the
    other arguments, kept for the session (the answer must be JSON)."""
    @functools.wraps(fn)
    def asked(host, *args: Any) -> Any:
        key = hashlib.sha256(json.dumps([fn.__name__, *args], default=str).encode()).hexdigest()[:16]
        return session_fact(image_of(host.backend.name), f"{fn.__name__}-{key}", lambda: fn(host, *args))

    return asked
