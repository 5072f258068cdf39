"""The stage kinds, in one table: for each, when a variant has it, what it is built on, the labels it adds, how it
is described, and what its build context holds beyond the template's common variables. `plan`, `render` and
`build` consult this table instead of branching on the kind.

    base -> cann-install -> cann -> torch [-> vllm | sglang [-> framework]] [-> overlay]

- base: the OS with Python, tini and the entrypoint (FROM the OS image); skipped when CANN comes from an official
  image, which is then cann-install's parent.
- cann-install: CANN's packages installed; cann: the same plus the ENV its env scripts set (captured by running
  them in the cann-install image: `captures_env`).
- torch: torch and torch_npu; vllm / sglang: the backend from its lock; framework: an RL framework (verl, ROLL)
  from its lock over the backend's, and its tag archives; overlay: a non-default profile, allocator
  or user --env over the image below (a thin image, so such a choice never rebuilds CANN or torch).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

from ascend_images.checkout import IMAGES_DIR
from ascend_images.inputs.artifacts import (
    bisheng_wanted,
    framework_wanted,
    off_pypi_wanted,
    sglang_wanted,
    source_wanted,
)
from ascend_images.inputs.frameworklock import load_framework_lock
from ascend_images.inputs.lockfile import LockError, load_lock
from ascend_images.inputs.sources import MISSING_SHA256, SERVER_VAR, Artifact, Sources, sha256_file
from ascend_images.matrix.envs import EnvValue, baked_env, effective_env
from ascend_images.matrix.model import Variant
from ascend_images.matrix.schema import SglangPins, VllmPins
from ascend_images.stages.stage import Stage

LABEL_PREFIX = "io.ascend-images"
DOWNLOADS_LABEL = f"{LABEL_PREFIX}.downloads"  # .<stage kind>: what it installed from downloads PyPI lacks
LAYOUT_LAYER = "cann:image"  # what the official CANN image sets itself, beside its env scripts

Captured = Mapping[str, str] | None
# a kind's part of the build context: (stage, sources, captured env, template variables, extra files) -> None
ContextPart = Callable[["Stage", Sources, Captured, dict[str, Any], dict[str, bytes]], None]


# What a stage's tag says after its leading version (names.py spells it out):
#   os: <os>-py<python>[-<arch>]; device: <version>-<device>-<os>-...; release: <version>-cann<cann>-<device>-...;
#   over: the tag of the image below with the overlay suffix (the stage is that image with other settings)
TagScope = Literal["os", "device", "release", "over"]
# Inputs that may be test doubles: "cann" (--cann-dir with the marker), "artifacts" (--artifacts-dir with it),
# "off-pypi" (a wheel the lock takes from a vendor index, served from such an --artifacts-dir)
DoubleInput = Literal["cann", "artifacts", "off-pypi"]


@dataclass(frozen=True)
class StageKind:
    name: str
    applies: Callable[[Variant], bool]  # does a variant's chain have this stage
    labels: Callable[[Stage], dict[str, str]]  # the io.ascend-images.* labels it adds (parents' are inherited)
    description: Callable[[Stage], str]
    context: ContextPart
    repo: str  # the repository under the namespace ("" for an over-scoped kind: the image below's)
    tag_scope: TagScope
    version: Callable[[Variant], str] | None = None  # the tag's leading version and the OCI version label
    # the OCI version label where it is spelt otherwise than in the tag (CANN's: 8.3.RC1, not the tag's 8.3.rc1)
    label_version: Callable[[Variant], str] | None = None
    # (input, label value) of each input that, when a double, makes this image a test double; labels are
    # inherited, but the image that sets the label names every double below it too
    doubles: tuple[tuple[DoubleInput, str], ...] = ()
    captures_env: bool = False  # the build runs the env scripts in the parent image before rendering
    on_official_image: bool = True  # False: skipped when CANN comes FROM an official image (its parent instead)
    # said when the stage's external parent (an image we do not build) can be neither found nor pulled
    missing_parent_hint: Callable[[Variant], str] | None = None

    # the repository when it depends on the variant (a framework's is its name), else `repo`
    repo_of: Callable[[Variant], str] | None = None
    # the kind whose doubles this one's test-double label names too (a framework's: its backend's)
    doubles_below: Callable[[Variant], str] | None = None

    def repo_for(self, v: Variant) -> str:
        return self.repo_of(v) if self.repo_of else self.repo

    def row_for(self, v: Variant) -> StageKind:
        """The row that names this stage: its own, or for an over-scoped kind the variant's top kind's."""
        return KINDS[top_kind(v)] if self.tag_scope == "over" else self


def overlay_suffix(v: Variant) -> str:
    """What a variant sets over its image below: a non-default profile, allocator, user --env ("" for none)."""
    parts = []
    if v.profile != v.matrix.spec.defaults.profile:
        parts.append(v.profile)
    if v.allocator is not None:
        parts.append("nopreload" if v.allocator == "none" else v.allocator)
    if v.user_env:
        digest = hashlib.sha256(repr(v.user_env).encode()).hexdigest()[:8]
        parts.append(f"env{digest}")
    return "-".join(parts)


def top_kind(v: Variant) -> str:
    """The heavy stage a variant's image is (or its overlay sits on): the last kind of its chain that is not
    over-scoped."""
    return [k.name for k in KINDS.values() if k.tag_scope != "over" and k.applies(v)][-1]


def image_kind(v: Variant) -> str:
    """The kind of a variant's image: the last kind of its chain."""
    return [k.name for k in KINDS.values() if k.applies(v)][-1]


