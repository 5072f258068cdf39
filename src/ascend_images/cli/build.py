"""The build area: what may be built (matrix, env), its Dockerfiles (render), building it (build, os-image) and
testing the images (test)."""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from pathlib import Path

from ascend_images import DEFAULT_NAMESPACE
from ascend_images.cli.options import (
    InputFlags,
    Selection,
    SourceFlags,
    checked_path,
    given_flags,
    output_path,
    read_only_needs_a_cache,
    refuse_moot,
)
from ascend_images.cli.project import project_path
from ascend_images.cli.taskdef import INPUTS, MATRIX_HELP, SELECTION, SOURCES, exit_with, run_body, task
from ascend_images.console import note
from ascend_images.errors import SelectionError
from ascend_images.inputs.sources import MISSING_SHA256
from ascend_images.matrix.envs import reader_text
from ascend_images.matrix.model import Matrix, Variant, load_matrix
from ascend_images.matrix.rules import RULES, enforce, evaluate
from ascend_images.matrix.selection import CI_SETS, all_variants, ci_variants
from ascend_images.stages.bake import render_plan
from ascend_images.stages.contexts import INSTALLER_OS
from ascend_images.stages.plan import BuildPlan, PlanOptions, host_arch, make_plan
from ascend_images.stages.render import Renderer

Out = Callable[[str], None]
BUILD_HELP = {
    "base_image": "FROM this image for the base stage (default: ascend-images/os:<os>-<arch> if present)",
    "namespace": "repository namespace of the tags (default ascend-images)",
    "work_dir": "where contexts, logs and reports go (default: the project's build/)",
    "no_cache": "build every step again, BuildKit's cache ignored (a rebuild that proves the same inputs give the "
                "same image)",
    "fetch": "run `invoke fetch` for the selection first, then build from the cache",
    "stage_cache": "REGISTRY/NAMESPACE of a registry cache (BuildKit's, mode=max, a ref per stage): every step found "
                   "there is not run again, every step built goes there (or set ASCEND_IMAGES_STAGE_CACHE)",
    "stage_cache_read_only": "with --stage-cache: take steps from it, write nothing (e.g. CI on pull requests)",
    "builder": "the BuildKit builder to build on, as `docker buildx ls` names it (default: BUILDX_BUILDER, else "
               "the current one)",
    "push": "push every stage to its tag's registry (--namespace REGISTRY/NAMESPACE); what a builder whose images "
            "land in no local engine needs",
    "load": "load every stage into this engine (a docker-container, remote or kubernetes builder)",
    "ci": "build matrix.yaml's `ci.publish` or `ci.test` (what CI publishes, or builds from test doubles and tests) "
          "in one bake; with --arch for another arch",
    "demo": "build from test doubles made in build/demo-inputs (a checkout's tests/fixtures), under the namespace "
            "ascend-images-demo unless --namespace names another: images that show the build, never published",
}


def check_rules(variants: list[Variant], namespace: str = DEFAULT_NAMESPACE) -> None:
    """The rules' errors stop the command; their warnings are notes (stderr), never mixed into results: among them,
    each --env name nothing in the image reads (a typo, or a variable of another version)."""
    enforce(variants, warn=note)
    for v in variants:
        warn_unread_user_env(v, namespace)


def warn_unread_user_env(v: Variant, namespace: str) -> None:
    from ascend_images.stages.envreaders import user_env_warnings
    from ascend_images.stages.kinds import image_env_of
    from ascend_images.stages.names import image_tag

    if v.user_env:
        for line in user_env_warnings([name for name, _ in v.user_env], v, image_env_of(v), v.matrix.spec.env,
                                      image_tag(v, namespace)):
            note(line)


# --- matrix ---------------------------------------------------------------------------------------------------------
@task(groups=(SELECTION,))
def matrix(c, sel):
    """Releases and the variants of matrix.yaml (all, or the selection's), with their compatibility status."""
    exit_with(run_body(show_matrix, sel, print))


