"""No flag dropped or misread (issue 54, item 3), in `invoke` and `ascend-images` alike: invoke's own core options are
refused before and after the task name; a flag without its value is a usage error naming it; a value flag given
twice takes the last value (Docker's and argparse's rule) while a repeatable flag appends; Docker's combined short
flags are refused with what to use instead. Each refusal: exit 2, one line on stderr, nothing on stdout."""

from __future__ import annotations

import json

import pytest
import yaml

from tests.unit.inprocess import PROGRAMS

both = pytest.mark.parametrize("program", PROGRAMS.values(), ids=PROGRAMS.keys())


def refused(program, argv: list[str], *words: str) -> str:
    code, out, err = program(argv)
    assert code == 2, (argv, out, err)
    assert out == "" and err.count("\n") == 1 and err.startswith("error: "), (argv, out, err)
    for word in words:
        assert word in err, (argv, err)
    return err


@both
@pytest.mark.parametrize(("argv", "words"), [
    (["publish", "r.example/ns", "--device", "a3", "--dry"], ["publish has no flag --dry", "did you mean --dry-run?"]),
    (["env", "--device", "a3", "--echo"], ["env has no flag --echo", "invoke's own --echo is not taken"]),
    (["env", "--pty", "--device", "a3"], ["env has no flag --pty"]),
    (["env", "--device", "a3", "--warn-only"], ["env has no flag --warn-only"]),
    (["env", "--hide", "both"], ["env has no flag --hide"]),
    (["matrix", "--write-pyc"], ["matrix has no flag --write-pyc"]),
    (["env", "--device", "a3", "--version"], ["--version", "give it before the task name"]),
    (["env", "--list"], ["--list", "give it before the task name"]),
], ids=["dry-after", "echo", "pty", "warn-only", "hide", "write-pyc", "version-after", "list-after"])
def test_core_options_after_the_task_name(program, argv, words):
    refused(program, argv, *words)


def test_project_after_the_task_name_is_refused():
    refused(PROGRAMS["ascend-images"], ["env", "--project", "/tmp"], "--project is an option of ascend-images itself",
            "before the task name")


@both
@pytest.mark.parametrize(("argv", "words"), [
    (["--dry", "env"], ["has no option --dry"]),
    (["--echo", "env", "--device", "a3"], ["has no option --echo"]),
    (["-e", "env"], ["has no option -e (invoke's --echo)"]),
    (["--warn-only", "matrix"], ["has no option --warn-only"]),
], ids=["dry", "echo", "e", "warn-only"])
def test_core_options_before_the_task_name(program, argv, words):
    refused(program, argv, *words)


@both
@pytest.mark.parametrize(("argv", "words"), [
    (["run", "--print", "--device", "a2", "--env"], ["--env needs a value: KEY=VALUE"]),
    (["run", "--print", "--device", "a2", "-e", "A=1", "-e"], ["-e (--env) needs a value"]),
    (["run", "--print", "--device", "a2", "-v"], ["-v (--volume) needs a value: HOST:CONTAINER"]),
    (["run", "--print", "--device", "a2", "-p", "--name", "x"], ["-p (--publish) needs a value"]),
    (["env", "--device", "a2", "--device"], ["--device needs a value"]),
    (["run", "--print", "--device", "a2", "-d"], ["-d (--device) needs a value",
                                                  "Docker's -d (detach) is --detach"]),
    (["env", "--device", "--json"], ["--device needs a value"]),
], ids=["env-last", "e-again", "v", "p-before-flag", "device-again", "d-docker", "device-before-flag"])
def test_a_flag_without_its_value(program, argv, words):
    refused(program, argv, *words)


@both
def test_a_value_flag_given_twice_takes_the_last(program):
    code, out, err = program(["env", "--device", "a2", "--device", "a3", "--json"])
    assert code == 0, err
    assert [v["variant"].split("/")[1] for v in json.loads(out)] == ["a3"]
    code, out, err = program(["run", "--print", "--format", "compose", "--image", "a/b:1", "-i", "c/d:2",
                              "--name", "one", "--name=two"])
    assert code == 0, err
    service = yaml.safe_load(out)["services"]["ascend"]
    assert service["image"] == "c/d:2" and service["container_name"] == "two"


@both
def test_a_repeatable_flag_keeps_every_value(program):
    code, out, err = program(["run", "--print", "--format", "compose", "--image", "a/b:1", "-e", "A=1", "--env",
                              "B=2", "-e=C=3"])
    assert code == 0, err
    environment = yaml.safe_load(out)["services"]["ascend"]["environment"]
    assert (environment["A"], environment["B"], environment["C"]) == ("1", "2", "3")


@both
@pytest.mark.parametrize("flags", ["-it", "-ti", "-dit", "-itd"])
def test_dockers_combined_short_flags(program, flags):
    refused(program, ["run", "--print", "--image", "a/b:1", flags, "--", "bash"], f"{flags} is docker run's",
            "--detach")


@both
def test_dockers_tty_letter_alone(program):
    refused(program, ["run", "--image", "a/b:1", "-t"], "run has no flag -t", "Docker's -t (a terminal)")


@both
def test_a_value_that_looks_like_a_number_is_still_a_value(program):
    refused(program, ["run", "--print", "--format", "k8s", "--image", "a/b:1", "--replicas", "-1"],
            "--replicas -1: expected a whole number")
