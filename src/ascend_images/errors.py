"""Errors that end a command with a clear, specific message (no traceback)."""

from __future__ import annotations


class AscendImagesError(Exception):
    """Base class: the message is meant for the user as it stands."""


class MatrixError(AscendImagesError):
    """matrix.yaml does not load or does not follow the schema."""

    def __init__(self, path: str, problems: list[str]):
        self.path = path
        self.problems = problems
        if len(problems) == 1:  # one line, naming the file (a YAML problem names its line and column too)
            problem = problems[0]
            super().__init__(problem if problem.startswith(f"{path}:") else f"{path}: {problem}")
            return
        lines = "\n".join(f"  - {p}" for p in problems)
        super().__init__(f"{path}: {len(problems)} problem(s):\n{lines}")


class SelectionError(AscendImagesError):
    """A flag names something the matrix does not have."""


class RuleError(AscendImagesError):
    """A variant breaks one or more compatibility rules."""


class BuildError(AscendImagesError):
    """A stage failed to build."""


class Interrupted(BuildError):
    """The user stopped a build (Ctrl-C): nothing of the stage in progress was tagged."""


class Unreachable(AscendImagesError):
    """An engine, an index or a registry could not be reached, or refused: the command line was right, and the same
    command may work later (exit 3, apart from a usage error's 2)."""


class DockerUnavailable(Unreachable):
    """No Docker engine answers."""
