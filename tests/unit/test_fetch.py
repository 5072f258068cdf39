"""`invoke fetch` against a real HTTP server on 127.0.0.1 serving fixture bytes (no mocked HTTP):
resume after a broken transfer, retries on 5xx, sha256 refusals, trust on first use."""

from __future__ import annotations

import hashlib
import io
import shutil
from pathlib import Path

import pytest
import yaml

from ascend_images.cli.inputs import fetch_selection
from ascend_images.cli.options import Selection, SourceFlags
from ascend_images.errors import SelectionError
from ascend_images.inputs.artifacts import Wanted
from ascend_images.inputs.cache import fetch_all
from ascend_images.inputs.download import PARTIAL_DIR, DownloadError, Policy
from ascend_images.inputs.pins import PINS_FILE, TRUST_RECORD
from ascend_images.matrix.model import load_matrix
from tests.conftest import ROOT
from tests.fixtures.httpserver import Server
from tests.fixtures.matrices import matrix_copy as copy_matrix

FAST = Policy(attempts=4, backoff=0.01, timeout=10)
PAYLOAD = bytes(range(256)) * 4096  # 1 MiB, so a transfer can break in the middle


@pytest.fixture
def server():
    srv = Server()
    yield srv
    srv.stop()


@pytest.fixture
def matrix_copy(tmp_path):
    """The real matrix in a directory of its own, so the pin file beside it is the test's."""
    return load_matrix(copy_matrix(tmp_path))


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def wanted(server: Server, name: str, data: bytes, sha256: str | None = None, **headers) -> Wanted:
    server.files[f"/{name}"] = data
    return Wanted("test", name, server.url(f"/{name}"), "artifacts", sha256, headers)


def test_resumes_with_a_range_request_after_a_broken_transfer(server, matrix_copy, tmp_path, capsys):
    w = wanted(server, "big.run", PAYLOAD, sha(PAYLOAD))
    server.script["/big.run"] = ["disconnect"]
    lines: list[str] = []
    (result,) = fetch_all(matrix_copy, [w], tmp_path / "cache", lines.append, policy=FAST, stream=io.StringIO())
    assert result.status == "downloaded" and (tmp_path / "cache" / "big.run").read_bytes() == PAYLOAD
    ranges = [h.get("Range") for p, h in server.requests]
    assert ranges[0] is None and ranges[1] == f"bytes={len(PAYLOAD) // 2}-", ranges  # resumed, not restarted
    assert "attempt 1 failed" in capsys.readouterr().err  # a note on stderr, not a result


def test_retries_server_errors_then_succeeds(server, matrix_copy, tmp_path):
    w = wanted(server, "flaky.zip", b"zip bytes", sha(b"zip bytes"))
    server.script["/flaky.zip"] = [500, 500]
    (result,) = fetch_all(matrix_copy, [w], tmp_path / "cache", print, policy=FAST, stream=io.StringIO())
    assert result.status == "downloaded"
    assert len(server.requests) == 3


def test_gives_up_after_bounded_attempts(server, matrix_copy, tmp_path):
    w = wanted(server, "down.zip", b"x", sha(b"x"))
    server.script["/down.zip"] = [503] * 10
    with pytest.raises(DownloadError, match="gave up after 4 attempts"):
        fetch_all(matrix_copy, [w], tmp_path / "cache", print, policy=FAST, stream=io.StringIO())
    assert len(server.requests) == 4
    assert not (tmp_path / "cache" / "down.zip").exists()


def test_a_404_is_not_retried(server, matrix_copy, tmp_path):
    w = Wanted("test", "missing.run", server.url("/missing.run"), "cann", "0" * 64)
    with pytest.raises(DownloadError, match="HTTP 404"):
        fetch_all(matrix_copy, [w], tmp_path / "cache", print, policy=FAST, stream=io.StringIO())
    assert len(server.requests) == 1