def show_matrix(sel: Selection, out: Out) -> int:
    """Every variant, or those the selection flags name (each value checked, as every task checks it)."""
    matrix = sel.load()
    variants = sel.variants(matrix) if sel.narrows() else all_variants(matrix)
    violations = evaluate(variants)
    by_variant: dict[str, list[str]] = {}
    for v in violations:
        by_variant.setdefault(v.variant, []).append(f"{v.rule.severity}:{v.rule.id}")
    out(f"{matrix.path}: {len(matrix.spec.releases)} releases, {len(variants)} variants, {len(RULES)} rules\n")
    out(f"{'release':28} {'cann':8} {'hdk>=':9} {'torch':7} {'torch_npu':13} {'python':15} backends")
    for name, rel in matrix.spec.releases.items():
        backends = []
        for b in sorted(rel.backends.model_fields_set):
            pins = getattr(rel.backends, b)
            backends.append(b if not hasattr(pins, "model_dump") else
                            f"{b}({', '.join(f'{k}={v}' for k, v in pins.model_dump().items() if isinstance(v, str))})")
        for fw, fw_pins in rel.frameworks.items():
            state = f"blocked: {fw_pins.blocked.split(',')[0]}..." if fw_pins.blocked else "ok"
            backends.append(f"{fw}={fw_pins.version} over {'/'.join(fw_pins.backends)} ({state})")
        pair = matrix.spec.torch.pairs[rel.torch_npu]
        hdk = rel.hdk_floor or matrix.spec.cann.releases[rel.cann].hdk_floor
        out(f"{name:28} {rel.cann:8} {hdk:9} {pair.torch:7} {rel.torch_npu:13} {','.join(rel.python):15} "
            f"{' '.join(backends)}")
    out("")
    out(f"{'variant':70} status")
    errors = 0
    for v in variants:
        marks = by_variant.get(v.name, [])
        errors += any(m.startswith("error") for m in marks)
        out(f"{v.name:70} {'ok' if not marks else ' '.join(marks)}")
    out(f"\n{len(variants) - len(by_variant)} clean, {len(by_variant)} with findings, {errors} with errors")
    return 1 if errors else 0


# --- env ------------------------------------------------------------------------------------------------------------
@task(groups=(SELECTION,), help={"json": "print one JSON list, one entry per variant"})
def env(c, sel, json=False):
    """The environment a variant's image carries: name, value, layer and source."""
    run_body(show_env, sel, print, json)


def show_env(sel: Selection, out: Out, as_json: bool = False) -> int:
    """--json prints one document, always a list (one entry per variant), since a selection may hold several and a
    reader should not have to guess the shape; the rules' warnings go to stderr either way. Each variable names its
    reader (DESIGN 26); what the references set and the image does not read is listed after, with why."""
    from ascend_images.stages.envreaders import image_env, unread_env
    from ascend_images.stages.kinds import image_env_of

    variants = sel.variants()
    check_rules(variants)
    if as_json:
        out(json.dumps([{"variant": v.name,
                         "variables": {k: e.as_dict() for k, e in image_env(v, image_env_of(v)).items()},
                         "unread": {k: u.as_dict() for k, u in unread_env(v, image_env_of(v)).items()}}
                        for v in variants], indent=2))
        return 0
    for v in variants:
        env = image_env(v, image_env_of(v))
        out(f"# {v.name} (profile {v.profile})")
        out(f"{'NAME':48} {'VALUE':24} {'LAYER':18} {'READER':32} SOURCE")
        for e in env.values():
            over = f"  (overrides {', '.join(f'{layer}={value}' for layer, value in e.overrides)})" if e.overrides \
                else ""
            out(f"{e.name:48} {e.value:24} {e.layer:18} {reader_text(e.reader_dict) or '--env':32} {e.source}{over}")
        out("# plus what the CANN env scripts set (matrix.yaml cann.env_sets, checked against them at build time): "
            + "; ".join(v.env_scripts))
        unread = unread_env(v, image_env_of(v))
        if unread:
            out("# not baked: what the references set that nothing in this image reads")
            for u in unread.values():
                instead = f" (the nearest it reads: {u.instead})" if u.instead else ""
                out(f"#   {u.name}={u.value} ({u.layer}): {u.why}{instead}")
    return 0


# --- render ---------------------------------------------------------------------------------------------------------
@task(groups=(SELECTION, SOURCES.without("cache_dir", "state_dir")),
      help={"out": "output directory (default: the project's build/contexts)",
            "base_image": BUILD_HELP["base_image"], "namespace": BUILD_HELP["namespace"],
            "check": "compare the committed rendered/ Dockerfiles with what the matrix renders now (exit 1 on drift)",
            "update": "rewrite rendered/ (what CI publishes and every default image) from the matrix"})
