"""The base of every model of matrix.yaml: unknown keys are errors (a misspelt key silently ignored is how a
tuned default goes missing from every image), and a model is frozen once read."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict

from ascend_images.matrix.versions import AscendVersion


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


def _check_ascend(value: str) -> str:
    AscendVersion.parse(value)
    return value
