"""What each invoke task does, kept out of tasks.py so the tasks stay thin and testable."""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Callable, Iterable
from dataclasses import replace
from pathlib import Path

from ascend_images.console import Steps, note
from ascend_images.errors import AscendImagesError, SelectionError
from ascend_images.flags import InputFlags, LockFlags, RunFlags, Selection, SourceFlags
from ascend_images.inputs.checksums import parse_checksums
from ascend_images.inputs.lockfile import (
    LockError,
    LockSpec,
    check_lock,
    lock_spec,
    lock_specs,
    locks_dir,
    parse_lock,
)
from ascend_images.inputs.pins import pins_path, read_pins
from ascend_images.matrix.envs import effective_env
from ascend_images.matrix.model import Matrix, Variant, all_variants, choices, load_matrix, parse_env_overrides
from ascend_images.matrix.rules import RULES, enforce, evaluate
from ascend_images.runtime.imagetests import ImageTestResult, run_image_suite
from ascend_images.stages.kinds import KINDS, overlay_suffix, top_kind
from ascend_images.stages.names import DEFAULT_NAMESPACE, TEST_DOUBLE_LABEL, image_tag, label, stage_tag
from ascend_images.stages.plan import BuildPlan, PlanOptions, make_plan
from ascend_images.stages.render import Renderer

Out = Callable[[str], None]
PROJECT_ROOT = Path(__file__).resolve().parents[2]


def check_rules(variants: list[Variant], out: Out) -> None:
    enforce(variants, warn=out)


# --- invoke matrix -------------------------------------------------------------------------------
def show_matrix(sel: Selection, out: Out) -> int:
    matrix = sel.load()
    variants = all_variants(matrix)
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


# --- invoke env ------------------------------------------------------------------------------------
def show_env(sel: Selection, out: Out, as_json: bool = False, err: Out = note) -> int:
    """--json prints one document, always a list (one entry per variant), since a selection may hold several and a
    reader should not have to guess the shape; the rules' warnings then go to `err` so stdout stays parseable."""
    variants = sel.variants()
    check_rules(variants, err if as_json else out)
    if as_json:
        out(json.dumps([{"variant": v.name, "variables": {k: e.as_dict() for k, e in effective_env(v).items()}}
                        for v in variants], indent=2))
        return 0
    for v in variants:
        env = effective_env(v)
        out(f"# {v.name} (profile {v.profile})")
        out(f"{'NAME':48} {'VALUE':28} {'LAYER':18} SOURCE")
        for e in env.values():
            over = f"  (overrides {', '.join(f'{layer}={value}' for layer, value in e.overrides)})" if e.overrides \
                else ""
            out(f"{e.name:48} {e.value:28} {e.layer:18} {e.source}{over}")
        out("# plus what the CANN env scripts set, captured at build time: " + "; ".join(v.env_scripts))
    return 0


# --- invoke render ---------------------------------------------------------------------------------
def render_selection(sel: Selection, flags: SourceFlags, out_dir: Path, out: Out,
                     namespace: str = DEFAULT_NAMESPACE, base_image: str | None = None) -> BuildPlan:
    matrix = sel.load()
    variants = sel.variants(matrix)
    check_rules(variants, out)
    sources = flags.sources(matrix, strict=False)
    plan = make_plan(variants, PlanOptions(sources.cann, namespace, base_images(variants, base_image)))
    renderer = Renderer()
    # render everything in memory first: a failure leaves no new directory behind
    rendered = []
    for stage in plan.stages:
        ctx, files = renderer.context(stage, sources)
        rendered.append((stage, ctx, files, renderer.render_text(stage, ctx)))
    for stage, ctx, files, dockerfile in rendered:
        path = renderer.write(stage, out_dir, ctx, files, dockerfile)
        out(f"{stage.kind:13} {stage.tag:80} {path}")
    for stage, ctx, _, _ in rendered:
        if ctx.get("lock", {}).get("missing"):
            note(f"note: {stage.tag}: no fresh backend lock, a build would stop here: {ctx['lock']['missing']}")
    if any("sha256-missing" in (out_dir / s.slug / "Dockerfile").read_text() for s in plan.stages):
        note("note: some downloads have no sha256 (shown as sha256-missing); a build needs them "
            "(--checksums FILE, or --cann-dir/--artifacts-dir)")
    return plan


