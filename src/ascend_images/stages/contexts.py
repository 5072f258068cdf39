"""What each stage kind adds to its build context beyond the common template variables (render.py): the template
variables and the files a kind's Dockerfile copies. The stage-kind table (kinds.py) names one builder per row.

Every kind that installs Python packages does it the one way (DESIGN 19): what its locks add (stages/packages.py)
is installed by uv, natively, for the target platform, with bytecode compiled natively, in build stages FROM the build
host's own platform (`--platform=$BUILDPLATFORM`) of the same build; only sdists build on the target, in throwaway
stages; the stage itself copies the result in.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import Any

from ascend_images.checkout import IMAGES_DIR
from ascend_images.inputs.artifacts import (
    bisheng_wanted,
    framework_wanted,
    off_pypi_wanted,
    sglang_wanted,
    source_wanted,
)
from ascend_images.inputs.lockfile import GLIBC_FLOOR, LockError
from ascend_images.inputs.sources import INPUTS_DIR, MISSING_SHA256, Artifact, Sources, sha256_file
from ascend_images.matrix.cannenv import expand
from ascend_images.matrix.envs import EnvValue
from ascend_images.matrix.model import Variant
from ascend_images.stages.envreaders import KindEnv, shipped_env, stage_defaults
from ascend_images.stages.packages import SourceBuild, StagePackages, stage_packages
from ascend_images.stages.record import StageInputs, pin_arg, store_url
from ascend_images.stages.stage import Stage

LABEL_PREFIX = "io.ascend-images"
DOWNLOADS_LABEL = f"{LABEL_PREFIX}.downloads"  # .<stage kind>: what it installed from downloads PyPI lacks
# the stage below, as `<repo>:<tag>` in the image's own namespace: how provenance and publishing walk a chain
PARENT_LABEL = f"{LABEL_PREFIX}.parent"
TEST_DOUBLE_LABEL = f"{LABEL_PREFIX}.test-double"
LAYOUT_LAYER = "cann:image"  # what the official CANN image sets itself, beside its env scripts
SCRIPTS_LAYER = "cann:set_env"  # what CANN's env scripts set (check-cann-env checks the image against them)
INSTALLER_OS = "debian12"  # the native stages' OS: its python3 is the images' 3.11, whatever OS the images are
PYTHON_PREFIX = "/usr/local/python"  # the image's Python (a venv of the OS's, or BiSheng's tree): what it installs into


# the files every native stage's tool is made of: the same bytes in every stage's context, so the engine's cache builds
# that tool once (images/common/installer/, and the rootfs helpers it runs)
INSTALLER_FILES = {
    **{f"installer/{name}": f"installer/{name}" for name in ("install-packages", "build-pure-wheel", "install-uv",
                                                            "wheel-links")},
    **{f"installer/{name}": f"rootfs/usr/local/libexec/ascend-images/{name}" for name in ("build-env", "fetch",
                                                                                         "os-install")},
}


def installer_files() -> dict[str, bytes]:
    return {rel: (IMAGES_DIR / "common" / source).read_bytes() for rel, source in INSTALLER_FILES.items()}


# --- the packages of a stage -----------------------------------------------------------------------------------------
def packages_context(stage: Stage, sources: Sources, ctx: dict[str, Any], files: dict[str, bytes],
                     inputs: StageInputs, builds: list[dict[str, Any]] | None = None,
                     fetched_wheels: Iterable[Artifact] = (), zips: Iterable[Artifact] = (),
                     target_build: dict[str, Any] | None = None) -> None:
    """The variables the partials packages-*.j2 read, and the files they copy: install.txt (the lock's pins the
    image below lacks, hashed), build-requirements.txt, the stage's locks (kept in the image), plus the source builds
    the kind adds (`builds`: each one wheel, built on the target or, `native`, here) and wheels fetched as files
    (`fetched_wheels`)."""
    v = stage.variant
    try:
        pk = stage_packages(stage)
    except LockError as exc:
        if sources.artifacts.strict:
            raise
        pk = StagePackages((), {}, (), ())
        ctx["lock"] = {**ctx.get("lock", {}), "missing": str(exc)}
    files["install.txt"] = ("".join(f"{line}\n" for line in pk.install)).encode()
    for lock in pk.locks.values():
        files[f"locks/{lock.path.name}"] = lock.text.encode()
    if not pk.locks:  # a preview of a stage whose lock is missing: the build stops before this is ever used
        files["locks/LOCK-MISSING"] = f"{ctx['lock']['missing']}\n".encode()
    if pk.build_requirements:
        files["build-requirements.txt"] = ("".join(f"{line}\n" for line in pk.build_requirements)).encode()
    native = [b for b in builds or [] if b["native"]]
    files.update(installer_files())
    locked_builds = [{"key": f"{build_key(v)}-{b.sha256[:16]}", "spec": f"{inputs.wheel(b.sha256)}#{b.sha256}",
                      "subdir": ".", "project_file": "", "version": "", "env": [], "script": "", "args": [],
                      "what": f"{b.name} {b.version} (no {v.arch} wheel)"} for b in pk.builds]
    tool = v.matrix.spec.tools["uv"]
    uv = tool.files[v.arch]
    ctx["platform"] = v.arch_spec.docker_platform
    ctx["uv"] = {"version": tool.version, "files": [{"url": f"{arch}={inputs.wheel(f.sha256)}", "sha256": f.sha256}
                                                   for arch, f in tool.files.items()]}
    locked_builds += [device_build(stage, sources, inputs, b) for b in pk.device_builds]
    target_builds = [*locked_builds, *(b for b in builds or [] if not b["native"])]
    if target_build:
        target_builds.append(target_build)
    ctx["packages"] = {
        "layers": list(pk.layers), "locks": [lock.path.name for lock in pk.locks.values()],
        "install": len(pk.install), "replaces": list(pk.replaces), "below_unknown": pk.below_unknown,
        "target_builds": target_builds,
        "native_builds": native,
        "build_requirements": bool(pk.build_requirements),
        "fetched": [inputs.download(a) for a in fetched_wheels],
        "zips": [inputs.download(a) for a in zips],
        "names": sorted({line.split("==", 1)[0] for line in pk.install}),
        "python_platform": f"{v.arch}-{GLIBC_FLOOR}", "prefix": PYTHON_PREFIX,
        "uv_target": {"url": inputs.wheel(uv.sha256), "sha256": uv.sha256},
        "waived": list(pk.waived),
    }
    # what the wheel store must hold (uv for the build host's arch and the target's among it), and where beside the pip
    # indexes it finds it (x86_64's torch: PyTorch's CPU index)
    inputs.want([*pk.wanted, *(f"uv=={tool.version} --hash=sha256:{f.sha256}" for f in tool.files.values())])
    torch_index = v.arch_spec.torch_index_url if sources.torch_index_url is None else sources.torch_index_url
    inputs.indexes.extend([torch_index] if torch_index else [])


def device_build(stage: Stage, sources: Sources, inputs: StageInputs, build: SourceBuild) -> dict[str, Any]:
    """A locked package built on the target from its sdist for the stage's device (DESIGN 28): with the device's
    SOC_VERSION, which the package's build records and its start-up check compares with the chip, and its kernels
    compiled by CANN's compilers. The kernels' switch is a build arg: on, but where the CANN is a test double (it has
    no compiler; the image carries the test-double label), so the same build writes the same device record."""
    v = stage.variant
    spec = v.device_build
    assert spec is not None
    soc = v.device_spec.soc_version
    inputs.switch(spec.kernels, "0" if sources.cann.test_double else "1")
    switch = f"{spec.kernels}=${{{spec.kernels}}}"
    return {"key": f"{build_key(v)}-{soc}-{spec.kernels.lower()}${{{spec.kernels}}}-{build.sha256[:16]}",
            "spec": f"{inputs.wheel(build.sha256)}#{build.sha256}", "subdir": ".", "project_file": "", "version": "",
            "env": [f"SOC_VERSION={soc}", switch], "script": "", "args": [spec.kernels],
            "what": f"{build.name} {build.version} for {v.device} from its sdist (SOC_VERSION={soc}, {switch})"}


def source_build(inputs: StageInputs, key: str, artifact: Artifact, what: str, *, subdir: str = ".",
                 project_file: str = "", version: str = "", env: Iterable[str] = (),
                 native: bool = False) -> dict[str, Any]:
    """One wheel built from a source tree: on the target (the default), or, for a pure-Python tree (`native`), on the
    build host's own arch in the native packages stage (build-pure-wheel refuses a wheel that is not py3-none-any)."""
    spec = inputs.spec(artifact)
    return {"key": f"{key}-{artifact.sha256[:16]}", "spec": spec, "subdir": subdir,
            "project_file": project_file, "version": version, "env": list(env), "what": what, "native": native,
            "script": "", "args": []}


