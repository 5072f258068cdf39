"""Issue 41's "Why" list, each case typed as a user types it into a shell, through the installed `ascend-images`
script, from a directory that is not the checkout: the exit code and the words the user reads. A refusal is one line
on stderr, exit 2 (usage and value errors alike), nothing on stdout and nothing written."""

from __future__ import annotations

import json
import shlex
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest
import yaml

from ascend_images.cli.project import ProjectNotFound, find_root
from tests.fixtures.httpserver import Server
from tests.unit import console_script

from .helpers import ROOT

Check = Callable[[subprocess.CompletedProcess], None]


def refused(start: str, *more: str) -> Check:
    def check(result: subprocess.CompletedProcess) -> None:
        assert result.returncode == 2, result.stdout + result.stderr
        assert result.stderr.startswith(start), result.stderr
        assert result.stderr.count("\n") == 1, f"more than one line:\n{result.stderr}"
        for word in more:
            assert word in result.stderr, result.stderr
        assert "Traceback" not in result.stderr and result.stdout == ""
    return check


@pytest.fixture(scope="module")
def script(tmp_path_factory) -> Path:
    return console_script.find_or_install(tmp_path_factory.mktemp("venv"))


@pytest.fixture
def elsewhere(tmp_path) -> Path:
    """A directory that is not the checkout, and no project's either."""
    away = tmp_path / "elsewhere"
    away.mkdir()
    return away


def typed(script: Path, line: str, cwd: Path, **files: str) -> subprocess.CompletedProcess:
    argv = shlex.split(line.format(**files))
    assert argv[0] == "ascend-images"
    return console_script.run(script, *argv[1:], cwd=cwd)


# --- tracebacks before ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize(("line", "check"), [
    ("ascend-images outdated --index-url ''", refused("error: --index-url is empty: give the index's URL")),
    ("ascend-images outdated --index-url pypi.org/simple",
     refused("error: --index-url pypi.org/simple: not an http(s) URL")),
    ("ascend-images outdated --index-url https:///simple", refused("error: --index-url https:///simple: the URL names "
                                                                   "no host")),
    ("ascend-images lock --check --index-url ftp://mirror/simple",
     refused("error: --index-url ftp://mirror/simple: not an http(s) URL")),
    ("ascend-images lock --check --extra-index-url ''", refused("error: --extra-index-url is empty")),
], ids=["empty", "scheme-less", "no-host", "ftp", "extra-empty"])
def test_index_urls(script, elsewhere, line, check):
    check(typed(script, line, elsewhere))


def test_a_matrix_that_is_not_utf8(script, elsewhere):
    bad = elsewhere / "matrix.yaml"
    bad.write_bytes((ROOT / "matrix.yaml").read_bytes().replace(b"Atlas", b"Atl\xe4s", 1))
    result = typed(script, "ascend-images env --matrix {m}", elsewhere, m=str(bad))
    refused(f"error: {bad}: not UTF-8 text (byte 0xe4 at offset")(result)


@pytest.mark.parametrize("report", ['{"tags": [1, 2]}', "[]", '{"tags": {"r/x:1": "latest"}}', "\xff\xfe",
                                    '{"tag": {}}'],
                         ids=["tags-a-list", "a-list", "not-a-digest", "not-utf8", "no-tags"])
@pytest.mark.parametrize("task", ["published-refs", "npu-gate"])
def test_a_publish_report_of_the_wrong_shape(script, elsewhere, report, task):
    path = elsewhere / "report.json"
    path.write_bytes(report.encode("latin-1"))
    result = typed(script, f"ascend-images {task} --report {{r}}", elsewhere, r=str(path))
    refused(f"error: {path}: not a publish report")(result)


# --- errors that blamed the wrong thing ----------------------------------------------------------------------------
def test_render_into_a_place_that_cannot_be_written(script, elsewhere):
    (elsewhere / "a-file").write_text("x")
    refused("error: --out /proc/forbidden: nothing can be made under /proc")(
        typed(script, "ascend-images render --device a3 --out /proc/forbidden", elsewhere))
    refused(f"error: --out {elsewhere / 'a-file' / 'sub'}: {elsewhere / 'a-file'} is a file, not a directory")(
        typed(script, "ascend-images render --device a3 --out {o}", elsewhere, o=str(elsewhere / "a-file" / "sub")))


