"""A pinned package PyPI does not carry (vllm-ascend 0.23.0's triton-ascend==3.2.2), from the vendor index matrix.yaml
names for it: `invoke lock` resolves with it and records the exact file and sha256, `invoke fetch` downloads it
verified, and the stage installs it from the cache before the lock. The vendor index is a real HTTP server on
127.0.0.1 serving a PEP 503 page and the triton-ascend test double (Huawei's mirror is out of reach here); the rest
resolves against PyPI."""

from __future__ import annotations

import hashlib

import pytest

from ascend_images.errors import SelectionError
from ascend_images.inputs.artifacts import off_index_wanted
from ascend_images.inputs.cache import fetch_all, wanted_for
from ascend_images.inputs.lockfile import LockError, load_lock, lock_spec
from ascend_images.inputs.lockgen import LockMaker
from ascend_images.inputs.sources import ArtifactSource, CannSource, Sources
from ascend_images.matrix.model import load_matrix, select
from ascend_images.stages.plan import PlanOptions, make_plan
from ascend_images.stages.render import Renderer
from tests.fixtures.fake_sglang_tag.make_archive import archive_bytes
from tests.fixtures.fake_triton_ascend.make_wheel import index_page, wheel_bytes, write_wheels
from tests.fixtures.httpserver import Server
from tests.fixtures.matrices import matrix_copy

pytestmark = pytest.mark.network
RELEASE = "cann9.1.0-pt2.10.0"


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


@pytest.fixture(scope="module")
def locked(vendor, tmp_path_factory, work_dir):
    """The matrix with the vendor index pointed at the local server, and the release's vLLM lock made with it."""
    server, _ = vendor

    def local_vendor(data: dict) -> None:
        data["package_indexes"]["triton-ascend"]["urls"] = [server.url("/simple")]

    directory = tmp_path_factory.mktemp("matrix")
    path = matrix_copy(directory, local_vendor, locks=True)
    matrix = load_matrix(path)
    (variant,) = select(matrix, device="a3", backend="vllm", release=RELEASE, arch="aarch64")
    lines: list[str] = []
    LockMaker(lines.append, work_dir / "cache" / "sdists").make(lock_spec(variant), directory / "locks")
    return matrix, variant, lines


def test_the_lock_records_the_vendor_file_and_its_sha256(vendor, locked):
    _, wheels = vendor
    _, variant, lines = locked
    lock = load_lock(variant)  # the lock's own check passes against the matrix beside it
    file = "triton_ascend-3.2.2-cp311-cp311-manylinux_2_27_aarch64.manylinux_2_28_aarch64.whl"
    (entry,) = lock.off_index
    assert (entry.name, entry.version, entry.file) == ("triton-ascend", "3.2.2", file)
    assert entry.sha256 == hashlib.sha256(wheels[file]).hexdigest()  # the bytes served, hashed here
    assert entry.url.endswith(f"/files/{file}") and entry.url.startswith("http://127.0.0.1:")
    # what vllm-ascend 0.23.0's wheel pins (its METADATA on PyPI), and the source build its lock needs
    assert (lock.pins["vllm-ascend"], lock.pins["torch"], lock.pins["torch-npu"], lock.pins["triton-ascend"]) == (
        "0.23.0", "2.10.0", "2.10.0.post4", "3.2.2")
    assert lock.pins["transformers"] == "5.5.4" and "arctic-inference" in lock.from_source
    assert any("triton-ascend 3.2.2 is not on https://pypi.org/simple" in line for line in lines)


def test_fetch_downloads_it_verified_and_refuses_other_bytes(vendor, locked, tmp_path):
    server, wheels = vendor
    matrix, variant, _ = locked
    wanted = [w for w in wanted_for([variant], cann=False) if w.key == "wheel:triton-ascend"]
    assert len(wanted) == 1
    results = fetch_all(matrix, wanted, tmp_path / "cache", lambda line: None)
    assert results[0].status == "downloaded"
    assert (tmp_path / "cache" / wanted[0].file).read_bytes() == wheels[wanted[0].file]
    # the vendor's file changes under the same name: the lock's sha256 refuses it, nothing is cached
    path = f"/files/{wanted[0].file}"
    original = server.files[path]
    server.files[path] = original[:-1] + bytes([original[-1] ^ 1])
    try:
        with pytest.raises(Exception, match="sha256"):
            fetch_all(matrix, wanted, tmp_path / "other", lambda line: None)
        assert not (tmp_path / "other" / wanted[0].file).exists()
    finally:
        server.files[path] = original


