"""`ascend-images`: the project's own command (DESIGN 18), invoke's Program over the very tasks `invoke` runs
(cli.collection, which tasks.py hands to invoke too).

It shows and takes only the project's options (`--help`, `--version`, `--list`, `--project DIR`, completion); invoke's
options for running shell commands (`--echo`, `--pty`, `--dry`...) mean nothing to an image build tool and are
refused. Usage errors (an unknown task or flag, a missing argument) are one line naming the nearest candidates and
exit 2, as value errors do, in `invoke` too (tasks.py installs the same handling).
"""

from __future__ import annotations

import ast
import difflib
import functools
import logging
import re
from collections.abc import Callable, Iterable

from invoke import Exit, Program
from invoke.exceptions import ParseError
from invoke.parser import Argument

from ascend_images.checkout import describe, file_sha256, templates_missing, version
from ascend_images.cli.argv import read_task_part
from ascend_images.cli.project import ProjectNotFound, find_root, set_root
from ascend_images.cli.taskdef import INTERRUPTED, USAGE_ERROR

NAME = "ascend-images"
UNKNOWN = re.compile(r"^No idea what (.+) is!$")  # invoke's parser's words for a token it cannot place
NEEDS_VALUE = re.compile(r"^Flag (?:'(?P<quoted>.+)'|<Argument: (?P<name>[\w-]+)[^>]*>) needed value and was "
                         r"(?:given none|not given one)!$")
MISSING_POSITIONAL = re.compile(r"^'(.+)' did not receive required positional arguments: (.+)$")
# invoke's core options an image build tool offers; the others (run()'s echo, pty, dry, warn-only, hide, sudo,
# timeouts, config files, bytecode writing, debug, dedupe) are refused wherever they are given. `invoke` keeps the two
# that find tasks.py (--collection, --search-root); ascend-images has its collection built in and no such options.
OWN_CORE = frozenset({"help", "version", "list", "list-format", "list-depth", "project", "complete",
                      "print-completion-script", "collection", "search-root"})


# --- --version ----------------------------------------------------------------------------------------------------
def version_line() -> str:
    try:
        matrix = find_root() / "matrix.yaml"
        digest = f"sha256:{file_sha256(matrix)[:12]}"
    except (ProjectNotFound, OSError):
        digest = "none (no project here)"
    installed = " (installed without its checkout)" if templates_missing() else ""
    return f"{NAME} {version()}{installed} (commit {describe()}, matrix.yaml {digest})"


# --- usage errors, one line each ----------------------------------------------------------------------------------
def nearest(word: str, candidates: Iterable[str]) -> list[str]:
    return difflib.get_close_matches(word, sorted(set(candidates)), n=3, cutoff=0.6)


def explain(error: ParseError, program: Program) -> str:
    """invoke's parse error as one sentence: an unknown token names the nearest flags of the task being parsed (for a
    flag) or the nearest task names; a flag without its value and a missing argument say what is needed."""
    text = str(error)
    binary = shown_binary(program)
    context = getattr(error, "context", None)
    if found := NEEDS_VALUE.match(text):
        flag = found["quoted"] or f"--{found['name'].replace('_', '-')}"
        return f"{flag} needs a value (`{binary} --help {context.name if context and context.name else ''}`)"
    if found := MISSING_POSITIONAL.match(text):
        return f"{found[1]} needs {found[2].replace(chr(39), '').upper()} (`{binary} --help {found[1]}`)"
    found = UNKNOWN.match(text)
    if not found:
        return text
    try:
        token = str(ast.literal_eval(found[1]))
    except (ValueError, SyntaxError):
        token = found[1]
    if token.startswith("-") and context is not None and context.name:
        flags = [f for f in (*context.flags, *context.inverse_flags) if f.startswith("--")]
        close = nearest(token, flags)
        return f"{context.name} has no flag {token}{_did_you_mean(close)} (`{binary} --help {context.name}` lists them)"
    if token.startswith("-"):
        return f"{binary} has no option {token} (`{binary} --help` lists them)"
    parser = getattr(program, "parser", None)
    tasks = list(parser.contexts) if parser is not None else list(program.collection.task_names)
    close = nearest(token, tasks)
    return f"no task named {token!r}{_did_you_mean(close)} (`{binary} --list` lists them)"


def _did_you_mean(close: list[str]) -> str:
    return f"; did you mean {' or '.join(close)}?" if close else ""


def _explaining(parse: Callable[..., None]) -> Callable[..., None]:
    @functools.wraps(parse)
    def wrapper(self: Program, *args: object) -> None:
        try:
            parse(self, *args)
        except ParseError as exc:
            raise Exit(f"error: {explain(exc, self)}", code=USAGE_ERROR) from None
        except KeyboardInterrupt:  # invoke would exit 1 without a word
            raise Exit("interrupted: stopped by Ctrl-C before any task ran", code=INTERRUPTED) from None

    wrapper.explaining = True  # type: ignore[attr-defined]
    return wrapper


