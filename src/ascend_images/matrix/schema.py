"""The shape of matrix.yaml, as pydantic models (schemaerrors.py words what does not fit it).

Unknown keys are errors with a "did you mean" hint: a misspelt key silently ignored is how a
tuned default goes missing from every image.

The models are split by idea: strict.py (the base), platforms.py (devices, arches, OSes), stack.py (CANN, torch),
releasespec.py (backends, releases, frameworks), envspec.py (the tuned environment); this module holds the whole
file's shape, its defaults, CI's selections, vendor indexes and tools, and names every model.
"""

from __future__ import annotations

import datetime as dt
from typing import Literal

from pydantic import Field

from ascend_images.matrix.envspec import (  # noqa: F401 - re-exported: the shape's one name
    DroppedVariable,
    EnvEntry,
    EnvReader,
    EnvSpec,
    EnvTable,
)
from ascend_images.matrix.platforms import (  # noqa: F401 - re-exported: the shape's one name
    AllocatorSpec,
    ArchSpec,
    DebootstrapSpec,
    DeviceSpec,
    DeviceSupport,
    OsSpec,
    PythonSpec,
)
from ascend_images.matrix.releasespec import (  # noqa: F401 - re-exported: the shape's one name
    ArtifactSpec,
    BackendSpec,
    DeviceBuild,
    FrameworkArchive,
    FrameworkPins,
    FrameworkSpec,
    ImagePackage,
    KernelBuild,
    KernelReleases,
    LockedPins,
    NpuLine,
    PinOverride,
    ReleaseBackends,
    ReleaseSpec,
    SglangPins,
    SglKernelNpu,
    VllmPins,
)
from ascend_images.matrix.stack import (  # noqa: F401 - re-exported: the shape's one name
    CannEnvSet,
    CannReleaseSpec,
    CannSpec,
    LayoutSpec,
    TorchPairSpec,
    TorchSpec,
)
from ascend_images.matrix.strict import (
    Strict,
)


class DefaultsSpec(Strict):
    os: str
    arch: str
    python: str
    profile: str
    cann_source: Literal["image", "url", "local"]
    release: dict[str, dict[str, str]]
    # framework -> backend -> the release `--framework` picks when no --release is given (both devices)
    framework_release: dict[str, dict[str, str]] = Field(default_factory=dict)


class CiEntry(Strict):
    device: str
    backend: str
    release: str
    os: str
    arches: list[str]
    framework: str = "none"


class CiTestEntry(Strict):
    """A selection CI builds from test doubles and tests (`invoke build --ci test`), as the selection flags spell
    it: unset values take the matrix's defaults, so moving a default moves what CI tests and no test file."""

    device: str
    backend: str
    release: str | None = None
    framework: str | None = None
    profile: str | None = None
    env: list[str] = Field(default_factory=list)
    allocator: str | None = None
    arches: list[str]
    why: str  # what this entry adds to CI (a stage kind, a default, a layout)


class CiSpec(Strict):
    publish: list[CiEntry]
    test: list[CiTestEntry] = Field(default_factory=list)


class NoDeps(Strict):
    """A package installed with `pip install --no-deps`, as upstream installs it: a lock is resolved without it (its
    requirement overridden out, so the resolver never needs its file or metadata), and what `pip check` then says of
    its own requirements is waived, for this reason."""

    why: str
    source: str


class PackageIndexSpec(Strict):
    """Vendor PEP 503 pip indexes that publish versions of a package PyPI does not carry, looked in in order."""

    urls: list[str]
    # set: a version PyPI lacks is installed --no-deps from a pinned file (pins.yaml), never resolved
    no_deps: NoDeps | None = None
    source: str


class ToolFile(Strict):
    file: str
    url: str
    sha256: str


class ToolSpec(Strict):
    """A build tool the stages run (uv): its version and, per host arch, the file to install with its sha256."""

    version: str
    files: dict[str, ToolFile]  # arch -> the file for a host of that arch
    source: str


class MatrixSpec(Strict):
    schema_: Literal[1] = Field(alias="schema")
    # where this definition lives: every image's org.opencontainers.image.source, which registries and update tools
    # follow from an image to its source
    repository: str = Field(pattern=r"^https://[^\s]+$")
    source_date: dt.date  # the release's date: every image's SOURCE_DATE_EPOCH
    sources: dict[str, str]
    devices: dict[str, DeviceSpec]
    arches: dict[str, ArchSpec]
    os: dict[str, OsSpec]
    allocators: dict[str, AllocatorSpec]
    python: dict[str, PythonSpec]
    cann: CannSpec
    layouts: dict[str, LayoutSpec]
    torch: TorchSpec
    backends: dict[str, BackendSpec]
    frameworks: dict[str, FrameworkSpec] = Field(default_factory=dict)
    releases: dict[str, ReleaseSpec]
    # package -> where `invoke lock` looks for a pinned version PyPI lacks (the lock records the file and sha256)
    package_indexes: dict[str, PackageIndexSpec] = Field(default_factory=dict)
    # the tools a build runs (uv: installs each stage's packages, natively, for the target platform)
    tools: dict[str, ToolSpec] = Field(default_factory=dict)
    defaults: DefaultsSpec
    env: EnvSpec
    ci: CiSpec
