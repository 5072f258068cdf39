"""`invoke outdated` against a local PEP 503 index on 127.0.0.1 built from fixture wheels (no mocks): the
releases newer than the matrix, their platforms, their pins read from the wheels, and the verdicts."""

from __future__ import annotations

import hashlib
import io
import json
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
import yaml

from ascend_images.cli.inputs import show_outdated
from ascend_images.cli.options import Selection
from ascend_images.inputs.outdated import pinned_versions
from ascend_images.inputs.wheelmeta import read_metadata
from ascend_images.matrix.model import load_matrix
from tests.conftest import ROOT
from tests.fixtures.httpserver import Server
from tests.fixtures.matrices import matrix_copy


def wheel(name: str, version: str, tag: str, requires: list[str], python: str | None = ">=3.10") -> tuple[str, bytes]:
    dist = name.replace("-", "_")
    info = f"{dist}-{version}.dist-info"
    meta = f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n"
    meta += f"Requires-Python: {python}\n" if python else ""
    meta += "".join(f"Requires-Dist: {r}\n" for r in requires)
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as whl:
        whl.writestr(f"{dist}/__init__.py", "")
        whl.writestr(f"{info}/METADATA", meta)
        whl.writestr(f"{info}/WHEEL", f"Wheel-Version: 1.0\nTag: {tag}\n")
        whl.writestr(f"{info}/RECORD", "")
    return f"{dist}-{version}-{tag}.whl", buffer.getvalue()


# SGLang's releases here are keyed by the matrix's default (moving it changes no test): one newer on its NPU line (a
# post-release of it: upstream's line 0.5.16-0.5.20 is CANN 9.0.0 on Python 3.11), one on the Python 3.12 line
# (SG PR 40524, from 0.5.21)
_SPEC = load_matrix(ROOT / "matrix.yaml").spec
SG_DEFAULT = _SPEC.defaults.release["a3"]["sglang"]
SG_NEWEST = _SPEC.releases[SG_DEFAULT].backends.sglang.sglang
SG_OK, SG_BLOCKED = f"{SG_NEWEST}.post9", "0.6.0"
SG_DRAFT = SG_DEFAULT.replace(f"sglang{SG_NEWEST}", f"sglang{SG_OK}")
SG_AFTER = list(_SPEC.releases)[list(_SPEC.releases).index(SG_DEFAULT) + 1]

# (project, file name, bytes): a small world newer than matrix.yaml, written out by hand
FILES = [
    ("torch-npu", *wheel("torch-npu", "2.11.0", "cp311-cp311-manylinux_2_28_aarch64", ["torch==2.11.0"])),
    ("torch-npu", *wheel("torch-npu", "2.11.0", "cp311-cp311-manylinux_2_28_x86_64", ["torch==2.11.0"])),
    # a torch_npu whose wheel pins another torch than its own version: PT's rule is broken
    ("torch-npu", *wheel("torch-npu", "2.12.0", "cp311-cp311-manylinux_2_28_aarch64", ["torch==2.11.0"])),
    ("torch-npu", *wheel("torch-npu", "2.13.0rc1", "cp311-cp311-manylinux_2_28_aarch64", ["torch==2.13.0"])),
    # x86_64 only, with an sdist: an aarch64 build must compile it
    ("vllm-ascend", *wheel("vllm-ascend", "0.24.0", "cp311-cp311-manylinux_2_24_x86_64",
                           ["torch==2.11.0", "torch-npu==2.11.0", "triton-ascend==3.2.0", "numpy<2.0.0"])),
    ("vllm-ascend", "vllm_ascend-0.24.0.tar.gz", b"sdist"),
    # pins a triton-ascend the index does not have; Python 3.11 is out
    ("vllm-ascend", *wheel("vllm-ascend", "0.25.0", "cp312-cp312-manylinux_2_24_aarch64",
                           ["triton-ascend==3.2.2", "torch-npu==2.11.0"], python=">=3.12")),
    ("vllm-ascend", *wheel("vllm-ascend", "0.25.0", "cp311-cp311-manylinux_2_24_aarch64",
                           ["triton-ascend==3.2.2", "torch-npu==2.11.0"], python=">=3.12")),
    ("vllm", "vllm-0.24.0.tar.gz", b"sdist"),
    # pins a triton-ascend this index lacks and the vendor index has: buildable, and the verdict says where from
    ("vllm-ascend", *wheel("vllm-ascend", "0.26.0", "cp311-cp311-manylinux_2_34_aarch64",
                           ["triton-ascend==3.2.3", "torch-npu==2.11.0"])),
    ("vllm", "vllm-0.26.0.tar.gz", b"sdist"),
    ("triton-ascend", *wheel("triton-ascend", "3.2.0", "cp311-cp311-manylinux_2_27_aarch64", [])),
    # a newer SGLang on the matrix's own NPU line, and one on the line after it (PyPI's wheels are the CUDA build:
    # this one says Requires-Python >=3.11, as PyPI's 0.5.22 does, and pins torch 2.9.1)
    ("sglang", *wheel("sglang", SG_OK, "py3-none-any", ["torch==2.9.1"])),
    ("sglang", *wheel("sglang", SG_BLOCKED, "py3-none-any", ["torch==2.9.1"], python=">=3.11")),
]
# the tags' python/pyproject_npu.toml, where "GitHub" answers: SG_OK's (requires-python as upstream's at main
# 00ac7105), none for SG_BLOCKED
PROJECT_FILES = {SG_OK: b'[project]\nname = "sglang"\nrequires-python = ">=3.10"\ndependencies = ["numpy"]\n'}


