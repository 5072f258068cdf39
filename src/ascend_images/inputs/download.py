"""One HTTP(S) download into a cache, done the way multi-GB CANN packages need: resumed with a Range
request after a broken transfer, retried with backoff on transient failures, verified before it gets
its final name (a file under its final name is always whole and checked), with progress."""

from __future__ import annotations

import hashlib
import http.client
import os
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

from ascend_images.console import draws_live, end_live, live, progress_stream
from ascend_images.errors import AscendImagesError, Unreachable
from ascend_images.inputs.https import urlopen

PARTIAL_DIR = ".partial"
CHUNK = 1 << 20
RETRY_STATUS = {408, 425, 429, 500, 502, 503, 504}


class DownloadError(AscendImagesError):
    """A download failed for good (after its retries), or its content is not what was expected."""


class DownloadUnreachable(DownloadError, Unreachable):
    """The server did not answer, or kept failing, through every attempt."""


@dataclass(frozen=True)
class Request:
    url: str
    file: str
    sha256: str | None = None  # None: not known; the caller decides what to trust
    headers: dict[str, str] = field(default_factory=dict)


def host_cache(name: str, override_env: str | None = None) -> Path:
    """One of this host's caches of ours: $`override_env` when set, else $XDG_CACHE_HOME/ascend-images/`name`, else
    ~/.cache/ascend-images/`name` (XDG's default; a relative XDG_CACHE_HOME is ignored, as the spec says): downloads,
    the wheel store, built wheels, lint's records, the tests' doubles and registries."""
    override = os.environ.get(override_env) if override_env else None
    if override:
        return Path(override)
    xdg = os.environ.get("XDG_CACHE_HOME")
    return (Path(xdg) if xdg and Path(xdg).is_absolute() else Path.home() / ".cache") / "ascend-images" / name


def with_login(url: str, credentials: tuple[tuple[str, str, str], ...]) -> str:
    """An index URL with the login the flags gave for its host (--torch-index-url's): the host fetches from it."""
    parts = urllib.parse.urlsplit(url)
    for host, login, password in credentials:
        if host == parts.hostname:
            userinfo = f"{urllib.parse.quote(login, safe='')}:{urllib.parse.quote(password, safe='')}"
            return urllib.parse.urlunsplit((parts.scheme, f"{userinfo}@{parts.netloc}", parts.path, parts.query, ""))
    return url


def without_credentials(url: str) -> tuple[str, dict[str, str]]:
    """A URL's user:password as a basic Authorization header, and the URL without them (urllib sends neither
    otherwise): a private index's files are fetched on the host, never in a build."""
    import base64
    import urllib.parse

    parts = urllib.parse.urlsplit(url)
    if parts.username is None:
        return url, {}
    login = f"{urllib.parse.unquote(parts.username)}:{urllib.parse.unquote(parts.password or '')}"
    host = parts.hostname or ""
    netloc = f"{host}:{parts.port}" if parts.port else host
    token = base64.b64encode(login.encode()).decode()
    return urllib.parse.urlunsplit((parts.scheme, netloc, parts.path, parts.query, parts.fragment)), {
        "Authorization": f"Basic {token}"}


@dataclass
class Policy:
    attempts: int = 5
    backoff: float = 1.0  # seconds before the 2nd attempt; doubled each time after
    timeout: float = 60.0


class Progress:
    """A download's progress: on a terminal (console.draws_live) a bar drawn by rich, like every live line of ours;
    anywhere else plain lines (every 10% or 15 s), no terminal codes; nothing with --quiet."""

    def __init__(self, name: str, stream: TextIO | None = None):
        self.stream = stream or progress_stream()  # nothing drawn with --quiet
        self.name = name
        self.started = time.monotonic()
        self.last_line = 0.0
        self.last_decile = -1
        self.bar: Any = None
        if draws_live(self.stream):
            from rich.progress import BarColumn, DownloadColumn, TextColumn, TimeRemainingColumn, TransferSpeedColumn

            self.bar = live(self.stream, TextColumn("{task.description}"), BarColumn(), DownloadColumn(),
                            TransferSpeedColumn(), TimeRemainingColumn(), label=name)

    def update(self, done: int, total: int | None, resumed_from: int = 0) -> None:
        if self.bar is not None:
            self.bar.update(self.bar.task_ids[0], completed=done, total=total)
            return
        elapsed = max(time.monotonic() - self.started, 1e-6)
        rate = (done - resumed_from) / elapsed
        if total:
            eta = (total - done) / rate if rate > 0 else 0
            text = (f"{self.name}: {done / total:4.0%} {_size(done)}/{_size(total)} {_size(rate)}/s "
                    f"ETA {_clock(eta)}")
            decile = int(10 * done / total)
        else:
            text, decile = f"{self.name}: {_size(done)} {_size(rate)}/s", -1
        if decile > self.last_decile or time.monotonic() - self.last_line > 15:
            self.last_decile, self.last_line = decile, time.monotonic()
            self.stream.write(text + "\n")
            self.stream.flush()

    def close(self) -> None:
        """Take the bar away (the step's plain line says how the file ended)."""
        if self.bar is not None:
            end_live(self.bar)
            self.bar = None


