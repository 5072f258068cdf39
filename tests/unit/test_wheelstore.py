"""The host's wheel store (DESIGN 19) against a real PEP 503 index on 127.0.0.1: each file fetched once however many
stages want it, a stored file that does not hash to its key deleted and fetched again (never given to a build),
--offline naming what is missing and the command that fetches it, and a download that does not match its pin refused
with both hashes."""

from __future__ import annotations

import hashlib

import pytest

from ascend_images.builder.stageinputs import lay_out_contexts
from ascend_images.errors import AscendImagesError, SelectionError
from ascend_images.inputs.sources import CannSource, Sources
from ascend_images.inputs.wheelstore import StoredFile, WheelStore, stored_files
from ascend_images.stages.record import StageInputs
from tests.fixtures.httpserver import Server

UV = "uv-0.13.9-py3-none-manylinux_2_28_aarch64.whl"
FILES = {"alpha-1.0-py3-none-any.whl": b"alpha wheel bytes", "beta-2.0-py3-none-any.whl": b"beta wheel bytes",
         "gamma-3.0-py3-none-any.whl": b"gamma wheel bytes", UV: b"uv for aarch64"}


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


@pytest.fixture
def index():
    """A PEP 503 index serving FILES, each listed with its sha256 (as PyPI lists them)."""
    server = Server()
    for file, data in FILES.items():
        project = file.split("-")[0]
        server.files[f"/files/{file}"] = data
        server.files[f"/simple/{project}/"] = (f'<html><body><a href="{server.url("/files/" + file)}#sha256='
                                                f'{sha(data)}">{file}</a></body></html>').encode()
    yield server
    server.stop()


def item(file: str) -> StoredFile:
    name, version = file.split("-")[:2]
    return StoredFile(name, version, sha(FILES[file]))


def downloads(server: Server) -> list[str]:
    return [path for path, _ in server.requests if path.startswith("/files/")]


def store_at(tmp_path, index, lines=None, **kwargs) -> WheelStore:
    out = lines.append if lines is not None else (lambda line: None)
    return WheelStore(tmp_path / "store", [index.url("/simple")], out=out, **kwargs)


def test_two_stages_wanting_one_wheel_fetch_it_once(tmp_path, index):
    alpha, beta, gamma = (item(f) for f in list(FILES)[:3])
    first = store_at(tmp_path, index)
    first.ensure([alpha, beta])  # the torch stage, say
    first.ensure([beta, gamma])  # the backend stage: beta is there already
    store_at(tmp_path, index).ensure([alpha, gamma])  # another build on this host, another release
    assert sorted(downloads(index)) == sorted(f"/files/{f}" for f in list(FILES)[:3])  # each once
    assert first.downloaded == list(FILES)[:3]
    assert (tmp_path / "store" / beta.sha256 / "beta-2.0-py3-none-any.whl").read_bytes() == FILES[
        "beta-2.0-py3-none-any.whl"]


def test_a_stored_file_that_does_not_hash_to_its_key_is_deleted_fetched_again_and_never_given_to_a_build(
        tmp_path, index):
    alpha = item("alpha-1.0-py3-none-any.whl")
    bad = tmp_path / "store" / alpha.sha256 / "alpha-1.0-py3-none-any.whl"
    bad.parent.mkdir(parents=True)
    bad.write_bytes(b"tampered")
    lines: list[str] = []
    store = store_at(tmp_path, index, lines)
    # what a stage build does: the store filled, then the stage's files linked into its `wheels` context
    (path,) = store.ensure([alpha])
    assert path.read_bytes() == FILES["alpha-1.0-py3-none-any.whl"]
    assert lines == [f"wheel store: {bad} hashes to {sha(b'tampered')}, not {alpha.sha256}: deleted, fetched again"]
    assert downloads(index) == ["/files/alpha-1.0-py3-none-any.whl"]
    inputs = StageInputs()
    inputs.want([f"alpha==1.0 --hash=sha256:{alpha.sha256}"])
    given = lay_out_contexts(inputs.freeze("s", {}, {}, None, {}), Sources(CannSource("url")), store,
                             tmp_path / "inputs")
    given_bytes = (given["wheels"] / alpha.sha256 / bad.name).read_bytes()
    assert given_bytes == FILES["alpha-1.0-py3-none-any.whl"]


