"""The task part of a command line, read before invoke's parser sees it, so that no flag is dropped or misread.

invoke's parser differs from Docker's and argparse's in ways that cost a user dearly: a task's positional argument
eats `--help` (`publish --help` published to a registry called `--help`); a value flag given twice makes its second
value an unknown task; a repeatable flag left without its value is dropped; `-it` is `-i t` (an image called `t`);
invoke's own options (`--dry`, `--echo`...) after the task name are taken without a word. Here the tokens are read
once against the same parser contexts invoke builds, with these rules:

- `--help` or `-h` before `--` asks for the task's help, whatever else is on the line;
- a flag that takes a value and has none (the line ends, or the next token is a flag) is a usage error naming it;
- a value flag given twice takes the last value, as Docker's and argparse's do (repeatable flags keep appending);
- Docker's combined short flags (`-it`, `-ti`, `-dit`) are refused with what to use instead;
- an option of the program itself (invoke's core options, or `--project`) after the task name is refused.

Anything else (an unknown task or flag, a missing positional) is left to invoke, whose errors program.explain words.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Mapping
from dataclasses import dataclass, field

from invoke.parser import Argument, ParserContext

HELP = ("--help", "-h")
# Docker's boolean short flags of `docker run` that users type together: -i (keep stdin open), -t (a terminal),
# -d (detach). Here -i is --image and -d is --device, as in every task.
DOCKER_COMBINED = re.compile(r"-[itd]{2,3}")
DOCKER_LETTER = {
    "-d": "-d is --device here, as in every task; Docker's -d (detach) is --detach",
    "-t": "Docker's -t (a terminal) has no counterpart: run streams the container's output; for an interactive "
          "shell, print the docker line (--print --format docker) and run it",
    "-i": "-i is --image here; Docker's -i (keep stdin open) has no counterpart: run streams the container's output",
}


class UsageError(Exception):
    """The command line is wrong (exit 2): the message is one line, naming the flag as typed."""


@dataclass
class Reading:
    """What the task part of a line asks: the tokens for invoke (each value flag given once: its last value), or the
    help of a task."""

    tokens: list[str]
    help_for: str | None = None
    problems: list[str] = field(default_factory=list)  # the first is the error, unless help was asked


def _flag_like(token: str) -> bool:
    return token.startswith("-") and token != "-" and not _number(token)


def _number(token: str) -> bool:
    return re.fullmatch(r"-\d+(\.\d+)?", token) is not None


def _shown(argument: Argument) -> str:
    long = next((n for n in argument.names if len(n) > 1), argument.name)
    return "--" + long.replace("_", "-")


def _as_typed(token: str, argument: Argument) -> str:
    long = _shown(argument)
    return token if token == long else f"{token} ({long})"


def missing_value(token: str, argument: Argument, task: str, binary: str) -> str:
    what = f": {argument.help}" if argument.help else ""
    hint = f"; {DOCKER_LETTER[token]}" if token in DOCKER_LETTER and task == "run" else ""
    return f"{_as_typed(token, argument)} needs a value{what}{hint} (`{binary} --help {task}`)"


def _split(token: str, context: ParserContext) -> tuple[str, str | None]:
    """A flag token as invoke splits it: `--name=value`, `-xVALUE` for a value flag `-x`; else the token alone."""
    if "=" in token:
        name, _, value = token.partition("=")
        return name, value
    if not token.startswith("--") and len(token) > 2:
        head = token[:2]
        if head in context.flags and context.flags[head].takes_value:
            return head, token[2:]
    return token, None


def read_task_part(tokens: list[str], contexts: Mapping[str, ParserContext], core: ParserContext, *,
                   binary: str, own_core: frozenset[str]) -> Reading:
    """Read the task part of a line (what follows the program's own options, before `--`). Never raises: the first
    problem is in `problems`, and `help_for` names the task whose help was asked for (help wins over problems)."""
    out: list[str] = []
    problems: list[str] = []
    help_for: str | None = None
    context: ParserContext | None = None
    positionals: list[Argument] = []
    pending: tuple[str, Argument, int] | None = None  # a flag waiting for its value: as typed, argument, its index
    given: dict[tuple[int, str], list[int]] = {}  # (task number, argument) -> indexes in `out` of its last value
    drop: set[int] = set()
    task_number = 0
    lost = False  # an unknown token: invoke says what is wrong; only --help is still looked for

    def took_value(argument: Argument, indexes: list[int]) -> None:
        key = (task_number, argument.name)
        if argument in positionals:  # a positional argument given as a flag (`publish --registry R`)
            positionals.remove(argument)
        if argument.kind is not list and key in given:
            drop.update(given[key])  # the last value wins
        given[key] = indexes

    for token in tokens:
        if token in HELP:
            if help_for is None and context is not None:
                help_for = context.name
            continue
        if lost:
            out.append(token)
            continue
        if pending is not None:
            typed, argument, at = pending
            name = _split(token, context)[0] if context is not None else token
            if _flag_like(token) and (name in context.flags or name in context.inverse_flags or name in core.flags
                                      or DOCKER_COMBINED.fullmatch(token)):
                problems.append(missing_value(typed, argument, context.name, binary))
                lost = True
                out.append(token)
                continue
            out.append(token)
            took_value(argument, [at, len(out) - 1])
            pending = None
            continue
        if context is None or (not _flag_like(token) and not positionals):
            if token in contexts:
                context = contexts[token]
                positionals = list(context.positional_args)
                task_number += 1
            else:
                lost = True  # an unknown task (or a value too many): invoke's error, with the nearest names
            out.append(token)
            continue
        if not _flag_like(token):
            positionals.pop(0)
            out.append(token)
            continue
        if DOCKER_COMBINED.fullmatch(token):
            problems.append(f"{token} is docker run's ({' '.join('-' + c for c in token[1:])}); {context.name} "
                            "takes no such flags: run streams the container's output (an interactive shell: print "
                            "the docker line with --print --format docker and run it); in the background: --detach")
            lost = True
            out.append(token)
            continue
        name, value = _split(token, context)
        if name in context.flags:
            argument = context.flags[name]
            out.append(token)
            if not argument.takes_value:
                continue
            if value is not None:
                took_value(argument, [len(out) - 1])
            else:
                pending = (token, argument, len(out) - 1)
            continue
        if name in context.inverse_flags:
            out.append(token)
            continue
        if name in core.flags:
            argument = core.flags[name]
            if argument.name in own_core:
                problems.append(f"{_as_typed(name, argument)} is an option of {binary} itself: give it before "
                                f"the task name ({binary} {name} ... {context.name} ...)")
            else:
                close = difflib.get_close_matches(name, [f for f in context.flags if f.startswith("--")], n=2,
                                                  cutoff=0.6)
                mean = f"; did you mean {' or '.join(close)}?" if close else ""
                problems.append(f"{context.name} has no flag {name} (invoke's own {_shown(argument)} is not taken: "
                                f"nothing here runs shell commands){mean} (`{binary} --help {context.name}`)")
            lost = True
            out.append(token)
            continue
        if name in DOCKER_LETTER and context.name == "run":
            problems.append(f"run has no flag {name}: {DOCKER_LETTER[name]}")
            lost = True
        else:
            lost = True  # an unknown flag: invoke's error names the nearest ones
        out.append(token)
    if pending is not None and not lost:
        problems.append(missing_value(pending[0], pending[1], context.name, binary))  # type: ignore[union-attr]
    return Reading([t for i, t in enumerate(out) if i not in drop], help_for, problems)