def stage_version(kind: str, v: Variant) -> str:
    """The leading version of a stage's tag, and its OCI version label: what the stage adds."""
    row = KINDS[kind].row_for(v)
    if row.version is None:
        raise ValueError(f"stage kind {row.name!r} has no version")
    return row.version(v)


def stage_label_version(kind: str, v: Variant) -> str:
    """org.opencontainers.image.version of a stage: its tag's version, unless its row spells it otherwise."""
    row = KINDS[kind].row_for(v)
    return row.label_version(v) if row.label_version else stage_version(kind, v)


def stage_doubles(stage: Stage, doubles: Mapping[DoubleInput, bool]) -> list[str]:
    """The test-double label values of a stage, given which inputs are doubles: its own row's, after those of the
    kind it is built over where its row says so (the label is set anew, so it must name every double below)."""
    row = KINDS[stage.kind].row_for(stage.variant)
    below = KINDS[row.doubles_below(stage.variant)].doubles if row.doubles_below else ()
    return list(dict.fromkeys(value for source, value in (*below, *row.doubles) if doubles.get(source)))


def _label(**values: str) -> dict[str, str]:
    return {f"{LABEL_PREFIX}.{k.replace('_', '-')}": v for k, v in values.items()}


def _image_labels(v: Variant) -> dict[str, str]:
    return _label(os=v.os, arch=v.arch, python=v.python, python_version=v.python_version)


# --- base ------------------------------------------------------------------------------------------------------
def _base_context(stage: Stage, sources: Sources, captured: Captured, ctx: dict[str, Any],
                  files: dict[str, bytes]) -> None:
    v = stage.variant
    if v.python != "system":
        resolved = sources.artifacts.resolve(f"python {v.python}", bisheng_wanted(v))
        ctx["python"]["artifacts"] = [{"url": a.url, "sha256": a.sha256} for a in resolved.values()]
        record_downloads(stage, ctx, resolved.values())


# --- cann-install ------------------------------------------------------------------------------------------------
def _cann_install_labels(stage: Stage) -> dict[str, str]:
    v = stage.variant
    # FROM an official CANN image there is no base stage: this one says what the image is built on
    own = _image_labels(v) if stage.external_parent else {}
    return own | _label(device=v.device, soc_version=v.device_spec.soc_version, cann=v.release.cann,
                        cann_layout=v.cann.layout, hdk_floor=str(v.hdk_floor))


def _cann_install_context(stage: Stage, sources: Sources, captured: Captured, ctx: dict[str, Any],
                          files: dict[str, bytes]) -> None:
    packages = sources.cann.packages(stage.variant)
    ctx["cann"]["packages"] = [{"kind": p.kind, "url": p.url, "sha256": p.sha256} for p in packages]
    record_downloads(stage, ctx, packages)