def committed_renderings(matrix: str, out: Out, update: bool = False, check: bool = False) -> int:
    """`invoke render --check | --update`: the committed rendered/ Dockerfiles."""
    from ascend_images.stages import drift as rendered

    if check and update:
        # --update would rewrite what --check is asked to compare, so the check could never fail
        raise SelectionError("--check and --update contradict each other: --check compares rendered/ with the "
                             "matrix (exit 1 on drift), --update rewrites it; pass one of them")
    if update:
        count, directory = rendered.update(matrix)
        out(f"wrote {count} Dockerfiles to {directory}")
        return 0
    result, directory = rendered.drift(matrix)
    if result.clean:
        out(f"{directory}: up to date with matrix.yaml and images/")
        return 0
    out(result.diff[:20000])
    out(result.summary(directory))
    return 1


def base_images(variants: Iterable[Variant], explicit: str | None,
                exists: Callable[[str], bool] | None = None) -> dict[tuple[str, str], str]:
    """(os, arch) -> the image the base stage starts FROM.

    --base-image wins; else a locally made `ascend-images/os:<os>-<arch>` (invoke os-image) when the
    engine has it; else the matrix's image for that OS.
    """
    from ascend_images.inputs.osimage import local_os_image

    pairs = sorted({(v.os, v.arch) for v in variants})
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
    return out


# --- invoke build / os-image -----------------------------------------------------------------------
def fetch_selection(sel: Selection, flags: SourceFlags, out: Out, *, stream=None, record: bool = False) -> list:
    """`invoke fetch`: every download the selection needs, into the cache (CANN too, unless it comes from
    --cann-dir or an image)."""
    from ascend_images.inputs.cache import fetch_all, wanted_for

    matrix = sel.load()
    variants = sel.variants(matrix)
    steps = Steps("fetch", live=False)  # the download bar is fetch's live line
    check_rules(variants, steps.warn)
    kind = flags.cann_kind or matrix.spec.defaults.cann_source
    wanted = wanted_for(variants, cann=kind == "url")
    if flags.artifacts_dir:  # those come from the directory the user named
        wanted = [w for w in wanted if w.mount != "artifacts"]
    cache = flags.cache()
    out(f"fetch: {len(wanted)} file(s) for {len(variants)} variant(s) into {cache}")
    given = parse_checksums(Path(flags.checksums)) if flags.checksums else {}
    results = fetch_all(matrix, wanted, cache, out, checksums=given, stream=stream, record=record, steps=steps)
    counts: dict[str, int] = {}
    for r in results:
        counts[r.status] = counts.get(r.status, 0) + 1
    out("fetch: " + (", ".join(f"{n} {status}" for status, n in counts.items()) or "nothing to fetch"))
    return results


def build_selection(sel: Selection, flags: SourceFlags, input_flags: InputFlags, out: Out, *,
                    work_dir: Path = Path("build"), namespace: str = DEFAULT_NAMESPACE,
                    base_image: str | None = None, force: bool = False,
                    fetch: bool = False, jobs: int = 1, stage_cache: str | None = None,
                    stage_cache_read_only: bool = False) -> tuple[BuildPlan, list]:
    """Validate everything, then build; returns (plan, results)."""
    if jobs < 1:
        raise SelectionError(f"--jobs {jobs}: at least 1 (stages built at once)")
    from ascend_images.builder.build import Builder, BuildSettings, git_revision
    from ascend_images.builder.engine import connect, image_exists

    matrix = sel.load()
    variants = sel.variants(matrix)
    check_rules(variants, out)
    if fetch:
        fetch_selection(sel, flags, out)
    sources = flags.sources(matrix)
    doubles = [what for what, used in (("CANN packages", sources.cann.test_double),
                                       ("artifacts", sources.artifacts.test_double)) if used]
    if doubles and namespace == DEFAULT_NAMESPACE:
        raise SelectionError(f"the {' and '.join(doubles)} are test doubles (tests/fixtures): build them under "
                             f"a namespace of their own, e.g. --namespace {DEFAULT_NAMESPACE}-demo, so their tags "
                             "never look like a real build's")
    inputs = input_flags.inputs(flags.index_credentials())
    client = connect()
    bases = base_images(variants, base_image, lambda ref: image_exists(client, ref))
    plan = make_plan(variants, PlanOptions(sources.cann, namespace, bases))
    # resolve every download and backend lock before the first stage starts, so a missing checksum or a
    # stale lock fails in seconds, not after an hour of CANN and torch
    renderer = Renderer()
    for stage in plan.stages:
        if not KINDS[stage.kind].captures_env:  # needs the env captured from its built parent image
            renderer.context(stage, sources)
    out(f"plan: {len(plan.stages)} stages for {len(variants)} variant(s)")
    for stage in plan.stages:
        out(f"  {stage.kind:13} {stage.tag}  <- {stage.parent_ref}")
    settings = BuildSettings(sources, inputs, work_dir, force=force, revision=git_revision(PROJECT_ROOT), jobs=jobs,
                             stage_cache=stage_cache, stage_cache_read_only=stage_cache_read_only)
    builder = Builder(client, settings, out=out)
    results = builder.build(plan)
    for v in variants:
        out(f"image for {v.name}: {plan.top(v).tag}")
    return plan, results


