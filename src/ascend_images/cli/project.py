"""Which project a command works on, found the way git finds its repository (DESIGN 21), by a marker of its own: a
directory holding a pyproject.toml whose [project] name is ascend-images (a checkout of this project, with its
matrix.yaml). `--project DIR` (or ASCEND_IMAGES_PROJECT) when given; else the current directory or its nearest parent
that is one; else the checkout the command was installed from. A matrix.yaml of somebody else's on the way up (no
such pyproject.toml beside it) is passed over and named in a note, with the flags that would use it. Defaults that
name files of the project (matrix.yaml, build/, README.md) are resolved against it, so the command works from any
directory; paths a user types stay relative to where they typed.
"""

from __future__ import annotations

import os
import tomllib
from pathlib import Path

from ascend_images.checkout import ROOT as INSTALLED_FROM
from ascend_images.errors import AscendImagesError

ENV_VAR = "ASCEND_IMAGES_PROJECT"
NAME = "ascend-images"
MARKER = "pyproject.toml"
MATRIX = "matrix.yaml"


class ProjectNotFound(AscendImagesError):
    """No ascend-images checkout where a command looks for one."""


_root: Path | None = None
_passed_over: list[Path] = []  # foreign matrix.yaml files the search went past, for root()'s note


def is_project(directory: Path) -> bool:
    """A checkout of this project: its pyproject.toml names it, and its matrix.yaml is there."""
    try:
        data = tomllib.loads((directory / MARKER).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError):
        return False
    project = data.get("project")
    return isinstance(project, dict) and project.get("name") == NAME and (directory / MATRIX).is_file()


def find_root(given: str | None = None, cwd: Path | None = None, installed_from: Path = INSTALLED_FROM) -> Path:
    """The project directory (see the module's docstring), or ProjectNotFound naming every place looked at."""
    flag = "--project" if given is not None else ENV_VAR
    given = given if given is not None else os.environ.get(ENV_VAR)
    if given is not None:
        if not given.strip():
            raise ProjectNotFound(f"{flag} is empty: name the directory of an {NAME} checkout")
        path = Path(given).expanduser()
        if not is_project(path):
            raise ProjectNotFound(f"{flag} {given}: not an {NAME} checkout: {path.resolve()} needs a {MATRIX} and a "
                                  f"{MARKER} whose [project] name is {NAME}")
        return path.resolve()
    here = (cwd or Path.cwd()).resolve()
    _passed_over.clear()
    for directory in (here, *here.parents):
        if is_project(directory):
            return directory
        if (directory / MATRIX).is_file():
            _passed_over.append(directory / MATRIX)
    if is_project(installed_from):
        return installed_from
    raise ProjectNotFound(f"no project found: no {NAME} checkout ({MARKER} naming {NAME}, with its {MATRIX}) in "
                          f"{here} or any parent, the command was installed from none ({installed_from}), and "
                          f"neither --project DIR nor {ENV_VAR} names one")


def passed_over_note(found: Path) -> str | None:
    """The note for a matrix.yaml the search passed over on its way to `found`."""
    if not _passed_over:
        return None
    other = _passed_over[0]
    return (f"note: {other} is not an {NAME} checkout's (no {MARKER} naming {NAME} beside it): using {found}; "
            f"--matrix {other} uses that matrix, --project DIR another checkout")


def set_root(path: Path | None) -> None:
    global _root
    _root = path


def root() -> Path:
    """The project this process works on: set by the program before a task runs, else found now."""
    global _root
    if _root is None:
        _root = find_root()
        said = passed_over_note(_root)
        if said:
            from ascend_images.console import note

            note(said)
    return _root


def project_path(value: str | None, default: str) -> str:
    """A path flag's value as given, or its default inside the project (e.g. build/, matrix.yaml)."""
    return value if value is not None else str(root() / default)