def render(c, sel, sources, out=None, base_image=None, namespace=None, check=False, update=False):
    """Render the build context (Dockerfile and files) of every stage of the selection; or check/update the
    committed Dockerfiles."""
    if check or update:
        run_body(refuse_moot, {"--out": out, "--base-image": base_image, "--namespace": namespace,
                               **given_flags(sources)},
                 "--check and --update compare or rewrite rendered/, which is rendered from the matrix alone with "
                 "the defaults; leave it out")
        exit_with(run_body(committed_renderings, sel, print, update=update, check=check))
        return
    target = run_body(output_path, "--out", out, "build/contexts")
    run_body(render_selection, sel, sources, target, print, namespace or DEFAULT_NAMESPACE, base_image)


def render_selection(sel: Selection, flags: SourceFlags, out_dir: Path, out: Out,
                     namespace: str = DEFAULT_NAMESPACE, base_image: str | None = None) -> BuildPlan:
    matrix = sel.load()
    variants = sel.variants(matrix)
    check_rules(variants)
    sources = flags.sources(matrix, strict=False)
    plan = make_plan(variants, PlanOptions(sources.cann, namespace, base_images(variants, base_image)))
    # render everything in memory first: a failure leaves no new directory behind
    rendered = render_plan(plan, sources)
    renderer = Renderer()
    for stage in plan.stages:
        path = renderer.write(stage, out_dir, rendered[stage.slug].record, rendered[stage.slug].dockerfile)
        out(f"{stage.kind:13} {stage.tag:80} {path}")
    for stage in plan.stages:
        missing = rendered[stage.slug].record.template.get("lock", {}).get("missing")
        if missing:
            note(f"note: {stage.tag}: no fresh lock, a build would stop here: {missing}")
    if any(MISSING_SHA256 in r.record.download_args.values() for r in rendered.values()):
        note("note: some downloads have no sha256 (shown as sha256-missing); a build needs them "
             "(--checksums FILE, or --cann-dir/--artifacts-dir)")
    return plan


def committed_renderings(sel: Selection, out: Out, update: bool = False, check: bool = False) -> int:
    """`render --check | --update`: the committed rendered/ Dockerfiles (every selection flag but --matrix is
    refused: the committed set is the matrix's, not a selection's)."""
    from ascend_images.stages import drift as rendered

    if check and update:
        # --update would rewrite what --check is asked to compare, so the check could never fail
        raise SelectionError("--check and --update contradict each other: --check compares rendered/ with the "
                             "matrix (exit 1 on drift), --update rewrites it; pass one of them")
    given = sel.narrows()
    if given:
        raise SelectionError(f"--{given[0]} narrows the selection, and --check/--update always cover every committed "
                             "Dockerfile (rendered/ holds what CI publishes and every default): leave it out")
    if update:
        count, directory = rendered.update(sel.matrix_path)
        out(f"wrote {count} files (the build contexts and the bake file) to {directory}")
        return 0
    result, directory = rendered.drift(sel.matrix_path)
    if result.clean:
        out(f"{directory}: up to date with matrix.yaml and images/")
        return 0
    out(result.diff[:20000])
    out(result.summary(directory))
    return 1


def base_images(variants: list[Variant], explicit: str | None,
                exists: Callable[[str], bool] | None = None) -> dict[tuple[str, str], str]:
    """(os, arch) -> the image the base stage starts FROM.

    --base-image wins; else a locally made `ascend-images/os:<os>-<arch>` (invoke os-image) when the
    engine has it; else the matrix's image for that OS.
    """
    from ascend_images.inputs.osimage import local_os_image

    pairs = sorted({(v.os, v.arch) for v in variants})
    if explicit is not None and not explicit.strip():
        raise SelectionError("--base-image is empty: name the image the base stage starts FROM, or leave it out")
    if explicit and len(pairs) > 1:
        raise SelectionError(
            f"--base-image names one image but the selection spans {len(pairs)} OS/arch pairs "
            f"({', '.join(f'{o}/{a}' for o, a in pairs)}); select one --os and one --arch"
        )
    out = {}
    for v in variants:
        key = (v.os, v.arch)
        if explicit:
            out[key] = explicit
            continue
        local = local_os_image(v.os, v.arch_spec.debian_arch)
        out[key] = local if exists and exists(local) else v.os_spec.image
    # the installer: the build host's own arch, whatever the variants' (--base-image is a variant's, not its)
    matrix = next(iter(variants)).matrix if variants else None
    if matrix is not None:
        arch = host_arch()
        local = local_os_image(INSTALLER_OS, matrix.spec.arches[arch].debian_arch)
        out.setdefault((INSTALLER_OS, arch), local if exists and exists(local) else matrix.spec.os[INSTALLER_OS].image)
    return out