def make_os_image(matrix_path: str, os_name: str, arch: str, out: Out, mirror: str | None = None,
                  work_dir: Path = Path("build")) -> str:
    from ascend_images.builder.engine import connect
    from ascend_images.inputs.osimage import make_os_image as make
    from ascend_images.inputs.osimage import os_image_spec

    spec = os_image_spec(load_matrix(matrix_path), os_name, arch, mirror)
    client = connect()
    out(f"debootstrap {spec.suite} ({spec.docker_arch}) from {spec.public_mirror} -> {spec.tag}")
    tag = make(client, spec, work_dir / "logs")
    out(f"loaded {tag}")
    return tag


# --- invoke test -----------------------------------------------------------------------------------
def run_image_tests(sel: Selection, flags: SourceFlags, input_flags: InputFlags, out: Out, *, images: list[str],
                    work_dir: Path = Path("build"), namespace: str = DEFAULT_NAMESPACE,
                    stage_cache: str | None = None) -> list[ImageTestResult]:
    if any(not i.strip() for i in images):
        raise SelectionError("--image is empty: give an image reference to test (e.g. ascend/sglang:tag), or leave "
                             "--image out to test the selection's images")
    if not images:
        plan, _ = build_selection(sel, flags, input_flags, out, work_dir=work_dir, namespace=namespace,
                                  stage_cache=stage_cache)
        images = [plan.top(v).tag for v in sel.variants()]
    results = []
    for image in images:
        out(f"testing {image}")
        results.append(run_image_suite(image, work_dir))
    out(f"\n{'image':90} {'passed':>6} {'failed':>6} {'skipped':>7}")
    for r in results:
        out(f"{r.image:90} {r.passed:6} {len(r.failed):6} {r.skipped:7}")
        for name in r.failed:
            out(f"    FAILED {name}")
    return results


def check_device_indices(devices: tuple[int, ...], text: str, device: str | None, matrix: Matrix) -> None:
    """A node numbers its NPUs 0..max_devices-1 (matrix devices.<d>.max_devices); with the device unknown, the
    largest node any device has is the bound, so a typo like 99999 is still caught."""
    from ascend_images.runtime.run import RunError

    limits = {name: d.max_devices for name, d in matrix.spec.devices.items() if d.max_devices}
    if not limits:
        return
    if device in limits:
        limit, node = limits[device], f"an {device} node"
    else:
        limit = max(limits.values())
        node = "any node (" + ", ".join(f"{n}: {m}" for n, m in limits.items()) + ")"
    beyond = [n for n in devices if n >= limit]
    if beyond:
        raise RunError(f"--devices {text}: device {beyond[0]} is beyond {node}, which has at most {limit} NPUs; "
                       f"valid: indices 0-{limit - 1} (e.g. 0-1)")


def build_command(sel: Selection, namespace: str = DEFAULT_NAMESPACE) -> str:
    """The build line that makes the selection's image, flags as the user gave them, in the command the user
    typed (`ascend-images` or `invoke`)."""
    import shlex

    program = "ascend-images" if Path(sys.argv[0]).name == "ascend-images" else "invoke"
    parts = [program, "build"]
    for flag in ("device", "backend", "release", "os", "arch", "python", "profile", "allocator", "framework"):
        value = getattr(sel, flag)
        if value is not None:
            parts += [f"--{flag}", value]
    for item in sel.env:
        parts += ["--env", item]
    if sel.matrix != "matrix.yaml":
        parts += ["--matrix", sel.matrix]
    if namespace != DEFAULT_NAMESPACE:
        parts += ["--namespace", namespace]
    return " ".join(shlex.quote(p) for p in parts)