@pytest.fixture(scope="module")
def index():
    srv = Server()
    pages: dict[str, list[str]] = {}
    for project, name, data in FILES:
        srv.files[f"/files/{name}"] = data
        pages.setdefault(project, []).append(f'<a href="/files/{name}#sha256={hashlib.sha256(data).hexdigest()}">'
                                             f"{name}</a>")
    for project, links in pages.items():
        srv.files[f"/simple/{project}/"] = f"<html><body>{''.join(links)}</body></html>".encode()
    # a vendor's index (as Huawei's mirror for triton-ascend): 3.2.3 only, not the 3.2.2 vllm-ascend 0.25.0 pins
    name, data = wheel("triton-ascend", "3.2.3", "cp311-cp311-manylinux_2_27_aarch64", [])
    srv.files[f"/vendor/files/{name}"] = data
    srv.files["/vendor/simple/triton-ascend/"] = f'<a href="/vendor/files/{name}">{name}</a>'.encode()
    for version, text in PROJECT_FILES.items():
        srv.files[f"/raw/v{version}/python/pyproject_npu.toml"] = text
    yield srv
    srv.stop()


@pytest.fixture(scope="module")
def matrix(tmp_path_factory, index) -> Path:
    """The matrix as its releases pin it: the fixture index models PyPI before torch-npu 2.11.0, so the pairs
    no release uses (2.11.0 and newer, recorded from PyPI) are left out; triton-ascend's vendor index is the
    fixture's."""
    def releases_only(data: dict) -> None:
        used = {r["torch_npu"] for r in data["releases"].values()}
        data["torch"]["pairs"] = {k: v for k, v in data["torch"]["pairs"].items() if k in used}
        data["package_indexes"]["triton-ascend"]["urls"] = [index.url("/vendor/simple")]
        data["backends"]["sglang"]["artifacts"]["npu_project_file"]["url"] = \
            index.url("/raw/v{version}/python/pyproject_npu.toml")

    return matrix_copy(tmp_path_factory.mktemp("matrix"), releases_only, locks=True)


def rows_by_version(index, matrix, packages=None) -> dict[tuple[str, str], dict]:
    lines: list[str] = []
    show_outdated(Selection(str(matrix)), lines.append, index_url=index.url("/simple"),
                      packages=packages, as_json=True)
    return {(r["package"], r["version"]): r for r in json.loads(lines[-1])}


