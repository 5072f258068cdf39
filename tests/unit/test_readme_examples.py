"""README's examples are commands a user copies (issue 41: it showed `invoke lint -v`, which is refused). Every
`invoke ...` or `ascend-images ...` line of its shell blocks is parsed as the program parses it (task, flags, values
given, arguments present), without running; the ones that need neither Docker nor the network run for real, through
the installed script, from a directory that is not the checkout."""

from __future__ import annotations

import re
import shlex

import pytest
from invoke import Exit

from ascend_images.cli.collection import tasks
from ascend_images.cli.program import AscendImagesProgram, install_suggestions
from tests.unit import console_script

from .helpers import ROOT

COMMAND = re.compile(r"^(?:\.venv/bin/)?(invoke|ascend-images)\s")


def readme_commands() -> list[str]:
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    found = []
    for block in re.findall(r"```(?:bash|sh|console)?\n(.*?)```", text, re.S):
        joined = re.sub(r"\\\n\s*", " ", block)  # continuation lines are one command
        for line in joined.splitlines():
            line = line.strip()
            if not COMMAND.match(line):
                continue
            for part in re.split(r"\s&&\s", line):  # README's first lines chain set-up and the command
                part = part.strip()
                if COMMAND.match(part):
                    found.append(part)
    return found


def words(command: str) -> list[str]:
    """The command's words, up to a shell comment or a pipe (`| jq .`)."""
    out = []
    for word in shlex.split(command, comments=True):
        if word == "|":
            break
        out.append(word)
    return out


COMMANDS = readme_commands()


def test_readme_has_commands():
    assert len(COMMANDS) > 30  # the usage sections; a change to how they are found must not silently find none


@pytest.mark.parametrize("command", COMMANDS)
def test_each_readme_command_parses(command):
    install_suggestions()
    program = AscendImagesProgram(name="ascend-images", binary="ascend-images", namespace=tasks(), version="test")
    argv = ["ascend-images", *words(command)[1:]]
    program.create_config()
    try:
        program.parse_core(argv)
        program.parse_collection()
        program.parse_tasks()
    except Exit as exc:
        pytest.fail(f"README's `{command}` is refused: {exc.message}")
    assert program.tasks, command


# what runs here for real: no engine, no network
RUNS_HERE = ("matrix", "env", "render", "lock --check", "ci-matrix")


@pytest.fixture(scope="module")
def script(tmp_path_factory):
    return console_script.find_or_install(tmp_path_factory.mktemp("venv"))


@pytest.mark.parametrize("command", [c for c in COMMANDS
                                     if " ".join(words(c)[1:]).startswith(RUNS_HERE) and "--out" not in c])
def test_each_local_readme_command_runs_from_elsewhere(command, script, tmp_path):
    result = console_script.run(script, *words(command)[1:], cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-2000:]
    assert "Traceback" not in result.stderr