# --- invoke run ------------------------------------------------------------------------------------
def run_image(sel: Selection, flags: RunFlags, out: Out, *, image: str | None, command: list[str],
              print_only: bool = False, namespace: str = DEFAULT_NAMESPACE) -> int:
    from ascend_images.builder.engine import connect, image_exists
    from ascend_images.runtime.k8s import k8s_yaml
    from ascend_images.runtime.run import (
        RunError,
        RunSpec,
        check_host,
        check_spec,
        check_volumes,
        compose_service,
        docker_run_line,
        parse_devices,
        parse_publish,
        parse_restart,
        parse_volume,
        run_container,
    )

    if flags.mode not in ("manual", "runtime"):
        raise RunError(f"--mode {flags.mode!r}: valid: manual (--device passthrough), runtime (Ascend Docker Runtime)")
    if flags.driver_mounts not in ("auto", "minimal", "full"):
        raise RunError(f"--driver-mounts {flags.driver_mounts!r}: valid: auto (full for 2+ NPUs or A3), minimal "
                       "(driver lib64 and version.info), full (the whole driver tree)")
    formats = [f.strip() for f in flags.format.split(",") if f.strip()]
    if not formats or set(formats) - {"docker", "compose", "k8s"}:
        raise RunError(f"--format {flags.format!r}: valid: docker, compose, k8s (comma-separated; default "
                       "docker,compose)")
    if flags.format != RunFlags.format and not print_only:
        raise RunError(f"--format {flags.format} says what --print prints; add --print")
    if flags.build and print_only:
        raise RunError("--build and --print contradict each other: --print asks the engine nothing and builds "
                       "nothing; leave one out")
    if flags.replicas < 0 or (flags.replicas and "k8s" not in formats):
        raise RunError(f"--replicas {flags.replicas}: a Deployment of N >= 1 pods, for --print --format k8s")
    matrix = sel.load()
    device = None
    if image is not None and not image.strip():
        raise RunError("--image is empty: give an image reference (e.g. ascend/sglang:tag), or leave --image out "
                       "to run the selection's image")
    requested = framework = overlay_of = None
    if image is None:
        variants = sel.variants(matrix)
        if len(variants) != 1:
            raise SelectionError(f"the selection names {len(variants)} images; narrow it or pass --image REF")
        image, device = image_tag(variants[0], namespace), variants[0].device
        framework = variants[0].framework if variants[0].framework != "none" else None
        requested = image
        overlay_of = variants[0] if overlay_suffix(variants[0]) else None
        if sel.env:
            # --env makes an overlay image of its own tag, not the selection's plain image: say which one runs
            note(f"note: --env selects the overlay image {image}; built by: {build_command(sel, namespace)}"
                 + ("" if print_only else " (or add --build to build just the overlay here)"))
    elif flags.build:
        raise RunError("--build builds the selection's overlay (--env, --profile, --allocator); with --image REF "
                       "there is nothing to build: leave one out")
    elif sel.device in matrix.spec.devices:  # --image REF --device a3: what the image is for, before any label
        device = sel.device
    spec = RunSpec(image=image, command=tuple(command), devices=tuple(parse_devices(flags.devices)),
                   mode=flags.mode, host_root=Path(flags.host_root),  # type: ignore[arg-type]
                   driver_mounts=flags.driver_mounts,  # type: ignore[arg-type]
                   shm_size=flags.shm_size, ipc_host=flags.ipc_host, network_host=flags.network_host,
                   env=parse_env_overrides(sel.env), name=flags.name, device=device,
                   volumes=tuple(parse_volume(v) for v in flags.volumes),
                   ports=tuple(parse_publish(p) for p in flags.publish), detach=flags.detach,
                   restart=parse_restart(flags.restart) if flags.restart is not None else None,
                   workdir=flags.workdir)
    if not print_only:  # the flags' own mistakes before the engine is asked anything (warnings come below)
        check_spec(spec)
        check_volumes(spec)
    client = None if print_only else connect()
    if client is not None:
        if not image_exists(client, image):
            if overlay_of is None or not flags.build:
                how = (build_command(sel, namespace) if image == requested
                       else "invoke build ... (the flags that made it)")
                hint = ", or add --build to build just its overlay over the image below" if overlay_of else ""
                raise RunError(f"image {image} is not on this engine; build it first ({how}) or pull it{hint}")
            build_overlay(client, overlay_of, namespace, sel)
        labels = client.images.get(image).labels or {}
        device = labels.get(label("device"), device)
        framework = labels.get(label("framework"), framework)
    devices_spec = matrix.spec.devices.get(device) if device else None
    spec = replace(spec, device=device, min_devices=devices_spec.min_devices if devices_spec else 1,
                   framework=framework)
    check_device_indices(spec.devices, flags.devices, device, matrix)
    for warning in check_spec(spec):  # stderr: stdout stays the shell line, compose file or manifest alone
        note(f"warning: {warning}")
    if print_only:
        printed = []
        if "docker" in formats:
            printed.append(docker_run_line(spec) + "\n")
        if "compose" in formats:
            printed.append(compose_service(spec))
        if "k8s" in formats:
            if devices_spec is None or not devices_spec.k8s_resource:
                raise RunError(f"--format k8s needs the device plugin's resource name of the image's device "
                               f"({device or 'unknown'}): pass --device a2 or a3 with --image, or set "
                               "devices.<device>.k8s_resource in the matrix")
            printed.append(k8s_yaml(spec, devices_spec.k8s_resource, flags.replicas))
        out("\n".join(printed).rstrip("\n"))
        return 0
    runtimes = set(client.info().get("Runtimes", {})) if client else None
    check_host(spec, runtimes)
    return run_container(client, spec, sys.stdout)


