"""`--help` and `-h` on every task print its help, exit 0 and do nothing, whatever else is on the line (issue 54,
item 1): before, a task with a positional argument took `--help` for it and ran (`publish --help` published to a
registry called `--help`). Every task of the collection, with positional-looking words before and after the help
flag, through invoke's own Program loading tasks.py and through `ascend-images`'s; nothing may reach the engine or
an index (DOCKER_HOST and the HTTP proxies point at a listener that counts connections) and nothing may be written
(the working directory, HOME, the XDG directories and the project are temporary and checked empty after)."""

from __future__ import annotations

import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from ascend_images.cli.collection import tasks
from tests.unit import console_script
from tests.unit.inprocess import Listener, run_ascend_images, run_invoke

from .helpers import ROOT

TASKS = sorted(tasks().task_names)
LINES = [
    ["--help", "{task}"],  # invoke's own form, before the task name
    ["{task}", "--help"],
    ["{task}", "-h"],
    ["{task}", "reg.example/ns", "--help"],
    ["{task}", "--help", "reg.example/ns"],
    ["{task}", "x", "y", "-h"],
    ["{task}", "-h", "x", "y"],
    ["{task}", "--device", "--help"],  # where a value is due: help still wins
]


@pytest.fixture
def nowhere(tmp_path, monkeypatch) -> Iterator[tuple[Listener, list[Path]]]:
    listener = Listener()
    project = tmp_path / "project"
    project.mkdir()
    shutil.copy(ROOT / "matrix.yaml", project / "matrix.yaml")
    shutil.copy(ROOT / "pyproject.toml", project / "pyproject.toml")
    watched = [tmp_path / name for name in ("cwd", "home", "cache", "state")]
    for directory in watched:
        directory.mkdir()
    url = f"http://127.0.0.1:{listener.port}"
    env = {"DOCKER_HOST": f"tcp://127.0.0.1:{listener.port}", "HOME": str(watched[1]),
           "XDG_CACHE_HOME": str(watched[2]), "XDG_STATE_HOME": str(watched[3]), "ASCEND_IMAGES_STATE": str(watched[3]),
           "ASCEND_IMAGES_PROJECT": str(project), "http_proxy": url, "https_proxy": url, "HTTP_PROXY": url,
           "HTTPS_PROXY": url, "DOCKER_CONFIG": str(watched[1] / ".docker")}
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    for key in ("no_proxy", "NO_PROXY", "DOCKER_CONTEXT", "ASCEND_IMAGES_CACHE", "ASCEND_IMAGES_WHEELS"):
        monkeypatch.delenv(key, raising=False)
    monkeypatch.chdir(watched[0])
    yield listener, [*watched, project]
    listener.close()


@pytest.mark.parametrize("program", [run_invoke, run_ascend_images], ids=["invoke", "ascend-images"])
@pytest.mark.parametrize("task", TASKS)
def test_help_anywhere_prints_help_and_does_nothing(nowhere, program, task):
    listener, watched = nowhere
    before = {d: sorted(d.rglob("*")) for d in watched}
    for line in LINES:
        argv = [word.format(task=task) for word in line]
        code, out, err = program(argv)
        assert code == 0, (argv, out, err)
        assert out.startswith("Usage: "), (argv, out, err)
        assert f" {task} " in out.splitlines()[0] and "Docstring:" in out and "Options:" in out, (argv, out)
        assert "no notes or progress on stderr" in out, (argv, out)  # the flags' own help (--quiet's), every time
        assert err == "", (argv, err)
    assert listener.connections == 0, f"{task}: something reached for the engine or an index"
    assert {d: sorted(d.rglob("*")) for d in watched} == before, f"{task}: something was written"


@pytest.fixture(scope="module")
def script(tmp_path_factory) -> Path:
    return console_script.find_or_install(tmp_path_factory.mktemp("venv"))


@pytest.mark.parametrize("argv", [["publish", "--help"], ["sbom", "registry.example/x:1", "-h"],
                                  ["diff", "a", "--help", "b"]])
def test_the_installed_commands_agree(script, tmp_path, argv):
    """The real entry points, as a shell starts them: the console script and `python -m invoke`."""
    listener = Listener()
    env = {**console_script.ENV, "DOCKER_HOST": f"tcp://127.0.0.1:{listener.port}"}
    try:
        for command in ([str(script)], [sys.executable, "-m", "invoke", "--search-root", str(ROOT)]):
            result = subprocess.run([*command, *argv], cwd=tmp_path, env=env, capture_output=True, text=True,
                                    timeout=120)
            assert result.returncode == 0, result.stdout + result.stderr
            assert result.stdout.startswith("Usage: ") and f" {argv[0]} " in result.stdout.splitlines()[0]
            assert result.stderr == ""
    finally:
        listener.close()
    assert listener.connections == 0
    assert list(tmp_path.iterdir()) == []