def as_typed(program: Program, name: str) -> str:
    """How the user spelled a core option given before the task name (`-e` or `--echo`), for the error."""
    argument = program.initial_context.args[name]
    spellings = {f"-{n}" if len(n) == 1 else f"--{n}" for n in argument.names}
    for token in program.argv[1:]:
        if token == "--":
            break
        flag = token.partition("=")[0]
        if flag in spellings:
            return flag
        if flag.startswith("-") and not flag.startswith("--") and any(f"-{letter}" in spellings for letter in flag[1:]):
            return flag  # a cluster such as -ep
    return f"--{name}"


def refuse_foreign_core(program: Program) -> None:
    """invoke's options for running shell commands, given before the task name, are refused (after it, the reading of
    the task part refuses them)."""
    binary = shown_binary(program)
    for name, argument in program.args.items():
        if name not in OWN_CORE and argument.got_value:
            if name == "debug":  # invoke turned its debug log on before tasks.py was read: the refusal stays one line
                logging.getLogger("invoke").disabled = True
            typed = as_typed(program, name)
            meaning = f" (invoke's --{name})" if typed != f"--{name}" else ""
            raise Exit(f"error: {binary} has no option {typed}{meaning}: task flags go after the task name "
                       f"(`{binary} --help` lists its options)", code=USAGE_ERROR)


def shown_binary(program: Program) -> str:
    """The program's name as a user types it: invoke calls itself `inv[oke]`."""
    return program.binary.replace("[", "").replace("]", "")


def _reading(parse_tasks: Callable[..., None]) -> Callable[..., None]:
    """Read the task part strictly (cli.argv) before invoke parses it: help wins, then the first problem is the
    error, else invoke parses the tokens with each value flag's last value."""

    @functools.wraps(parse_tasks)
    def wrapper(self: Program) -> None:
        refuse_foreign_core(self)
        parser = self._make_parser()
        reading = read_task_part(list(self.core.unparsed), parser.contexts, self.initial_context,
                                 binary=shown_binary(self), own_core=OWN_CORE)
        if reading.help_for is not None:
            self.parser = parser
            self.print_task_help(reading.help_for)
            raise Exit
        if reading.problems:
            raise Exit(f"error: {reading.problems[0]}", code=USAGE_ERROR)
        self.core.unparsed[:] = reading.tokens
        parse_tasks(self)

    wrapper.reading = True  # type: ignore[attr-defined]
    return wrapper


def install_suggestions(program_class: type[Program] = Program) -> None:
    """Make a Program read its command line strictly (cli.argv) and word its usage errors in one line with the
    nearest candidates, exit 2. `invoke` loads tasks.py before it parses the tasks part of its command line, so
    tasks.py calling this still changes `invoke biuld` and `invoke publish --help`."""
    if not getattr(program_class.parse_tasks, "reading", False):
        program_class.parse_tasks = _reading(program_class.parse_tasks)  # type: ignore[method-assign]
    for name in ("parse_core", "parse_tasks", "parse_cleanup"):  # core options, task names and flags, --help TASK
        method = getattr(program_class, name)
        if not getattr(method, "explaining", False):
            setattr(program_class, name, _explaining(method))


class AscendImagesProgram(Program):
    def core_args(self) -> list[Argument]:
        return [*super().core_args(),
                Argument(names=("project",), help="the project directory, an ascend-images checkout (default: the "
                                                  "current directory or the nearest parent that is one, else the "
                                                  "checkout this command was installed from; or set "
                                                  "ASCEND_IMAGES_PROJECT)")]

    def parse_core(self, argv: list[str] | None) -> None:
        super().parse_core(argv)
        refuse_foreign_core(self)
        missing = templates_missing()
        if missing and not self.args.version.value:
            raise Exit(f"error: {missing}", code=USAGE_ERROR)
        given = self.args.project.value
        if given is not None:
            try:
                set_root(find_root(given))
            except ProjectNotFound as exc:
                raise Exit(f"error: {exc}", code=USAGE_ERROR) from None

    def print_help(self) -> None:
        print(f"Usage: {self.binary} [--project DIR] <task> [--task-options] ...")
        print("")
        print("Options:")
        print("")
        own = [t for t in self.initial_context.help_tuples() if set(re.findall(r"--([a-z-]+)", t[0])) & set(OWN_CORE)]
        self.print_columns(own)
        self.list_tasks()

    def print_version(self) -> None:
        print(version_line())