def build_overlay(client, v: Variant, namespace: str, sel: Selection) -> None:
    """`run --build`: the overlay alone, over the image below it on this engine (never the stages below: those
    need the build's source flags)."""
    from ascend_images.builder.build import Builder, BuildSettings, git_revision
    from ascend_images.builder.engine import image_exists
    from ascend_images.stages.plan import overlay_plan

    sources = SourceFlags().sources(v.matrix, strict=False)
    below = stage_tag(top_kind(v), v, namespace)
    if not image_exists(client, below):
        raise SelectionError(f"--build builds only the overlay, over {below}, which is not on this engine either; "
                             f"build the whole image: {build_command(sel, namespace)}")
    doubles = (client.images.get(below).labels or {}).get(TEST_DOUBLE_LABEL, "")
    plan = overlay_plan(v, PlanOptions(sources.cann, namespace), tuple(d for d in doubles.split(",") if d))
    note(f"building the overlay {plan.stages[0].tag} over {below}")
    Builder(client, BuildSettings(sources, revision=git_revision(PROJECT_ROOT)), out=note).build(plan)


# --- invoke bench ----------------------------------------------------------------------------------
def bench(sel: Selection, flags: SourceFlags, input_flags: InputFlags, out: Out, *, json_path: Path,
          work_dir: Path = Path("build"), namespace: str = "ascend-images-bench", runs: int = 7,
          measure_alone: bool = True, stage_cache: str | None = None, stage_cache_read_only: bool = False,
          fleet_engine: str | None = None) -> dict:
    """`invoke bench`; with a stage cache, the cold build pushes there and the fleet build (a second, empty engine:
    a scratch dockerd here, or `fleet_engine`) is measured pulling from it."""
    from ascend_images.bench import STEPS, BenchSetup, run_bench, table
    from ascend_images.builder.build import BuildSettings, git_revision
    from ascend_images.builder.engine import connect, image_exists

    matrix = sel.load()
    variants = sel.variants(matrix)
    steps = Steps("bench", STEPS)
    check_rules(variants, steps.warn)
    client = connect()
    # every selection flag, so an overlay (profile, allocator, --env) over shared stages can be measured too
    selection = {"device": sel.device, "backend": sel.backend, "release": sel.release, "os": sel.os,
                 "arch": sel.arch, "python": sel.python, "profile": sel.profile,
                 "env": parse_env_overrides(sel.env), "allocator": sel.allocator}
    settings = BuildSettings(flags.sources(matrix), input_flags.inputs(flags.index_credentials()), work_dir,
                             revision=git_revision(PROJECT_ROOT))
    setup = BenchSetup(client, settings, Path(sel.matrix), selection,
                       base_images(variants, None, lambda ref: image_exists(client, ref)), namespace, out,
                       stage_cache=stage_cache, stage_cache_read_only=stage_cache_read_only, fleet_engine=fleet_engine,
                       steps=steps)
    report = run_bench(setup, runs=runs, measure_alone=measure_alone)
    json_path.parent.mkdir(parents=True, exist_ok=True)
    json_path.write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    out("")
    out(table(report))
    out(f"\nJSON: {json_path}")
    return report


