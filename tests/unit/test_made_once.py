"""The host's record of slow-to-make test doubles: made once, taken while intact, made again when not."""

from __future__ import annotations

import pytest

from tests.fixtures import made_once as module


@pytest.fixture
def record(tmp_path, monkeypatch):
    monkeypatch.setattr(module, "doubles_dir", lambda: tmp_path)
    return tmp_path


def test_made_once_then_taken_and_made_again_when_damaged_or_its_inputs_change(record):
    calls = []

    def make() -> bytes:
        calls.append(1)
        return b"double bytes"

    assert module.made_once("x.whl", ["maker v1", b"\x00sha"], make) == b"double bytes"
    assert module.made_once("x.whl", ["maker v1", b"\x00sha"], make) == b"double bytes"
    assert len(calls) == 1
    (kept,) = [p for p in record.iterdir() if not p.name.endswith(".sha256")]
    kept.write_bytes(b"damaged")  # its sha256 no longer matches: made again, never handed out
    assert module.made_once("x.whl", ["maker v1", b"\x00sha"], make) == b"double bytes"
    assert len(calls) == 2
    assert module.made_once("x.whl", ["maker v2", b"\x00sha"], make) == b"double bytes"  # another maker
    assert module.made_once("x.whl", ["maker v", b"2\x00sha"], make) == b"double bytes"  # parts are not run together
    assert len(calls) == 4
