"""Flags that used to be accepted and did something unexpected (issue 37): each is refused, naming the flag."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.conftest import ROOT


def invoke(*argv: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "invoke", *argv], cwd=ROOT, capture_output=True, text=True,
                          timeout=120)


@pytest.mark.parametrize(("argv", "message"), [
    (["run", "--print", "--device", "a2", "--devices", "99999"],
     "error: --devices 99999: device 99999 is beyond an a2 node, which has at most 8 NPUs; valid: indices 0-7"),
    (["run", "--print", "--device", "a2", "--devices", "0-8"],
     "error: --devices 0-8: device 8 is beyond an a2 node, which has at most 8 NPUs; valid: indices 0-7"),
    (["run", "--print", "--device", "a3", "--devices", "16"],
     "error: --devices 16: device 16 is beyond an a3 node, which has at most 16 NPUs; valid: indices 0-15"),
    (["env", "--device", ""], "error: --device is empty: name a device (a2, a3, a5;"),
    (["env", "--backend", ","], "error: --backend is empty: name a backend ("),
    (["run", "--print", "--image", ""], "error: --image is empty: give an image reference"),
    (["test", "--image", ""], "error: --image is empty: give an image reference to test"),
    (["render", "--check", "--update"], "error: --check and --update contradict each other"),
])
def test_refused(argv, message):
    result = invoke(*argv)
    assert result.returncode == 2, result.stdout + result.stderr
    assert result.stderr.startswith(message), result.stderr
    assert result.stdout == ""


def test_the_last_npu_of_a_node_is_accepted():
    result = invoke("run", "--print", "--format", "docker", "--device", "a3", "--devices", "0-15")
    assert result.returncode == 0, result.stderr
    assert "-e ASCEND_RT_VISIBLE_DEVICES=0,1,2,3,4,5,6,7,8,9,10,11,12,13,14,15" in result.stdout


def test_run_env_says_which_overlay_image_runs_and_how_to_build_it():
    result = invoke("run", "--print", "--format", "docker", "--device", "a2", "-e", "X=a b")
    assert result.returncode == 0, result.stderr
    note = result.stderr.splitlines()[0]
    assert note.startswith("note: --env selects the overlay image ascend-images/")
    assert note.endswith("-env0c3c3839; built by: invoke build --device a2 --env 'X=a b'")
    assert "note:" not in result.stdout


def test_run_env_over_a_framework_names_the_build_that_makes_it():
    result = invoke("run", "--print", "--format", "docker", "--device", "a3", "--backend", "vllm", "--framework",
                    "verl", "--namespace", "team-x", "-e", "X=1")
    assert result.returncode == 0, result.stderr
    note = result.stderr.splitlines()[0]
    assert note.startswith("note: --env selects the overlay image team-x/verl:0.9.1-vllm0.23.0-cann9.1.0-a3-"), note
    assert note.endswith("; built by: invoke build --device a3 --backend vllm --framework verl --env X=1 "
                         "--namespace team-x"), note


def test_broken_matrix_yaml_names_the_file_line_and_column(tmp_path):
    broken = tmp_path / "matrix.yaml"
    broken.write_text("a: 1\nb: [1, 2\nc: 3\n", encoding="utf-8")  # the flow list is never closed
    result = invoke("env", "--matrix", str(broken))
    assert result.returncode == 2
    assert f"{broken}:3:2: not valid YAML: while parsing a flow sequence expected ',' or ']'" in result.stderr
    assert "<unicode string>" not in result.stderr


@pytest.mark.parametrize(("args", "message"), [
    (("--print", "--build", "--device", "a2", "-e", "X=1"), "error: --build and --print contradict each other"),
    (("--build", "--image", "some/image:tag"), "error: --build builds the selection's overlay"),
])
def test_run_build_is_refused_where_there_is_nothing_to_build(args, message):
    result = invoke("run", *args)
    assert result.returncode == 2, result.stdout + result.stderr
    assert result.stderr.startswith(message), result.stderr
    assert result.stdout == ""