# --- invoke publish / ci-matrix --------------------------------------------------------------------
def publish(sel: Selection, out: Out, *, registry: str, dry_run: bool = False, force: bool = False,
            namespace: str = DEFAULT_NAMESPACE, report_path: Path = Path("build/publish-report.json"),
            on_step: Callable[[str, str], None] | None = None, only: str = "all",
            allow_test_double: bool = False) -> dict:
    """Push the selection's images (as built: the same flags as `invoke build`) to REGISTRY."""
    from ascend_images.builder.build import git_revision
    from ascend_images.builder.engine import connect
    from ascend_images.release.attest import Attestor, matrix_digest
    from ascend_images.release.publish import Publisher, Target, group_variants, write_report
    from ascend_images.release.registry import RegistryClient

    target = Target.parse(registry)
    matrix = sel.load()
    variants = sel.variants(matrix)
    steps = Steps("publish")
    check_rules(variants, steps.warn)
    groups = group_variants(variants, namespace, target)
    # the merge job writes lists from what the registry holds: it needs no engine, and may run where none is
    client = None if only == "lists" else connect()
    registry_client = RegistryClient(target.registry)
    pins = read_pins(pins_path(matrix))
    attestor = None if client is None or dry_run else Attestor(
        client, registry_client, pins, out, commit=git_revision(PROJECT_ROOT),
        matrix_sha256=matrix_digest(matrix.path))
    publisher = Publisher(client, registry_client, target, out, force=force, dry_run=dry_run,
                          allow_test_double=allow_test_double, on_step=on_step, pins=pins, attestor=attestor,
                          steps=steps)
    report = publisher.run(groups, only=only)
    if not dry_run:
        write_report(report, report_path)
        out(f"report: {report_path}")
    return report


# --- invoke outdated ------------------------------------------------------------------------------
def show_outdated(sel: Selection, out: Out, *, index_url: str, packages: list[str] | None = None,
                  pre: bool = False, limit: int = 5, as_json: bool = False, err: Out = note) -> list:
    """The rows on `out`; a wheel whose metadata cannot be read is a warning on `err`, so --json stays one
    document."""
    from ascend_images.inputs.outdated import as_json as to_json
    from ascend_images.inputs.outdated import outdated, pinned_versions, table

    matrix = sel.load()
    known = list(pinned_versions(matrix))
    for name in packages or []:
        if name not in known:
            raise SelectionError(f"--package {name!r}: the matrix pins {', '.join(known)}")
    rows = outdated(matrix, index_url, err, packages=packages, pre=pre, limit=limit)
    if as_json:
        out(to_json(rows))
    else:
        out(table(rows, pinned_versions(matrix)) if rows else "nothing newer than the matrix on the index")
    return rows


# --- invoke sbom / provenance / verify -----------------------------------------------------------------
def image_attestations(ref: str, matrix_path: str, arch: str):
    """An image's SBOM and provenance: read from the registry a reference names (HOST[:PORT]/REPO:TAG; a list resolves
    to its `arch` image), else made now from the engine's image of that name."""
    from ascend_images.builder.build import git_revision
    from ascend_images.builder.engine import connect
    from ascend_images.release.attest import from_engine, from_registry, matrix_digest, names_a_registry

    matrix = Selection(matrix_path).load()
    if names_a_registry(ref):
        return from_registry(ref, matrix.spec.arches[arch].debian_arch), matrix
    return from_engine(connect(), ref, read_pins(pins_path(matrix)), commit=git_revision(PROJECT_ROOT),
                       matrix_sha256=matrix_digest(matrix.path)), matrix


def show_sbom(ref: str, out: Out, *, matrix: str = "matrix.yaml", arch: str = "aarch64",
              licenses: bool = False) -> dict:
    from ascend_images.release.sbom import license_summary

    docs, _ = image_attestations(ref, matrix, arch)
    if licenses:
        rows = license_summary(docs.sbom)
        out(f"{'components':>10}  licence (as each package's metadata states it; {docs.source})")
        for licence, count in rows:
            out(f"{count:>10}  {licence}")
    else:
        out(json.dumps(docs.sbom, indent=2))
    return docs.sbom