@pytest.mark.parametrize("line", ["ascend-images inspect ''", "ascend-images sbom ' '", "ascend-images diff '' x"])
def test_an_empty_image_is_named_before_any_engine_is_asked(script, elsewhere, line):
    result = typed(script, line, elsewhere)
    assert result.returncode == 2 and "is empty: give an image reference" in result.stderr, result.stderr
    assert "Docker engine" not in result.stderr


# --- flags taken and ignored ---------------------------------------------------------------------------------------
def test_matrix_honours_the_selection(script, elsewhere):
    refused("error: unknown device 'a9' (from --device). Valid: a2, a3, a5")(
        typed(script, "ascend-images matrix --device a9 --backend nope", elsewhere))
    narrowed = typed(script, "ascend-images matrix --device a3 --backend vllm --release cann9.1.0-pt2.10.0", elsewhere)
    assert narrowed.returncode == 0, narrowed.stderr
    variants = [line for line in narrowed.stdout.splitlines() if line.startswith("cann9.1.0-pt2.10.0/")]
    assert variants and all("/a3/vllm/" in line for line in variants), variants


def test_the_same_device_twice(script, elsewhere):
    refused("error: --device a2,a2: a2 is named twice")(typed(script, "ascend-images env --device a2,a2", elsewhere))


def test_duplicate_keys_in_the_matrix(script, elsewhere):
    text = (ROOT / "matrix.yaml").read_text(encoding="utf-8")
    broken = elsewhere / "matrix.yaml"
    broken.write_text(text + "\ndevices: {}\n", encoding="utf-8")  # a second top-level `devices:`
    result = typed(script, "ascend-images env --matrix {m}", elsewhere, m=str(broken))
    line = text.count("\n") + 2
    refused(f"error: {broken}:{line}:1: not valid YAML: key 'devices' is given twice in this mapping")(result)


# --- empty paths ----------------------------------------------------------------------------------------------------
@pytest.mark.parametrize(("line", "flag"), [
    ("ascend-images render --out ''", "--out"), ("ascend-images env --matrix ''", "--matrix"),
    ("ascend-images build --device a3 --work-dir ''", "--work-dir"),
    ("ascend-images build --device a3 --wheelhouse ''", "--wheelhouse"),
    ("ascend-images fetch --device a3 --dest ''", "--dest"), ("ascend-images readme --readme ''", "--readme"),
    ("ascend-images publish --device a3 --report '' r.example/ns", "--report"),
    ("ascend-images --project '' env", "--project"), ("ascend-images fetch --device a3 --state-dir ''", "--state-dir"),
])
def test_an_empty_path_is_refused_and_nothing_is_written(script, elsewhere, line, flag):
    before = set(elsewhere.rglob("*"))
    result = typed(script, line, elsewhere)
    refused(f"error: {flag} is empty")(result)
    assert set(elsewhere.rglob("*")) == before


# --- results apart from notes --------------------------------------------------------------------------------------
def test_render_keeps_rule_warnings_off_stdout(script, elsewhere):
    line = "ascend-images render --release cann8.3.rc1-sglang0.5.8 --device a2 --backend sglang --out {o}"
    loud = typed(script, line, elsewhere, o=str(elsewhere / "ctx"))
    assert loud.returncode == 0, loud.stderr
    assert "warning [" in loud.stderr and "warning [" not in loud.stdout
    assert all(len(row.split()) == 3 for row in loud.stdout.splitlines())  # kind, tag, path: results only
    quiet = typed(script, line + " -q", elsewhere, o=str(elsewhere / "ctx2"))
    assert quiet.returncode == 0 and quiet.stderr == "" and len(quiet.stdout.splitlines()) == len(
        loud.stdout.splitlines())


# --- run --print ----------------------------------------------------------------------------------------------------
def test_compose_keeps_the_container_name_and_a_bad_name_is_refused(script, elsewhere):
    result = typed(script, "ascend-images run --print --format compose --device a2 --name web-0", elsewhere)
    assert result.returncode == 0, result.stderr
    assert yaml.safe_load(result.stdout)["services"]["ascend"]["container_name"] == "web-0"
    refused("error: --name 'my web': Docker refuses it")(
        typed(script, "ascend-images run --print --device a2 --name 'my web'", elsewhere))


