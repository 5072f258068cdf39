"""Packages PyPI does not carry, pinned like CANN's packages (DESIGN 15): vllm-ascend 0.23.0's triton-ascend==3.2.2
and SGLang 0.5.17's tag archive and NPU dependency list.

The locks are resolved against PyPI for real. The vendor's index and GitHub's archive path are HTTP servers on
127.0.0.1 serving test doubles (Huawei's mirror and GitHub are out of reach here), or nothing at all: the point is
that a lock needs neither."""

from __future__ import annotations

import hashlib
import io
import tarfile

import pytest
import yaml

from ascend_images.errors import SelectionError
from ascend_images.inputs.artifacts import off_pypi_wanted
from ascend_images.inputs.cache import fetch_all, wanted_for
from ascend_images.inputs.lockfile import LockError
from ascend_images.inputs.lockgen import LockMaker
from ascend_images.inputs.lockspec import load_lock, lock_spec
from ascend_images.inputs.pins import TRUST_RECORD, read_pins
from ascend_images.inputs.sources import ArtifactSource, CannSource, Sources
from ascend_images.matrix.model import load_matrix
from ascend_images.matrix.selection import select
from ascend_images.stages.plan import PlanOptions, make_plan
from ascend_images.stages.render import Renderer
from tests.fixtures.fake_sglang_tag.make_archive import archive_bytes
from tests.fixtures.fake_triton_ascend.make_wheel import index_page, wheel_bytes, write_wheels
from tests.fixtures.httpserver import Server
from tests.fixtures.matrices import matrix_copy

pytestmark = pytest.mark.network
RELEASE = "cann9.1.0-pt2.10.0"
WHEEL = "triton_ascend-3.2.2-cp311-cp311-manylinux_2_27_aarch64.manylinux_2_28_aarch64.whl"
NOTHING_LISTENS = "http://127.0.0.1:9/simple"


@pytest.fixture(scope="module")
def vendor():
    """A PEP 503 index holding the triton-ascend 3.2.2 double for both arches."""
    server = Server()
    wheels = dict(wheel_bytes(arch) for arch in ("x86_64", "aarch64"))
    server.files["/simple/triton-ascend/"] = index_page(wheels, "../../files/")
    for name, data in wheels.items():
        server.files[f"/files/{name}"] = data
    yield server, wheels
    server.stop()


def vllm_lock(tmp_path, work_dir, vendor_urls: list[str], mutate=None, pins: dict | None = None):
    def change(data: dict) -> None:
        data["package_indexes"]["triton-ascend"]["urls"] = vendor_urls
        if mutate:
            mutate(data)

    path = matrix_copy(tmp_path, change, locks=True)
    if pins is not None:
        (tmp_path / "pins.yaml").write_text(yaml.safe_dump({"pins": pins}))
    matrix = load_matrix(path)
    (variant,) = select(matrix, device="a3", backend="vllm", release=RELEASE, arch="aarch64")
    lines: list[str] = []
    LockMaker(lines.append, work_dir / "cache" / "sdists", pins=read_pins(tmp_path / "pins.yaml")).make(
        lock_spec(variant, "backend"), tmp_path / "locks")
    return matrix, variant, lines


def test_the_lock_needs_neither_the_vendor_file_nor_its_index(tmp_path, work_dir):
    """Nothing listens where the matrix says triton-ascend lives: the lock is made all the same, from PyPI, with
    triton-ascend resolved out and named in the header as a file fetch pins on first use."""
    _, variant, lines = vllm_lock(tmp_path, work_dir, [NOTHING_LISTENS])
    lock = load_lock(variant)  # the lock's own check passes against the matrix beside it
    (entry,) = lock.off_pypi
    assert (entry.name, entry.version, entry.file, entry.sha256) == ("triton-ascend", "3.2.2", None, None)
    assert lock.header["off-pypi"] == "triton-ascend==3.2.2 recorded-on-first-fetch"
    assert lock.header["resolved-without"].startswith("triton-ascend (uv --override")
    # what vllm-ascend 0.23.0's wheel pins (its METADATA on PyPI, read by hand), and the source build it needs
    assert (lock.pins["vllm-ascend"], lock.pins["torch"], lock.pins["torch-npu"], lock.pins["triton-ascend"]) == (
        "0.23.0", "2.10.0", "2.10.0.post4", "3.2.2")
    assert lock.pins["transformers"] == "5.5.4" and "arctic-inference" in lock.from_source
    assert any("triton-ascend 3.2.2 is not on https://pypi.org/simple: resolved without it" in line for line in lines)