def build_key(v: Variant) -> str:
    """What a wheel built on the target depends on beyond its inputs' sha256: the target and the torch it builds
    against (no build isolation)."""
    return f"{v.os}-py{v.python_version}-{v.arch}-torch{v.torch}"


# --- base ------------------------------------------------------------------------------------------------------------
def base_context(stage: Stage, sources: Sources, ctx: dict[str, Any], files: dict[str, bytes],
                 inputs: StageInputs) -> None:
    v = stage.variant
    if v.python != "system":
        resolved = sources.artifacts.resolve(f"python {v.python}", bisheng_wanted(v))
        ctx["python"]["artifacts"] = [inputs.download(a) for a in resolved.values()]
        record_downloads(stage, ctx, resolved.values())
    packages_context(stage, sources, ctx, files, inputs)


# --- cann-install, cann ----------------------------------------------------------------------------------------------
def cann_install_context(stage: Stage, sources: Sources, ctx: dict[str, Any], files: dict[str, bytes],
                         inputs: StageInputs) -> None:
    packages = sources.cann.packages(stage.variant)
    ctx["cann"]["packages"] = [{"kind": p.kind, **inputs.download(Artifact(p.file, p.url, p.sha256))}
                               for p in packages]
    record_downloads(stage, ctx, packages)


