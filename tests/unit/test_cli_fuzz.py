"""The command line against random and adversarial values (hypothesis): each invocation either succeeds or ends
with exactly one `error:` line, never a traceback, and a refused `render` leaves nothing rendered. Run in-process
through invoke's own Program (the task bodies and flag parsing as `invoke` runs them), bounded in examples."""

from __future__ import annotations

import contextlib
import io
import shutil
import sys
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.conftest import ROOT

ADVERSARIAL = ["", " ", "\n", "\r", "\t", "\x00", "\x1b[31m", "$(touch /pwned)", "`id`", "'", '"', "\\", "../..",
               "/", "a" * 300, "é", "名字", "\u2028", "-1", "99999999999999999999", "--help", "a=b", "=", "A-B"]
text = st.one_of(st.sampled_from(ADVERSARIAL), st.text(max_size=40))
SETTINGS = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture],
                    derandomize=True)


def run(*argv: str) -> tuple[str, str]:
    """(stdout, stderr) of `invoke ARGV` run in this process; an exception escaping invoke is a traceback."""
    sys.path.insert(0, str(ROOT))
    from invoke import Collection, Program

    import tasks

    program = Program(namespace=Collection.from_module(tasks), version="test")
    out, err = io.StringIO(), io.StringIO()
    # --help and parse errors exit: their text is checked by the caller
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err), contextlib.suppress(SystemExit):
        program.run(["invoke", *argv], exit=False)
    return out.getvalue(), err.getvalue()


def assert_clean(stderr: str) -> bool:
    """True when refused: then exactly one `error:` line, the last of stderr but for the indented problems of a
    matrix that has several; notes, warnings and progress lines may come before it (stderr is theirs too)."""
    assert "Traceback" not in stderr, stderr
    lines = [line for line in stderr.splitlines() if line.strip()]
    errors = [i for i, line in enumerate(lines) if line.startswith("error: ")]
    if not errors:
        return False
    assert len(errors) == 1, stderr
    assert all(line.startswith("  - ") for line in lines[errors[0] + 1:]), stderr
    return True


@SETTINGS
@given(key=st.one_of(st.sampled_from(["X", "OMP_NUM_THREADS", "_a1", "1X", "A-B", ""]), text), value=text,
       namespace=st.one_of(st.sampled_from(["ascend-images", "reg.example:5000/ai", "Bad", "a__b", "a_-b"]), text),
       device=st.one_of(st.sampled_from(["a2", "a3", "a2,a3", "a4", ""]), text))
def test_render(key, value, namespace, device):
    out = Path(tempfile.mkdtemp(prefix="fuzz-render-")) / "ctx"
    try:
        _, err = run("render", "--env", f"{key}={value}", "--namespace", namespace, "--device", device,
                     "--backend", "none", "--out", str(out))
        if assert_clean(err):
            assert not out.exists() or not any(out.iterdir()), "a refused render left files"
    finally:
        shutil.rmtree(out.parent, ignore_errors=True)


@SETTINGS
@given(env=st.lists(text, max_size=3), profile=st.one_of(st.sampled_from(["production", "debug"]), text),
       allocator=st.one_of(st.sampled_from(["jemalloc", "none", "tcmalloc"]), text))
def test_env(env, profile, allocator):
    argv = ["env", "--device", "a3", "--profile", profile, "--allocator", allocator]
    for item in env:
        argv += ["--env", item]
    assert_clean(run(*argv)[1])


@SETTINGS
@given(release=text, arch=st.one_of(st.sampled_from(["aarch64", "x86_64"]), text), matrix=text)
def test_matrix(release, arch, matrix):
    assert_clean(run("matrix", "--release", release, "--arch", arch, "--matrix", matrix or "matrix.yaml")[1])


@SETTINGS
@given(dest=st.sampled_from(["README.md/sub", "/proc/forbidden", "/proc/1/x", "tasks.py"]), device=text)
def test_fetch_dest(dest, device):
    assert assert_clean(run("fetch", "--dest", dest, "--device", device)[1]), "a bad --dest was not refused"


@SETTINGS
@given(registry=text, namespace=text)
def test_publish_dry_run(registry, namespace):
    pytest.importorskip("docker")
    assert_clean(run("publish", "--dry-run", "--registry", registry, "--namespace", namespace, "--device", "a3")[1])


