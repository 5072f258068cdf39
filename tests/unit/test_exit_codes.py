"""Exit codes with one meaning each (issue 54, item 2), the same in `invoke` and `ascend-images`: 0 done; 1 the task
ran and found something; 2 the command line is wrong; 3 an engine, index or registry could not be reached or refused;
130 interrupted, after one line on stderr. Before, 2 meant both a wrong command line and an engine or index that did
not answer, and Ctrl-C during a network wait exited 1 without a word."""

from __future__ import annotations

import signal
import socket
import subprocess
import sys
import time

import pytest
from invoke import Exit

from ascend_images.cli.taskdef import run_body
from tests.fixtures.signals import default_sigint
from tests.unit import console_script
from tests.unit.inprocess import PROGRAMS, Listener

from .helpers import ROOT, documents_copy, holding

both = pytest.mark.parametrize("program", PROGRAMS.values(), ids=PROGRAMS.keys())


def closed_port() -> int:
    with socket.socket() as sock:  # bound, never listening: a connection is refused at once
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@both
def test_0_done(program):
    code, out, err = program(["env", "--device", "a3", "-q"])
    assert (code, err) == (0, "") and "ASCEND_RT_VISIBLE_DEVICES" not in err and out


@both
def test_1_the_task_ran_and_found_something(program, tmp_path):
    readme, docs = documents_copy(tmp_path)
    page = holding("rendered", readme, docs)
    text = page.read_text(encoding="utf-8")
    page.write_text(text.replace("<!-- generated:rendered -->\n", "<!-- generated:rendered -->\nstale\n"),
                    encoding="utf-8")
    code, out, _ = program(["readme", "--check", "--readme", str(readme), "--docs", str(docs)])
    assert code == 1 and "+stale" not in out and "-stale" in out


def test_1_a_stage_that_did_not_build():
    """A build that ran and failed is what the task found, not a wrong command line (before: 2)."""
    from ascend_images.errors import BuildError

    def build() -> None:
        raise BuildError("[3/5 cann] ascend-images/cann:9.1.0: RUN failed (exit 1); full log: build/logs/cann.log")

    with pytest.raises(Exit) as caught:
        run_body(build)
    assert caught.value.code == 1 and caught.value.message.startswith("error: [3/5 cann]")


@both
@pytest.mark.parametrize("argv", [["biuld"], ["env", "--devcie", "a3"], ["env", "--device"], ["env", "--device", "a9"],
                                  ["inspect"], ["--dry", "env"]],
                         ids=["unknown-task", "unknown-flag", "no-value", "bad-value", "no-argument", "core-option"])
def test_2_the_command_line_is_wrong(program, argv):
    code, out, err = program(argv)
    assert code == 2 and out == "" and err.startswith("error: ") and err.count("\n") == 1, (argv, code, err)


@both
def test_3_no_engine(program, monkeypatch):
    port = closed_port()
    monkeypatch.setenv("DOCKER_HOST", f"tcp://127.0.0.1:{port}")
    code, out, err = program(["inspect", "ascend-images/os:debian12-arm64"])
    assert code == 3 and out == "", err
    assert err.startswith(f"error: no Docker engine answers at tcp://127.0.0.1:{port}"), err


@both
def test_3_no_index(program):
    port = closed_port()
    code, out, err = program(["outdated", "--package", "torch", "--index-url", f"http://127.0.0.1:{port}/simple"])
    assert code == 3 and out == "", err
    assert err.startswith(f"error: cannot reach the index at 127.0.0.1:{port}"), err


def test_3_no_registry():
    """A registry that never answers, through the retries (their sleeps skipped)."""
    from ascend_images.release.registry import RegistryClient

    client = RegistryClient(f"127.0.0.1:{closed_port()}", sleep=lambda seconds: None)
    with pytest.raises(Exit) as caught:
        run_body(client.manifest, "ai/x", "1")
    assert caught.value.code == 3 and "still failing after 6 attempts" in caught.value.message


def test_3_a_download_that_never_comes(tmp_path):
    from ascend_images.inputs.download import Policy, Request, fetch_file

    url = f"http://127.0.0.1:{closed_port()}/cann.run"
    with pytest.raises(Exit) as caught:
        run_body(fetch_file, Request(url, "cann.run"), tmp_path, policy=Policy(attempts=2, backoff=0))
    assert caught.value.code == 3 and "gave up after 2 attempts" in caught.value.message


@pytest.fixture(scope="module")
def script(tmp_path_factory):
    return console_script.find_or_install(tmp_path_factory.mktemp("venv"))


@pytest.mark.parametrize("entry", ["ascend-images", "invoke"])
def test_130_ctrl_c_while_an_index_keeps_silent(script, tmp_path, entry):
    """SIGINT to a real process blocked reading from a server that accepted the connection and never answers."""
    silent = Listener(silent=True)
    command = ([str(script)] if entry == "ascend-images"
               else [sys.executable, "-m", "invoke", "--search-root", str(ROOT)])
    process = subprocess.Popen([*command, "outdated", "--package", "torch", "--index-url",
                                f"http://127.0.0.1:{silent.port}/simple"], cwd=tmp_path, env=console_script.ENV,
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, preexec_fn=default_sigint)
    try:
        assert silent.knocked.wait(60), "the command never asked the index"
        time.sleep(0.3)  # inside the read now
        started = time.monotonic()
        process.send_signal(signal.SIGINT)
        out, err = process.communicate(timeout=30)
    finally:
        process.kill()
        silent.close()
    assert process.returncode == 130, (out, err)
    assert time.monotonic() - started < 10
    assert err == ("interrupted: outdated stopped by Ctrl-C; what it had finished is kept whole, nothing "
                   "half-written is left\n"), err
    assert out == "" and list(tmp_path.iterdir()) == []


def test_130_ctrl_c_in_a_foreground_run_stops_and_removes_the_container_and_says_so():
    """Ctrl-C while `run` streams a container's output: the container stopped and removed, then one line and 130
    (before, run returned 130 as if it were the container's own code, without a word)."""
    import io

    from ascend_images.cli.taskdef import ProjectTask
    from ascend_images.runtime.run import RunSpec, run_container

    calls: list[str] = []

    class Container:
        name, id = "c", "0123456789abcdef"

        def start(self):
            calls.append("start")

        def logs(self, **_):
            raise KeyboardInterrupt

        def stop(self, timeout):
            calls.append("stop")

        def remove(self, force=False):
            calls.append("remove")

    class Client:
        containers = type("Containers", (), {"create": staticmethod(lambda **_: Container())})()

    def body(c):
        return run_container(Client(), RunSpec("img", devices=(0,)), io.StringIO())

    body.__name__ = "run"
    from invoke import Context

    with pytest.raises(Exit) as caught:
        ProjectTask(body)(Context())
    assert calls == ["start", "stop", "remove"]
    assert caught.value.code == 130 and caught.value.message.startswith("interrupted: run stopped by Ctrl-C")