# the variables the image below has that CANN's env lines extend, left for the Dockerfile's ENV to expand: its own
# values, whatever image it is (our base, or an official CANN image)
BELOW = {"PATH": "${PATH}"}


def cann_env(v: Variant) -> dict[str, str]:
    """What the release's env scripts set (matrix.yaml cann.env_sets), over the image below."""
    return expand(v.cann_env_lines, BELOW)


def cann_context(stage: Stage, sources: Sources, ctx: dict[str, Any], files: dict[str, bytes],
                 inputs: StageInputs) -> None:
    v = stage.variant
    baked, _ = stage_defaults(v, stage_env(stage), None, stage.locks)
    ctx["cann_env"] = [{"name": k, "value": val, "comment": "", "expands": k in BELOW}
                       for k, val in cann_env(v).items()]
    ctx["cann_env_source"] = v.cann_env_source
    # beside its scripts, the official image sets these itself (the layout says which, with its source)
    ctx["layout_env"] = [{"name": k, "value": val, "comment": f"{LAYOUT_LAYER}; source: {v.layout.source}"}
                         for k, val in v.layout_env.items()]
    ctx["defaults"] = env_items(baked)
    files["etc/env.json"] = as_json(env_document(v, v.matrix.spec.defaults.profile, baked))
    files["etc/env-scripts"] = ("\n".join(v.env_scripts) + "\n").encode()