def test_k8s_gets_what_was_typed(script, elsewhere):
    result = typed(script, "ascend-images run --print --format k8s --device a3 -e 'X=a$$b $(HOME)' -- echo '$$'",
                   elsewhere)
    assert result.returncode == 0, result.stderr
    container = yaml.safe_load(result.stdout)["spec"]["containers"][0]
    assert {e["name"]: e["value"] for e in container["env"]}["X"] == "a$$$$b $$(HOME)"  # kubelet: a$$b $(HOME)
    assert container["args"] == ["echo", "$$$$"]  # kubelet: $$


# --- an index that has nothing -------------------------------------------------------------------------------------
def test_an_index_answering_404_for_everything_is_no_all_clear(script, elsewhere):
    server = Server()
    try:
        result = typed(script, "ascend-images outdated --index-url {u}", elsewhere, u=server.url("/simple"))
    finally:
        server.stop()
    refused("error: the index at", "has none of the packages asked for", "PEP 503")(result)


# --- usage errors ---------------------------------------------------------------------------------------------------
@pytest.mark.parametrize(("line", "says"), [
    ("ascend-images build --bogus", "error: build has no flag --bogus"),
    ("ascend-images inspect", "error: inspect needs IMAGE"),
    ("ascend-images env --device", "error: --device needs a value"),
    ("ascend-images --echo env", "error: ascend-images has no option --echo"),
    ("ascend-images --dry env", "error: ascend-images has no option --dry"),
])
def test_usage_errors_exit_2_in_one_line(script, elsewhere, line, says):
    refused(says)(typed(script, line, elsewhere))


def test_help_shows_the_projects_options_only(script, elsewhere):
    result = typed(script, "ascend-images --help", elsewhere)
    assert result.returncode == 0
    for foreign in ("--echo", "--pty", "--dry", "--prompt-for-sudo-password", "--write-pyc", "--command-timeout",
                    "--warn-only", "--hide", "--config"):
        assert foreign not in result.stdout, foreign
    assert "--project" in result.stdout and "--version" in result.stdout
    task_help = typed(script, "ascend-images --help lint", elsewhere)
    assert "hadolint" not in task_help.stdout.split("--verbose", 1)[1].splitlines()[0]


# --- from anywhere --------------------------------------------------------------------------------------------------
def test_from_anywhere(script, elsewhere):
    result = typed(script, "ascend-images env --device a3 --json", elsewhere)
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)[0]["variant"] == "cann9.1.0-pt2.10.0/a3/none/debian12/aarch64/system"
    refused(f"error: --project {elsewhere}: not an ascend-images checkout: {elsewhere} needs a matrix.yaml and a "
            "pyproject.toml whose [project] name is ascend-images")(
        typed(script, "ascend-images --project {p} env", elsewhere, p=str(elsewhere)))


def test_the_project_is_found_as_git_finds_a_repository(tmp_path, monkeypatch):
    monkeypatch.delenv("ASCEND_IMAGES_PROJECT", raising=False)
    own = tmp_path / "own"
    (own / "deep" / "er").mkdir(parents=True)
    (own / "matrix.yaml").write_text("x: 1\n")
    (own / "pyproject.toml").write_text('[project]\nname = "ascend-images"\n')  # the project's own marker
    nowhere = tmp_path / "nowhere"
    nowhere.mkdir()
    assert find_root(cwd=own / "deep" / "er", installed_from=nowhere) == own  # the nearest parent
    assert find_root(cwd=nowhere, installed_from=own) == own  # else the checkout it was installed from
    assert find_root(str(own), cwd=nowhere, installed_from=nowhere) == own  # --project
    monkeypatch.setenv("ASCEND_IMAGES_PROJECT", str(own))
    assert find_root(cwd=nowhere, installed_from=nowhere) == own  # the environment variable
    monkeypatch.delenv("ASCEND_IMAGES_PROJECT")
    with pytest.raises(ProjectNotFound) as caught:
        find_root(cwd=nowhere, installed_from=nowhere)
    said = str(caught.value)
    assert str(nowhere) in said and "installed from" in said and "--project DIR" in said
    assert "ASCEND_IMAGES_PROJECT" in said