# --- cann ----------------------------------------------------------------------------------------------------------
def _cann_context(stage: Stage, sources: Sources, captured: Captured, ctx: dict[str, Any],
                  files: dict[str, bytes]) -> None:
    v = stage.variant
    baked = baked_env(v, backend=False)
    if captured is not None:
        ctx["captured"] = ctx["env"] = [{"name": k, "value": val, "comment": ""} for k, val in captured.items()]
    # beside its scripts, the official image sets these itself (the layout says which, with its source)
    ctx["layout_env"] = [{"name": k, "value": val, "comment": f"{LAYOUT_LAYER}; source: {v.layout.source}"}
                         for k, val in v.layout_env.items()]
    ctx["defaults"] = env_items(baked)
    files["etc/env.json"] = as_json(env_document(v, v.matrix.spec.defaults.profile, baked, captured))
    files["etc/env-scripts"] = ("\n".join(v.env_scripts) + "\n").encode()


# --- torch ---------------------------------------------------------------------------------------------------------
def _torch_labels(stage: Stage) -> dict[str, str]:
    v = stage.variant
    return _label(release=v.release_name, backend="none", torch=v.torch, torch_npu=v.torch_npu,
                  profile=v.matrix.spec.defaults.profile)


def _torch_context(stage: Stage, sources: Sources, captured: Captured, ctx: dict[str, Any],
                   files: dict[str, bytes]) -> None:
    v = stage.variant
    local = v.arch_spec.torch_local_version
    index = v.arch_spec.torch_index_url if sources.torch_index_url is None else sources.torch_index_url
    ctx["torch"] = {"index_url": index, "requirements": ["torch", "torch-npu"]}
    files["constraints.txt"] = f"torch=={v.torch}{local}\ntorch-npu=={v.torch_npu}\n".encode()


# --- the backends: vllm and sglang -----------------------------------------------------------------------------------
def _vllm_labels(stage: Stage) -> dict[str, str]:
    v, pins = stage.variant, stage.variant.backend_pins
    if not isinstance(pins, VllmPins):
        return {}
    return _label(backend="vllm", vllm=pins.vllm, vllm_ascend=pins.vllm_ascend,
                  triton_ascend=pins.triton_ascend or "", allocator=v.default_allocator)


def _sglang_labels(stage: Stage) -> dict[str, str]:
    v, pins = stage.variant, stage.variant.backend_pins
    if not isinstance(pins, SglangPins):
        return {}
    return _label(backend="sglang", sglang=pins.sglang, sgl_kernel_npu=pins.sgl_kernel_npu.tag,
                  allocator=v.default_allocator)


def _vllm_version(v: Variant) -> str:
    assert isinstance(v.backend_pins, VllmPins)
    return v.backend_pins.vllm_ascend


def _sglang_version(v: Variant) -> str:
    assert isinstance(v.backend_pins, SglangPins)
    return v.backend_pins.sglang


def _backend_context(stage: Stage, sources: Sources, captured: Captured, ctx: dict[str, Any],
                     files: dict[str, bytes]) -> None:
    v = stage.variant
    baked = baked_env(v, backend=True)
    below = baked_env(v, backend=False)
    # only what the backend layer changes after profile precedence is applied
    ctx["defaults"] = env_items({k: e for k, e in baked.items() if k not in below or below[k].value != e.value})
    ctx["pins"] = v.backend_pins.model_dump(by_alias=True) if v.backend_pins else {}
    files["etc/env.json"] = as_json(env_document(v, v.matrix.spec.defaults.profile, baked, captured))
    ctx["lock"], files["backend-lock.txt"] = _backend_lock(v, sources)
    wheels = sources.artifacts.resolve(f"{v.backend} {v.release_name}: wheels not on PyPI", off_pypi_wanted(v))
    ctx["off_pypi"] = [{"file": a.file, "url": a.url, "sha256": a.sha256} for a in wheels.values()]
    record_downloads(stage, ctx, [*wheels.values(), *([ctx["lock"]["archive"]] if ctx["lock"]["archive"] else [])])
    if ctx["lock"]["overrides"] or ctx["lock"]["no_deps"]:
        files["pip-check"] = (IMAGES_DIR / "common" / "backend" / "pip-check").read_bytes()
    ctx["allocator"] = allocator(v, v.default_allocator)


