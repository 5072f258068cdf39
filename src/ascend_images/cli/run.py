"""The run area: `run` starts a built image with Ascend device passthrough, checking the host first, or prints the
equivalent docker run line, compose service or Kubernetes manifest."""

from __future__ import annotations

import sys
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

from ascend_images import DEFAULT_NAMESPACE
from ascend_images.cli.options import RunFlags, Selection, SourceFlags, whole_number, without_effect
from ascend_images.cli.taskdef import SELECTION, exit_with, run_body, task
from ascend_images.console import note
from ascend_images.errors import SelectionError
from ascend_images.matrix.model import Matrix, Variant
from ascend_images.matrix.selection import parse_env_overrides
from ascend_images.stages.kinds import overlay_suffix, top_kind
from ascend_images.stages.names import TEST_DOUBLE_LABEL, image_tag, label, stage_tag
from ascend_images.stages.plan import PlanOptions

Out = Callable[[str], None]


@task(groups=(SELECTION,),
      help={"image": "run this image instead of the selection's (a reference Docker accepts)",
            "devices": "NPU numbers on the host, e.g. 0-3,6 (default 0)",
            "mode": "manual (--device and driver mounts) or runtime (Ascend Docker Runtime, ASCEND_VISIBLE_DEVICES)",
            "host_root": "look host devices and driver files up under this directory (default /)",
            "driver_mounts": "auto (default: full for 2+ NPUs or A3), minimal (driver lib64 + version.info), full "
                             "(the whole driver tree: HCCL topology files, hccn_tool)",
            "shm_size": "shared memory size (default 16g)", "ipc_host": "--ipc host",
            "network_host": "--network host (multi-node, serving)",
            "name": "container name (as Docker accepts it: [a-zA-Z0-9][a-zA-Z0-9_.-]*)",
            "volume": "HOST:CONTAINER[:ro|rw], as docker run -v (repeatable; the host path must exist)",
            "publish": "CONTAINER, HOST:CONTAINER, IP:HOST:CONTAINER or IP::CONTAINER, ports or equal ranges "
                       "(8000-8010:8000-8010), /tcp, /udp or /sctp, as docker run -p (repeatable)",
            "detach": "start in the background and return (the container stays; docker's -d)",
            "restart": "no | on-failure[:N] | always | unless-stopped, as docker run --restart (needs --detach)",
            "workdir": "working directory in the container (absolute), as docker run --workdir",
            "print": "print instead of running: the equivalent docker run line and a compose service (--format)",
            "format": "with --print: docker, compose, k8s (comma-separated; default docker,compose); k8s: a Pod "
                      "asking the Ascend device plugin for the NPUs",
            "replicas": "with --print --format k8s: a Deployment of N (a number) pods instead of a Pod",
            "build": "the selection's overlay (--env, --profile, --allocator) is not on this engine: build it over "
                     "the image below (which must be) instead of refusing",
            "namespace": "the namespace the selection's images were built under (default ascend-images)"},
      iterable=["volume", "publish"])
def run(c, sel, image=None, devices="0", mode="manual", host_root=None, driver_mounts=None, shm_size="16g",
        ipc_host=False, network_host=False, name=None, print=False, volume=None, publish=None, detach=False,
        restart=None, workdir=None, format=None, replicas=None, build=False, namespace=None):
    """Run an image with Ascend device passthrough, checking the host first; command after `--`."""
    from builtins import print as echo

    run_body(refuse_without_effect, sel, image=image, print_only=print, mode=mode,
             given={"--format": format, "--replicas": replicas, "--namespace": namespace,
                    "--driver-mounts": driver_mounts, "--host-root": host_root})
    flags = RunFlags(devices, mode, host_root or "/", driver_mounts or "auto", shm_size, ipc_host, network_host, name,
                     volumes=list(volume or []), publish=list(publish or []), detach=detach, restart=restart,
                     workdir=workdir, format=format or RunFlags.format,
                     replicas=run_body(whole_number, "--replicas", replicas or "0", 0), build=build)
    exit_with(run_body(run_image, sel, flags, echo, image=image, command=command_after_dashes(c.remainder),
                       print_only=print, namespace=namespace or DEFAULT_NAMESPACE))


def refuse_without_effect(sel: Selection, *, image: str | None, print_only: bool, mode: str,
                          given: dict[str, str | None]) -> None:
    """The run flags that would change nothing with the others given (None: not given) are refused."""
    fmt, replicas = given["--format"], given["--replicas"]
    if fmt is not None and not print_only:
        raise without_effect("--format", fmt, "it says what --print prints; add --print")
    if replicas is not None and "k8s" not in (fmt or RunFlags.format).split(","):
        raise without_effect("--replicas", replicas, "it makes the Kubernetes form a Deployment; add --print "
                                                     "--format k8s")
    if image is not None:
        if given["--namespace"] is not None:
            raise without_effect("--namespace", given["--namespace"], "it says where the selection's images were "
                                 "built, and --image names the image to run; leave one out")
        moot = [name for name in sel.narrows() if name not in ("device", "env")]
        if moot:
            raise without_effect(f"--{moot[0]}", getattr(sel, moot[0]), "it narrows the selection, and --image "
                                 "names the image to run (--device still says which device it is for, --env adds "
                                 "to its environment); leave one out")
    if mode == "runtime":
        for flag in ("--driver-mounts", "--host-root"):
            if given[flag] is not None:
                raise without_effect(flag, given[flag], "the Ascend Docker Runtime (--mode runtime) passes the "
                                     "devices and mounts the driver itself; leave it out, or use --mode manual")


