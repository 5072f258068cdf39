"""Load matrix.yaml, check it, and the variant: one buildable combination and what it reads from the matrix."""

from __future__ import annotations

import datetime as dt
import difflib
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from packaging.version import Version as PepVersion
from pydantic import ValidationError

from ascend_images.errors import MatrixError
from ascend_images.matrix.placeholders import placeholders
from ascend_images.matrix.schema import (
    ArchSpec,
    CannReleaseSpec,
    DeviceBuild,
    DeviceSpec,
    FrameworkPins,
    LayoutSpec,
    MatrixSpec,
    OsSpec,
    PythonSpec,
    ReleaseSpec,
    SglangPins,
    TorchPairSpec,
    VllmPins,
)
from ascend_images.matrix.schemaerrors import format_validation_error
from ascend_images.matrix.versions import AscendVersion, ascend
from ascend_images.matrix.yamlfile import YamlFileError, load_yaml_file

DEFAULT_MATRIX = Path("matrix.yaml")
BACKENDS = ("none", "vllm", "sglang")


def suggest(value: str, valid: Iterable[str]) -> str:
    """' (did you mean X?)' when a close match exists, else ''."""
    hint = difflib.get_close_matches(value, list(valid), n=1, cutoff=0.6)
    return f"; did you mean {hint[0]!r}?" if hint else ""


def unknown(kind: str, value: str, valid: Iterable[str], where: str = "") -> str:
    valid = sorted(valid)
    loc = f" ({where})" if where else ""
    hint = suggest(value, valid) or "."
    return f"unknown {kind} {value!r}{loc}{hint} Valid: {', '.join(valid)}"


@dataclass(frozen=True)
class Matrix:
    spec: MatrixSpec
    path: Path

    @property
    def devices(self) -> dict[str, DeviceSpec]:
        return self.spec.devices

    @property
    def releases(self) -> dict[str, ReleaseSpec]:
        return self.spec.releases

    @property
    def source_date_epoch(self) -> int:
        """The release's date (source_date) as SOURCE_DATE_EPOCH: its midnight, UTC."""
        day = self.spec.source_date
        return int(dt.datetime(day.year, day.month, day.day, tzinfo=dt.UTC).timestamp())


def load_matrix(path: str | Path = DEFAULT_MATRIX) -> Matrix:
    path = Path(path)
    try:
        raw = load_yaml_file(path)
    except FileNotFoundError:
        raise MatrixError(str(path), ["file not found (pass --matrix PATH)"]) from None
    except YamlFileError as exc:
        raise MatrixError(str(path), [str(exc)]) from None
    if not isinstance(raw, dict):
        raise MatrixError(str(path), [f"top level must be a mapping, got {type(raw).__name__}"])
    if unfilled := placeholders(raw):
        raise MatrixError(str(path), unfilled)
    try:
        spec = MatrixSpec.model_validate(raw)
    except ValidationError as exc:
        raise MatrixError(str(path), format_validation_error(exc)) from None
    problems = cross_reference_problems(spec)
    if problems:
        raise MatrixError(str(path), problems)
    return Matrix(spec=spec, path=path)


