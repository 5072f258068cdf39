"""`ascend-images`: the project's own command (DESIGN 18), invoke's Program over the very tasks `invoke` runs.

tasks.py stays the one place the tasks are declared; this module finds it at the root of the checkout the package
was installed from (`pip install -e .` leaves the package at <root>/src/ascend_images), so both commands always run
the same code. Parse errors get the nearest task or flag names, in `invoke` too (tasks.py installs them).
"""

from __future__ import annotations

import ast
import difflib
import functools
import hashlib
import importlib.util
import re
import subprocess
import tomllib
from collections.abc import Callable, Iterable
from pathlib import Path
from types import ModuleType

from invoke import Collection, Program
from invoke.exceptions import ParseError

ROOT = Path(__file__).resolve().parents[2]
NAME = "ascend-images"
UNKNOWN = re.compile(r"^No idea what (.+) is!$")  # invoke's parser's words for a token it cannot place


class NoCheckout(SystemExit):
    """The package runs outside a source checkout: there is no tasks.py to load."""


def load_tasks(root: Path = ROOT) -> ModuleType:
    path = root / "tasks.py"
    if not path.is_file():
        raise NoCheckout(f"error: {NAME} runs the tasks of a source checkout, and there is no {path}: this copy of "
                         f"the package was installed without one. Install it from the checkout with "
                         f"`pip install -e .` (tasks.py sits next to src/), or run `invoke` there")
    spec = importlib.util.spec_from_file_location("tasks", path)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


# --- --version ----------------------------------------------------------------------------------------------------
def project_version(root: Path = ROOT) -> str:
    """pyproject.toml's version: the checkout that runs is the truth, whichever copy pip's metadata describes."""
    try:
        return tomllib.loads((root / "pyproject.toml").read_text(encoding="utf-8"))["project"]["version"]
    except (OSError, KeyError, tomllib.TOMLDecodeError):
        from importlib.metadata import PackageNotFoundError, version

        try:
            return version(NAME)
        except PackageNotFoundError:
            return "unknown"


def git_commit(root: Path = ROOT) -> str:
    """The short commit, with -dirty when tracked files differ from it (as `git describe --dirty`: untracked files
    do not count); "unknown" outside a git checkout or without git."""
    def git(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run(["git", "-C", str(root), *args], capture_output=True, text=True, timeout=30)

    try:
        head = git("rev-parse", "--short", "HEAD")
        if head.returncode:
            return "unknown"
        changed = git("status", "--porcelain", "--untracked-files=no")
    except (OSError, subprocess.TimeoutExpired):
        return "unknown"
    return head.stdout.strip() + ("-dirty" if changed.returncode or changed.stdout.strip() else "")


def matrix_digest(root: Path = ROOT) -> str:
    path = root / "matrix.yaml"
    return hashlib.sha256(path.read_bytes()).hexdigest()[:12] if path.is_file() else "none"


def version_line(root: Path = ROOT) -> str:
    return f"{NAME} {project_version(root)} (commit {git_commit(root)}, matrix.yaml sha256:{matrix_digest(root)})"


# --- did you mean -------------------------------------------------------------------------------------------------
def nearest(word: str, candidates: Iterable[str]) -> list[str]:
    return difflib.get_close_matches(word, sorted(set(candidates)), n=3, cutoff=0.6)


def explain(error: ParseError, program: Program) -> str | None:
    """invoke's "No idea what 'x' is!" as a sentence naming what was meant: the nearest flags of the task being
    parsed for a flag, the nearest task names otherwise. None for any other parse error (kept as invoke words it)."""
    found = UNKNOWN.match(str(error))
    if not found:
        return None
    try:
        token = str(ast.literal_eval(found[1]))
    except (ValueError, SyntaxError):
        token = found[1]
    binary = program.binary
    context = getattr(error, "context", None)
    if token.startswith("-") and context is not None and context.name:
        flags = [f for f in (*context.flags, *context.inverse_flags) if f.startswith("--")]
        close = nearest(token, flags)
        return (f"error: {context.name} has no flag {token}{_did_you_mean(close)} "
                f"(`{binary} --help {context.name}` lists them)")
    parser = getattr(program, "parser", None)
    tasks = list(parser.contexts) if parser is not None else list(program.collection.task_names)
    close = nearest(token, tasks)
    return f"error: no task named {token!r}{_did_you_mean(close)} (`{binary} --list` lists them)"


def _did_you_mean(close: list[str]) -> str:
    return f"; did you mean {' or '.join(close)}?" if close else ""


def _explaining(parse: Callable[[Program], None]) -> Callable[[Program], None]:
    @functools.wraps(parse)
    def wrapper(self: Program) -> None:
        try:
            parse(self)
        except ParseError as exc:
            better = explain(exc, self)
            if better is None:
                raise
            raise ParseError(better, getattr(exc, "context", None)) from None

    wrapper.explaining = True  # type: ignore[attr-defined]
    return wrapper


def install_suggestions(program_class: type[Program] = Program) -> None:
    """Make a Program's unknown-task and unknown-flag errors name the nearest candidates. `invoke` loads tasks.py
    before it parses the tasks part of its command line, so tasks.py calling this still changes `invoke biuld`."""
    for name in ("parse_tasks", "parse_cleanup"):  # the steps that parse task names, their flags, and --help TASK
        method = getattr(program_class, name)
        if not getattr(method, "explaining", False):
            setattr(program_class, name, _explaining(method))


class AscendImagesProgram(Program):
    def print_version(self) -> None:
        print(version_line())


def main(argv: list[str] | None = None) -> None:
    namespace = Collection.from_module(load_tasks())
    install_suggestions()
    AscendImagesProgram(name=NAME, binary=NAME, binary_names=[NAME], namespace=namespace,
                        version=project_version()).run(argv)


if __name__ == "__main__":
    main()
