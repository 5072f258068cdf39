"""Where images run, as matrix.yaml says: the devices (chips, SOC versions, control nodes, what upstream ships
on each), the arches, the OSes, the memory allocators and the Pythons."""

from __future__ import annotations

from typing import Literal

from packaging.version import Version
from pydantic import Field, field_validator

from ascend_images.matrix.strict import Strict, _check_ascend


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
