"""Load matrix.yaml, check it, and select variants from it."""

from __future__ import annotations

import difflib
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from ascend_images.errors import MatrixError, SelectionError
from ascend_images.matrix.schema import (
    ArchSpec,
    CannReleaseSpec,
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
    format_validation_error,
)
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
    return problems


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


def _split(values: str | Iterable[str] | None) -> list[str] | None:
    if values is None:
        return None
    if isinstance(values, str):
        values = [values]
    # given but empty ('' or ',') is [], not None: an empty flag must not widen to "all" or the default
    return [v.strip() for value in values for v in value.split(",") if v.strip()]


def _pick(kind: str, flag: str, wanted: list[str] | None, valid: Iterable[str], default: list[str]) -> list[str]:
    valid = list(valid)
    if wanted is not None and not wanted:
        raise SelectionError(f"{flag} is empty: name a {kind} ({', '.join(valid)}; comma-separated for several), "
                             f"or leave {flag} out for {', '.join(default)}")
    chosen = wanted or default
    for value in chosen:
        if value not in valid:
            raise SelectionError(unknown(kind, value, valid, f"from {flag}"))
    twice = sorted({value for value in chosen if chosen.count(value) > 1})
    if twice:  # a2,a2 would make the same variant twice
        raise SelectionError(f"{flag} {','.join(chosen)}: {', '.join(twice)} is named twice; name each {kind} once")
    return chosen


def choices(kind: str, flag: str, value: str | None, valid: Iterable[str]) -> list[str]:
    """A comma-separated flag's values, each checked against `valid`; all of them when the flag is unset."""
    valid = list(valid)
    return _pick(kind, flag, _split(value), valid, valid)


def select(
    matrix: Matrix,
    *,
    device: str | Iterable[str] | None = None,
    backend: str | Iterable[str] | None = None,
    release: str | None = None,
    os: str | Iterable[str] | None = None,
    arch: str | Iterable[str] | None = None,
    python: str | None = None,
    profile: str | None = None,
    env: dict[str, str] | None = None,
    allocator: str | None = None,
    framework: str | None = None,
) -> list[Variant]:
    """Variants for the given flags; lists are comma-separated. Unset flags take the matrix defaults."""
    spec = matrix.spec
    d = spec.defaults
    devices = _pick("device", "--device", _split(device), spec.devices, sorted(spec.devices))
    backends = _pick("backend", "--backend", _split(backend), spec.backends, ["none"])
    oses = _pick("os", "--os", _split(os), spec.os, [d.os])
    arches = _pick("arch", "--arch", _split(arch), spec.arches, [d.arch])
    profile = _pick("profile", "--profile", _split(profile), spec.env.profile, [d.profile])[0]
    if release is not None and release not in spec.releases:
        raise SelectionError(unknown("release", release, spec.releases, "from --release"))
    if python is not None and python not in spec.python:
        raise SelectionError(unknown("python", python, spec.python, "from --python"))
    if allocator is not None and allocator not in spec.allocators:
        raise SelectionError(unknown("allocator", allocator, spec.allocators, "from --allocator"))
    if framework is not None and framework not in ("none", *spec.frameworks):
        raise SelectionError(unknown("framework", framework, ["none", *spec.frameworks], "from --framework"))
    framework = framework or "none"

    variants = []
    for dev in devices:
        for be in backends:
            name = release or d.framework_release.get(framework, {}).get(be) or d.release.get(dev, {}).get(be)
            if name is None:
                raise SelectionError(
                    f"no default release for device {dev!r} and backend {be!r} in defaults.release; "
                    f"pass --release (releases with {be!r}: {', '.join(_with_backend(matrix, be))})"
                )
            rel = spec.releases[name]
            if be not in rel.backends.model_fields_set:
                raise SelectionError(
                    f"release {name!r} has no backend {be!r} (it has: "
                    f"{', '.join(sorted(rel.backends.model_fields_set))}); releases with {be!r}: "
                    f"{', '.join(_with_backend(matrix, be)) or 'none'}"
                )
            if framework != "none":
                check_framework(matrix, name, be, framework)
            py = python or (d.python if d.python in rel.python else rel.python[0])
            if py not in rel.python:
                raise SelectionError(
                    f"release {name!r} is not tested with python {py!r} (from --python); "
                    f"valid for it: {', '.join(rel.python)}"
                )
            for os_name in oses:
                for ar in arches:
                    variants.append(
                        Variant(
                            matrix=matrix,
                            release_name=name,
                            device=dev,
                            backend=be,
                            os=os_name,
                            arch=ar,
                            python=py,
                            profile=profile,
                            user_env=tuple(sorted((env or {}).items())),
                            # the backend's own allocator is no choice: it keeps the variant equal to the default
                            allocator=None if allocator == spec.backends[be].allocator else allocator,
                            framework=framework,
                        )
                    )
    return variants


