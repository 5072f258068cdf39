"""What CANN's env scripts set, as the matrix declares it (cann.env_sets): the official image's ENV lines applied in
order over the image below, with path lists cleaned. The cann stage bakes the result as ENV and its build checks it
against what sourcing the scripts really sets (images/common/rootfs/.../check-cann-env), so a declaration that no
longer matches CANN stops the build instead of shipping a wrong environment."""

from __future__ import annotations

import re

# lists whose empty entries mean the working directory, and whose repeats only slow every lookup down
PATH_LIKE = ("PATH", "LD_LIBRARY_PATH", "PYTHONPATH", "ASCEND_CUSTOM_OPP_PATH")
_REFERENCE = re.compile(r"\$(?:\{(\w+)\}|(\w+))")


def clean_path_list(value: str) -> str:
    """Drop empty entries (an empty entry means the working directory) and repeats, keep order."""
    return ":".join(dict.fromkeys(part for part in value.split(":") if part))


def unquoted(value: str) -> str:
    """A Dockerfile ENV value as the official image writes it: `""` is the empty string."""
    return value[1:-1] if len(value) >= 2 and value[0] == value[-1] == '"' else value


def expand(lines: list[str], below: dict[str, str]) -> dict[str, str]:
    """`NAME=value` lines applied in order, each `$VAR` / `${VAR}` replaced by what is set so far (`below`: the image
    below's values; unset is empty), as Docker applies ENV lines; returns what the lines set, path lists cleaned.
    A value of `below` may itself be a reference (`${PATH}`), which the Dockerfile's ENV then expands."""
    env = dict(below)
    changed: dict[str, str] = {}
    for line in lines:
        name, _, value = line.partition("=")
        env[name] = changed[name] = _REFERENCE.sub(lambda m: env.get(m.group(1) or m.group(2), ""), unquoted(value))
    return {name: clean_path_list(value) if name in PATH_LIKE else value for name, value in changed.items()}
