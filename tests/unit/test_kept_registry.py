"""The tests' kept registries (tests/fixtures/registry.py): the same port and storage run after run, one run at a
time, a new port when the old one is taken, and emptied when they outgrow their caps. No registry is started here."""

from __future__ import annotations

import socket

from tests.fixtures import registry as fixture
from tests.fixtures.registry import kept_registry


def test_a_kept_registry_keeps_its_port_and_storage(tmp_path):
    first = kept_registry(tmp_path)
    assert first is not None
    (tmp_path / "data" / "blob").parent.mkdir(parents=True)
    (tmp_path / "data" / "blob").write_bytes(b"x")
    first.close()
    again = kept_registry(tmp_path)
    assert again is not None and again.port == first.port
    assert (tmp_path / "data" / "blob").read_bytes() == b"x"
    assert f"rootdirectory: {tmp_path / 'data'}" in again.config.read_text()
    again.close()


def test_one_run_at_a_time(tmp_path):
    held = kept_registry(tmp_path)
    assert held is not None
    assert kept_registry(tmp_path) is None  # the caller starts a registry of its own
    held.close()
    assert kept_registry(tmp_path) is not None


def test_a_taken_port_is_replaced_and_recorded(tmp_path):
    first = kept_registry(tmp_path)
    first.close()
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", first.port))
        listener.listen()
        moved = kept_registry(tmp_path)
        assert moved.port != first.port
        assert (tmp_path / "port").read_text() == str(moved.port)
        moved.close()


def test_an_outgrown_registry_is_emptied(tmp_path, monkeypatch):
    repositories = tmp_path / "data/docker/registry/v2/repositories"
    for i in range(3):
        (repositories / f"t{i}").mkdir(parents=True)
    monkeypatch.setattr(fixture, "KEPT_PREFIXES", 3)
    kept_registry(tmp_path).close()
    assert repositories.is_dir()  # at the cap: kept
    (repositories / "t3").mkdir()
    kept_registry(tmp_path).close()
    assert not (tmp_path / "data").exists()
    big = tmp_path / "data" / "blob"
    big.parent.mkdir(parents=True)
    big.write_bytes(b"x" * 11)
    monkeypatch.setattr(fixture, "KEPT_BYTES", 10)
    kept_registry(tmp_path).close()
    assert not big.exists()