def test_metadata_is_read_with_two_range_requests(index):
    before = len(index.requests)
    meta = read_metadata(index.url("/files/vllm_ascend-0.24.0-cp311-cp311-manylinux_2_24_x86_64.whl"))
    assert meta.version == "0.24.0" and "triton-ascend==3.2.0" in meta.requires_dist
    ranges = [h.get("Range") for _, h in index.requests[before:]]
    assert len(ranges) == 2 and all(r and r.startswith("bytes=") for r in ranges)  # never the whole wheel


def test_newer_releases_with_platforms_pins_and_verdicts(index, matrix):
    rows = rows_by_version(index, matrix)
    assert set(rows) == {("torch-npu", "2.11.0"), ("torch-npu", "2.12.0"), ("torch-npu", "2.13.0rc1"),
                         ("vllm-ascend", "0.24.0"), ("vllm-ascend", "0.25.0"), ("vllm-ascend", "0.26.0"),
                         ("vllm", "0.24.0"), ("vllm", "0.26.0"), ("sglang", SG_OK), ("sglang", SG_BLOCKED)}
    # ^ nothing the matrix already has or older; the one pre-release newer than every final (upstream's newest rc
    # line), with its verdict like any release
    assert rows[("torch-npu", "2.13.0rc1")]["verdict"] == "ok"
    ok = rows[("torch-npu", "2.11.0")]
    assert ok["wheels"] == {"x86_64": True, "aarch64": True} and ok["pins"] == {"torch": "==2.11.0"}
    assert ok["verdict"] == "ok"
    assert "pins torch==2.11.0, not ==2.12.0" in rows[("torch-npu", "2.12.0")]["verdict"]
    source_build = rows[("vllm-ascend", "0.24.0")]
    assert source_build["wheels"] == {"x86_64": True, "aarch64": False} and source_build["sdist"]
    assert source_build["pins"] == {"torch": "==2.11.0", "torch-npu": "==2.11.0", "triton-ascend": "==3.2.0"}
    assert source_build["verdict"] == "no aarch64 wheel: built from the sdist"
    blocked = rows[("vllm-ascend", "0.25.0")]["verdict"]
    assert "Python 3.11 excluded (>=3.12)" in blocked
    assert "pins triton-ascend==3.2.2, which this index does not have" in blocked
    assert "vllm 0.25.0 (vllm-ascend's rule) is not on this index" in blocked
    # no sdist (PyPI's sglang wheels are the CUDA build): buildable from the git tag matrix.yaml names
    assert rows[("sglang", SG_OK)]["verdict"] == (
        "ok; NPU line: CANN 9.0.0, Python 3.11, torch_npu 2.10.0, chips 910b, a3; no sdist: build it from its git tag, "
        f"https://github.com/sgl-project/sglang/archive/refs/tags/v{SG_OK}.tar.gz, with its python/pyproject_npu.toml "
        "transcribed under upstream/ (npu_requirements)")
    vendor = index.url("/vendor/simple")
    assert rows[("vllm-ascend", "0.26.0")]["verdict"] == (
        f"ok; triton-ascend==3.2.3 is not on this index but on {vendor} (package_indexes); locked without it, "
        "installed --no-deps (package_indexes.triton-ascend.no_deps)")


