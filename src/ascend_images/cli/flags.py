"""The short letters of flags: one table, the same letter for a flag in every task that takes it, or none."""

from __future__ import annotations

# One short letter per flag, the same in every task that takes the flag; a flag not named here has none. A letter is
# a promise: `-d` is --device wherever it is accepted, so a user never has to look a letter up per task. Docker's
# habits win where our flags mean what Docker's do (`docker run -v -p -w -e`), which is why --verbose has no letter:
# `-v` is --volume in `run`, and giving --verbose `-v` elsewhere would make one letter mean two things. `-h` is
# help's, anywhere on the line (cli.argv). invoke's own core flags for running shell commands (-d debug, -e echo,
# -p pty, -w warn-only, -f config) are refused before the task name; after it the task's letter is the only meaning.
SHORT_FLAGS: dict[str, str] = {
    # the selection, taken by most tasks
    "device": "d",
    "backend": "b",
    "release": "r",
    "os": "o",
    "arch": "a",
    "profile": "f",
    "allocator": "l",
    "env": "e",  # docker run -e: the container's environment (the tuned defaults' overrides)
    "matrix": "m",
    # docker run's
    "volume": "v",
    "publish": "p",
    "workdir": "w",
    # the rest
    "image": "i",
    "quiet": "q",
}
NO_SHORT_FLAG = {"h"}  # help's, in every task


def short_flag(name: str) -> str | None:
    """The short letter of a flag (dashed or underscored), or None."""
    return SHORT_FLAGS.get(name.replace("_", "-"))
