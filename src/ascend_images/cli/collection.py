"""Every task of the project, in one invoke Collection: what `invoke` (through tasks.py) and `ascend-images` run."""

from __future__ import annotations

from invoke import Collection

from ascend_images.cli import build, imagetest, inputs, lint, readme, rebuild, release, run

AREAS = (build, imagetest, run, inputs, release, rebuild, lint, readme)


def tasks() -> Collection:
    collection = Collection()
    for area in AREAS:
        for task in Collection.from_module(area).tasks.values():
            collection.add_task(task)
    return collection