def test_offline_names_the_missing_wheel_and_the_command_that_fetches_it(tmp_path, index):
    beta = item("beta-2.0-py3-none-any.whl")
    store = store_at(tmp_path, index, offline=True, fetch_hint="invoke fetch --device a3 --backend vllm")
    with pytest.raises(SelectionError) as caught:
        store.ensure([beta])
    assert str(caught.value) == (f"--offline: beta==2.0 (sha256 {beta.sha256[:12]}) is not in the wheel store "
                                 f"({tmp_path / 'store'}); fetch it on a connected host with `invoke fetch --device "
                                 "a3 --backend vllm` (or copy its store here)")
    assert downloads(index) == []


def test_a_download_that_does_not_match_its_pin_stops_naming_the_file_and_both_hashes(tmp_path, index):
    """uv's wheel, pinned in matrix.yaml by sha256: the index lists the pinned hash, the bytes it sends are others."""
    pinned = item(UV)
    index.files[f"/files/{UV}"] = b"uv, replaced"
    with pytest.raises(AscendImagesError) as caught:
        store_at(tmp_path, index).ensure([pinned])
    said = str(caught.value)
    assert UV in said and pinned.sha256 in said and sha(b"uv, replaced") in said, said
    assert not (tmp_path / "store" / pinned.sha256).exists() or not any((tmp_path / "store" / pinned.sha256).iterdir())


def test_a_lock_line_names_the_stored_file():
    (stored,) = stored_files([f"alpha==1.0 --hash=sha256:{'a' * 64}  # via beta"])
    assert (stored.name, stored.version, stored.sha256) == ("alpha", "1.0", "a" * 64)


def test_an_index_that_lists_no_hashes_is_used_by_fetching_the_pinned_version_until_one_file_hashes_to_the_pin(
        tmp_path):
    """PEP 503 makes the #sha256 fragment optional (a company's Nexus may leave it out): the files of the pinned
    version are fetched, the one with the pinned hash is stored, the others are deleted; another version is never
    fetched, and a version with no file of that hash is refused naming the index."""
    server = Server()
    files = {"delta-1.0-cp311-cp311-manylinux_2_28_x86_64.whl": b"delta x86", "delta-1.0-py3-none-any.whl":
             b"delta pure", "delta-1.1-py3-none-any.whl": b"delta newer"}
    for file, data in files.items():
        server.files[f"/files/{file}"] = data
    server.files["/simple/delta/"] = "".join(f'<a href="/files/{f}">{f}</a>' for f in files).encode()
    try:
        wanted = StoredFile("delta", "1.0", sha(b"delta pure"))
        store = store_at(tmp_path, server)
        (path,) = store.ensure([wanted])
        assert path.read_bytes() == b"delta pure"
        assert sorted(downloads(server)) == ["/files/delta-1.0-cp311-cp311-manylinux_2_28_x86_64.whl",
                                             "/files/delta-1.0-py3-none-any.whl"]
        assert store.downloaded == ["delta-1.0-py3-none-any.whl"]
        assert [p.name for p in (tmp_path / "store").rglob("*") if p.is_file()] == ["delta-1.0-py3-none-any.whl"]
        with pytest.raises(SelectionError) as caught:
            store.ensure([StoredFile("delta", "1.0", "0" * 64)])
        assert "has no file of delta with that sha256" in str(caught.value)
    finally:
        server.stop()


def test_two_writers_storing_one_file_at_once_both_get_it(tmp_path):
    """Two stages of one build (--jobs 2) or two builds on one host fill the store with the same wheel at the same
    moment: each writes under a temporary name of its own, and both end with the one verified file (with one shared
    temporary name, one writer renamed it away from under the other: "No such file or directory")."""
    from concurrent.futures import ThreadPoolExecutor

    data = bytes(range(256)) * 40_000  # 10 MB: a copy long enough for writers to overlap
    source = tmp_path / "torch-2.13.0-py3-none-any.whl"
    source.write_bytes(data)
    store = WheelStore(tmp_path / "store", [], out=lambda line: None)
    with ThreadPoolExecutor(8) as pool:
        stored = list(pool.map(lambda _: store._put(source, sha(data)), range(32)))
    assert {p.read_bytes() == data for p in stored} == {True}
    assert [p.name for p in (tmp_path / "store" / sha(data)).iterdir()] == [source.name]  # no temporary left