def _size(n: float) -> str:
    for unit in ("B", "KB", "MB", "GB"):
        if n < 1000 or unit == "GB":
            return f"{n:.1f} {unit}" if unit != "B" else f"{int(n)} B"
        n /= 1000
    return f"{n:.1f} GB"


def _clock(seconds: float) -> str:
    seconds = int(seconds)
    return f"{seconds // 60}m{seconds % 60:02d}s" if seconds >= 60 else f"{seconds}s"


_hash_cache: dict[tuple[str, int, int], str] = {}


def sha256_file(path: Path) -> str:
    """The file's sha256, computed once per (path, size, mtime)."""
    stat = path.stat()
    key = (str(path.resolve()), stat.st_size, stat.st_mtime_ns)
    if key not in _hash_cache:
        digest = hashlib.sha256()
        with path.open("rb") as handle:
            for chunk in iter(lambda: handle.read(CHUNK), b""):
                digest.update(chunk)
        _hash_cache[key] = digest.hexdigest()
    return _hash_cache[key]


class _Transient(Exception):
    """Worth another attempt: the connection broke, timed out, or the server said try later."""


def _attempt(req: Request, partial: Path, policy: Policy, progress: Progress) -> None:
    have = partial.stat().st_size if partial.exists() else 0
    url, auth = without_credentials(req.url)
    headers = {"User-Agent": "ascend-images", **auth, **req.headers}
    if have:
        headers["Range"] = f"bytes={have}-"
    try:
        response = urlopen(urllib.request.Request(url, headers=headers), timeout=policy.timeout)
    except urllib.error.HTTPError as exc:
        if exc.code == 416 and have:  # nothing left to send: what we hold is the whole file
            return
        if exc.code in RETRY_STATUS:
            raise _Transient(f"HTTP {exc.code}") from None
        raise DownloadError(f"{req.url}: HTTP {exc.code} {exc.reason}") from None
    except (urllib.error.URLError, TimeoutError, ConnectionError, http.client.HTTPException) as exc:
        raise _Transient(str(getattr(exc, "reason", exc))) from None
    with response:
        status = response.status
        if have and status == 206:
            mode, done = "ab", have
        else:  # 200: the server ignored the range, so start again from the first byte
            mode, done = "wb", 0
        length = response.headers.get("Content-Length")
        total = done + int(length) if length is not None else None
        resumed_from = done
        try:
            with partial.open(mode) as out:
                while chunk := response.read(CHUNK):
                    out.write(chunk)
                    done += len(chunk)
                    progress.update(done, total, resumed_from)
        except (TimeoutError, ConnectionError, http.client.HTTPException, OSError) as exc:
            raise _Transient(f"transfer broke at {_size(done)}: {exc}") from None
        if total is not None and done < total:
            raise _Transient(f"transfer broke at {_size(done)} of {_size(total)}")


def fetch_file(req: Request, cache: Path, *, policy: Policy | None = None, stream: TextIO | None = None,
               log: Callable[[str], None] | None = None) -> tuple[Path, str]:
    """Download req into cache/<file>; returns (path, sha256). With a known sha256 a mismatch is refused
    and the partial download removed; without one the caller records or checks what came."""
    policy = policy or Policy()
    log = log or (lambda line: None)
    cache.mkdir(parents=True, exist_ok=True)
    partial_dir = cache / PARTIAL_DIR
    partial_dir.mkdir(exist_ok=True)
    partial = partial_dir / (req.file + ".part")
    progress = Progress(req.file, stream)
    delay = policy.backoff
    try:
        for attempt in range(1, policy.attempts + 1):
            try:
                _attempt(req, partial, policy, progress)
                break
            except _Transient as exc:
                if attempt == policy.attempts:
                    raise DownloadUnreachable(f"{req.url}: gave up after {attempt} attempts: {exc} (the partial "
                                              f"download is kept in {partial} and resumed next time)") from None
                log(f"{req.file}: attempt {attempt} failed ({exc}); retrying in {delay:.1f}s")
                time.sleep(delay)
                delay *= 2
    finally:
        progress.close()
    got = sha256_file(partial)
    if req.sha256 and got != req.sha256.lower():
        partial.unlink()
        raise DownloadError(f"{req.file}: sha256 {got}, expected {req.sha256} (from {req.url}); "
                            "the download was deleted, nothing was cached")
    return partial, got


def commit(partial: Path, cache: Path, file: str) -> Path:
    """Give a verified download its final name (atomic rename within the cache)."""
    target = cache / file
    partial.replace(target)
    return target
