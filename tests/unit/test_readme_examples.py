"""The examples of README and of the manual's pages (docs/*.md) are commands a user copies (issue 41: README showed
`invoke lint -v`, which is refused). Every `invoke ...` or `ascend-images ...` line of their shell blocks is parsed as
the program parses it (task, flags, values given, arguments present), without running; the ones that need neither
Docker nor the network run for real, through the installed script, from a directory that is not the checkout."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest
from invoke import Exit

from ascend_images.cli.collection import tasks
from ascend_images.cli.program import AscendImagesProgram, install_suggestions
from dev.tasks import tasks as dev_tasks
from tests.unit import console_script

from .helpers import ROOT

COMMAND = re.compile(r"^(?:\.venv/bin/)?(invoke|ascend-images)\s")


DOCUMENTS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


def readme_commands(path: Path) -> list[str]:
    """The commands of one document's shell blocks."""
    text = path.read_text(encoding="utf-8")
    found = []
    for block in re.findall(r"```(?:bash|sh|console)?\n(.*?)```", text, re.S):
        joined = re.sub(r"\\\n\s*", " ", block)  # continuation lines are one command
        for line in joined.splitlines():
            # README's first lines chain set-up and the command: each part on its own (before, a line that did not
            # start with the command was passed over whole, so command 1's build was never parsed)
            for part in re.split(r"\s&&\s", line.strip()):
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


FOUND = {path.relative_to(ROOT).as_posix(): readme_commands(path) for path in DOCUMENTS}
COMMANDS = [command for commands in FOUND.values() for command in commands]
IDS = [f"{name}: {command}" for name, commands in FOUND.items() for command in commands]


def test_readme_and_the_manual_have_commands():
    # a change to how they are found must not silently find none
    assert FOUND["README.md"][0].startswith(".venv/bin/invoke build --device a3 --backend sglang")  # command 1
    assert len(COMMANDS) > 30  # the manual's usage sections
    for page in ("matrix", "building", "locks", "rl", "running", "image-tests", "publishing", "benchmark", "sources"):
        assert FOUND[f"docs/{page}.md"], page


@pytest.mark.parametrize("command", COMMANDS, ids=IDS)
def test_each_readme_command_parses(command):
    install_suggestions()
    collection = tasks()
    for dev_task in dev_tasks():  # the manual's benchmark page runs the maintainers' bench from a checkout
        collection.add_task(dev_task)
    program = AscendImagesProgram(name="ascend-images", binary="ascend-images", namespace=collection, version="test")
    argv = ["ascend-images", *words(command)[1:]]
    program.create_config()
    try:
        program.parse_core(argv)
        program.parse_collection()
        program.parse_tasks()
    except Exit as exc:
        pytest.fail(f"`{command}` is refused: {exc.message}")
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