def _sglang_context(stage: Stage, sources: Sources, captured: Captured, ctx: dict[str, Any],
                    files: dict[str, bytes]) -> None:
    _backend_context(stage, sources, captured, ctx, files)
    v = stage.variant
    resolved = sources.artifacts.resolve(f"sglang {v.release_name}", sglang_wanted(v))
    ctx["artifacts"] = {key: {"file": a.file, "url": a.url, "sha256": a.sha256, "kind": key}
                        for key, a in resolved.items()}
    record_downloads(stage, ctx, resolved.values())


def _backend_lock(v: Variant, sources: Sources) -> tuple[dict[str, Any], bytes]:
    """The stage's lock (checked against the matrix) and the sdist its source package builds from:
    from --artifacts-dir when it holds the file (it must have the lock's sha256), else the index's URL.
    A preview render (not strict) of a missing or stale lock renders with a placeholder and says why."""
    try:
        lock = load_lock(v)
    except LockError as exc:
        if sources.artifacts.strict:
            raise
        sdist = {"file": "lock-missing.tar.gz", "url": "lock-missing", "sha256": MISSING_SHA256}
        return ({"sdist": sdist, "archive": None, "build_requirements": ["setuptools"], "from_source": [],
                 "from_source_pins": [],
                 "overrides": [], "no_deps": [], "subdir": "", "missing": str(exc)},
                f"# LOCK MISSING OR STALE: {exc}\n".encode())
    wanted = source_wanted(lock)
    archive = None
    if wanted.on_pypi:  # pinned by the lock with PyPI's sha256; from --artifacts-dir when it holds a copy
        file, url, sha256 = wanted.file, wanted.url, wanted.sha256
        directory = sources.artifacts.directory
        if directory is not None and (directory / file).is_file():
            local = sha256_file(directory / file)
            if local != sha256:
                raise LockError(f"{directory / file}: sha256 {local}, but {lock.path} pins {sha256} (PyPI's)")
            url = f"{SERVER_VAR}/artifacts/{file}"
        sdist = Artifact(file, url, sha256 or MISSING_SHA256)
    else:  # a tag archive: a download PyPI does not carry, pinned in pins.yaml like the others
        (sdist,) = sources.artifacts.resolve(f"{v.backend} {v.release_name}: source tree", [wanted]).values()
        archive = sdist
    return ({"sdist": {"file": sdist.file, "url": sdist.url, "sha256": sdist.sha256}, "archive": archive,
             "build_requirements": list(lock.build_requirements), "from_source": list(lock.from_source),
             "from_source_pins": [f"{name}=={lock.pins[name]}" for name in lock.from_source],
             "subdir": lock.source_subdir, "overrides": list(lock.overrides),
             "no_deps": [f"{f.name}=={f.version}" for f in lock.off_pypi], "missing": ""}, lock.text.encode())


def record_downloads(stage: Stage, ctx: dict[str, Any], artifacts: Iterable[Any]) -> None:
    """The downloads PyPI does not carry that this stage installs, as a label (file -> sha256): `invoke publish`
    checks each against pins.yaml. One label per kind, so a child's never hides its parent's."""
    key = f"{DOWNLOADS_LABEL}.{stage.kind}"
    files = {**json.loads(ctx["labels"].get(key, "{}")), **{a.file: a.sha256 for a in artifacts}}
    if files:
        ctx["labels"][key] = json.dumps(files, sort_keys=True, separators=(",", ":"))


def allocator(v: Variant, name: str) -> dict[str, Any]:
    return {"name": name, "packages": v.allocator_packages(name), "library": v.allocator_library(name),
            "source": v.matrix.spec.allocators[name].source}


# --- framework -------------------------------------------------------------------------------------------------------
def _framework_labels(stage: Stage) -> dict[str, str]:
    v, pins = stage.variant, stage.variant.framework_pins
    if pins is None:
        return {}
    return _label(framework=v.framework, framework_version=pins.version)


def _framework_version(v: Variant) -> str:
    assert v.framework_pins is not None
    return f"{v.framework_pins.version}-{v.backend}{stage_version(v.backend, v)}"


