"""The shape of matrix.yaml, as pydantic models (schemaerrors.py words what does not fit it).

Unknown keys are errors with a "did you mean" hint: a misspelt key silently ignored is how a
tuned default goes missing from every image.
"""

from __future__ import annotations

import datetime as dt
from typing import Any, Literal

from packaging.specifiers import InvalidSpecifier, SpecifierSet
from packaging.version import Version
from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from ascend_images.matrix.versions import AscendVersion


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


def _check_ascend(value: str) -> str:
    AscendVersion.parse(value)
    return value


class DeviceSupport(Strict):
    """The lines upstream ships a device on (rule device-support): the oldest CANN, torch_npu and vLLM-Ascend, the
    backends and frameworks; a release below them has no variant for the device, and naming one is refused."""

    cann: str | None = None
    torch_npu: str | None = None
    vllm_ascend: str | None = None
    backends: list[str] | None = None  # None: every backend
    frameworks: list[str] | None = None  # None: every framework
    why_not: dict[str, str] = Field(default_factory=dict)  # backend or framework -> why upstream does not ship it
    source: str

    @field_validator("cann")
    @classmethod
    def _cann_version(cls, value: str | None) -> str | None:
        return value if value is None else _check_ascend(value)

    @field_validator("torch_npu", "vllm_ascend")
    @classmethod
    def _pep440(cls, value: str | None) -> str | None:
        if value is not None:
            Version(value)  # InvalidVersion is a ValueError: pydantic names the key
        return value


class DeviceSpec(Strict):
    description: str
    chip: str
    soc_version: str
    opp_kernel_dir: str
    ops_package: dict[Literal["kernels", "ops"], str]
    min_devices: int = 1
    max_devices: int | None = Field(default=None, ge=1)  # NPUs one node has; run --devices indices stay below it
    k8s_resource: str | None = None  # the Ascend device plugin's resource name (invoke run --format k8s)
    # the control nodes every container of this device needs (invoke run), beside /dev/davinciN
    control_nodes: list[str] = Field(default_factory=lambda: ["davinci_manager", "devmm_svm", "hisi_hdc"])
    # device nodes (or directories of them) passed when the host has them: the 950's UB devices
    optional_nodes: list[str] = Field(default_factory=list)
    optional_mounts: list[str] = Field(default_factory=list)  # host files mounted read-only when present
    support: DeviceSupport | None = None
    source: str


class ArchSpec(Strict):
    docker_platform: str
    debian_arch: str
    gnu_triplet: str
    github_runner: str
    docker_variant: str | None = None
    torch_local_version: str
    torch_index_url: str
    # why no lock above the base layer is made for this arch (its builds stop, and `lock --check` says so)
    unlocked: str | None = None
    source: str


class DebootstrapSpec(Strict):
    suite: str
    mirror: str


class OsSpec(Strict):
    family: Literal["apt", "dnf"]
    debootstrap: DebootstrapSpec | None = None
    image: str
    python_packages: list[str]
    # headers for building C extensions against the system Python (locked sdists without a wheel)
    python_dev_packages: list[str]
    python_bin: str
    base_packages: list[str]
    official_cann_os: str | None = None
    source: str


class AllocatorSpec(Strict):
    packages: dict[Literal["apt", "dnf"], list[str]]
    library: dict[Literal["apt", "dnf"], str]  # "" preloads nothing; {triplet} is the arch's gnu_triplet
    source: str


class PythonSpec(Strict):
    version: str
    description: str
    tarball_url: str | None = None
    libs_url: str | None = None
    libs: list[str] = Field(default_factory=list)
    arches: list[str] | None = None
    sha256: dict[str, str] = Field(default_factory=dict)
    source: str


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


class ArtifactSpec(Strict):
    file: str  # the name it has in a local --artifacts-dir
    url: str  # where a connected host downloads it


class KernelBuild(Strict):
    cann: str
    torch: str
    python: str = "3.11"


class KernelReleases(Strict):
    """sgl-kernel-npu tags that share one release matrix (.github/workflows/build_and_release.yml at each tag):
    the zips each of them publishes, for both chips and both arches."""

    tags: list[str]
    builds: list[KernelBuild]
    source: str


class NpuLine(Strict):
    """What upstream builds the NPU images of a run of SGLang releases with (docker/npu.Dockerfile,
    release-docker-npu.yml, python/pyproject_npu.toml): PyPI's sglang wheels are the CUDA build, so a newer release
    is judged by its line, not by the wheel."""

    versions: str  # the releases on the line, a PEP 440 specifier
    cann: str
    python: str
    torch_npu: str
    chips: list[str]  # the chips upstream publishes images for (its tags: 910b, a3, 950)
    why: str | None = None  # what holds the line to its Python, where that is not the base image alone
    source: str

    def covers(self, version: str) -> bool:
        return SpecifierSet(self.versions).contains(version, prereleases=True)

    @field_validator("versions")
    @classmethod
    def _specifier(cls, value: str) -> str:
        try:
            SpecifierSet(value)
        except InvalidSpecifier:
            raise ValueError(f"versions must be a PEP 440 specifier such as '>=0.5.16,<0.5.21', got {value!r}") \
                from None
        return value


class BackendSpec(Strict):
    description: str
    allocator: str
    artifacts: dict[str, ArtifactSpec] = Field(default_factory=dict)
    sha256: dict[str, str] = Field(default_factory=dict)
    packages: list[str] = Field(default_factory=list)
    min_a3: str | None = None
    vllm_exceptions: dict[str, list[str]] = Field(default_factory=dict)
    python: str | dict[str, str] | None = None
    min_version: str | None = None
    min_cann: str | None = None
    kernel_releases: list[KernelReleases] = Field(default_factory=list)
    npu_lines: list[NpuLine] = Field(default_factory=list)
    # vllm-ascend versions whose PyPI sdist lacks the catlass sources its A2/A3 custom-op build needs
    sdist_lacks_catlass: list[str] = Field(default_factory=list)
    source: str


