"""What a release pins, as matrix.yaml holds it: the backends (their artifacts, kernel releases, NPU lines, the
build each device takes), each release's backend and framework pins with their overrides, and the frameworks."""

from __future__ import annotations

from typing import Any, Literal

from packaging.specifiers import InvalidSpecifier, SpecifierSet
from pydantic import Field, field_validator

from ascend_images.matrix.strict import Strict


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


class DeviceBuild(Strict):
    """Which build of a device-specific package each device installs (DESIGN 28): PyPI's wheel, which is one device's
    build, or the package's sdist built in the image for the device (its SOC_VERSION), as upstream's own images do.
    The package records the device it was built for, and checks it against the chip at start-up."""

    package: str
    pypi_wheel: str  # the device PyPI's wheels are built for (their build-info file says so)
    devices: dict[str, Literal["wheel", "sdist"]]
    # the build's environment switch for the kernels CANN's compilers build: on, but where the CANN is a test double
    # (it has no compiler)
    kernels: str
    # what the sdist's build imports, or its kernels' build finds, in the image (it builds without isolation)
    build_requirements: list[str]
    source: str


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
    device_build: DeviceBuild | None = None
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


class ImagePackage(Strict):
    """A package upstream's own image of a backend installs beside it for run time (its Dockerfile): locked with the
    backend, so the image runs what upstream's runs (a transfer engine, a distributed executor, an extra's codecs),
    with the OS libraries its shared objects need (their NEEDED entries), per OS family."""

    requirement: str
    why: str
    os_packages: dict[Literal["apt", "dnf"], list[str]] = Field(default_factory=dict)
    source: str


class LockedPins(Strict):
    """What every backend with a lock may say about it."""

    overrides: list[PinOverride] = Field(default_factory=list)
    # what upstream's image of this release installs beside the backend for run time, each with why
    image_packages: list[ImagePackage] = Field(default_factory=list)
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