NUMBER = st.one_of(st.sampled_from(["1", "2", "0", "-1", "abc", "1.5", "٣", "99999999999999999999", " 3"]), text)


@SETTINGS
@given(runs=NUMBER, replicas=NUMBER)
def test_number_flags(runs, replicas):
    # an unknown device stops the bench right after its flags are checked, so nothing is built
    assert assert_clean(run("bench", "--runs", runs, "--device", "a9")[1])
    assert assert_clean(run("run", "--print", "--format", "k8s", "--image", "x", "--replicas", replicas)[1])


@SETTINGS
@given(devices=st.one_of(st.sampled_from(["0", "0-3,6", "3-1", "0,0", "x", ""]), text),
       volume=st.one_of(st.sampled_from(["/tmp:/models:ro", "/nonexistent:/m", "relative:/m", "/tmp:rel", "/tmp"]),
                        text),
       publish=st.one_of(st.sampled_from(["8000:8000", "127.0.0.1:8000:8000/tcp", "70000:1", "a:b"]), text),
       replicas=NUMBER, fmt=st.sampled_from(["docker", "compose", "k8s", "docker,compose", "helm"]))
def test_run_print(devices, volume, publish, replicas, fmt):
    out, err = run("run", "--print", "--format", fmt, "--image", "reg.example/ai/img:1", "--devices", devices,
                   "-v", volume, "-p", publish, "--replicas", replicas)
    if not assert_clean(err):
        assert out.strip(), "run --print neither printed nor refused"


# --- file inputs and index URLs (issue 41) --------------------------------------------------------------------------
MATRIX_BYTES = (ROOT / "matrix.yaml").read_bytes()


@st.composite
def mutated_matrix(draw) -> bytes:
    """matrix.yaml with a random slice replaced by random bytes: mostly near-valid files, which reach the schema and
    the rules, not just the YAML parser."""
    start = draw(st.integers(0, len(MATRIX_BYTES)))
    end = draw(st.integers(start, min(len(MATRIX_BYTES), start + 200)))
    return MATRIX_BYTES[:start] + draw(st.binary(max_size=40)) + MATRIX_BYTES[end:]


@SETTINGS
@given(data=st.one_of(mutated_matrix(), st.binary(max_size=200)))
def test_matrix_bytes(data):
    path = Path(tempfile.mkdtemp(prefix="fuzz-matrix-")) / "matrix.yaml"
    try:
        path.write_bytes(data)
        assert_clean(run("env", "--device", "a3", "--matrix", str(path))[1])
    finally:
        shutil.rmtree(path.parent, ignore_errors=True)


JSON = st.recursive(st.none() | st.booleans() | st.integers() | st.text(max_size=10),
                    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3),
                    max_leaves=8)


@SETTINGS
@given(doc=st.one_of(JSON, st.fixed_dictionaries({"tags": st.dictionaries(st.text(max_size=20), JSON, max_size=3)})),
       raw=st.one_of(st.none(), st.binary(max_size=30)))
def test_report_json(doc, raw):
    import json

    path = Path(tempfile.mkdtemp(prefix="fuzz-report-")) / "report.json"
    try:
        path.write_bytes(raw if raw is not None else json.dumps(doc).encode())
        assert_clean(run("published-refs", "--report", str(path))[1])
        assert_clean(run("npu-gate", "--report", str(path), "--runs", str(path.parent / "none.tsv"))[1])
    finally:
        shutil.rmtree(path.parent, ignore_errors=True)


URL = st.one_of(st.sampled_from(["", " ", "pypi.org/simple", "https://", "https:///simple", "http://h:port/x",
                                 "ftp://h/simple", "file:///srv/simple", "https://pypi.org/simple", "http://[::1"]),
                text)


@SETTINGS
@given(index=URL, extra=URL)
def test_index_urls(index, extra):
    # lock --check reads the URLs and asks no index: each is checked, then the locks are (no network either way)
    assert_clean(run("lock", "--check", "--release", "cann9.1.0-pt2.10.0", "--index-url", index,
                     "--extra-index-url", extra)[1])