def test_one_wrong_byte_is_refused_and_nothing_is_cached(server, matrix_copy, tmp_path):
    broken = bytearray(PAYLOAD)
    broken[1234] ^= 0xFF
    w = wanted(server, "toolkit.run", bytes(broken), sha(PAYLOAD))
    cache = tmp_path / "cache"
    with pytest.raises(DownloadError) as caught:
        fetch_all(matrix_copy, [w], cache, print, policy=FAST, stream=io.StringIO())
    assert sha(PAYLOAD) in str(caught.value) and sha(bytes(broken)) in str(caught.value)  # both hashes named
    assert not (cache / "toolkit.run").exists()
    assert list((cache / PARTIAL_DIR).iterdir()) == []


def test_trust_on_first_use_records_then_refuses_a_changed_file(server, matrix_copy, tmp_path, own_state_dir,
                                                                  capsys):
    cache = tmp_path / "cache"
    first = b"release zip, first upload"
    w = wanted(server, "sgl-kernel-npu-x.zip", first)
    lines: list[str] = []
    (result,) = fetch_all(matrix_copy, [w], cache, lines.append, policy=FAST, stream=io.StringIO())
    assert result.status == "trusted-on-first-use"
    # recorded in this host's trust record, in its state directory (not the cache), not in the committed pin file
    assert not (cache / TRUST_RECORD).exists()
    record = yaml.safe_load((own_state_dir / TRUST_RECORD).read_text())
    assert record == {"pins": {"sgl-kernel-npu-x.zip": {"url": w.url, "size": len(first), "sha256": sha(first)}}}
    assert yaml.safe_load((tmp_path / PINS_FILE).read_text()) == {"pins": {}}  # the committed file: no pin yet
    said = capsys.readouterr().err  # a note, on stderr: the results (one line per file) are stdout's
    assert "TRUST ON FIRST USE" in said and "invoke fetch --record" in said
    assert not any("TRUST ON FIRST USE" in line for line in lines)
    # the entry to add to pins.yaml, printed as it would stand there
    assert f"  sgl-kernel-npu-x.zip:\n    sha256: {sha(first)}\n    size: {len(first)}\n    url: {w.url}" in said
    # fetched again: the cached copy matches the record
    (again,) = fetch_all(matrix_copy, [w], cache, print, policy=FAST, stream=io.StringIO())
    assert again.status == "cached"
    # upstream changes the file; this host's cache downloads it again (the copy deleted) and refuses it
    server.files["/sgl-kernel-npu-x.zip"] = b"release zip, silently replaced"
    (cache / "sgl-kernel-npu-x.zip").unlink()
    with pytest.raises(DownloadError) as caught:
        fetch_all(matrix_copy, [w], cache, print, policy=FAST, stream=io.StringIO())
    message = str(caught.value)
    assert sha(first) in message and sha(b"release zip, silently replaced") in message and "refused" in message
    assert not (cache / "sgl-kernel-npu-x.zip").exists()
    # and a tampered cached copy is refused too
    (cache / "sgl-kernel-npu-x.zip").write_bytes(b"tampered")
    with pytest.raises(SelectionError, match=sha(first)):
        fetch_all(matrix_copy, [w], cache, print, policy=FAST, stream=io.StringIO())


def test_a_committed_pin_is_enforced_and_nothing_is_cached(server, matrix_copy, tmp_path):
    """pins.yaml beside the matrix pins a file upstream publishes no sha256 for: a download that differs is refused
    with one line naming the file and both hashes, and leaves nothing in the cache, on any host."""
    good, bad = b"toolkit as pinned", b"toolkit as served today"
    (tmp_path / PINS_FILE).write_text(f"pins:\n  toolkit.run:\n    url: https://example.invalid/toolkit.run\n"
                                      f"    size: {len(good)}\n    sha256: {sha(good)}\n")
    w = wanted(server, "toolkit.run", bad)
    cache = tmp_path / "cache"
    with pytest.raises(DownloadError) as caught:
        fetch_all(matrix_copy, [w], cache, print, policy=FAST, stream=io.StringIO())
    message = str(caught.value)
    assert "toolkit.run" in message and sha(good) in message and sha(bad) in message and "pinned in" in message
    assert not (cache / "toolkit.run").exists() and not (cache / TRUST_RECORD).exists()
    server.files["/toolkit.run"] = good
    (result,) = fetch_all(matrix_copy, [w], cache, print, policy=FAST, stream=io.StringIO())
    assert result.status == "downloaded" and not (cache / TRUST_RECORD).exists()  # pinned: nothing to trust