def test_without_no_deps_in_the_matrix_the_lock_refuses_to_guess(tmp_path, work_dir):
    def no_rule(data: dict) -> None:
        del data["package_indexes"]["triton-ascend"]["no_deps"]

    with pytest.raises(LockError, match=r"triton-ascend==3\.2\.2 is not on https://pypi\.org/simple for "
                                        r"aarch64-manylinux_2_35, and matrix\.yaml package_indexes\.triton-ascend "
                                        r"has no no_deps"):
        vllm_lock(tmp_path, work_dir, [NOTHING_LISTENS], no_rule)


def test_a_pinned_vendor_file_is_named_in_the_lock(tmp_path, work_dir):
    sha = "ab" * 32
    pins = {WHEEL: {"url": f"https://vendor.example/{WHEEL}", "size": 123, "sha256": sha},
            WHEEL.replace("aarch64", "x86_64"): {"url": "https://vendor.example/x", "size": 1, "sha256": "cd" * 32}}
    _, variant, _ = vllm_lock(tmp_path, work_dir, [NOTHING_LISTENS], pins=pins)
    (entry,) = load_lock(variant).off_pypi
    assert (entry.file, entry.url, entry.sha256) == (WHEEL, f"https://vendor.example/{WHEEL}", sha)


def test_fetch_finds_it_on_the_vendor_index_trusts_it_once_and_records_it(vendor, tmp_path, work_dir,
                                                                           own_state_dir):
    server, wheels = vendor
    matrix, variant, _ = vllm_lock(tmp_path, work_dir, [NOTHING_LISTENS, server.url("/simple")])
    (wanted,) = [w for w in wanted_for([variant], cann=False) if w.key == "wheel:triton-ascend"]
    assert wanted.file == ""  # not pinned when the lock was made: fetch looks it up (the first index fails)
    lines: list[str] = []
    (result,) = fetch_all(matrix, [wanted], tmp_path / "cache", lines.append, stream=io.StringIO())
    assert (result.file, result.status) == (WHEEL, "trusted-on-first-use")
    assert (tmp_path / "cache" / WHEEL).read_bytes() == wheels[WHEEL]
    trusted = read_pins(own_state_dir / TRUST_RECORD)[WHEEL]
    assert trusted.sha256 == hashlib.sha256(wheels[WHEEL]).hexdigest()  # the bytes served, hashed here
    # a build on this host now names the file, from the cache, with its sha256
    cached = ArtifactSource(None, {WHEEL: trusted.sha256}, True, tmp_path / "cache", {WHEEL: trusted})
    (artifact,) = cached.resolve("vllm", off_pypi_wanted(variant)).values()
    assert (artifact.file, artifact.sha256) == (WHEEL, trusted.sha256)
    # --record writes it into pins.yaml, with the URL it came from
    fetch_all(matrix, [wanted], tmp_path / "cache", lines.append, stream=io.StringIO(), record=True)
    pinned = read_pins(tmp_path / "pins.yaml")[WHEEL]
    assert (pinned.url, pinned.size, pinned.sha256) == (server.url(f"/files/{WHEEL}"), len(wheels[WHEEL]),
                                                        trusted.sha256)
    # the vendor's file changes under the same name: refused (this host trusted the first), nothing cached
    path = f"/files/{WHEEL}"
    original = server.files[path]
    server.files[path] = original[:-1] + bytes([original[-1] ^ 1])
    try:
        with pytest.raises(Exception, match=trusted.sha256):
            fetch_all(matrix, [wanted], tmp_path / "other", lambda line: None, stream=io.StringIO())
        assert not (tmp_path / "other" / WHEEL).exists()
    finally:
        server.files[path] = original


def test_the_stage_installs_it_no_deps_before_the_lock_and_waives_only_it(tmp_path, work_dir):
    _, variant, _ = vllm_lock(tmp_path, work_dir, [NOTHING_LISTENS])
    artifacts = tmp_path / "artifacts"
    write_wheels(artifacts, ["aarch64"])
    stage = make_plan([variant], PlanOptions(CannSource("url", strict=False))).top(variant)
    renderer = Renderer()
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(SelectionError, match=r"triton-ascend==3\.2\.2 \(cp311, aarch64\) is not on PyPI, and no file "
                                             r"of it is pinned in pins\.yaml or fetched here"):
        renderer.record(stage, Sources(CannSource("url", strict=False), ArtifactSource(empty, strict=True)))
    record = renderer.record(stage, Sources(CannSource("url", strict=False), ArtifactSource(artifacts)))
    text, files = renderer.render_text(stage, record), record.files
    sha = hashlib.sha256((artifacts / WHEEL).read_bytes()).hexdigest()
    # fetched as a file from the build's inputs, checked against its pin (a build arg whose default is the sha256),
    # and installed with the stage's other wheels, natively (--no-deps, as every one)
    arg = "SHA256_TRITON_ASCEND_3_2_2_CP311_CP311_MANYLINUX_2_27_AARCH64_MANYLINUX_2_28_AARCH64_WHL"  # the file's name
    assert f"\nARG {arg}={sha}\n" in text
    fetch = text.index(f"/run/ascend-images/artifacts/{WHEEL}#${{{arg}}} /tmp/ascend-install/wheels/{WHEEL}")
    assert fetch < text.index("install-packages /usr/local/python aarch64-manylinux_2_35 /tmp/ascend-install")
    assert "triton-ascend" not in files["install.txt"].decode()  # not a file of the wheel store: PyPI lacks it
    assert "pip-check --no-deps triton-ascend==3.2.2" in text and "pip-check" in files
    assert 'io.ascend-images.test-double="off-pypi-wheels"' in text  # a double served it: never published
    assert f'\\"{WHEEL}\\":\\"${{{arg}}}\\"' in text  # the downloads label: what publish checks against pins.yaml