def _framework_context(stage: Stage, sources: Sources, captured: Captured, ctx: dict[str, Any],
                       files: dict[str, bytes]) -> None:
    v, pins = stage.variant, stage.variant.framework_pins
    assert pins is not None
    baked = baked_env(v, backend=True, framework=True)
    below = baked_env(v, backend=True)
    ctx["defaults"] = env_items({k: e for k, e in baked.items() if k not in below or below[k].value != e.value})
    ctx["framework"] = {"name": v.framework, "version": pins.version,
                        "description": v.matrix.spec.frameworks[v.framework].description}
    files["etc/env.json"] = as_json(env_document(v, v.matrix.spec.defaults.profile, baked, captured))
    try:
        backend_lock, lock = load_lock(v), load_framework_lock(v)
        files["framework-lock.txt"] = lock.text.encode()
        ctx["lock"] = {"missing": "", "overrides": [*backend_lock.overrides, *lock.overrides],
                       "no_deps": [f"{f.name}=={f.version}" for f in backend_lock.off_pypi] + list(pins.no_deps)}
    except LockError as exc:
        if sources.artifacts.strict:
            raise
        files["framework-lock.txt"] = f"# LOCK MISSING OR STALE: {exc}\n".encode()
        ctx["lock"] = {"missing": str(exc), "overrides": [], "no_deps": list(pins.no_deps)}
    resolved = sources.artifacts.resolve(f"{v.framework} {v.release_name}: tag archives", framework_wanted(v))
    ctx["archives"] = [{"file": a.file, "url": a.url, "sha256": a.sha256, "name": spec.name, "version": spec.version}
                       for spec, a in zip(pins.archives, resolved.values(), strict=True)]
    # the archives go in --no-deps as upstream installs them: their own requirements are the framework's listed ones
    ctx["lock"]["no_deps"] += [f"{a.name}=={a.version}" for a in pins.archives]
    record_downloads(stage, ctx, resolved.values())
    files["pip-check"] = (IMAGES_DIR / "common" / "backend" / "pip-check").read_bytes()


# --- overlay ---------------------------------------------------------------------------------------------------------
def _overlay_labels(stage: Stage) -> dict[str, str]:
    v = stage.variant
    labels = _label(profile=v.profile)
    if v.allocator is not None:
        labels |= _label(allocator=v.allocator)
    if v.user_env:
        # the values too (they are in the image's ENV anyway): the image tests read their expectations here
        labels |= _label(user_env=json.dumps(dict(v.user_env), sort_keys=True))
    return labels


def _overlay_context(stage: Stage, sources: Sources, captured: Captured, ctx: dict[str, Any],
                     files: dict[str, bytes]) -> None:
    v = stage.variant
    full = effective_env(v)
    own = ("profile:", "user", *(("allocator:",) if v.allocator is not None else ()))
    ctx["env"] = env_items({k: e for k, e in full.items() if e.layer.startswith(own)})
    if v.allocator is not None:
        ctx["allocator"] = allocator(v, v.allocator)
    files["etc/env.json"] = as_json(env_document(v, v.profile, full, captured))


# --- the table -------------------------------------------------------------------------------------------------------
def _os_image_hint(v: Variant) -> str:
    return (f"With no registry, make the OS image locally: invoke os-image --os {v.os} --arch {v.arch} "
            "(then build again, or pass --base-image REF)")


