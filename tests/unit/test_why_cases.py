"""Issue 37's "Why" list, each case typed as a user types it into a shell and run through the installed
`ascend-images` script: the exit code and the words the user reads. Cases that would ask Docker stop before it
(--print, or a flag check that fails first), so none needs an engine."""

from __future__ import annotations

import json
import shlex
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.unit import console_script

Check = Callable[[subprocess.CompletedProcess], None]


def says(stream: str, *words: str) -> Check:
    def check(result: subprocess.CompletedProcess) -> None:
        text = getattr(result, stream)
        for word in words:
            assert word in text, f"{word!r} not in {stream}:\n{text}"
    return check


def refused(message: str) -> Check:
    """An error is one line on stderr, starting with what the user needs, and nothing on stdout."""
    def check(result: subprocess.CompletedProcess) -> None:
        assert result.stderr.startswith(message), result.stderr
        assert "Traceback" not in result.stderr and result.stdout == ""
    return check


def one_json_list_of(count: int) -> Check:
    def check(result: subprocess.CompletedProcess) -> None:
        doc = json.loads(result.stdout)  # several documents one after the other fail here ("Extra data")
        assert isinstance(doc, list) and len(doc) == count, doc
        assert "warning [torch-npu-cann-pair]" in result.stderr  # the rules' warning, off stdout
    return check


def names_the_file_line_and_column(result: subprocess.CompletedProcess) -> None:
    broken = result.args[-1]  # the --matrix path the command line named
    assert f"{broken}:3:2: not valid YAML: while parsing a flow sequence expected ',' or ']'" in result.stderr, \
        result.stderr
    assert "<unicode string>" not in result.stderr


def lock_check_passes(result: subprocess.CompletedProcess) -> None:
    last = result.stdout.splitlines()[-1]
    fresh, of = last.split(" locks fresh")[0].split(" of ")
    assert fresh == of and int(of) > 0, last
    assert "skipped (the matrix says why)" in last
    assert "FAILED" not in result.stdout


CASES: list[tuple[str, str, int, Check]] = [
    # an index that does not answer is an error naming the host, never "nothing newer"; 3: try again later
    ("outdated-unreachable-index", "ascend-images outdated --index-url http://127.0.0.1:9/simple", 3,
     refused("error: cannot reach the index at 127.0.0.1:9: [Errno 111] Connection refused")),
    ("env-json-several-variants",
     "ascend-images env --release cann8.3.rc1-sglang0.5.8 --arch x86_64 --os debian12 --json", 0,
     one_json_list_of(2)),
    # compose would replace $HOME with the host's value; $$ is its literal $
    ("compose-dollar", "ascend-images run --print --format compose --device a2 -e 'X=cost $HOME'", 0,
     says("stdout", "X: cost $$HOME")),
    ("devices-beyond-the-node", "ascend-images run --print --device a2 --devices 99999", 2,
     refused("error: --devices 99999: device 99999 is beyond an a2 node, which has at most 8 NPUs; valid: "
             "indices 0-7")),
    ("empty-device", "ascend-images run --print --device ''", 2,
     refused("error: --device is empty: name a device (a2, a3, a5;")),
    ("empty-image", "ascend-images run --print --image ''", 2, refused("error: --image is empty: give an image "
                                                                       "reference")),
    ("render-check-and-update", "ascend-images render --check --update", 2,
     refused("error: --check and --update contradict each other")),
    ("run-env-names-the-overlay", "ascend-images run --print --format docker --device a2 -e X=1", 0,
     says("stderr", "note: --env selects the overlay image ascend-images/", "-env",
          "; built by: ascend-images build --device a2 --env X=1")),
    ("broken-matrix-yaml", "ascend-images env --matrix {broken}", 2, names_the_file_line_and_column),
    ("lock-check-clean-checkout", "ascend-images lock --check", 0, lock_check_passes),
    ("mistyped-task", "ascend-images biuld", 2,
     refused("error: no task named 'biuld'; did you mean build or rebuild? (`ascend-images --list` lists them)")),
    ("mistyped-flag", "ascend-images build --devcie a3", 2,
     refused("error: build has no flag --devcie; did you mean --device")),
    ("version", "ascend-images --version", 0, says("stdout", "ascend-images 0.1.0 (commit ", "matrix.yaml sha256:")),
]


@pytest.fixture(scope="module")
def script(tmp_path_factory) -> Path:
    return console_script.find_or_install(tmp_path_factory.mktemp("venv"))


@pytest.mark.parametrize(("line", "code", "check"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_as_a_user_types_it(script, tmp_path, line, code, check):
    broken = tmp_path / "matrix.yaml"
    broken.write_text("a: 1\nb: [1, 2\nc: 3\n", encoding="utf-8")  # the flow list is never closed
    argv = shlex.split(line.format(broken=broken))
    assert argv[0] == "ascend-images"
    result = console_script.run(script, *argv[1:])
    assert result.returncode == code, result.stdout + result.stderr
    check(result)