# --- SGLang from its git tag: the committed NPU dependency list, checked against the archive where it is at hand ---
SGLANG = "cann9.0.0-sglang0.5.17"
ARCHIVE_PATH = "/sgl-project/sglang/archive/refs/tags/v0.5.17.tar.gz"


def sglang_lock(tmp_path, work_dir, archive_url: str):
    def local_github(d: dict) -> None:
        d["backends"]["sglang"]["artifacts"]["source_tag"]["url"] = archive_url
        d["package_indexes"]["triton-ascend"]["urls"] = [NOTHING_LISTENS]

    matrix = load_matrix(matrix_copy(tmp_path, local_github, locks=True))
    (variant,) = select(matrix, device="a3", backend="sglang", release=SGLANG, arch="aarch64")
    lines: list[str] = []
    LockMaker(lines.append, tmp_path / "sdists").make(lock_spec(variant, "backend"), tmp_path / "locks")
    return variant, lines


def test_sglang_locks_from_the_committed_list_without_github(tmp_path, work_dir):
    variant, lines = sglang_lock(tmp_path, work_dir, "http://127.0.0.1:9/archive/v{version}.tar.gz")
    lock = load_lock(variant)
    file, url, sha256 = lock.source_sdist
    assert (file, url, sha256) == ("sglang-v0.5.17.tar.gz", "http://127.0.0.1:9/archive/v0.5.17.tar.gz", None)
    assert lock.header["source-requirements"] == (
        "upstream/sglang-0.5.17-pyproject_npu.yaml (sgl-project/sglang python/pyproject_npu.toml at e510dc58ba8f; "
        "not checked against the tag archive)")
    # upstream's pins at that commit, written out by hand: transformers, xgrammar, openai, torchao
    assert (lock.pins["transformers"], lock.pins["xgrammar"], lock.pins["openai"], lock.pins["torchao"]) == (
        "5.12.1", "0.2.1", "2.6.1", "0.9.0")
    assert (lock.pins["torch"], lock.pins["torch-npu"], lock.pins["triton-ascend"]) == (
        "2.10.0", "2.10.0", "3.2.1.dev20260530")
    assert any("could not be downloaded" in line for line in lines)


def test_sglang_list_checked_against_the_archive_and_a_difference_stops_the_lock(tmp_path, work_dir):
    server = Server()
    try:
        _, data = archive_bytes("0.5.17")
        server.files[ARCHIVE_PATH] = data
        variant, _ = sglang_lock(tmp_path / "same", work_dir, server.url(ARCHIVE_PATH))
        lock = load_lock(variant)
        assert lock.header["source-requirements"].endswith("checked against the tag archive)")
        assert lock.source_sdist[2] is None  # no pin in pins.yaml: fetch records it on first use
        # upstream's file says another transformers than the committed list: named, nothing written
        with tarfile.open(fileobj=io.BytesIO(data)) as tar:
            members = {m.name: (m, tar.extractfile(m).read() if m.isfile() else None) for m in tar.getmembers()}
        changed = io.BytesIO()
        with tarfile.open(fileobj=changed, mode="w:gz") as tar:
            for name, (member, content) in members.items():
                if name.endswith("python/pyproject_npu.toml"):
                    content = content.replace(b'"transformers==5.12.1"', b'"transformers==5.12.2"')
                    member.size = len(content)
                tar.addfile(member, io.BytesIO(content) if content is not None else None)
        server.files["/changed.tar.gz"] = changed.getvalue()
        with pytest.raises(LockError) as caught:
            sglang_lock(tmp_path / "changed", work_dir, server.url("/changed.tar.gz"))
        assert "transformers (runtime): upstream/sglang-0.5.17-pyproject_npu.yaml has 'transformers==5.12.1', " \
               "pyproject_npu.toml in sglang-v0.5.17.tar.gz has 'transformers==5.12.2'" in str(caught.value)
        assert not (tmp_path / "changed" / "locks" / SGLANG / "sglang-aarch64.txt").read_text().count("5.12.2")
    finally:
        server.stop()
