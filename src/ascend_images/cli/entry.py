"""The top of the command line: the collection both entry points run (`invoke` through tasks.py, and the
`ascend-images` script), with the generated sections that describe the command line itself registered for
`invoke readme` (cli/clidoc.py reads the collection and the program, which the task modules below must not import)."""

from __future__ import annotations

import os
import sys

from invoke import Collection

from ascend_images.checkout import version
from ascend_images.cli import clidoc
from ascend_images.cli.collection import tasks
from ascend_images.cli.program import NAME, AscendImagesProgram, install_suggestions
from ascend_images.cli.taskdef import DOC_SECTIONS


def namespace() -> Collection:
    DOC_SECTIONS.update(clidoc.SECTIONS)
    return tasks()


def main(argv: list[str] | None = None) -> None:
    install_suggestions()
    try:
        AscendImagesProgram(name=NAME, binary=NAME, binary_names=[NAME], namespace=namespace(),
                            version=version()).run(argv)
    except BrokenPipeError:  # `ascend-images ... | head`: the reader has what it wanted
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        sys.exit(0)


if __name__ == "__main__":
    main()
