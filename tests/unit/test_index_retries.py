"""An index page is retried on what passes (a 503, a 429, a refused connection) and not on what does not (a 404):
a lock asks for a page per package, many at once, and one hiccup must not fail it; a dead index still fails, in a few
seconds, naming the host and the attempts."""

from __future__ import annotations

import time

import pytest

from ascend_images.inputs import pypi
from ascend_images.inputs.pypi import IndexUnreachableError, PackageIndexError, index_files
from tests.fixtures.httpserver import Server

PAGE = b'<a href="/files/six-1.17.0-py2.py3-none-any.whl#sha256=' + b"a" * 64 + b'">six</a>'


@pytest.fixture
def index(monkeypatch):
    monkeypatch.setattr(pypi, "INDEX_BACKOFF", 0.05)
    server = Server()
    server.files["/simple/six/"] = PAGE
    yield server
    server.stop()


@pytest.mark.parametrize("hiccups", [[503], [429, 502]])
def test_a_passing_failure_is_retried(index, hiccups):
    index.script["/simple/six/"] = list(hiccups)
    (file,) = index_files(index.url("/simple"), "six")
    assert file.file == "six-1.17.0-py2.py3-none-any.whl" and file.sha256 == "a" * 64
    assert len(index.requests) == len(hiccups) + 1


def test_a_missing_page_is_not_retried(index):
    with pytest.raises(PackageIndexError, match="HTTP 404"):
        index_files(index.url("/simple"), "nosuchpackage")
    assert len(index.requests) == 1


def test_a_failure_that_lasts_ends_in_a_few_seconds_naming_host_and_attempts(index):
    index.script["/simple/six/"] = [503, 503, 503]
    dead = r"cannot reach the index at 127\.0\.0\.1:\d+: HTTP 503 .*3 attempts"
    with pytest.raises(IndexUnreachableError, match=dead):
        index_files(index.url("/simple"), "six")
    started = time.monotonic()
    with pytest.raises(IndexUnreachableError, match=r"127\.0\.0\.1:9: .*3 attempts"):
        index_files("http://127.0.0.1:9/simple", "six")
    assert time.monotonic() - started < 5


# PEP 691's JSON form of the same page, as PyPI sends it to a client that asks for it first (written out by hand from
# PEP 691's example: a relative url, the sha256 under "hashes", a file with no hash)
JSON_PAGE = (b'{"meta": {"api-version": "1.0"}, "name": "six", "files": ['
             b'{"filename": "six-1.17.0-py2.py3-none-any.whl", "url": "../../files/six-1.17.0-py2.py3-none-any.whl",'
             b' "hashes": {"sha256": "' + b"b" * 64 + b'"}},'
             b'{"filename": "six-1.17.0.tar.gz", "url": "https://files.example/six-1.17.0.tar.gz", "hashes": {}}]}')


def test_the_json_page_is_asked_for_first_and_read_when_sent(index):
    index.files["/simple/six/"] = JSON_PAGE
    index.content_types["/simple/six/"] = "application/vnd.pypi.simple.v1+json"
    wheel, sdist = index_files(index.url("/simple"), "six")
    assert (wheel.file, wheel.url, wheel.sha256) == ("six-1.17.0-py2.py3-none-any.whl",
                                                     index.url("/files/six-1.17.0-py2.py3-none-any.whl"), "b" * 64)
    assert (sdist.file, sdist.url, sdist.sha256) == ("six-1.17.0.tar.gz", "https://files.example/six-1.17.0.tar.gz", "")
    accept = index.requests[0][1]["Accept"]
    assert accept.startswith("application/vnd.pypi.simple.v1+json") and "text/html" in accept


def test_an_index_that_answers_in_html_alone_is_still_read(index):
    (file,) = index_files(index.url("/simple"), "six")
    assert (file.file, file.sha256) == ("six-1.17.0-py2.py3-none-any.whl", "a" * 64)