# --- torch -----------------------------------------------------------------------------------------------------------
def torch_context(stage: Stage, sources: Sources, ctx: dict[str, Any], files: dict[str, bytes],
                  inputs: StageInputs) -> None:
    v = stage.variant
    local = v.arch_spec.torch_local_version
    files["constraints.txt"] = f"torch=={v.torch}{local}\ntorch-npu=={v.torch_npu}\n".encode()
    baked, own = stage_defaults(v, stage_env(stage), below_env(stage), stage.locks)
    ctx["defaults"] = env_items(own)
    files["etc/env.json"] = as_json(env_document(v, v.matrix.spec.defaults.profile, baked))
    packages_context(stage, sources, ctx, files, inputs)


# --- the backends: vllm and sglang -----------------------------------------------------------------------------------
def backend_context(stage: Stage, sources: Sources, ctx: dict[str, Any], files: dict[str, bytes],
                    inputs: StageInputs) -> None:
    v = stage.variant
    baked, own = stage_defaults(v, stage_env(stage), below_env(stage), stage.locks)
    ctx["defaults"] = env_items(own)
    ctx["pins"] = v.backend_pins.model_dump(by_alias=True) if v.backend_pins else {}
    files["etc/env.json"] = as_json(env_document(v, v.matrix.spec.defaults.profile, baked))
    ctx["lock"], source = _backend_source(stage, sources)
    wheels = sources.artifacts.resolve(f"{v.backend} {v.release_name}: wheels not on PyPI",
                                       off_pypi_wanted(v, stage.locks))
    ctx["off_pypi"] = [inputs.download(a) for a in wheels.values()]
    record_downloads(stage, ctx, [*wheels.values(), *([ctx["lock"]["archive"]] if ctx["lock"]["archive"] else [])])
    files["pip-check"] = (IMAGES_DIR / "common" / "backend" / "pip-check").read_bytes()
    ctx["allocator"] = allocator(v, v.default_allocator)
    family = v.os_spec.family
    needing = [p for p in (v.backend_pins.image_packages if v.backend_pins else []) if p.os_packages.get(family)]
    ctx["image_os"] = {"needed_by": [p.requirement for p in needing],
                       "packages": sorted({o for p in needing for o in p.os_packages[family]})}
    pins = ctx["pins"]
    builds = []
    if source is not None and v.backend == "vllm":
        # vLLM with VLLM_TARGET_DEVICE=empty (no CUDA): PyPI's vllm wheel is the CUDA build (compat.md, VA)
        builds.append(source_build(inputs, build_key(v), source, f"vLLM {pins['vllm']} from its sdist",
                                   env=["VLLM_TARGET_DEVICE=empty"]))
    elif source is not None:
        # SGLang from its source tree with its NPU project file (SG), not PyPI's CUDA wheel; a tag archive has no
        # .git for setuptools-scm, so the version is given. The NPU project builds pure Python: it requires setuptools,
        # setuptools-scm and wheel only, so none of the compiled modules of PyPI's CUDA wheels (cp311 since 0.5.11:
        # sglang/srt/{grpc,multimodal,server}/_core) is built (tests/fixtures/fake_sglang_tag); so it is built
        # natively, not under emulation, and a wheel that is not py3-none-any would stop the build
        builds.append(source_build(inputs, build_key(v), source, f"SGLang {pins['sglang']} from its source tree",
                                   subdir=ctx["lock"]["subdir"] or ".", project_file=pins.get("project_file") or "",
                                   version=pins["sglang"], native=True))
    zips = []
    if v.backend == "sglang":
        resolved = sources.artifacts.resolve(f"sglang {v.release_name}", sglang_wanted(v))
        ctx["artifacts"] = {k: {**inputs.download(a), "kind": k} for k, a in resolved.items()}
        record_downloads(stage, ctx, resolved.values())
        zips = [a for k, a in resolved.items() if k == "kernel_release"]  # a release zip of wheels
    kernel = None
    if "kernel_source" in ctx.get("artifacts", {}):  # built with its build.sh against CANN, on the target (ref002, VQ)
        tree = ctx["artifacts"]["kernel_source"]
        kernel = {"what": f"sgl-kernel-npu {pins['sgl_kernel_npu']['tag']} from source (build.sh)",
                  "spec": f"{tree['url']}#${{{tree['arg']}}}", "file": tree["file"],
                  "script": f"SOC_VERSION={v.device_spec.soc_version} bash build.sh", "args": []}
    packages_context(stage, sources, ctx, files, inputs, builds, wheels.values(), zips, kernel)
    if source is not None and source.url == store_url(source.sha256):  # PyPI's sdist, served from the wheel store
        inputs.want([f"{v.backend}=={pins[v.backend]} --hash=sha256:{source.sha256}"])