def show_provenance(ref: str, out: Out, *, matrix: str = "matrix.yaml", arch: str = "aarch64") -> dict:
    docs, _ = image_attestations(ref, matrix, arch)
    out(json.dumps(docs.provenance, indent=2))
    return docs.provenance


def verify_image(ref: str, out: Out, *, matrix: str = "matrix.yaml", arch: str = "aarch64") -> int:
    """One line per finding, exit 1 when there is any (see release.attest.findings)."""
    from ascend_images.release.attest import findings

    docs, loaded = image_attestations(ref, matrix, arch)
    found = findings(docs, locks_dir=locks_dir(loaded), pins=read_pins(pins_path(loaded)), checkout=PROJECT_ROOT)
    for line in found:
        out(f"FAIL  {line}")
    where = "made from the engine's image" if docs.source == "engine" else "read from the registry"
    out(f"{ref}: {len(found)} finding(s) (SBOM and provenance {where})")
    return 1 if found else 0


# --- invoke inspect / diff -------------------------------------------------------------------------
def inspect_image(ref: str, out: Out, as_json: bool = False) -> dict:
    from ascend_images.builder.engine import connect
    from ascend_images.release.imagemeta import image_facts

    facts = image_facts(connect(), ref)
    if as_json:
        out(json.dumps(facts, indent=2))
        return facts
    out(f"{facts['ref']}  {facts['id'][:19]}  {facts['architecture']}  {facts['size_mb']} MB")
    double = facts["labels"].get(TEST_DOUBLE_LABEL)
    if double:
        out(f"TEST DOUBLE: built with fake {double} (tests/fixtures); invoke publish refuses it")
    for section in ("labels", "cann", "python", "env"):
        out(f"\n[{section}]")
        for key, value in facts[section].items():
            out(f"  {key} = {value}")
    return facts


def diff_images(a: str, b: str, out: Out) -> int:
    from ascend_images.builder.engine import connect
    from ascend_images.release.imagemeta import diff_facts, image_facts

    client = connect()
    rows = diff_facts(image_facts(client, a), image_facts(client, b))
    out(f"--- {a}\n+++ {b}")
    for section, key, left, right in rows:
        out(f"[{section}] {key}: {'(absent)' if left is None else left} -> {'(absent)' if right is None else right}")
    out(f"{len(rows)} difference(s)")
    return len(rows)


# --- invoke lock -----------------------------------------------------------------------------------
def lock_selection(sel: Selection, flags: LockFlags) -> list[LockSpec]:
    matrix = sel.load()
    variants = all_variants(matrix)
    releases = choices("release", "--release", flags.release, matrix.spec.releases)
    backends = choices("backend", "--backend", flags.backend, ["vllm", "sglang"])
    arches = choices("arch", "--arch", flags.arch, matrix.spec.arches)
    chosen = [v for v in variants if v.release_name in releases and v.backend in backends and v.arch in arches]
    specs = lock_specs(matrix, chosen)
    if not specs:
        raise SelectionError("no release in the selection has a vllm or sglang backend to lock")
    return specs