def test_the_task_prints_a_table(index, matrix):
    result = subprocess.run([sys.executable, "-m", "invoke", "outdated", "--index-url", index.url("/simple"),
                             "--package", "torch-npu", "--matrix", str(matrix)],
                            cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    header, *lines = result.stdout.splitlines()
    assert header.split()[:3] == ["package", "newer", "matrix"]
    from packaging.version import Version

    newest = str(max(map(Version, pinned_versions(Selection(str(matrix)).load())["torch-npu"])))
    assert [line.split()[:3] for line in lines] == [["torch-npu", "2.13.0rc1", newest], ["torch-npu", "2.12.0", newest],
                                                   ["torch-npu", "2.11.0", newest]]


@pytest.mark.network
def test_live_pypi_lists_a_newer_vllm_ascend():
    """PyPI itself (a `network` test): it carries vllm-ascend releases newer than the matrix's (0.23.0.post1 since
    November 2026, an sdist), each read with its files."""
    from packaging.version import Version

    lines: list[str] = []
    rows = show_outdated(Selection(str(ROOT / "matrix.yaml")), lines.append,
                             index_url="https://pypi.org/simple", packages=["vllm-ascend"], limit=2)
    assert rows, lines
    assert all(Version(r.version) > Version("0.23.0") for r in rows), lines
    assert all(r.sdist or any(r.wheels.values()) for r in rows), lines


def test_a_pre_release_older_than_a_final_is_left_out_unless_asked():
    from packaging.version import Version

    from ascend_images.inputs.outdated import candidates
    from ascend_images.inputs.pypi import IndexFile

    names = ["pkg-1.1.0rc1.tar.gz", "pkg-1.1.0.tar.gz", "pkg-1.2.0rc1.tar.gz", "pkg-1.2.0rc2.tar.gz",
             "pkg-1.3.0rc1.tar.gz"]
    files = [IndexFile(n, "", "") for n in names]
    # each rc line above the newest final, by its newest rc; none below it
    assert list(candidates(files, "pkg", Version("1.0"))) == ["1.3.0rc1", "1.2.0rc2", "1.1.0"]
    assert list(candidates(files, "pkg", Version("1.0"), pre=True)) == [
        "1.3.0rc1", "1.2.0rc2", "1.2.0rc1", "1.1.0", "1.1.0rc1"]


def test_a_release_the_matrix_marks_blocked_is_shown_with_its_reason():
    """vllm-ascend 0.26.0rc1 (a release in matrix.yaml, blocked): outdated still lists it as newer than what is built,
    and its verdict is the matrix's reason, not 'ok'."""
    from ascend_images.inputs.outdated import assess, blocked_releases, pinned_versions
    from ascend_images.inputs.pypi import IndexFile
    from ascend_images.matrix.model import load_matrix

    matrix = load_matrix(ROOT / "matrix.yaml")
    blocked = blocked_releases(matrix)
    assert set(blocked) == {("vllm-ascend", "0.26.0rc1")}
    assert blocked["vllm-ascend", "0.26.0rc1"].startswith("release cann9.1.0-vllm0.26.0rc1 is blocked: vllm-ascend "
                                                          "0.26.0rc1 pins fastapi<0.124.0")
    assert "0.26.0rc1" not in pinned_versions(matrix)["vllm-ascend"]  # named, never built
    entries = [(IndexFile("vllm_ascend-0.26.0rc1-cp311-cp311-manylinux_2_34_aarch64.whl", "", ""), "wheel")]
    cand = assess("vllm-ascend", "0.26.0rc1", entries, lambda name, version: True, lambda url: ({}, ">=3.10"),
                  blocked=blocked)
    assert cand.verdict.startswith("matrix.yaml: release cann9.1.0-vllm0.26.0rc1 is blocked: ")


def test_an_unreachable_index_is_an_error_naming_the_host(matrix):
    # port 9 (discard) has nothing listening: the connection is refused at once
    result = subprocess.run([sys.executable, "-m", "invoke", "outdated", "--index-url", "http://127.0.0.1:9/simple",
                             "--matrix", str(matrix)],
                            cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert result.returncode != 0
    assert "nothing newer" not in result.stdout
    assert "cannot reach the index at 127.0.0.1:9" in result.stderr
    assert "Connection refused" in result.stderr


def test_lock_against_an_unreachable_index_fails_naming_the_host(matrix, tmp_path):
    result = subprocess.run([sys.executable, "-m", "invoke", "lock", "--index-url", "http://127.0.0.1:9/simple",
                             "--backend", "vllm", "--arch", "x86_64", "--matrix", str(matrix),
                             "--work-dir", str(tmp_path)],
                            cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert result.returncode == 1
    assert "cannot reach the index at 127.0.0.1:9" in result.stdout
    assert "0 of " in result.stdout and "locks written" in result.stdout


def test_a_newer_backend_release_says_what_its_env_registry_drops_and_adds(tmp_path):
    """vLLM-Ascend 0.26.0rc1 over the 0.23.0 the matrix builds, each wheel's vllm_ascend/envs.py holding the registry
    upstream's has (tests/fixtures/env_readers/registries.yaml): of what the matrix bakes for vLLM-Ascend 0.23.0
    (FLASHCOMM1, MATMUL_ALLREDUCE in verl's layer, SOC_VERSION), 0.26.0rc1 no longer names MATMUL_ALLREDUCE, and its
    registry adds VLLM_ASCEND_MLA_FIA_SPLIT; both said whatever else blocks the release."""
    import yaml

    registries = yaml.safe_load((ROOT / "tests/fixtures/env_readers/registries.yaml").read_text())["vllm-ascend"]
    srv = Server()
    try:
        links = []
        for version, names in registries.items():
            envs = "env_variables = {\n" + "".join(f'    "{n}": lambda: None,\n' for n in names) + "}\n"
            name, data = wheel("vllm-ascend", version, "cp311-cp311-manylinux_2_34_aarch64", [])
            buffer = io.BytesIO()  # the wheel with its registry beside its metadata
            with zipfile.ZipFile(io.BytesIO(data)) as src, zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as dst:
                for item in src.namelist():
                    dst.writestr(item, src.read(item))
                dst.writestr("vllm_ascend/envs.py", envs)
            srv.files[f"/files/{name}"] = buffer.getvalue()
            links.append(f'<a href="/files/{name}">{name}</a>')
        srv.files["/simple/vllm-ascend/"] = "".join(links).encode()
        srv.files["/simple/vllm/"] = b""
        lines: list[str] = []
        show_outdated(Selection(str(matrix_copy(tmp_path, locks=True))), lines.append, index_url=srv.url("/simple"),
                      packages=["vllm-ascend"], as_json=True, pre=True)
    finally:
        srv.stop()
    (row,) = [r for r in json.loads(lines[-1]) if r["version"] == "0.26.0rc1"]
    assert row["env_gone"] == ["VLLM_ASCEND_ENABLE_MATMUL_ALLREDUCE"]
    assert row["env_added"] == ["VLLM_ASCEND_MLA_FIA_SPLIT"]
    assert row["verdict"].endswith(
        "; env: vllm-ascend 0.26.0rc1's vllm_ascend/envs.py no longer names VLLM_ASCEND_ENABLE_MATMUL_ALLREDUCE (baked "
        "for it: matrix.yaml env, its reader's versions); env: vllm_ascend/envs.py adds VLLM_ASCEND_MLA_FIA_SPLIT")


def test_sglang_is_judged_by_its_npu_line_not_by_pypis_cuda_wheel(index, matrix):
    """PyPI's sglang 0.5.22 wheel allows Python 3.11 (as SG_BLOCKED's here), but upstream's NPU line from 0.5.21 is
    CANN 9.1.0 on Python 3.12 for A3 and 950 (SG PR 40524: sgl-kernel-npu 2026.9.0.post5 py312 only; 910b dropped)."""
    rows = rows_by_version(index, matrix, packages=["sglang"])
    row = rows[("sglang", SG_BLOCKED)]
    assert row["problems"] == ["blocked: NPU line is Python 3.12 (sgl-kernel-npu 2026.9.0.post5 py312 only for CANN "
                               "9.1.0; SG PR 40524)"]
    assert row["read_from"].startswith("PyPI's CUDA wheel")
    assert "upstream publishes no 910b image on this line: no a2 variant" in row["notes"]
    unread = "its python/pyproject_npu.toml could not be read here (HTTP 404): judged by the recorded line"
    assert unread in row["notes"]
    assert row["verdict"].startswith("blocked: NPU line is Python 3.12")
    # what the wheel says is said, marked, and judges nothing: its torch==2.9.1 pin is no problem
    assert rows[("sglang", SG_OK)]["problems"] == []
    assert rows[("sglang", SG_OK)]["pins"] == {"torch": "==2.9.1"}


def test_a_tag_project_file_that_excludes_the_python_blocks_the_release(index, matrix):
    path = f"/raw/v{SG_OK}/python/pyproject_npu.toml"
    index.files[path] = b'[project]\nrequires-python = ">=3.12"\ndependencies = ["torch-npu==2.10.0.post6"]\n'
    try:
        row = rows_by_version(index, matrix, packages=["sglang"])[("sglang", SG_OK)]
    finally:
        index.files[path] = PROJECT_FILES[SG_OK]
    assert row["problems"] == ["the tag's python/pyproject_npu.toml excludes Python 3.11 (>=3.12)"]
    assert "the tag's python/pyproject_npu.toml pins torch-npu==2.10.0.post6" in row["notes"]


def test_a_release_on_no_recorded_line_is_not_ok(index, tmp_path):
    def no_lines(data: dict) -> None:
        data["backends"]["sglang"]["npu_lines"] = [line for line in data["backends"]["sglang"]["npu_lines"]
                                                   if line["python"] != "3.11"]
        data["torch"]["pairs"] = {k: v for k, v in data["torch"]["pairs"].items()
                                  if k in {r["torch_npu"] for r in data["releases"].values()}}
        data["backends"]["sglang"]["artifacts"]["npu_project_file"]["url"] = \
            index.url("/raw/v{version}/python/pyproject_npu.toml")
    path = matrix_copy(tmp_path, no_lines, locks=True)
    row = rows_by_version(index, path, packages=["sglang"])[("sglang", SG_OK)]
    assert row["problems"] == [f"no NPU line recorded for {SG_OK} (backends.sglang.npu_lines): read its "
                               "docker/npu.Dockerfile and python/pyproject_npu.toml at the tag first"]


def test_the_tag_files_are_read_where_the_matrix_says_the_project_file_is(index, matrix):
    from ascend_images.inputs.sglangline import PROJECT_FILE, tag_files

    read = tag_files(load_matrix(matrix).spec.backends["sglang"].artifacts["npu_project_file"])
    dockerfile = f"/raw/v{SG_OK}/docker/npu.Dockerfile"
    index.files[dockerfile] = b"RUN pip install triton-ascend==3.2.3\n"
    try:
        assert read(SG_OK, PROJECT_FILE) == (PROJECT_FILES[SG_OK].decode(), "")
        assert read(SG_OK, "docker/npu.Dockerfile") == ("RUN pip install triton-ascend==3.2.3\n", "")
        assert read(SG_BLOCKED, PROJECT_FILE) == (None, "HTTP 404")
    finally:
        del index.files[dockerfile]
    assert tag_files(None)(SG_OK, PROJECT_FILE)[0] is None


# --- `outdated --write`: a release judged ok, drafted into matrix.yaml beside the one it follows ----------------------
RAW = _SPEC.backends["sglang"].artifacts["npu_project_file"].url  # the tag's project file: matrix.yaml's address


def text_copy(tmp_path: Path, index) -> Path:
    """The real matrix.yaml as text (its comments kept), its tag-file URL pointed at the fixture server."""
    path = matrix_copy(tmp_path, locks=True)
    text = path.read_text()
    assert RAW in text
    path.write_text(text.replace(RAW, index.url("/raw/v{version}/python/pyproject_npu.toml")))
    return path


def draft(index, path: Path, tag_files: dict[str, str] | None = None, **flags) -> tuple[int, list[str]]:
    from ascend_images.cli.inputs import write_release

    lines: list[str] = []

    def tag_file(version: str, name: str) -> tuple[str | None, str]:
        return ((tag_files or {}).get(name), "" if tag_files and name in tag_files else "unreachable here")

    code = write_release(Selection(str(path)), lines.append, index_url=index.url("/simple"), packages=["sglang"],
                         tag_file=tag_file, follow_up=False, **flags)
    return code, lines


def test_a_draft_with_what_cannot_be_read_here_is_refused_until_filled(index, tmp_path):
    from ascend_images.errors import MatrixError
    from ascend_images.matrix.model import load_matrix

    path = text_copy(tmp_path, index)
    before = path.read_text()
    code, lines = draft(index, path, version=SG_OK, default=False)
    assert code == 0 and lines[0] == f"wrote releases.{SG_DRAFT}: drafted after {SG_DEFAULT}"
    after = path.read_text()
    # one block inserted after the followed release, every other line as it was
    added = [line for line in after.splitlines() if line not in before.splitlines()]
    assert added[0] == f"  {SG_DRAFT}:" and sorted(set(before.splitlines()) - set(after.splitlines())) == []
    assert after.index(f"  {SG_DEFAULT}:") < after.index(f"  {SG_DRAFT}:") < after.index(f"  {SG_AFTER}:")
    with pytest.raises(MatrixError) as caught:
        load_matrix(path)
    problems = str(caught.value)
    for key in ("backends.sglang.sgl_kernel_npu.tag", "backends.sglang.triton_ascend",
                "backends.sglang.npu_requirements"):
        assert f"releases.{SG_DRAFT}.{key}: a placeholder `invoke outdated --write` left" in problems
    assert "3 value(s) could not be read here" in "\n".join(lines)


def test_a_draft_read_from_the_tag_is_a_release_the_matrix_accepts(index, tmp_path):
    from ascend_images.matrix.model import load_matrix

    path = text_copy(tmp_path, index)
    project = (b'[build-system]\nrequires = ["setuptools>=61.0", "wheel"]\n[project]\nname = "sglang"\n'
               b'requires-python = ">=3.10"\ndependencies = ["numpy", "xgrammar==0.2.1"]\n'
               b'[project.optional-dependencies]\nsrt_npu = []\n').decode()
    files = {".github/workflows/release-docker-npu.yml": "          SGLANG_KERNEL_NPU_TAG=2026.7.27\n",
             "docker/npu.Dockerfile": "RUN pip install triton-ascend==3.2.1.dev20260530 --extra-index-url x\n",
             "python/pyproject_npu.toml": project}
    code, lines = draft(index, path, files, version=SG_OK, default=True)
    assert code == 0 and not [line for line in lines if "placeholder" in line]
    matrix = load_matrix(path)  # no placeholder, every rule's input in place
    pins = matrix.spec.releases[SG_DRAFT].backends.sglang
    assert (pins.sglang, pins.sgl_kernel_npu.tag, pins.triton_ascend, pins.tree) == \
        (SG_OK, "2026.7.27", "3.2.1.dev20260530", "git-tag")
    release = matrix.spec.releases[SG_DRAFT]
    assert (release.cann, release.torch_npu) == ("9.0.0", "2.10.0")  # the NPU line's, SG (written out by hand)
    listed = yaml.safe_load((tmp_path / "upstream" / f"sglang-{SG_OK}-pyproject_npu.yaml").read_text())
    assert listed["dependencies"] == ["numpy", "xgrammar==0.2.1"] and listed["srt_npu"] == []
    assert listed["build-system-requires"] == ["setuptools>=61.0", "wheel"]
    # --default: every SGLang default (A2's and A3's: the 950 has none) and CI's published entry moved; CI's test
    # entry names no release
    assert {dev: per["sglang"] for dev, per in matrix.spec.defaults.release.items() if "sglang" in per} == \
        {"a2": SG_DRAFT, "a3": SG_DRAFT}
    assert [e.release for e in matrix.spec.ci.publish if e.backend == "sglang"] == [SG_DRAFT]
    # run again: the draft is kept, nothing drafted twice
    code, lines = draft(index, path, files, version=SG_OK, default=True)
    assert lines[0] == f"releases.{SG_DRAFT}: in matrix.yaml already, filled; going on from it"
    assert path.read_text().count(f"  {SG_DRAFT}:") == 1


def test_a_release_not_judged_ok_is_not_drafted(index, tmp_path):
    from ascend_images.errors import SelectionError

    path = text_copy(tmp_path, index)
    before = path.read_text()
    with pytest.raises(SelectionError, match=rf"sglang {SG_BLOCKED} is not `ok`: blocked: NPU line is Python 3.12"):
        draft(index, path, version=SG_BLOCKED, default=False)
    assert path.read_text() == before
