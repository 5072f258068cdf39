"""One package's files on a PEP 503 simple index (PyPI or any mirror of it): which exist, their
sha256 as the index publishes it, and a verified download."""

from __future__ import annotations

import json
import re
import time
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass
from html.parser import HTMLParser
from pathlib import Path

from ascend_images.errors import AscendImagesError, Unreachable
from ascend_images.inputs.download import (
    DownloadError,
    Policy,
    Request,
    commit,
    fetch_file,
    sha256_file,
    without_credentials,
)
from ascend_images.inputs.https import urlopen

PYPI_SIMPLE = "https://pypi.org/simple"
# PEP 691: the same page as JSON, which an index that has it (PyPI, devpi, Artifactory) sends when asked first. Parsed
# by the C json module it costs a fraction of the HTML parser's time on a page of thousands of files (numpy's),
# and a lock reads a page per package; an index with HTML alone (a plain mirror, a vendor's) still answers in HTML.
SIMPLE_JSON = "application/vnd.pypi.simple.v1+json"
SIMPLE_ACCEPT = f"{SIMPLE_JSON}, application/vnd.pypi.simple.v1+html;q=0.2, text/html;q=0.1"


class PackageIndexError(AscendImagesError):
    """The index does not answer, or does not have what was asked for."""


class IndexUnreachableError(PackageIndexError, Unreachable):
    """No answer from the index's host at all, as opposed to an answer that the project is not there."""


@dataclass(frozen=True)
class IndexFile:
    file: str
    url: str
    sha256: str


def normalize(name: str) -> str:
    """PEP 503 project name normalisation."""
    return re.sub(r"[-_.]+", "-", name).lower()


def pinned_name(requirement: str) -> str:
    """The package a `NAME[extras]==VERSION` pin is of, normalized."""
    return normalize(requirement.partition("==")[0].partition("[")[0])