# --- build ----------------------------------------------------------------------------------------------------------
@task(groups=(SELECTION, SOURCES, INPUTS), help=BUILD_HELP)
def build(c, sel, sources, inputs, fetch=False, base_image=None, namespace=DEFAULT_NAMESPACE, work_dir=None,
          no_cache=False, stage_cache=None, stage_cache_read_only=False, builder=None, push=False, load=False,
          ci=None, demo=False):
    """Build the selection's images: one `docker buildx bake` of its stages, on any BuildKit builder."""
    from ascend_images.cli.options import env_flag

    if demo:
        from ascend_images.cli.doubles import demo_build

        made = run_body(demo_build, sources, inputs, namespace, fetch, ci)
        sources, inputs, namespace = made.sources, made.inputs, made.namespace
    stage_cache = stage_cache or env_flag("ASCEND_IMAGES_STAGE_CACHE")
    run_body(read_only_needs_a_cache, stage_cache, stage_cache_read_only)
    run_body(inputs.check)
    run_body(build_selection, sel, sources, inputs, print,
             work_dir=run_body(output_path, "--work-dir", work_dir, "build"), namespace=namespace,
             base_image=base_image, no_cache=no_cache, fetch=fetch, stage_cache=stage_cache,
             stage_cache_read_only=stage_cache_read_only, builder=builder, push=push, load=load, ci=ci)


def build_variants(sel: Selection, matrix: Matrix, ci: str | None) -> list[Variant]:
    """The selection's variants, or with --ci a set of matrix.yaml's `ci` (every selection flag but --arch moot)."""
    if ci is None:
        return sel.variants(matrix)
    if ci not in CI_SETS:
        raise SelectionError(f"--ci {ci!r}: valid: {', '.join(CI_SETS)} (matrix.yaml ci.publish, ci.test)")
    refuse_moot({f"--{name}": getattr(sel, name) for name in sel.narrows() if name != "arch"},
                f"--ci {ci} builds matrix.yaml's ci.{ci} as it is (only --arch changes its arch); leave it out")
    return ci_variants(matrix, ci, sel.arch)


def check_output(namespace: str, push: bool, load: bool) -> None:
    """Where the images go: this engine, a registry (--push, which the namespace must name) or a load."""
    if push and load:
        raise SelectionError("--push and --load contradict each other: --push sends every stage to its tag's "
                             "registry, --load into this engine; pass one of them")
    first = namespace.split("/", 1)[0]
    if push and ("/" not in namespace or not ("." in first or ":" in first or first == "localhost")):
        raise SelectionError(f"--push sends every stage to its tag's registry, and --namespace {namespace} names "
                             "none: give --namespace REGISTRY[:PORT]/NAMESPACE (e.g. registry.example.com/ascend)")


def check_builder_output(builder, push: bool, load: bool) -> None:
    if not builder.local and not push and not load:
        raise SelectionError(f"{builder.describe()} keeps its images to itself, in no engine this host reads: add "
                             "--push with --namespace REGISTRY/NAMESPACE (then `invoke test --image`, `inspect` and "
                             "`publish` read them from there), or --load")