def cross_reference_problems(spec: MatrixSpec) -> list[str]:
    """Names that must point at something defined elsewhere in the matrix."""
    problems: list[str] = []

    def check(kind: str, value: str, valid: Iterable[str], where: str) -> None:
        valid = list(valid)
        if value not in valid:
            problems.append(f"{where}: {unknown(kind, value, valid)}")

    for version, cann in spec.cann.releases.items():
        check("layout", cann.layout, spec.layouts, f"cann.releases.{version}.layout")
    for name, release in spec.releases.items():
        check("CANN version", release.cann, spec.cann.releases, f"releases.{name}.cann")
        check("torch_npu", release.torch_npu, spec.torch.pairs, f"releases.{name}.torch_npu")
        for backend in release.backends.model_fields_set:
            check("backend", backend, spec.backends, f"releases.{name}.backends")
        for flavour in release.python:
            check("python", flavour, spec.python, f"releases.{name}.python")
        for fw, pins in release.frameworks.items():
            where = f"releases.{name}.frameworks.{fw}"
            check("framework", fw, spec.frameworks, where)
            for backend in pins.backends:
                check("backend", backend, release.backends.model_fields_set, f"{where}.backends")
    for name, fw_spec in spec.frameworks.items():
        for backend in [*fw_spec.backends, *fw_spec.why_not]:
            check("backend", backend, spec.backends, f"frameworks.{name}")
    for fw in spec.env.framework:
        check("framework", fw, spec.frameworks, "env.framework")
    d = spec.defaults
    check("os", d.os, spec.os, "defaults.os")
    check("arch", d.arch, spec.arches, "defaults.arch")
    check("python", d.python, spec.python, "defaults.python")
    check("profile", d.profile, spec.env.profile, "defaults.profile")
    for name, backend in spec.backends.items():
        check("allocator", backend.allocator, spec.allocators, f"backends.{name}.allocator")
        if backend.device_build is not None:
            where = f"backends.{name}.device_build"
            check("package", backend.device_build.package, backend.packages, f"{where}.package")
            check("device", backend.device_build.pypi_wheel, spec.devices, f"{where}.pypi_wheel")
            for device in backend.device_build.devices:
                check("device", device, spec.devices, f"{where}.devices")
    for device, per_backend in d.release.items():
        check("device", device, spec.devices, "defaults.release")
        for backend, release in per_backend.items():
            where = f"defaults.release.{device}.{backend}"
            check("backend", backend, spec.backends, where)
            check("release", release, spec.releases, where)
            if release in spec.releases and backend not in spec.releases[release].backends.model_fields_set:
                problems.append(f"{where}: release {release!r} has no {backend!r} backend")
    for framework, per_backend in d.framework_release.items():
        check("framework", framework, spec.frameworks, "defaults.framework_release")
        for backend, release in per_backend.items():
            where = f"defaults.framework_release.{framework}.{backend}"
            check("release", release, spec.releases, where)
            pins = spec.releases[release].frameworks.get(framework) if release in spec.releases else None
            if release in spec.releases and (pins is None or backend not in pins.backends):
                problems.append(f"{where}: release {release!r} pins no {framework} over {backend!r}")
    for device in spec.env.device:
        check("device", device, spec.devices, "env.device")
    for device, dev_spec in spec.devices.items():
        support = dev_spec.support
        if support is None:
            continue
        where = f"devices.{device}.support"
        for backend in support.backends or []:
            check("backend", backend, spec.backends, f"{where}.backends")
        for fw in support.frameworks or []:
            check("framework", fw, spec.frameworks, f"{where}.frameworks")
        for name in support.why_not:
            check("backend or framework", name, [*spec.backends, *spec.frameworks], f"{where}.why_not")
    for backend in spec.env.backend:
        check("backend", backend, spec.backends, "env.backend")
    profile_keys = {name: set(table) for name, table in spec.env.profile.items()}
    every_key = set().union(*profile_keys.values()) if profile_keys else set()
    for name, keys in sorted(profile_keys.items()):
        if every_key - keys:
            problems.append(
                f"env.profile.{name}: missing {', '.join(sorted(every_key - keys))} (every profile must set "
                "the same variables, so that switching profile never leaves another profile's value behind)"
            )
    for i, entry in enumerate(spec.ci.publish):
        where = f"ci.publish[{i}]"
        check("device", entry.device, spec.devices, where)
        check("backend", entry.backend, spec.backends, where)
        check("release", entry.release, spec.releases, where)
        check("os", entry.os, spec.os, where)
        if entry.framework != "none":
            check("framework", entry.framework, spec.frameworks, where)
        for arch in entry.arches:
            check("arch", arch, spec.arches, where)
    for i, test in enumerate(spec.ci.test):
        where = f"ci.test[{i}]"
        for device in test.device.split(","):
            check("device", device, spec.devices, where)
        check("backend", test.backend, spec.backends, where)
        if test.release is not None:
            check("release", test.release, spec.releases, where)
        if test.framework is not None:
            check("framework", test.framework, spec.frameworks, where)
        for arch in test.arches:
            check("arch", arch, spec.arches, where)
    return problems


def backend_unsupported(spec: MatrixSpec, device: str, backend: str) -> str | None:
    """Why upstream ships no `backend` image on `device` at all (devices.<d>.support.backends), or None."""
    support = spec.devices[device].support
    if support is None or support.backends is None or backend in support.backends:
        return None
    return support.why_not.get(backend, f"upstream ships it with {', '.join(support.backends)} only")


