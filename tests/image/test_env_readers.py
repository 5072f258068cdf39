"""Every tuned variable an image bakes is read by what the image ships (issue 62): for each variable of its
/etc/ascend-images/env.json but what CANN's scripts and the OS image set and what the user asked for, the reader
tests/fixtures/env_readers/readers.yaml names (read off the upstream files, never matrix.yaml) must name it in its
installed files here (a .py file, or a shared library's strings). A CANN reader is a test double here: its check
runs on an NPU host (tests/npu). One grep per reader's package, asked once per image and session."""

from __future__ import annotations

import json
import shlex
import subprocess
from pathlib import Path

import pytest
import yaml

from tests.conftest import ROOT
from tests.image.facts import image_fact, inspected

pytestmark = [pytest.mark.docker, pytest.mark.slow]
READERS = yaml.safe_load((ROOT / "tests/fixtures/env_readers/readers.yaml").read_text())["readers"]
SITE = "/usr/local/python/lib/python3.11/site-packages"
NOT_TUNED = ("cann:", "user", "allocator:")  # CANN's scripts and image, the user's --env, LD_PRELOAD


def container_root(host) -> Path | None:
    """The container's root as this host sees it (/proc/PID/root of its first process), when the engine runs here
    and this process may read it; else None."""
    pid = inspected(host.backend.name)["State"]["Pid"]
    root = Path(f"/proc/{pid}/root")
    try:
        return root if pid and (root / SITE.lstrip("/")).is_dir() else None
    except OSError:  # not root here, or the process is gone
        return None


@image_fact
def named_in(host, package: str, names: tuple[str, ...]) -> list[str]:
    """Which of `names` the installed files of `package` name, each as a whole identifier. The grep runs on this
    host's own arch over the container's files where it can reach them (an emulated grep over torch's libraries took
    10 s an image), else in the container."""
    patterns = [arg for n in names for arg in ("-e", n)]
    root = container_root(host)
    if root is not None:  # -r follows no symbolic link, so nothing outside the container's tree is read
        found = subprocess.run(["grep", "-rhoaw", *patterns, str(root / SITE.lstrip("/") / package)],
                               capture_output=True, text=True, errors="replace", check=False).stdout
        return sorted(set(found.split()))
    quoted = " ".join(shlex.quote(arg) for arg in patterns)
    out = host.run(f"grep -rhoaw {quoted} {SITE}/{package} 2>/dev/null | sort -u")
    return out.stdout.split()


def baked(host) -> dict[str, dict]:
    document = json.loads(host.file("/etc/ascend-images/env.json").content_string)
    return {name: entry for name, entry in document["variables"].items()
            if not entry["layer"].startswith(NOT_TUNED)}


def unread_variables(host, image: str) -> list[str]:
    """One line for each tuned variable `image` bakes that its reader (readers.yaml's) names in none of its installed
    files, or that no reader this image ships reads: the variable, the image, the reader expected."""
    variables = baked(host)
    assert variables, "no tuned variable at all: env.json lost its table"
    unread, wanted = [], {}
    for name in variables:
        fact = READERS.get(name)
        if fact is None:
            unread.append(f"{name}: baked in {image}, and no reader is known (tests/fixtures/env_readers/readers.yaml)")
        elif "other" in fact:
            unread.append(f"{name}: read by {fact['other']}, which {image} does not ship ({fact['source']})")
        elif "python" in fact:
            for package in fact["python"]:
                wanted.setdefault(package, set()).add(name)
    found = {package: set(named_in(host, package, tuple(sorted(names)))) for package, names in wanted.items()}
    for name in variables:
        fact = READERS.get(name, {})
        if "python" in fact and not any(name in found[package] for package in fact["python"]):
            unread.append(f"{name}: baked in {image}, and its reader ({', '.join(fact['python'])}: "
                          f"{fact['source']}) names it in none of its installed files")
    return unread


def test_every_baked_variable_is_read_by_what_the_image_ships(host, image):
    unread = unread_variables(host, image)
    assert not unread, "\n".join(unread)