def build_selection(sel: Selection, flags: SourceFlags, input_flags: InputFlags, out: Out, *,
                    work_dir: Path = Path("build"), namespace: str = DEFAULT_NAMESPACE,
                    base_image: str | None = None, no_cache: bool = False, fetch: bool = False,
                    stage_cache: str | None = None, stage_cache_read_only: bool = False, builder: str | None = None,
                    push: bool = False, load: bool = False, ci: str | None = None,
                    only: Sequence[Variant] | None = None) -> tuple[BuildPlan, list]:
    """Check the host and everything given, then build the selection, or exactly the variants `only` names (CI's
    run builds each image whose definition changed so); returns (plan, results)."""
    from ascend_images.builder.build import Builder, BuildSettings, source_date
    from ascend_images.builder.builders import preflight
    from ascend_images.cli.inputs import fetch_selection
    from ascend_images.stages.names import check_namespace

    if builder is not None and not builder.strip():
        raise SelectionError("--builder is empty: name a builder `docker buildx ls` lists, or leave it out")
    check_namespace(namespace)
    if stage_cache:
        check_namespace(stage_cache, "--stage-cache")
    check_output(namespace, push, load)
    matrix = sel.load()
    variants = list(only) if only is not None else build_variants(sel, matrix, ci)
    check_rules(variants, namespace)
    sources = flags.sources(matrix, strict=False)
    doubles = [what for what, used in (("CANN packages", sources.cann.test_double),
                                       ("artifacts", sources.artifacts.test_double)) if used]
    if doubles and namespace == DEFAULT_NAMESPACE:
        raise SelectionError(f"the {' and '.join(doubles)} are test doubles (tests/fixtures): build them under "
                             f"a namespace of their own, e.g. --namespace {DEFAULT_NAMESPACE}-demo, so their tags "
                             "never look like a real build's")
    if doubles and stage_cache and not stage_cache_read_only and "test-double" not in stage_cache:
        # a real cache must never hand a real build the steps of a test double's
        raise SelectionError(f"the {' and '.join(doubles)} are test doubles: their steps go only to a stage cache "
                             f"named as such, e.g. --stage-cache {stage_cache}-test-double, or with "
                             "--stage-cache-read-only")
    inputs = input_flags.inputs(flags.index_credentials())
    # the host, the engine and the builder, once the command line is known to be right and before anything is
    # fetched, rendered or built
    chosen = preflight(builder)
    check_builder_output(chosen, push, load)
    if fetch:
        fetch_selection(sel, flags, out)
    sources = flags.sources(matrix)
    bases = base_images(variants, base_image, builder_has(chosen))
    plan = make_plan(variants, PlanOptions(sources.cann, namespace, bases))
    out(f"plan: {len(plan.stages)} stages for {len(variants)} variant(s)")
    for stage in plan.stages:
        out(f"  {stage.kind:13} {stage.tag}  <- {stage.parent.tag if stage.parent else stage.parent_ref}")
    settings = BuildSettings(sources, inputs, work_dir, nocache=no_cache, source_date=source_date(matrix),
                             stage_cache=stage_cache, stage_cache_read_only=stage_cache_read_only,
                             wheel_store=flags.store_root(), installer_base=bases.get((INSTALLER_OS, host_arch())),
                             builder=chosen, push=push, load=load)
    builder = Builder(settings, out=out)
    with builder.workspace(plan) as workspace:
        results = builder.build(workspace)
    for v in variants:
        out(f"image for {v.name}: {plan.top(v).tag}")
    return plan, results


def builder_has(builder) -> Callable[[str], bool] | None:
    """Whether the builder's engine has an image (the local OS images the base stage may start FROM), for a docker
    driver; None for a BuildKit of its own, which takes the matrix's images from their registry."""
    import subprocess

    from ascend_images.builder.builders import engine_of

    if builder.driver != "docker":
        return None
    host = engine_of(builder.endpoint)
    return lambda ref: subprocess.run(["docker", "-H", host, "image", "inspect", ref],
                                      capture_output=True).returncode == 0


# --- os-image -------------------------------------------------------------------------------------------------------
@task(name="os-image", help={"os": "debian12", "arch": "x86_64 or aarch64 (foreign arches need qemu-user-static)",
                             "mirror": "Debian mirror (default deb.debian.org)", "matrix": MATRIX_HELP})
def os_image(c, os="debian12", arch="aarch64", mirror=None, matrix=None):
    """Make the OS base image locally with debootstrap (for hosts with no registry)."""
    run_body(make_os_image, project_path(matrix, "matrix.yaml"), os, arch, print, mirror,
             run_body(output_path, "the project's build directory", None, "build"))


def make_os_image(matrix_path: str, os_name: str, arch: str, out: Out, mirror: str | None = None,
                  work_dir: Path | None = None) -> str:
    from ascend_images.builder.engine import connect
    from ascend_images.inputs.osimage import make_os_image as make
    from ascend_images.inputs.osimage import os_image_spec

    matrix = load_matrix(checked_path("--matrix", matrix_path, "file"))
    spec = os_image_spec(matrix, os_name, arch, mirror)
    client = connect()
    out(f"debootstrap {spec.suite} ({spec.docker_arch}) from {spec.public_mirror} -> {spec.tag}")
    tag = make(client, spec, (work_dir or Path(project_path(None, "build"))) / "logs", matrix.source_date_epoch)
    out(f"loaded {tag}")
    return tag