def _backend_source(stage: Stage, sources: Sources) -> tuple[dict[str, Any], Artifact | None]:
    """The stage's lock facts the template reads, and the source package's sdist or tag archive: from
    --artifacts-dir when it holds the file (it must have the lock's sha256), else the wheel store (an index sdist) or
    its download (a tag archive). A preview render (not strict) of a missing or stale lock renders with a placeholder
    and says why."""
    v = stage.variant
    try:
        lock = stage.lock("backend")
    except LockError as exc:
        if sources.artifacts.strict:
            raise
        return ({"archive": None, "subdir": "", "overrides": [], "no_deps": [], "missing": str(exc)}, None)
    wanted = source_wanted(lock)
    archive = None
    if wanted.on_pypi:  # pinned by the lock with PyPI's sha256; from --artifacts-dir when it holds a copy
        sha256 = wanted.sha256 or MISSING_SHA256
        url = store_url(sha256)
        directory = sources.artifacts.directory
        if directory is not None and (directory / wanted.file).is_file():
            local = sha256_file(directory / wanted.file)
            if local != sha256:
                raise LockError(f"{directory / wanted.file}: sha256 {local}, but {lock.path} pins {sha256} (PyPI's)")
            url = f"{INPUTS_DIR}/artifacts/{wanted.file}"
        sdist = Artifact(wanted.file, url, sha256)
    else:  # a tag archive: a download PyPI does not carry, pinned in pins.yaml like the others
        (sdist,) = sources.artifacts.resolve(f"{v.backend} {v.release_name}: source tree", [wanted]).values()
        archive = sdist
    return ({"archive": archive, "subdir": lock.source_subdir, "overrides": list(lock.overrides),
             "no_deps": [f"{f.name}=={f.version}" for f in lock.off_pypi], "missing": ""}, sdist)


# --- framework -------------------------------------------------------------------------------------------------------
def framework_context(stage: Stage, sources: Sources, ctx: dict[str, Any], files: dict[str, bytes],
                      inputs: StageInputs) -> None:
    v, pins = stage.variant, stage.variant.framework_pins
    assert pins is not None
    baked, own = stage_defaults(v, stage_env(stage), below_env(stage), stage.locks)
    ctx["defaults"] = env_items(own)
    ctx["framework"] = {"name": v.framework, "version": pins.version,
                        "description": v.matrix.spec.frameworks[v.framework].description}
    files["etc/env.json"] = as_json(env_document(v, v.matrix.spec.defaults.profile, baked))
    resolved = sources.artifacts.resolve(f"{v.framework} {v.release_name}: tag archives", framework_wanted(v))
    # the archives go in --no-deps as upstream installs them: their own requirements are the framework's listed ones
    builds = [source_build(inputs, build_key(v), a, f"{spec.name} {spec.version} from its tag archive",
                           version=spec.version) for spec, a in zip(pins.archives, resolved.values(), strict=True)]
    record_downloads(stage, ctx, resolved.values())
    files["pip-check"] = (IMAGES_DIR / "common" / "backend" / "pip-check").read_bytes()
    ctx["lock"] = {"missing": ""}
    packages_context(stage, sources, ctx, files, inputs, builds)
    try:
        backend_lock, lock = stage.lock("backend"), stage.lock("framework")
        ctx["lock"] |= {"overrides": [*backend_lock.overrides, *lock.overrides],
                        "no_deps": [f"{f.name}=={f.version}" for f in backend_lock.off_pypi]
                        + [f"{n}=={ver}" for n, ver in lock.no_deps.items()]}
    except LockError:
        if sources.artifacts.strict:
            raise
        ctx["lock"] |= {"overrides": [], "no_deps": list(pins.no_deps)}