def test_record_writes_the_pin_file_and_keeps_pypi_files_out(server, matrix_copy, tmp_path):
    zip_bytes, sdist_bytes = b"kernel zip bytes", b"an sdist PyPI carries"
    kernel = wanted(server, "kernel.zip", zip_bytes)
    sdist = Wanted("sdist", "pkg-1.0.tar.gz", server.url("/pkg-1.0.tar.gz"), "artifacts", sha(sdist_bytes),
                   on_pypi=True)
    server.files["/pkg-1.0.tar.gz"] = sdist_bytes
    lines: list[str] = []
    results = fetch_all(matrix_copy, [kernel, sdist], tmp_path / "cache", lines.append, policy=FAST,
                        stream=io.StringIO(), record=True)
    assert [r.status for r in results] == ["recorded", "downloaded"]
    pins = yaml.safe_load((tmp_path / PINS_FILE).read_text())["pins"]
    assert pins == {"kernel.zip": {"url": kernel.url, "size": len(zip_bytes), "sha256": sha(zip_bytes)}}
    assert (tmp_path / PINS_FILE).read_text().startswith("# Downloads PyPI does not carry")
    # recording again adds nothing; a pin file that pins the name to other bytes is refused, not overwritten
    fetch_all(matrix_copy, [kernel], tmp_path / "cache", print, policy=FAST, stream=io.StringIO(), record=True)
    assert yaml.safe_load((tmp_path / PINS_FILE).read_text())["pins"] == pins


def test_progress_is_plain_lines_when_not_a_terminal(server, matrix_copy, tmp_path):
    w = wanted(server, "p.run", PAYLOAD, sha(PAYLOAD))
    stream = io.StringIO()
    fetch_all(matrix_copy, [w], tmp_path / "cache", print, policy=FAST, stream=stream)
    lines = stream.getvalue().splitlines()
    assert lines and "\r" not in stream.getvalue()
    assert lines[-1].startswith("p.run: 100% 1.0 MB/1.0 MB") and "ETA" in lines[-1]


def test_fetch_task_for_a_selection_then_build_resolves_from_the_cache(server, tmp_path):
    """The whole path: CANN packages named by the matrix, sent with Huawei's Referer, recorded on first use,
    then a build's sources take them from the cache (as a local directory would be: its named context `cann`)."""
    def served_here(data: dict) -> None:
        data["cann"]["download_url"] = server.url("/CANN/{version}/{file}")

    path = copy_matrix(tmp_path, served_here)
    matrix = load_matrix(path)
    data = yaml.safe_load(path.read_text())
    sel = Selection(matrix=str(path), device="a3", backend="none", release="cann8.5.0-pt2.8.0", arch="aarch64")
    (variant,) = sel.variants(matrix)
    for file in variant.package_files().values():
        server.files[f"/CANN/8.5.0/{file}"] = f"fake {file}".encode()
    flags = SourceFlags(cann_source="url", cache_dir=str(tmp_path / "cache"))
    lines: list[str] = []
    results = fetch_selection(sel, flags, lines.append, stream=io.StringIO(), wheels=False)  # the CANN packages
    assert [r.status for r in results] == ["trusted-on-first-use"] * 3
    assert all(h.get("Referer") == data["cann"]["download_referer"] for _, h in server.requests)
    packages = flags.sources(matrix).cann.packages(variant)
    assert [p.url for p in packages] == [f"/run/ascend-images/cann/{f}" for f in variant.package_files().values()]
    assert [p.sha256 for p in packages] == [sha(f"fake {f}".encode()) for f in variant.package_files().values()]
    # another host (its own cache and state) trusts nothing yet: its build stops and says to fetch
    elsewhere = SourceFlags(cann_source="url", cache_dir=str(tmp_path / "empty"),
                            state_dir=str(tmp_path / "elsewhere-state"))
    with pytest.raises(SelectionError, match="Ascend-cann-toolkit_8.5.0_linux-aarch64.run is not fetched yet"):
        elsewhere.sources(matrix).cann.packages(variant)
    # recorded into pins.yaml, the pins serve every host: its renders (the committed Dockerfiles' build args) name
    # the pinned sha256 without any cache, and its build fetches first
    fetch_selection(sel, flags, lines.append, stream=io.StringIO(), record=True, wheels=False)
    assert [p.sha256 for p in elsewhere.sources(matrix, strict=False).cann.packages(variant)] == \
        [p.sha256 for p in packages]


