"""Compatibility rules: data in matrix.yaml, small predicates here.

Each rule has an id, a severity, a one-line statement and the source it comes from. A violation
names the rule, the values it saw and what would be valid. Errors stop a build before anything is
rendered; warnings are printed and the build goes on.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Literal

from packaging.version import Version

from ascend_images.errors import RuleError
from ascend_images.matrix.envs import effective_env
from ascend_images.matrix.model import Variant, unsupported
from ascend_images.matrix.schema import MatrixSpec, SglangPins, VllmPins
from ascend_images.matrix.versions import ascend, python_version_in, release_of

Severity = Literal["error", "warning"]


@dataclass(frozen=True)
class Rule:
    id: str
    severity: Severity
    statement: str  # formatted with the matrix (`spec`): a threshold is stated from the data the check reads
    source: str
    check: Callable[[Variant], str | None]

    def stated(self, spec: MatrixSpec) -> str:
        tags = sum(len(k.tags) for k in spec.backends["sglang"].kernel_releases)
        return self.statement.format(spec=spec, kernel_tags=tags)


@dataclass(frozen=True)
class Violation:
    rule: Rule
    variant: str
    detail: str
    statement: str

    def __str__(self) -> str:
        r = self.rule
        return f"{r.severity} [{r.id}] {self.variant}: {self.detail} (rule: {self.statement}; source: {r.source})"


def _torch_npu_exact_torch(v: Variant) -> str | None:
    want = release_of(v.torch_npu)
    if v.torch != want:
        return f"torch_npu {v.torch_npu} is paired with torch {v.torch}; valid: torch == {want}"
    return None


def _torch_npu_python(v: Variant) -> str | None:
    rng = v.torch_pair.python
    if not python_version_in(v.python_version, rng):
        return f"python {v.python_version} is outside torch_npu {v.torch_npu}'s range {rng}"
    return None


def _vllm_pins(v: Variant) -> VllmPins | None:
    return v.backend_pins if isinstance(v.backend_pins, VllmPins) else None


def _sglang_pins(v: Variant) -> SglangPins | None:
    return v.backend_pins if isinstance(v.backend_pins, SglangPins) else None


def _vllm_ascend_needs_vllm(v: Variant) -> str | None:
    pins = _vllm_pins(v)
    if pins is None:
        return None
    exceptions = v.matrix.spec.backends["vllm"].vllm_exceptions
    valid = exceptions.get(pins.vllm_ascend, [release_of(pins.vllm_ascend)])
    if pins.vllm not in valid:
        return f"vllm-ascend {pins.vllm_ascend} is paired with vllm {pins.vllm}; valid: vllm {' or '.join(valid)}"
    return None


def _vllm_ascend_python(v: Variant) -> str | None:
    pins = _vllm_pins(v)
    ranges = v.matrix.spec.backends["vllm"].python
    if pins is None or not isinstance(ranges, dict):
        return None
    rng = ranges.get(pins.vllm_ascend)
    if rng is None:
        known = ", ".join(ranges)
        return f"vllm-ascend {pins.vllm_ascend} has no Python range in backends.vllm.python (known: {known})"
    if not python_version_in(v.python_version, rng):
        return f"python {v.python_version} is outside vllm-ascend {pins.vllm_ascend}'s range {rng}"
    return None


def _vllm_ascend_a3(v: Variant) -> str | None:
    pins = _vllm_pins(v)
    floor = v.matrix.spec.backends["vllm"].min_a3
    if pins is None or v.device != "a3" or floor is None:
        return None
    if Version(pins.vllm_ascend) < Version(floor):
        return f"vllm-ascend {pins.vllm_ascend} does not support A3; valid: vllm-ascend >= {floor}"
    return None


def _vllm_ascend_sdist_sources(v: Variant) -> str | None:
    pins = _vllm_pins(v)
    if pins is None or "vllm-ascend" not in pins.from_sdist.get(v.arch, []):
        return None
    lacking = v.matrix.spec.backends["vllm"].sdist_lacks_catlass
    if pins.vllm_ascend in lacking:
        return (f"releases.{v.release_name}.backends.vllm.from_sdist.{v.arch} builds vllm-ascend {pins.vllm_ascend} "
                f"from its PyPI sdist, which has no csrc/third_party/catlass for {v.device}'s custom ops; valid: its "
                f"wheel (leave vllm-ascend out of from_sdist), or a vllm-ascend whose sdist carries catlass (not "
                f"{', '.join(lacking)})")
    return None


def _device_build(v: Variant) -> str | None:
    build = v.device_build
    if build is None or v.backend_pins is None:
        return None
    soc = v.device_spec.soc_version
    how = build.devices.get(v.device)
    sdist = f"sdist (built in the image with SOC_VERSION={soc})"
    if how is None:
        known = ", ".join(f"{d}: {h}" for d, h in build.devices.items())
        return (f"backends.{v.backend}.device_build.devices names no build of {build.package} for {v.device} (it has "
                f"{known}); valid for {v.device}: {sdist}" + (", or wheel" if v.device == build.pypi_wheel else ""))
    if how == "wheel" and v.device != build.pypi_wheel:
        return (f"{v.device} installs {build.package} from PyPI's wheel (backends.{v.backend}.device_build.devices."
                f"{v.device}: wheel), which is {build.pypi_wheel}'s build: its start-up check stops it on "
                f"{v.device}'s chip; valid for {v.device}: {sdist}")
    return None


def _sglang_python(v: Variant) -> str | None:
    spec = v.matrix.spec.backends["sglang"].python
    if _sglang_pins(v) is None or not isinstance(spec, str):
        return None
    if not python_version_in(v.python_version, spec):
        return f"python {v.python_version} does not satisfy SGLang's {spec}"
    return None


def _sglang_min_cann(v: Variant) -> str | None:
    floor = v.matrix.spec.backends["sglang"].min_cann
    if _sglang_pins(v) is None or floor is None:
        return None
    if v.cann_version < ascend(floor):
        return f"CANN {v.cann_version} is below SGLang's floor; valid: CANN >= {floor}"
    return None


def _sglang_min_version(v: Variant) -> str | None:
    pins = _sglang_pins(v)
    floor = v.matrix.spec.backends["sglang"].min_version
    if pins is None or floor is None:
        return None
    if Version(pins.sglang) < Version(floor):
        return f"sglang {pins.sglang} has no NPU support; valid: sglang >= {floor}"
    return None


def _hdk_floor(v: Variant) -> str | None:
    declared = v.release.hdk_floor
    derived = ascend(v.cann.hdk_floor)
    if declared is not None and ascend(declared) < derived:
        return f"release declares HDK >= {declared} but CANN {v.cann_version} needs HDK >= {derived}"
    return None


def _torch_npu_cann(v: Variant) -> str | None:
    if v.torch_pair.cann is None:
        return (f"torch_npu {v.torch_npu}: no upstream source says which CANN it was released for (matrix.yaml "
                f"torch.pairs has cann: null); the release uses CANN {v.cann_version}, unconfirmed")
    made_for = ascend(v.torch_pair.cann)
    if made_for != v.cann_version:
        same = sorted(n for n, p in v.matrix.spec.torch.pairs.items()
                      if p.cann is not None and ascend(p.cann) == v.cann_version)
        hint = f"torch_npu released for it: {', '.join(same)}" if same else "no torch_npu in the table targets it"
        return (
            f"torch_npu {v.torch_npu} was released for CANN {made_for}, the release uses CANN "
            f"{v.cann_version} ({hint})"
        )
    return None


def _task_queue_graph_mode(v: Variant) -> str | None:
    # vLLM-Ascend runs in graph mode unless enforce_eager is set
    if v.backend != "vllm":
        return None
    value = effective_env(v).get("TASK_QUEUE_ENABLE")
    if value is not None and value.value == "2":
        return (
            f"TASK_QUEUE_ENABLE=2 (from {value.layer}) with vLLM's default graph mode; "
            "valid: TASK_QUEUE_ENABLE=1, or run vLLM with enforce_eager"
        )
    return None


def _bisheng_arch(v: Variant) -> str | None:
    arches = v.python_spec.arches
    if arches is not None and v.arch not in arches:
        return f"python {v.python!r} is only known for {', '.join(arches)}, not {v.arch}"
    return None


def _sglang_kernel_cann(v: Variant) -> str | None:
    pins = _sglang_pins(v)
    if pins is None or pins.sgl_kernel_npu.from_ != "release":
        return None
    tag = pins.sgl_kernel_npu.tag
    group = next((k for k in v.matrix.spec.backends["sglang"].kernel_releases if tag in k.tags), None)
    if group is None:
        known = [t for k in v.matrix.spec.backends["sglang"].kernel_releases for t in k.tags]
        return (f"sgl-kernel-npu tag {tag} is not in backends.sglang.kernel_releases, so no zip is known for it; "
                f"known tags: {', '.join(known)}")
    builds = [(ascend(b.cann), b.torch, b.python) for b in group.builds]
    if (v.cann_version, v.torch, v.python_version) not in builds:
        have = ", ".join(f"CANN {b.cann} + torch {b.torch} + Python {b.python}" for b in group.builds)
        return (f"sgl-kernel-npu {tag} publishes zips for {have}; this release has CANN {v.cann_version} + torch "
                f"{v.torch} + Python {v.python_version}: pick a tag that builds it, or `from: source`")
    return None


def _sglang_npu_line(v: Variant) -> str | None:
    pins = _sglang_pins(v)
    if pins is None:
        return None
    line = next((line for line in v.matrix.spec.backends["sglang"].npu_lines if line.covers(pins.sglang)), None)
    if line is None:  # a release older than the lines recorded: the other rules judge it
        return None
    chip = v.device_spec.chip
    if chip not in line.chips:
        return (f"upstream builds SGLang {pins.sglang}'s NPU images for {', '.join(line.chips)}, not {chip} "
                f"({v.device}): its NPU line ({line.versions}) dropped it; valid: a device whose chip is one of those")
    if line.python != v.python_version:
        return (f"SGLang {pins.sglang}'s NPU line is Python {line.python}, this variant has Python {v.python_version}"
                + (f" ({line.why})" if line.why else ""))
    if ascend(line.cann) != v.cann_version:
        return f"SGLang {pins.sglang}'s NPU line is CANN {line.cann}, this release has CANN {v.cann_version}"
    return None


def _device_support(v: Variant) -> str | None:
    return unsupported(v.matrix.spec, v.device, v.release_name, v.backend, v.framework)


RULES: tuple[Rule, ...] = (
    Rule("torch-npu-exact-torch", "error", "torch_npu X.Y.Z[.postN] requires torch == X.Y.Z", "PT",
         _torch_npu_exact_torch),
    Rule("torch-npu-python", "error", "torch_npu wheels exist only for their Python range", "PT",
         _torch_npu_python),
    Rule("vllm-ascend-needs-vllm", "error", "vllm-ascend vA.B.C requires vllm A.B.C (known exceptions listed)",
         "VA", _vllm_ascend_needs_vllm),
    Rule("vllm-ascend-python", "error", "vllm-ascend supports only its Python range", "VA", _vllm_ascend_python),
    Rule("device-support", "error", "a device is built only on the lines upstream ships it on (devices.<d>.support: "
         "its oldest CANN, torch_npu and vLLM-Ascend, its backends and frameworks)",
         "CANN, TorchNPU and VA release notes; CCI; ROLL Dockerfile.A5", _device_support),
    Rule("vllm-ascend-a3", "error", "A3 support starts at vllm-ascend {spec.backends[vllm].min_a3}",
         "VA", _vllm_ascend_a3),
    Rule("vllm-ascend-sdist-sources", "error",
         "a vllm-ascend sdist without catlass (backends.vllm.sdist_lacks_catlass) cannot build A2/A3 custom ops",
         "VA (csrc/build_aclnn.sh, .gitmodules); PyPI sdist file lists", _vllm_ascend_sdist_sources),
    Rule("device-build", "error", "a device installs the build of a device-specific package made for it: PyPI's "
         "wheel only on the device it is built for, elsewhere its sdist built with the device's SOC_VERSION "
         "(backends.<backend>.device_build)", "VA setup.py, vllm_ascend/utils.py, Dockerfile.a3, Dockerfile.a5; "
         "VA issue 11160", _device_build),
    Rule("sglang-python", "error", "SGLang on NPU needs Python {spec.backends[sglang].python}",
         "SG; ref002", _sglang_python),
    Rule("sglang-min-cann", "error", "SGLang on NPU needs CANN >= {spec.backends[sglang].min_cann}",
         "ref002", _sglang_min_cann),
    Rule("sglang-min-version", "error", "SGLang supports NPUs from v{spec.backends[sglang].min_version}",
         "SG", _sglang_min_version),
    Rule("hdk-floor-from-cann", "error", "the HDK floor is at least the driver CANN was released with", "MF",
         _hdk_floor),
    Rule("sglang-npu-line", "error", "an SGLang release is built as its NPU line is: that line's chips, Python and "
         "CANN (backends.sglang.npu_lines)", "SG (docker/npu.Dockerfile, release-docker-npu.yml; PR 40524)",
         _sglang_npu_line),
    Rule("sgl-kernel-npu-coverage", "error",
         "sgl-kernel-npu publishes release zips for the builds its release matrix lists (backends.sglang."
         "kernel_releases: {kernel_tags} tags)", "SG (sgl-kernel-npu build_and_release.yml at each tag)",
         _sglang_kernel_cann),
    Rule("torch-npu-cann-pair", "warning", "torch_npu is released for one CANN version", "PT", _torch_npu_cann),
    Rule("task-queue-graph-mode", "warning", "TASK_QUEUE_ENABLE=2 conflicts with graph mode",
         "ref000; ref001", _task_queue_graph_mode),
    Rule("bisheng-python-arch", "warning", "the BiSheng Python build is published for aarch64 (unconfirmed)",
         "ref004", _bisheng_arch),
)

RULES_BY_ID = {r.id: r for r in RULES}


def evaluate(variants: Iterable[Variant], rules: Iterable[Rule] = RULES) -> list[Violation]:
    out = []
    rules = tuple(rules)
    for v in variants:
        for rule in rules:
            detail = rule.check(v)
            if detail:
                out.append(Violation(rule, v.name, detail, rule.stated(v.matrix.spec)))
    return out


def enforce(variants: Iterable[Variant], warn: Callable[[str], None] = print) -> list[Violation]:
    """Raise RuleError listing every error; report warnings through `warn`."""
    violations = evaluate(variants)
    errors = [v for v in violations if v.rule.severity == "error"]
    for w in violations:
        if w.rule.severity == "warning":
            warn(str(w))
    if errors:
        raise RuleError(
            f"{len(errors)} compatibility error(s):\n" + "\n".join(f"  - {e}" for e in errors)
        )
    return violations