class SglKernelNpu(Strict):
    tag: str
    # `release`: the prebuilt zip of that tag; `source`: built from the tag's source tree
    from_: Literal["release", "source"] = Field(alias="from")


class PinOverride(Strict):
    """A requirement that replaces every other requirement on its package when a lock is resolved (uv's
    --override), for upstream pins that contradict each other; the image's `pip check` then waives exactly
    the conflicts it causes and no other."""

    requirement: str  # name==version
    why: str
    source: str

    @field_validator("requirement")
    @classmethod
    def _exact_pin(cls, value: str) -> str:
        name, sep, version = value.partition("==")
        if not sep or not name.strip() or not version.strip() or any(c in version for c in "<>=!~,; "):
            raise ValueError(f"an override must pin one exact version as NAME==VERSION, got {value!r}")
        return value


class LockedPins(Strict):
    """What every backend with a lock may say about it."""

    overrides: list[PinOverride] = Field(default_factory=list)
    # arch -> the locked packages PyPI has no wheel of for it, built in the image from their sdists (what the
    # lock's `from-source` header says; a lock that differs is refused)
    from_sdist: dict[Literal["x86_64", "aarch64"], list[str]] = Field(default_factory=dict)


class VllmPins(LockedPins):
    vllm: str
    vllm_ascend: str
    triton_ascend: str | None = None


class SglangPins(LockedPins):
    sglang: str
    sgl_kernel_npu: SglKernelNpu
    # the NPU project file that replaces python/pyproject.toml before install (SG; VQ for 0.5.8)
    project_file: str = "pyproject_npu.toml"
    # where the source tree comes from: PyPI's sdist (up to 0.5.10.post1, the sdist root is python/), or the git
    # tag's archive (backends.sglang.artifacts.source_tag: the repository root; the project is in python/)
    tree: Literal["sdist", "git-tag"] = "sdist"
    # SGLang's NPU code imports `triton` (sglang.srt.utils.common); on NPU that is triton-ascend, which
    # SGLang's own NPU images install beside it (SG docker/npu*.Dockerfile)
    triton_ascend: str | None = None
    # the NPU project's dependency lists, transcribed from the upstream tree into a committed file (path beside
    # matrix.yaml) with the commit it was read at: a lock is made from it without the tag archive, and checked
    # against the archive's project file where the archive can be downloaded
    npu_requirements: str | None = None


class ReleaseBackends(Strict):
    none: dict[str, Any] | None = None
    vllm: VllmPins | None = None
    sglang: SglangPins | None = None


class FrameworkArchive(Strict):
    """A framework's part that no package index carries (ROLL, MindSpeed): its git tag's archive, pinned in pins.yaml
    like every such download, installed --no-deps after the lock (its own requirements are in the framework's
    listed requirements)."""

    name: str  # the distribution it installs
    version: str
    file: str
    url: str
    source: str


class FrameworkPins(Strict):
    """One framework's versions in a release: what it installs over which of the release's backends."""

    version: str
    backends: list[str]  # the release's backends it is supported over (others are refused, with why_not)
    # PyPI packages installed --no-deps, as upstream's install guide does (`pip install --no-deps`): the lock is
    # resolved without their metadata, and `pip check` waives what they alone declare
    no_deps: list[str] = Field(default_factory=list)
    # committed transcriptions of upstream's requirement files (paths beside matrix.yaml), resolved into the lock
    requirements: list[str] = Field(default_factory=list)
    # PyPI pins upstream's guide installs beside them (e.g. megatron-core for the megatron strategy), resolved too
    packages: list[str] = Field(default_factory=list)
    # requirements that win over every other on their package (uv --override), where upstream's lists contradict
    # the backend or name what no lock can pin (a moving git branch); `pip check` waives what they cause
    overrides: list[PinOverride] = Field(default_factory=list)
    archives: list[FrameworkArchive] = Field(default_factory=list)
    # a backend of this release the framework does not go over -> why (said when it is asked for)
    why_not: dict[str, str] = Field(default_factory=dict)
    # why no consistent lock exists (upstream's lists contradict the backend's): the pair is refused, saying this
    blocked: str | None = None
    source: str

    @field_validator("no_deps")
    @classmethod
    def _exact_pins(cls, values: list[str]) -> list[str]:
        for value in values:
            name, sep, version = value.partition("==")
            if not sep or not name.strip() or not version.strip():
                raise ValueError(f"a --no-deps package must be pinned as NAME==VERSION, got {value!r}")
        return values


class FrameworkSpec(Strict):
    description: str
    module: str  # the import name, for the image tests
    backends: list[str]  # every backend the framework can go over at all
    why_not: dict[str, str] = Field(default_factory=dict)  # backend -> why never
    source: str


class ReleaseSpec(Strict):
    description: str
    cann: str
    hdk_floor: str | None = None
    torch_npu: str
    python: list[Literal["system", "bisheng"]]
    backends: ReleaseBackends
    frameworks: dict[str, FrameworkPins] = Field(default_factory=dict)
    blocked: str | None = None  # why its backends cannot be locked from the configured index (invoke lock)
    source: str


class DefaultsSpec(Strict):
    os: str
    arch: str
    python: str
    profile: str
    cann_source: Literal["image", "url", "local"]
    release: dict[str, dict[str, str]]
    # framework -> backend -> the release `--framework` picks when no --release is given (both devices)
    framework_release: dict[str, dict[str, str]] = Field(default_factory=dict)


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