KINDS: dict[str, StageKind] = {k.name: k for k in (
    StageKind("base", lambda v: True,
              lambda s: _image_labels(s.variant),
              lambda s: f"{s.variant.os} with Python {s.variant.python_version} ({s.variant.python}), tini and "
                        "the ascend-images entrypoint",
              _base_context, repo="base", tag_scope="os",
              version=lambda v: f"{v.os}-py{v.python_version}",
              on_official_image=False, missing_parent_hint=_os_image_hint),
    StageKind("cann-install", lambda v: True, _cann_install_labels,
              lambda s: f"CANN {s.variant.release.cann} for {s.variant.device} installed, environment not yet baked",
              _cann_install_context, repo="cann-install", tag_scope="device",
              version=lambda v: v.cann_version.tag, label_version=lambda v: v.release.cann,
              doubles=(("cann", "cann"),)),
    StageKind("cann", lambda v: True, lambda s: {},
              lambda s: f"CANN {s.variant.release.cann} for {s.variant.device} with its environment baked into ENV",
              _cann_context, repo="cann", tag_scope="device", version=lambda v: v.cann_version.tag,
              label_version=lambda v: v.release.cann, doubles=(("cann", "cann"),), captures_env=True),
    StageKind("torch", lambda v: True, _torch_labels,
              lambda s: f"torch {s.variant.torch} + torch_npu {s.variant.torch_npu} on CANN {s.variant.release.cann} "
                        f"for {s.variant.device}",
              _torch_context, repo="torch-npu", tag_scope="release", version=lambda v: v.torch_npu,
              doubles=(("cann", "cann"),)),
    StageKind("vllm", lambda v: v.backend == "vllm", _vllm_labels,
              lambda s: f"vLLM-Ascend on CANN {s.variant.release.cann} for {s.variant.device}",
              _backend_context, repo="vllm-ascend", tag_scope="release", version=_vllm_version,
              doubles=(("cann", "cann"), ("off-pypi", "off-pypi-wheels"))),
    StageKind("sglang", lambda v: v.backend == "sglang", _sglang_labels,
              lambda s: f"SGLang on CANN {s.variant.release.cann} for {s.variant.device}",
              _sglang_context, repo="sglang", tag_scope="release", version=_sglang_version,
              doubles=(("cann", "cann"), ("artifacts", "sgl-kernel-npu"), ("off-pypi", "off-pypi-wheels"))),
    StageKind("framework", lambda v: v.framework != "none", _framework_labels,
              lambda s: f"{s.variant.framework} over {s.variant.backend} on CANN {s.variant.release.cann} for "
                        f"{s.variant.device}",
              _framework_context, repo="framework", tag_scope="release", version=_framework_version,
              doubles=(("artifacts", "framework-archives"),),
              repo_of=lambda v: v.framework, doubles_below=lambda v: v.backend),
    StageKind("overlay", lambda v: bool(overlay_suffix(v)), _overlay_labels,
              lambda s: f"{s.parent_ref} with profile {s.variant.profile}"
                        + (f" and allocator {s.variant.allocator}" if s.variant.allocator is not None else ""),
              _overlay_context, repo="", tag_scope="over"),
)}


def register_kind(kind: StageKind, after: str) -> None:
    """Add a kind to the table right after `after` in the chain (parents first). The table stays one object,
    so every module that imported it sees the new row."""
    if kind.name in KINDS:
        raise ValueError(f"stage kind {kind.name!r} exists already")
    rows = list(KINDS.values())
    rows.insert([r.name for r in rows].index(after) + 1, kind)
    KINDS.clear()
    KINDS.update((r.name, r) for r in rows)


def unregister_kind(name: str) -> None:
    del KINDS[name]


def stage_labels(stage: Stage) -> dict[str, str]:
    """The io.ascend-images.* labels a stage adds (its parents' labels are inherited)."""
    return _label(stage=stage.kind) | KINDS[stage.kind].labels(stage)


# --- the environment documents kinds write ---------------------------------------------------------------------------
def env_items(values: Mapping[str, EnvValue]) -> list[dict[str, str]]:
    return [{"name": e.name, "value": e.value, "comment": f"{e.layer}; source: {e.source}"} for e in values.values()]


def env_document(v: Variant, profile: str, values: Mapping[str, EnvValue], captured: Captured) -> dict[str, Any]:
    """/etc/ascend-images/env.json: every variable the image sets, with where it comes from. `profile` is the
    one baked into this image: the default below an overlay, so that choosing another profile changes no
    stage but the overlay."""
    doc: dict[str, Any] = {"profile": profile, "env_scripts": v.env_scripts, "variables": {}}
    for name, value in (captured or {}).items():
        doc["variables"][name] = {"value": value, "layer": "cann:set_env", "source": "captured from env_scripts"}
    for name, value in v.layout_env.items():
        doc["variables"][name] = {"value": value, "layer": LAYOUT_LAYER, "source": v.layout.source}
    for name, item in values.items():
        doc["variables"][name] = item.as_dict()
    doc["variables"] = dict(sorted(doc["variables"].items()))
    return doc


def as_json(doc: Any) -> bytes:
    return (json.dumps(doc, indent=2, sort_keys=True) + "\n").encode()
