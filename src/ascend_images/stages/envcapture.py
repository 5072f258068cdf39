"""Capture what sourcing the CANN env scripts changes, by running the freshly installed image once.

Docker cannot `source` into ENV; so the build runs `bash` in the image, sources each script and
prints the environment before and after. The difference becomes ENV in the next layer, and every
process of the final image, shell or not, has it at no start-up cost.
"""

from __future__ import annotations

import shlex

import docker

from ascend_images.errors import BuildError

SEPARATOR = "\0--ascend-images-after--\0"
# set by bash itself, not by the scripts
SHELL_NOISE = {"_", "PWD", "OLDPWD", "SHLVL"}
PATH_LIKE = {"PATH", "LD_LIBRARY_PATH", "PYTHONPATH", "ASCEND_CUSTOM_OPP_PATH"}


def _parse(block: str) -> dict[str, str]:
    out = {}
    for item in block.split("\0"):
        if "=" in item:
            key, _, value = item.partition("=")
            out[key] = value
    return out


def clean_path_list(value: str) -> str:
    """Drop empty entries (an empty entry means the working directory) and repeats, keep order."""
    seen: list[str] = []
    for part in value.split(":"):
        if part and part not in seen:
            seen.append(part)
    return ":".join(seen)


def diff_env(before: dict[str, str], after: dict[str, str]) -> dict[str, str]:
    changed = {}
    for key, value in after.items():
        if key in SHELL_NOISE or before.get(key) == value:
            continue
        changed[key] = clean_path_list(value) if key in PATH_LIKE else value
    return dict(sorted(changed.items()))


def capture_env(client: docker.DockerClient, image: str, scripts: list[str]) -> dict[str, str]:
    sources = " && ".join(f"source {shlex.join(s.split())}" for s in scripts)
    script = f"env -0; printf '{SEPARATOR.replace(chr(0), chr(92) + '0')}'; {sources} && env -0"
    container = client.api.create_container(
        image, command=["/bin/bash", "--noprofile", "--norc", "-c", script], entrypoint=[], detach=True
    )
    try:
        client.api.start(container)
        status = client.api.wait(container, timeout=300)
        out = client.api.logs(container, stdout=True, stderr=False).decode("utf-8", "replace")
        err = client.api.logs(container, stdout=False, stderr=True).decode("utf-8", "replace")
    finally:
        client.api.remove_container(container, force=True)
    if status.get("StatusCode") != 0 or SEPARATOR not in out:
        raise BuildError(
            f"sourcing the CANN env scripts in {image} failed (exit {status.get('StatusCode')}):\n"
            f"  scripts: {'; '.join(scripts)}\n  stderr: {err.strip()[-2000:]}"
        )
    before, after = out.split(SEPARATOR, 1)
    changed = diff_env(_parse(before), _parse(after))
    if not changed:
        raise BuildError(f"sourcing {'; '.join(scripts)} in {image} changed no variable: is CANN installed?")
    return changed