class _Links(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.links: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "a":
            href = dict(attrs).get("href")
            if href:
                self.links.append(href)


def _without_fragment(href: str) -> tuple[str, str]:
    """A PEP 503 link and the sha256 its `#sha256=` fragment names ("" when it names none)."""
    url, _, fragment = href.partition("#")
    return url, fragment.removeprefix("sha256=") if fragment.startswith("sha256=") else ""


# A lock asks the index for a page per package, many at once: a resolver or server hiccup ("Temporary failure in
# name resolution", a 503) is retried with backoff before the index is called unreachable
INDEX_ATTEMPTS = 3
INDEX_BACKOFF = 1.0  # seconds before the 2nd attempt, doubled after


def checked_index_url(flag: str, url: str) -> str:
    """An index URL a flag names, refused before any request when it cannot be one: empty, not http(s) or file, or
    without a host."""
    shown = repr(url) if not url.strip() or url != url.strip() else url
    if not url.strip():
        raise PackageIndexError(f"{flag} is empty: give the index's URL, e.g. https://pypi.org/simple")
    try:
        parts = urllib.parse.urlsplit(url)
    except ValueError as exc:  # an unclosed [ of an IPv6 host, for one
        raise PackageIndexError(f"{flag} {shown}: not a URL ({exc})") from None
    if parts.scheme not in ("http", "https", "file"):
        raise PackageIndexError(f"{flag} {shown}: not an http(s) URL (e.g. https://pypi.org/simple, "
                                "http://HOST:PORT/simple)")
    if parts.scheme != "file" and not parts.hostname:
        raise PackageIndexError(f"{flag} {shown}: the URL names no host (e.g. https://pypi.org/simple)")
    try:
        parts.port  # noqa: B018 - a port that is not a number raises here
    except ValueError:
        raise PackageIndexError(f"{flag} {shown}: its port is not a number") from None
    return url


def index_files(index_url: str, project: str, timeout: float = 60) -> list[IndexFile]:
    page, auth = without_credentials(f"{index_url.rstrip('/')}/{normalize(project)}/")
    delay = INDEX_BACKOFF
    for attempt in range(1, INDEX_ATTEMPTS + 1):
        try:
            request = urllib.request.Request(page, headers={**auth, "Accept": SIMPLE_ACCEPT})
            with urlopen(request, timeout=timeout) as response:
                content_type, body = response.headers.get_content_type(), response.read()
            break
        except urllib.error.HTTPError as exc:
            if exc.code < 500 and exc.code != 429:
                raise PackageIndexError(f"{page}: HTTP {exc.code} (is {project!r} on this index?)") from None
            failure: object = f"HTTP {exc.code}"
        except (urllib.error.URLError, TimeoutError, OSError) as exc:
            failure = getattr(exc, "reason", exc)
        if attempt == INDEX_ATTEMPTS:
            host = urllib.parse.urlsplit(page).netloc or page
            raise IndexUnreachableError(f"cannot reach the index at {host}: {failure} (asked for {page}; "
                                        f"{attempt} attempts)") from None
        time.sleep(delay)
        delay *= 2
    login = urllib.parse.urlsplit(index_url)
    if content_type == SIMPLE_JSON:
        # a page may list ten thousand files (botocore's): each is read as cheaply as it can be, its name as the
        # index gives it and an absolute URL (PyPI's) taken as it is
        return [_index_file(page, login, f["url"], f.get("hashes", {}).get("sha256", ""), f.get("filename"))
                for f in json.loads(body)["files"]]
    parser = _Links()
    parser.feed(body.decode("utf-8", "replace"))
    return [_index_file(page, login, *_without_fragment(href)) for href in parser.links]


def _index_file(page: str, login: urllib.parse.SplitResult, href: str, sha256: str,
                filename: str | None = None) -> IndexFile:
    url = href if href.startswith(("https://", "http://")) else urllib.parse.urljoin(page, href)
    if login.username is not None:
        where = urllib.parse.urlsplit(url)
        if where.hostname == login.hostname:  # the index's files need its login too
            url = urllib.parse.urlunsplit((where.scheme, login.netloc, where.path, where.query, ""))
    return IndexFile(filename or urllib.parse.unquote(url.rsplit("/", 1)[-1]), url, sha256)


def version_files(files: list[IndexFile], project: str, version: str) -> list[IndexFile]:
    stem = f"{normalize(project).replace('-', '_')}-{version}".lower()
    stem_dash = f"{normalize(project)}-{version}".lower()
    out = []
    for f in files:
        name = f.file.lower()
        for s in (stem, stem_dash):
            if name.startswith(s) and (name[len(s):].startswith(("-", ".tar.gz", ".zip"))):
                out.append(f)
                break
    return out


def find_sdist(files: list[IndexFile], project: str, version: str) -> IndexFile:
    sdists = [f for f in version_files(files, project, version) if f.file.endswith((".tar.gz", ".zip"))]
    if not sdists:
        raise PackageIndexError(f"{project} {version}: the index has no source distribution")
    found = sdists[0]
    if not found.sha256:
        raise PackageIndexError(f"{found.url}: the index publishes no sha256 for it")
    return found


def find_wheel(files: list[IndexFile], project: str, version: str, arch: str, python_tag: str) -> IndexFile | None:
    """A wheel pip can install for CPython `python_tag` (cp311) on Linux `arch`, if the index has one."""
    for f in version_files(files, project, version):
        if not f.file.endswith(".whl"):
            continue
        _, _, pytags, abi, plat = f.file[:-4].rsplit("-", 4)
        py_ok = python_tag in pytags.split(".") or abi == "abi3" or pytags.startswith("py3") or "py2.py3" in pytags
        plat_ok = plat == "any" or any(p.endswith(arch) and p.startswith("manylinux") for p in plat.split("."))
        if py_ok and plat_ok:
            return f
    return None


def target_tags(arch: str, python_tag: str, glibc_minor: int = 35) -> list[str]:
    """The wheel tags a CPython `python_tag` on Linux `arch` with glibc 2.`glibc_minor` installs, most preferred
    first, as pip and uv order them (packaging.tags): its own ABI, then abi3, then pure Python; newest glibc first."""
    from packaging import tags

    version = (int(python_tag[2]), int(python_tag[3:]))
    legacy = {17: "manylinux2014", 12: "manylinux2010", 5: "manylinux1"} if arch == "x86_64" else {17: "manylinux2014"}
    platforms = []
    for minor in range(glibc_minor, 4, -1):
        platforms.append(f"manylinux_2_{minor}_{arch}")
        if minor in legacy:
            platforms.append(f"{legacy[minor]}_{arch}")
    platforms.append(f"linux_{arch}")
    return [str(t) for t in (*tags.cpython_tags(version, platforms=platforms),
                             *tags.compatible_tags(version, f"cp{version[0]}{version[1]}", platforms))]


def target_file(files: list[IndexFile], project: str, version: str, arch: str, python_tag: str) -> IndexFile | None:
    """The wheel the target installs for a pin: of the compatible ones, the one whose best tag ranks first."""
    from packaging.utils import InvalidWheelFilename, parse_wheel_filename

    rank = {tag: i for i, tag in enumerate(target_tags(arch, python_tag))}
    best: tuple[int, IndexFile] | None = None
    for f in version_files(files, project, version):
        if not f.file.endswith(".whl"):
            continue
        try:
            _, _, _, wheel_tags = parse_wheel_filename(f.file)
        except InvalidWheelFilename:
            continue
        score = min((rank[str(t)] for t in wheel_tags if str(t) in rank), default=None)
        if score is not None and (best is None or score < best[0]):
            best = (score, f)
    return best[1] if best else None


def has_wheel(files: list[IndexFile], project: str, version: str, arch: str, python_tag: str) -> bool:
    return find_wheel(files, project, version, arch, python_tag) is not None


def download(item: IndexFile, cache_dir: Path, *, policy: Policy | None = None) -> Path:
    """The file in cache_dir, downloaded once the way `invoke fetch` downloads (resumed, retried, with progress) and
    checked against the index's sha256 before it gets its final name."""
    target = cache_dir / item.file
    if target.is_file() and sha256_file(target) == item.sha256:
        return target
    try:
        partial, _ = fetch_file(Request(item.url, item.file, item.sha256 or None), cache_dir, policy=policy)
    except DownloadError as exc:
        raise PackageIndexError(str(exc)) from None
    return commit(partial, cache_dir, item.file)

