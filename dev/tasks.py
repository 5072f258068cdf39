"""The maintainers' tasks, added to invoke's collection by tasks.py (the installed `ascend-images` has none)."""

from __future__ import annotations

from invoke import Collection, Task

from dev import benchmark, cicosts


def tasks() -> list[Task]:
    return [task for area in (benchmark, cicosts) for task in Collection.from_module(area).tasks.values()]
