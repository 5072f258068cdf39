"""The tuned environment as matrix.yaml holds it: each variable's value, source and reader, by layer, and what
the references set that nothing reads."""

from __future__ import annotations

from typing import Any

from packaging.specifiers import InvalidSpecifier, SpecifierSet
from pydantic import Field, field_validator, model_validator

from ascend_images.matrix.strict import Strict


class EnvReader(Strict):
    """What reads a tuned variable (DESIGN 26): a Python package by its distribution name (torch_npu's library is
    torch-npu's), or a CANN component; for a package, the versions of it that read the variable (a PEP 440
    specifier, "" for every version); and where that was read (the package's own files, or CANN's documentation)."""

    package: str | None = None
    cann: str | None = None  # hccl, acl, slog, atb: what CANN's documentation says reads it
    versions: str = ""
    source: str

    @model_validator(mode="after")
    def _one_reader(self) -> EnvReader:
        if (self.package is None) == (self.cann is None):
            raise ValueError("a reader is a package or a CANN component: name one of package, cann")
        if self.versions:
            if self.package is None:
                raise ValueError("versions is a package's: a CANN reader reads in every version here")
            try:
                SpecifierSet(self.versions)
            except InvalidSpecifier:
                raise ValueError(f"versions {self.versions!r} is no PEP 440 specifier (e.g. '>=0.11,<0.30')") from None
        return self


class EnvEntry(Strict):
    value: str
    source: str
    reader: EnvReader

    @field_validator("value", mode="before")
    @classmethod
    def _stringify(cls, value: Any) -> Any:
        # YAML turns 1 and true into int and bool; an environment only holds strings
        if isinstance(value, bool):
            return "true" if value else "false"
        if isinstance(value, int | float):
            return str(value)
        return value


EnvTable = dict[str, EnvEntry]


class DroppedVariable(Strict):
    """A variable a reference sets that nothing these images ship reads: never baked, kept with why."""

    name: str
    layer: str
    value: str
    source: str
    why: str


class EnvSpec(Strict):
    common: EnvTable
    device: dict[str, EnvTable]
    backend: dict[str, EnvTable]
    framework: dict[str, EnvTable] = Field(default_factory=dict)
    profile: dict[str, EnvTable]
    dropped: list[DroppedVariable] = Field(default_factory=list)