def make_locks(sel: Selection, flags: LockFlags, out: Out, *, check: bool, cache_dir: Path,
               steps: Steps | None = None) -> int:
    """--check: report each lock's state without network (exit 1 when any is missing or stale).
    Otherwise resolve and write each lock; one failure does not stop the others."""
    from ascend_images.inputs.lockgen import LockMaker
    from ascend_images.inputs.pypi import PYPI_SIMPLE

    matrix = sel.load()
    root = locks_dir(matrix)
    specs = [] if flags.framework else lock_selection(sel, flags)
    frameworks = framework_lock_variants(matrix, flags)
    steps = steps or Steps("lock")
    steps.total = len(specs) + len(frameworks)
    failed = skipped = 0
    maker = LockMaker(out, cache_dir, flags.index_url or PYPI_SIMPLE, flags.torch_index_url,
                      tuple(flags.extra_index_urls), pins=read_pins(pins_path(matrix)))
    for spec in specs:
        path = spec.path(root)
        steps.begin(f"{spec.release}/{spec.backend}/{spec.arch}")
        try:
            blocked = matrix.spec.releases[spec.release].blocked
            if check:
                why = not_locked(matrix, spec)
                if why and not path.is_file():  # the matrix says it is not to be had: listed, with why; no failure
                    skipped += 1
                    out(f"skipped {path.relative_to(root.parent)}: {why}")
                    continue
                if not path.is_file():
                    raise LockError(f"missing: {spec.command}")
                check_lock(spec, parse_lock(path))
                out(f"ok      {path.relative_to(root.parent)}")
                continue
            if blocked:  # the matrix knows it cannot be locked: say why instead of failing in the resolver
                raise LockError(f"matrix.yaml marks release {spec.release} as blocked: {blocked}")
            started = time.monotonic()
            written = maker.make(spec, root)
            pins = parse_lock(written).pins
            out(f"wrote   {written.relative_to(root.parent)}: {len(pins)} packages "
                f"({time.monotonic() - started:.1f}s)")
        except AscendImagesError as exc:
            failed += 1
            out(f"FAILED  {path.relative_to(root.parent)}: {exc}")
    for v in frameworks:
        steps.begin(f"{v.release_name}/{v.backend}+{v.framework}/{v.arch}")
        why = not_locked(matrix, lock_spec(v))
        if why:  # no backend lock to resolve over: the framework's is not to be had either
            skipped += 1
            out(f"skipped {v.release_name}/{v.backend}-{v.framework}-{v.arch}: its backend's lock: {why}")
            continue
        failed += _framework_lock(v, root, out, check=check, index_url=flags.index_url or PYPI_SIMPLE,
                                  cache_dir=cache_dir)
    steps.end()
    counted = len(specs) + len(frameworks) - skipped
    out(f"{counted - failed} of {counted} locks {'fresh' if check else 'written'}"
        + (f", {skipped} skipped (the matrix says why)" if skipped else ""))
    return 1 if failed else 0


def framework_lock_variants(matrix: Matrix, flags: LockFlags) -> list[Variant]:
    """One variant per (release, backend, framework, arch) the selection has a framework lock for."""
    releases = choices("release", "--release", flags.release, matrix.spec.releases)
    backends = choices("backend", "--backend", flags.backend, ["vllm", "sglang"])
    arches = choices("arch", "--arch", flags.arch, matrix.spec.arches)
    frameworks = choices("framework", "--framework", flags.framework, matrix.spec.frameworks)
    seen: dict[tuple[str, str, str, str], Variant] = {}
    for v in all_variants(matrix):
        if (v.framework in frameworks and v.release_name in releases and v.backend in backends and v.arch in arches
                and v.os == matrix.spec.defaults.os):
            seen.setdefault((v.release_name, v.backend, v.framework, v.arch), v)
    if flags.framework and not seen:
        raise SelectionError(f"--framework {flags.framework}: no release in the selection pins it")
    return [seen[k] for k in sorted(seen)]


def _framework_lock(v: Variant, root: Path, out: Out, *, check: bool, index_url: str, cache_dir: Path) -> int:
    """Check or make one framework lock; 1 when it failed (said), else 0. A framework lock needs its backend's lock
    fresh: when that is missing or stale, the framework's fails and says so."""
    from ascend_images.inputs.frameworklock import check_framework_lock, framework_lock_spec, make_framework_lock

    where = f"{v.release_name}/{v.backend}-{v.framework}-{v.arch}"
    try:
        spec = framework_lock_spec(v)
        path = spec.path(root)
        where = str(path.relative_to(root.parent))
        if check:
            if not path.is_file():
                raise LockError(f"missing: {spec.command}")
            check_framework_lock(spec, parse_lock(path))
            out(f"ok      {where}")
            return 0
        started = time.monotonic()
        written = make_framework_lock(spec, root, out, cache_dir, index_url)
        out(f"wrote   {where}: {len(parse_lock(written).pins)} packages ({time.monotonic() - started:.1f}s)")
        return 0
    except AscendImagesError as exc:
        out(f"FAILED  {where}: {exc}")
        return 1


def not_locked(matrix, spec: LockSpec) -> str:
    """Why matrix.yaml says a lock is not to be had ("" when it should exist): its release is blocked, or the release
    names no locked build for that arch (from_sdist lists per arch what a committed lock builds from sdists)."""
    release = matrix.spec.releases[spec.release]
    if release.blocked:
        return f"release blocked: {release.blocked}"
    if spec.from_sdist is None:
        return (f"matrix.yaml locks no {spec.arch} build of {spec.backend} for this release "
                f"(releases.{spec.release}.backends.{spec.backend}.from_sdist has no {spec.arch})")
    return ""
