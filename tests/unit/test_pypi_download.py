"""`pypi.download` (the lock maker's sdists, the source-build test's sdist) against a real HTTP server on 127.0.0.1:
resumed and retried like `invoke fetch`, checked against the index's sha256, nothing under the final name unless
it matched."""

from __future__ import annotations

import hashlib

import pytest

from ascend_images.inputs.download import Policy
from ascend_images.inputs.pypi import IndexFile, PackageIndexError, download
from tests.fixtures.httpserver import Server

FAST = Policy(attempts=3, backoff=0.01, timeout=10)
SDIST = b"sdist bytes " * 100_000  # 1.2 MB: a transfer can break in its middle
NAME = "pkg-1.0.tar.gz"
SHA = hashlib.sha256(SDIST).hexdigest()  # the index's published hash of the bytes it serves


@pytest.fixture
def server():
    srv = Server()
    srv.files[f"/{NAME}"] = SDIST
    yield srv
    srv.stop()


def test_a_broken_transfer_is_resumed_and_the_result_checked(server, tmp_path):
    server.script[f"/{NAME}"] = ["disconnect", 503]
    path = download(IndexFile(NAME, server.url(f"/{NAME}"), SHA), tmp_path, policy=FAST)
    assert path == tmp_path / NAME and path.read_bytes() == SDIST
    ranges = [headers.get("Range") for _, headers in server.requests]
    assert ranges[0] is None and ranges[-1] == f"bytes={len(SDIST) // 2}-", ranges


def test_bytes_that_do_not_match_the_index_are_refused_and_not_cached(server, tmp_path):
    wrong = "0" * 64
    with pytest.raises(PackageIndexError, match=f"sha256 {SHA}, expected {wrong}"):
        download(IndexFile(NAME, server.url(f"/{NAME}"), wrong), tmp_path, policy=FAST)
    assert not (tmp_path / NAME).exists()
    assert not list(tmp_path.rglob("*.part")), "a refused download was kept to be resumed"


def test_a_cached_file_that_matches_is_not_downloaded_again(server, tmp_path):
    (tmp_path / NAME).write_bytes(SDIST)
    download(IndexFile(NAME, server.url(f"/{NAME}"), SHA), tmp_path, policy=FAST)
    assert server.requests == []
    (tmp_path / NAME).write_bytes(SDIST[:-1] + b"!")  # a cached copy that no longer matches is replaced
    assert download(IndexFile(NAME, server.url(f"/{NAME}"), SHA), tmp_path, policy=FAST).read_bytes() == SDIST
