"""Which variants a selection names: each flag checked against the matrix (what is valid, and what was meant), the
framework pairs upstream supports, and the --env overrides."""

from __future__ import annotations

import re
from collections.abc import Iterable

from ascend_images.errors import SelectionError
from ascend_images.matrix.model import Matrix, Variant, backend_unsupported, unknown, unsupported


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
    wanted_devices = _split(device)
    if wanted_devices:  # a device the matrix lacks is named before a backend (an empty flag is refused below)
        _pick("device", "--device", wanted_devices, spec.devices, [])
    backends = _pick("backend", "--backend", _split(backend), spec.backends, ["none"])
    fw = framework if framework in spec.frameworks else "none"

    def release_for(dev: str, be: str) -> str | None:  # --release, the framework's default, the device's default
        return release or d.framework_release.get(fw, {}).get(be) or d.release.get(dev, {}).get(be)

    def ships(dev: str) -> bool:  # a release for each backend, which upstream ships on the device
        return all((n := release_for(dev, be)) in spec.releases and unsupported(spec, dev, n, be, fw) is None
                   for be in backends)

    # no --device: every device that has the selection (the 950 has no SGLang, and no CANN below 9.1.0)
    devices = _pick("device", "--device", wanted_devices, spec.devices,
                    sorted(dev for dev in spec.devices if ships(dev)) or sorted(spec.devices))
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
            name = release_for(dev, be)
            why = backend_unsupported(spec, dev, be)
            if name is None and why is not None:
                valid = spec.devices[dev].support.backends  # type: ignore[union-attr]
                raise SelectionError(f"--device {dev} --backend {be}: no such image ({why}); valid backends for {dev}: "
                                     f"{', '.join(valid or [])} (rule device-support)")
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
                    # a device this release is below (devices.<d>.support) has no variant of it
                    devices = [dev for dev in spec.devices if unsupported(spec, dev, name, backend, fw) is None]
                    if not devices:
                        continue
                    out.extend(
                        select(matrix, device=devices, backend=backend, release=name,
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


CI_SETS = ("publish", "test")


def ci_entries(matrix: Matrix, which: str, arch: str | None = None) -> list[list[Variant]]:
    """The variants of each entry of matrix.yaml's `ci.<which>`, in its order: what CI publishes, or what it builds
    from the test doubles and tests; `arch` instead of each entry's arches."""
    if which not in CI_SETS:
        raise SelectionError(f"--ci {which!r}: valid: {', '.join(CI_SETS)} (matrix.yaml ci.publish, ci.test)")
    if which == "publish":
        return [select(matrix, device=entry.device, backend=entry.backend, release=entry.release, os=entry.os,
                       arch=arch or entry.arches, framework=entry.framework) for entry in matrix.spec.ci.publish]
    return [select(matrix, device=entry.device, backend=entry.backend, release=entry.release,
                   arch=arch or entry.arches, profile=entry.profile, env=parse_env_overrides(entry.env),
                   allocator=entry.allocator, framework=entry.framework) for entry in matrix.spec.ci.test]


def ci_variants(matrix: Matrix, which: str, arch: str | None = None) -> list[Variant]:
    """Every variant of `ci.<which>` once (a variant is its name and its overlay: profile, --env, allocator), in the
    entries' order."""
    return list(dict.fromkeys(v for entry in ci_entries(matrix, which, arch) for v in entry))