def device_build_unbuildable(spec: MatrixSpec, device: str, release: str, backend: str) -> str | None:
    """Why no build of the backend's device-specific package exists for `device` in this release (DESIGN 28), or
    None: the device builds it from its sdist, and this version's sdist cannot build the device's kernels."""
    build = spec.backends[backend].device_build
    vllm = spec.releases[release].backends.vllm if backend == "vllm" else None
    if build is None or vllm is None or build.devices.get(device) != "sdist":
        return None
    lacking = spec.backends["vllm"].sdist_lacks_catlass
    if vllm.vllm_ascend not in lacking:
        return None
    return (f"{device} builds vllm-ascend from its sdist (backends.vllm.device_build), and vllm-ascend "
            f"{vllm.vllm_ascend}'s sdist has no csrc/third_party/catlass for the device's custom ops (backends.vllm."
            f"sdist_lacks_catlass), while PyPI's wheel is {build.pypi_wheel}'s build; valid: a release whose "
            f"vllm-ascend sdist carries catlass (not {', '.join(lacking)})")


def unsupported(spec: MatrixSpec, device: str, release: str, backend: str, framework: str = "none") -> str | None:
    """Why upstream ships no `device` image of this release, backend and framework (devices.<d>.support), or None.
    A release below a device's lines has no variant for it in the matrix, and naming one is refused (rule
    device-support)."""
    rel = spec.releases[release]
    what = f"{device} ({spec.devices[device].description.split(':')[0]})"
    why = device_build_unbuildable(spec, device, release, backend)
    if why is not None:
        return f"no {backend} image for {what} on release {release!r}: {why}"
    support = spec.devices[device].support
    if support is None:
        return None
    why = backend_unsupported(spec, device, backend)
    if why is not None:
        return f"no {backend} image for {what}: {why}; valid backends: {', '.join(support.backends or [])}"
    if framework != "none" and support.frameworks is not None and framework not in support.frameworks:
        why = support.why_not.get(framework, "upstream ships no such image")
        valid = ", ".join(support.frameworks) or "none"
        return f"no {framework} image for {what}: {why}; valid frameworks: {valid}"
    if support.cann is not None and ascend(rel.cann) < ascend(support.cann):
        return f"{what} needs CANN >= {support.cann}; release {release!r} has CANN {rel.cann}"
    if support.torch_npu is not None and PepVersion(rel.torch_npu) < PepVersion(support.torch_npu):
        return f"{what} needs torch_npu >= {support.torch_npu}; release {release!r} has torch_npu {rel.torch_npu}"
    vllm = rel.backends.vllm if backend == "vllm" else None
    if support.vllm_ascend is not None and vllm is not None and \
            PepVersion(vllm.vllm_ascend) < PepVersion(support.vllm_ascend):
        return (f"{what} needs vllm-ascend >= {support.vllm_ascend}; release {release!r} has vllm-ascend "
                f"{vllm.vllm_ascend}")
    return None