def command_after_dashes(remainder: str) -> list[str]:
    """The command after `--`, word for word: invoke joins it into one string and loses the quoting, so
    `-- sh -c 'echo a; b'` would split; the process's own argv still has every word."""
    import shlex

    if "--" in sys.argv:
        return sys.argv[sys.argv.index("--") + 1:]
    return shlex.split(remainder or "")


def run_image(sel: Selection, flags: RunFlags, out: Out, *, image: str | None, command: list[str],
              print_only: bool = False, namespace: str = DEFAULT_NAMESPACE) -> int:
    from ascend_images.builder.engine import connect, image_exists
    from ascend_images.runtime.compose import compose_service
    from ascend_images.runtime.k8s import k8s_yaml
    from ascend_images.runtime.reference import parse_reference
    from ascend_images.runtime.run import RunSpec, check_host, check_spec, check_volumes, docker_run_line, run_container
    from ascend_images.runtime.runflags import RunError, parse_devices, parse_publish, parse_restart, parse_volume

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
    if image is not None:
        parse_reference("--image", image)
    requested = framework = overlay_of = None
    if image is None:
        variants = sel.variants(matrix)
        if len(variants) != 1:
            raise SelectionError(f"the selection names {len(variants)} images; narrow it or pass --image REF")
        image, device = image_tag(variants[0], namespace), variants[0].device
        framework = variants[0].framework if variants[0].framework != "none" else None
        requested = image
        overlay_of = variants[0] if overlay_suffix(variants[0]) else None
        from ascend_images.cli.build import warn_unread_user_env

        warn_unread_user_env(variants[0], namespace)
        if sel.env:
            # --env makes an overlay image of its own tag, not the selection's plain image: say which one runs
            note(f"note: --env selects the overlay image {image}; built by: {build_command(sel, namespace)}"
                 + ("" if print_only else " (or add --build to build just the overlay here)"))
    elif flags.build:
        raise RunError("--build builds the selection's overlay (--env, --profile, --allocator); with --image REF "
                       "there is nothing to build: leave one out")
    elif sel.device in matrix.spec.devices:  # --image REF --device a3: what the image is for, before any label
        device = sel.device
    if image is not None and requested is None and sel.env:  # an image the matrix did not select: every variable
        from ascend_images.stages.envreaders import user_env_warnings

        for line in user_env_warnings(list(parse_env_overrides(sel.env)), None, None, matrix.spec.env,
                                      image):
            note(line)
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
    if print_only and device is None:  # the image's label is the engine's to say, and --print asks it nothing
        note(f"note: --print does not read the image's labels: its device is unknown, so the line passes A2's and "
             f"A3's nodes; pass --device ({', '.join(matrix.spec.devices)}) to print another device's")
    spec = replace(spec, device=device, min_devices=devices_spec.min_devices if devices_spec else 1,
                   framework=framework)
    if devices_spec is not None:
        spec = replace(spec, control_nodes=tuple(devices_spec.control_nodes),
                       optional_nodes=tuple(devices_spec.optional_nodes),
                       device_mounts=tuple(devices_spec.optional_mounts))
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
                known = [name for name, d in matrix.spec.devices.items() if d.k8s_resource]
                raise RunError(f"--format k8s needs the device plugin's resource name of the image's device "
                               f"({device or 'unknown'}): pass --device {' or '.join(known)} with --image, or set "
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
    from ascend_images.builder.build import Builder, BuildSettings, source_date
    from ascend_images.builder.builders import preflight
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
    builder = Builder(BuildSettings(sources, source_date=source_date(v.matrix), builder=preflight(None)), out=note)
    with builder.workspace(plan) as workspace:
        builder.build(workspace)


def check_device_indices(devices: tuple[int, ...], text: str, device: str | None, matrix: Matrix) -> None:
    """A node numbers its NPUs 0..max_devices-1 (matrix devices.<d>.max_devices); with the device unknown, the
    largest node any device has is the bound, so a typo like 99999 is still caught."""
    from ascend_images.runtime.runflags import RunError

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
    if sel.matrix is not None:
        parts += ["--matrix", sel.matrix]
    if namespace != DEFAULT_NAMESPACE:
        parts += ["--namespace", namespace]
    return " ".join(shlex.quote(p) for p in parts)