def test_build_without_checksums_or_cache_says_to_fetch(tmp_path):
    path = copy_matrix(tmp_path)
    matrix = load_matrix(path)
    (variant,) = Selection(matrix=str(path), device="a3", backend="none", arch="aarch64").variants(matrix)
    sources = SourceFlags(cann_source="url", cache_dir=str(tmp_path / "nothing")).sources(matrix)
    missing = r"Ascend-cann-toolkit_9\.1\.0_linux-aarch64\.run is not fetched yet.*invoke fetch"  # A3 none
    with pytest.raises(SelectionError, match=missing):
        sources.cann.packages(variant)


def test_marked_directories_are_test_doubles(tmp_path):
    from ascend_images.inputs.sources import TEST_DOUBLE_MARKER, CannSource

    (tmp_path / "Ascend-cann-toolkit_8.5.0_linux-aarch64.run").write_text("x")
    assert not CannSource("local", tmp_path).test_double
    (tmp_path / TEST_DOUBLE_MARKER).write_text("fake")
    assert CannSource("local", tmp_path).test_double
    assert Path(ROOT / "tests/fixtures/fake_cann/make_packages.py").is_file()


def test_trust_outlives_the_download_cache(server, matrix_copy, tmp_path, own_state_dir):
    """Issue 41: the cache is what users delete to free space. With it gone, upstream's changed file is still
    refused: what was trusted is state, kept beside the cache, not in it."""
    cache = tmp_path / "cache"
    first = b"kernel zip as first published"
    w = wanted(server, "sgl-kernel-npu-y.zip", first)
    (result,) = fetch_all(matrix_copy, [w], cache, print, policy=FAST, stream=io.StringIO())
    assert result.status == "trusted-on-first-use"
    shutil.rmtree(cache)
    server.files["/sgl-kernel-npu-y.zip"] = b"kernel zip, replaced upstream"
    with pytest.raises(DownloadError) as caught:
        fetch_all(matrix_copy, [w], cache, print, policy=FAST, stream=io.StringIO())
    assert sha(first) in str(caught.value) and "refused" in str(caught.value)
    assert str(own_state_dir / TRUST_RECORD) in str(caught.value)
    assert not (cache / "sgl-kernel-npu-y.zip").exists()


def test_a_trust_record_left_in_the_cache_moves_to_the_state_directory(server, matrix_copy, tmp_path, own_state_dir,
                                                                       capsys):
    """An earlier version kept the record in the cache: the first fetch moves it (so an upgrade keeps what was trusted,
    and a later cache clean-up cannot reset it), and enforces it."""
    cache = tmp_path / "cache"
    cache.mkdir()
    w = wanted(server, "sgl-kernel-npu-z.zip", b"served now")
    (cache / TRUST_RECORD).write_text(yaml.safe_dump({"pins": {"sgl-kernel-npu-z.zip": {
        "url": w.url, "size": 11, "sha256": sha(b"trusted once")}}}))
    with pytest.raises(DownloadError, match="refused"):
        fetch_all(matrix_copy, [w], cache, print, policy=FAST, stream=io.StringIO())
    assert not (cache / TRUST_RECORD).exists() and (own_state_dir / TRUST_RECORD).is_file()
    said = capsys.readouterr().err
    assert f"the trust record moved from the download cache to {own_state_dir / TRUST_RECORD}" in said