# --- overlay ---------------------------------------------------------------------------------------------------------
def overlay_context(stage: Stage, sources: Sources, ctx: dict[str, Any], files: dict[str, bytes],
                    inputs: StageInputs) -> None:
    v = stage.variant
    full = shipped_env(v, stage_env(stage), stage.locks)
    own = ("profile:", "user", *(("allocator:",) if v.allocator is not None else ()))
    ctx["env"] = env_items({k: e for k, e in full.items() if e.layer.startswith(own)})
    if v.allocator is not None:
        ctx["allocator"] = allocator(v, v.allocator)
    files["etc/env.json"] = as_json(env_document(v, v.profile, full))


# --- shared ----------------------------------------------------------------------------------------------------------
def stage_env(stage: Stage) -> KindEnv:
    """What a stage's image ships and bakes of the tuned environment: its kind's column (the plan sets it)."""
    if stage.env is None:
        raise ValueError(f"stage {stage.tag} was made without its kind's environment column (stages/kinds.py)")
    return stage.env


def below_env(stage: Stage) -> KindEnv | None:
    """The column of the image a stage is built on, where it is one of ours: what its tuned environment has
    already."""
    return stage_env(stage.parent) if stage.parent is not None else None


def record_downloads(stage: Stage, ctx: dict[str, Any], artifacts: Iterable[Any]) -> None:
    """The downloads PyPI does not carry that this stage installs, as a label (file -> sha256, each its build arg,
    which the build expands): `invoke publish` checks each against pins.yaml. One label per kind, so a child's never
    hides its parent's."""
    key = f"{DOWNLOADS_LABEL}.{stage.kind}"
    files = {**json.loads(ctx["labels"].get(key, "{}")), **{a.file: f"${{{pin_arg(a.file)}}}" for a in artifacts}}
    if files:
        ctx["labels"][key] = json.dumps(files, sort_keys=True, separators=(",", ":"))


def allocator(v: Variant, name: str) -> dict[str, Any]:
    return {"name": name, "packages": v.allocator_packages(name), "library": v.allocator_library(name),
            "source": v.matrix.spec.allocators[name].source}


def env_items(values: Mapping[str, EnvValue]) -> list[dict[str, str]]:
    return [{"name": e.name, "value": e.value, "comment": f"{e.layer}; source: {e.source}"} for e in values.values()]


def env_document(v: Variant, profile: str, values: Mapping[str, EnvValue]) -> dict[str, Any]:
    """/etc/ascend-images/env.json: every variable the image sets, with where it comes from. `profile` is the
    one baked into this image: the default below an overlay, so that choosing another profile changes no
    stage but the overlay."""
    doc: dict[str, Any] = {"profile": profile, "env_scripts": v.env_scripts, "variables": {}}
    for name, value in cann_env(v).items():
        doc["variables"][name] = {"value": value, "layer": SCRIPTS_LAYER,
                                  "source": f"matrix.yaml cann.env_sets.{v.cann.env_set} ({v.cann_env_source}), "
                                            "checked against the env scripts at build time"}
    for name, value in v.layout_env.items():
        doc["variables"][name] = {"value": value, "layer": LAYOUT_LAYER, "source": v.layout.source}
    for name, item in values.items():
        doc["variables"][name] = item.as_dict()
    doc["variables"] = dict(sorted(doc["variables"].items()))
    return doc


def as_json(doc: Any) -> bytes:
    return (json.dumps(doc, indent=2, sort_keys=True) + "\n").encode()