def test_the_stage_installs_it_from_the_artifacts_before_the_lock(locked, tmp_path):
    _, variant, _ = locked
    artifacts = tmp_path / "artifacts"
    write_wheels(artifacts, ["aarch64"])
    plan = make_plan([variant], PlanOptions(CannSource("url", strict=False)))
    stage = plan.top(variant)
    # every other file the stage takes (vLLM's sdist) is not in the directory: served from upstream's URL
    renderer = Renderer()
    sources = Sources(CannSource("url", strict=False), ArtifactSource(strict=False))
    with pytest.raises(SelectionError, match="needs triton_ascend-3.2.2"):
        renderer.context(stage, Sources(CannSource("url", strict=False), ArtifactSource(tmp_path, strict=True)))
    ctx, _ = renderer.context(stage, Sources(sources.cann, ArtifactSource(artifacts, strict=False)))
    text = renderer.render_text(stage, ctx)
    file = "triton_ascend-3.2.2-cp311-cp311-manylinux_2_27_aarch64.manylinux_2_28_aarch64.whl"
    sha = hashlib.sha256((artifacts / file).read_bytes()).hexdigest()
    install = text.index(f"${{ASCEND_BUILD_SERVER}}/artifacts/{file}#{sha}")
    assert install < text.index("-r /etc/ascend-images/backend-lock.txt")
    assert 'io.ascend-images.test-double="off-index-wheels"' in text  # a double served it: never published


def test_without_the_vendor_the_lock_says_where_it_looked(tmp_path, work_dir):
    def unreachable_vendor(data: dict) -> None:
        data["package_indexes"]["triton-ascend"]["urls"] = ["http://127.0.0.1:9/simple"]  # nothing listens there

    matrix = load_matrix(matrix_copy(tmp_path, unreachable_vendor))
    (variant,) = select(matrix, device="a3", backend="vllm", release=RELEASE, arch="aarch64")
    with pytest.raises(LockError, match=r"triton-ascend==3\.2\.2 is not on https://pypi\.org/simple .* the index "
                                        r"matrix\.yaml names for it does not answer"):
        LockMaker(lambda line: None, work_dir / "cache" / "sdists").make(lock_spec(variant), tmp_path / "locks")
    assert off_index_wanted(variant) == []  # no lock, nothing to fetch: the build stops on the missing lock


# --- SGLang from its git tag: the archive from a URL, its NPU project read from python/ --------------------------
SGLANG = "cann9.0.0-sglang0.5.17"


@pytest.fixture(scope="module")
def github(vendor):
    """The tag archive double at GitHub's archive path, and triton-ascend's dev build on a nightly index."""
    server, _ = vendor
    name, data = archive_bytes("0.5.17")
    server.files["/sgl-project/sglang/archive/refs/tags/v0.5.17.tar.gz"] = data
    nightly = dict(wheel_bytes(arch, "3.2.1.dev20260530") for arch in ("x86_64", "aarch64"))
    server.files["/nightly/triton-ascend/"] = index_page(nightly, "../../files/")
    for wheel_name, wheel_data in nightly.items():
        server.files[f"/files/{wheel_name}"] = wheel_data
    return server, name, data


def test_sglang_locks_from_its_tag_archive(github, tmp_path, work_dir):
    server, name, data = github

    def local_github(d: dict) -> None:
        d["backends"]["sglang"]["artifacts"]["source_tag"]["url"] = server.url(
            "/sgl-project/sglang/archive/refs/tags/v{version}.tar.gz")
        d["package_indexes"]["triton-ascend"]["urls"] = [server.url("/simple"), server.url("/nightly")]

    matrix = load_matrix(matrix_copy(tmp_path, local_github, locks=True))
    (variant,) = select(matrix, device="a3", backend="sglang", release=SGLANG, arch="aarch64")
    LockMaker(lambda line: None, work_dir / "cache" / "sdists").make(lock_spec(variant), tmp_path / "locks")
    lock = load_lock(variant)
    file, url, sha256 = lock.source_sdist
    assert (file, url) == (name, server.url("/sgl-project/sglang/archive/refs/tags/v0.5.17.tar.gz"))
    assert sha256 == hashlib.sha256(data).hexdigest() and lock.source_subdir == "python"
    # read from python/pyproject_npu.toml in the archive (its pins, written out in the double from upstream)
    assert (lock.pins["transformers"], lock.pins["xgrammar"], lock.pins["openai"]) == ("5.12.1", "0.2.1", "2.6.1")
    assert (lock.pins["torch"], lock.pins["torch-npu"]) == ("2.10.0", "2.10.0")
    (entry,) = lock.off_index  # the dev build, found on the second vendor index
    assert (entry.version, entry.url) == ("3.2.1.dev20260530", server.url(f"/files/{entry.file}"))
    # the stage unpacks the archive, swaps the NPU project file in python/ and gives setuptools-scm the version
    plan = make_plan([variant], PlanOptions(CannSource("url", strict=False)))
    stage = plan.top(variant)
    ctx, _ = Renderer().context(stage, Sources(CannSource("url", strict=False), ArtifactSource(strict=False)))
    text = Renderer().render_text(stage, ctx)
    assert f"{url}#{sha256}" in text
    assert 'cp "$work/src/python/pyproject_npu.toml" "$work/src/python/pyproject.toml"' in text
    assert "SETUPTOOLS_SCM_PRETEND_VERSION=0.5.17" in text and '"$work/src/python"' in text
