"""Which project a command works on, found the way git finds its repository (DESIGN 21): `--project DIR` (or
ASCEND_IMAGES_PROJECT) when given; else the current directory or its nearest parent holding matrix.yaml; else the
checkout the command was installed from. Defaults that name files of the project (matrix.yaml, build/, README.md) are
resolved against it, so the command works from any directory; paths a user types stay relative to where they typed.
"""

from __future__ import annotations

import os
from pathlib import Path

from ascend_images.checkout import ROOT as INSTALLED_FROM
from ascend_images.errors import AscendImagesError

ENV_VAR = "ASCEND_IMAGES_PROJECT"
MARKER = "matrix.yaml"


class ProjectNotFound(AscendImagesError):
    """No project holds a matrix.yaml where a command looks for one."""


_root: Path | None = None


def find_root(given: str | None = None, cwd: Path | None = None, installed_from: Path = INSTALLED_FROM) -> Path:
    """The project directory (see the module's docstring), or ProjectNotFound naming every place looked at."""
    flag = "--project" if given is not None else ENV_VAR
    given = given if given is not None else os.environ.get(ENV_VAR)
    if given is not None:
        if not given.strip():
            raise ProjectNotFound(f"{flag} is empty: name the directory that holds the project's {MARKER}")
        path = Path(given).expanduser()
        if not (path / MARKER).is_file():
            raise ProjectNotFound(f"{flag} {given}: no {MARKER} in {path.resolve()}")
        return path.resolve()
    here = (cwd or Path.cwd()).resolve()
    for directory in (here, *here.parents):
        if (directory / MARKER).is_file():
            return directory
    if (installed_from / MARKER).is_file():
        return installed_from
    raise ProjectNotFound(f"no project found: no {MARKER} in {here} or any parent, the command was installed from no "
                          f"checkout holding one ({installed_from}), and neither --project DIR nor {ENV_VAR} names one")


def set_root(path: Path) -> None:
    global _root
    _root = path


def root() -> Path:
    """The project this process works on: set by the program before a task runs, else found now."""
    global _root
    if _root is None:
        _root = find_root()
    return _root


def project_path(value: str | None, default: str) -> str:
    """A path flag's value as given, or its default inside the project (e.g. build/, matrix.yaml)."""
    return value if value is not None else str(root() / default)
