"""CANN and torch as matrix.yaml holds them: the CANN releases, their packages, layouts and env scripts' lines, and
the torch_npu/torch pairs."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, field_validator, model_validator

from ascend_images.matrix.strict import Strict, _check_ascend
from ascend_images.matrix.versions import AscendVersion


class CannReleaseSpec(Strict):
    env_set: str  # cann.env_sets: what its env scripts set
    hdk_floor: str
    layout: str
    ops_package: Literal["kernels", "ops"]
    python_deps: list[str] | None = None  # the toolkit tools' Python packages, where they differ from cann's
    sha256: dict[str, str] = Field(default_factory=dict)
    source: str

    _hdk = field_validator("hdk_floor")(_check_ascend)


class CannEnvSet(Strict):
    """What a release's env scripts set: NAME=value lines in order, $VAR / ${VAR} naming a variable set before."""

    source: str
    lines: list[str]

    @field_validator("lines")
    @classmethod
    def _lines(cls, value: list[str]) -> list[str]:
        for line in value:
            name, sep, _ = line.partition("=")
            if not sep or not name.isidentifier():
                raise ValueError(f"{line!r}: expected NAME=value")
        return value


class CannSpec(Strict):
    download_url: str
    download_referer: str
    packages: dict[Literal["toolkit", "nnal"], str]
    python_deps: list[str]
    env_sets: dict[str, CannEnvSet]
    releases: dict[str, CannReleaseSpec]

    @model_validator(mode="after")
    def _env_sets_named(self) -> CannSpec:
        for version, release in self.releases.items():
            if release.env_set not in self.env_sets:
                raise ValueError(f"cann.releases.{version}.env_set: {release.env_set!r} is not under cann.env_sets "
                                 f"(valid: {', '.join(self.env_sets)})")
        return self

    @field_validator("releases")
    @classmethod
    def _versions(cls, value: dict[str, CannReleaseSpec]) -> dict[str, CannReleaseSpec]:
        for version in value:
            AscendVersion.parse(version)
        return value


class LayoutSpec(Strict):
    home: str
    env_scripts: list[str]
    # variables the official image sets itself, beside its env scripts ({cxx_abi}: the torch pair's C++ ABI)
    env: dict[str, str] = Field(default_factory=dict)
    source: str


class TorchPairSpec(Strict):
    torch: str
    cann: str | None  # the CANN it was released for; null: no upstream source says (unconfirmed)
    python: str
    cxx11_abi: Literal[0, 1]
    source: str


class TorchSpec(Strict):
    pairs: dict[str, TorchPairSpec]