def framework_pairs(matrix: Matrix, framework: str) -> list[str]:
    """Where a framework goes: 'release/backend' for every release that pins it."""
    return [f"{name}/{backend}" for name, rel in matrix.spec.releases.items()
            for fw, pins in rel.frameworks.items() if fw == framework and not pins.blocked for backend in pins.backends]


def check_framework(matrix: Matrix, release: str, backend: str, framework: str) -> None:
    """A framework goes over a backend only where the matrix pins it for that release and backend; otherwise the
    error says why (the framework's or the release's reason) and what would work."""
    spec = matrix.spec.frameworks[framework]
    pins = matrix.spec.releases[release].frameworks.get(framework)
    works = ", ".join(framework_pairs(matrix, framework)) or "nowhere yet"
    hint = f"--framework {framework} works with (release/backend): {works}"
    if backend not in spec.backends:
        why = spec.why_not.get(backend, f"{framework} runs its rollouts on {', '.join(spec.backends)}")
        raise SelectionError(f"--framework {framework} with --backend {backend}: not supported: {why}. {hint}")
    if pins is None:
        raise SelectionError(f"--framework {framework}: release {release!r} pins no {framework} version. {hint}")
    if backend not in pins.backends:
        why = pins.why_not.get(backend, f"the release pins {framework} over {', '.join(pins.backends)} only")
        raise SelectionError(f"--framework {framework} with --backend {backend} on release {release!r}: not "
                             f"supported: {why}. {hint}")
    if pins.blocked:
        raise SelectionError(f"--framework {framework} {pins.version} with --backend {backend} on release {release!r} "
                             f"is blocked (matrix.yaml): {pins.blocked}")


def _with_backend(matrix: Matrix, backend: str) -> list[str]:
    return sorted(n for n, r in matrix.spec.releases.items() if backend in r.backends.model_fields_set)


def all_variants(matrix: Matrix) -> list[Variant]:
    """Every (release, device, backend, os, arch, python) the matrix lists, default profile, no user env."""
    spec = matrix.spec
    out = []
    for name, rel in spec.releases.items():
        for backend in sorted(rel.backends.model_fields_set):
            frameworks = ["none", *(fw for fw, pins in rel.frameworks.items()
                                    if backend in pins.backends and not pins.blocked)]
            for py in rel.python:
                for fw in frameworks:
                    out.extend(
                        select(matrix, device=list(spec.devices), backend=backend, release=name,
                               os=list(spec.os), arch=list(spec.arches), python=py, framework=fw)
                    )
    return out


ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def control_character(text: str) -> str | None:
    """The first control character in `text`, spelt so a terminal shows it (\\n, \\x1b), or None."""
    for c in text:
        if ord(c) < 0x20 or 0x7F <= ord(c) < 0xA0 or c in "\u2028\u2029":
            return repr(c)[1:-1]
    return None


def parse_env_overrides(items: Iterable[str]) -> dict[str, str]:
    """--env KEY=VALUE pairs: the key a valid environment variable name, the value one line of text (a control
    character would end the Dockerfile's ENV instruction and start another)."""
    out: dict[str, str] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise SelectionError(f"--env {item!r}: expected KEY=VALUE")
        if not ENV_NAME.fullmatch(key):
            raise SelectionError(f"--env {item!r}: {key!r} is not a valid variable name ([A-Za-z_][A-Za-z0-9_]*)")
        bad = control_character(value)
        if bad is not None:
            raise SelectionError(f"--env {key}: the value holds the control character {bad}; a value is one line of "
                                 "printable text")
        out[key] = value
    return out