@dataclass(frozen=True)
class Variant:
    """One image to build: a release on one device, backend, OS, arch and Python."""

    matrix: Matrix = field(repr=False, compare=False, hash=False)
    release_name: str
    device: str
    backend: str
    os: str
    arch: str
    python: str
    profile: str = "production"
    user_env: tuple[tuple[str, str], ...] = ()
    allocator: str | None = None  # None: the backend's (backends.<name>.allocator)
    framework: str = "none"  # an RL framework over the backend (frameworks.<name>), or none

    # --- resolved facts ------------------------------------------------------------------------
    @property
    def release(self) -> ReleaseSpec:
        return self.matrix.spec.releases[self.release_name]

    @property
    def device_spec(self) -> DeviceSpec:
        return self.matrix.spec.devices[self.device]

    @property
    def os_spec(self) -> OsSpec:
        return self.matrix.spec.os[self.os]

    @property
    def arch_spec(self) -> ArchSpec:
        return self.matrix.spec.arches[self.arch]

    @property
    def python_spec(self) -> PythonSpec:
        return self.matrix.spec.python[self.python]

    @property
    def cann_version(self) -> AscendVersion:
        return ascend(self.release.cann)

    @property
    def cann(self) -> CannReleaseSpec:
        return self.matrix.spec.cann.releases[self.release.cann]

    @property
    def layout(self) -> LayoutSpec:
        return self.matrix.spec.layouts[self.cann.layout]

    @property
    def torch_npu(self) -> str:
        return self.release.torch_npu

    @property
    def torch_pair(self) -> TorchPairSpec:
        return self.matrix.spec.torch.pairs[self.torch_npu]

    @property
    def torch(self) -> str:
        return self.torch_pair.torch

    @property
    def hdk_floor(self) -> AscendVersion:
        """The release's declared floor, else the one its CANN was released with."""
        return ascend(self.release.hdk_floor or self.cann.hdk_floor)

    @property
    def backend_pins(self) -> VllmPins | SglangPins | None:
        pins = getattr(self.release.backends, self.backend)
        return pins if isinstance(pins, VllmPins | SglangPins) else None

    @property
    def framework_pins(self) -> FrameworkPins | None:
        return self.release.frameworks.get(self.framework) if self.framework != "none" else None

    @property
    def device_build(self) -> DeviceBuild | None:
        """How the backend's device-specific package is built (backends.<name>.device_build), if it has one."""
        return self.matrix.spec.backends[self.backend].device_build

    @property
    def device_sdist(self) -> str | None:
        """The package this variant's image builds from its sdist for its device (its SOC_VERSION), or None."""
        build = self.device_build
        return build.package if build is not None and build.devices.get(self.device) == "sdist" else None

    @property
    def python_version(self) -> str:
        return self.python_spec.version

    @property
    def default_allocator(self) -> str:
        return self.matrix.spec.backends[self.backend].allocator

    @property
    def allocator_name(self) -> str:
        return self.allocator or self.default_allocator

    def allocator_library(self, name: str | None = None) -> str:
        """The path LD_PRELOAD names for an allocator on this variant's OS and arch ("" for none)."""
        spec = self.matrix.spec.allocators[name or self.allocator_name]
        return spec.library[self.os_spec.family].format(triplet=self.arch_spec.gnu_triplet)

    def allocator_packages(self, name: str | None = None) -> list[str]:
        return list(self.matrix.spec.allocators[name or self.allocator_name].packages[self.os_spec.family])

    @property
    def cann_home(self) -> str:
        return self.layout.home.format(version=self.release.cann)

    @property
    def cann_python_deps(self) -> list[str]:
        """The Python packages CANN's own tools import, installed with it (and held by every backend lock)."""
        own = self.cann.python_deps
        return list(self.matrix.spec.cann.python_deps if own is None else own)

    @property
    def layout_env(self) -> dict[str, str]:
        """What the official CANN image sets beside its env scripts, for this variant's torch ABI."""
        return {k: v.format(cxx_abi=self.torch_pair.cxx11_abi) for k, v in self.layout.env.items()}

    @property
    def cann_env_lines(self) -> list[str]:
        """What this release's env scripts set (cann.env_sets), as NAME=value lines for its version and torch ABI."""
        lines = self.matrix.spec.cann.env_sets[self.cann.env_set].lines
        abi = str(self.torch_pair.cxx11_abi)
        return [line.replace("{version}", self.release.cann).replace("{cxx_abi}", abi) for line in lines]

    @property
    def cann_env_source(self) -> str:
        return self.matrix.spec.cann.env_sets[self.cann.env_set].source

    @property
    def env_scripts(self) -> list[str]:
        return [
            s.format(version=self.release.cann, cxx_abi=self.torch_pair.cxx11_abi)
            for s in self.layout.env_scripts
        ]

    def package_files(self) -> dict[str, str]:
        """The CANN .run files this variant installs, in install order: toolkit, operators, NNAL."""
        fmt = {"version": self.release.cann, "arch": self.arch}
        ops = self.device_spec.ops_package[self.cann.ops_package]
        names = self.matrix.spec.cann.packages
        return {"toolkit": names["toolkit"].format(**fmt), "ops": ops.format(**fmt),
                "nnal": names["nnal"].format(**fmt)}

    @property
    def name(self) -> str:
        top = self.backend if self.framework == "none" else f"{self.backend}+{self.framework}"
        return f"{self.release_name}/{self.device}/{top}/{self.os}/{self.arch}/{self.python}"

    def describe(self) -> dict[str, Any]:
        pins: dict[str, Any] = {}
        if self.backend_pins is not None:
            pins = self.backend_pins.model_dump(by_alias=True, exclude={"overrides", "from_sdist"})
            if self.backend_pins.overrides:
                pins["overrides"] = [o.requirement for o in self.backend_pins.overrides]
        return {
            "release": self.release_name,
            "device": self.device,
            "backend": self.backend,
            "os": self.os,
            "arch": self.arch,
            "python": self.python,
            "cann": self.release.cann,
            "hdk_floor": str(self.hdk_floor),
            "torch": self.torch,
            "torch_npu": self.torch_npu,
            "profile": self.profile,
            "allocator": self.allocator_name,
            **pins,
            **({"framework": self.framework, f"{self.framework}_version": self.framework_pins.version}
               if self.framework_pins else {}),
        }
