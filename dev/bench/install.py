"""One stage's install step measured five ways on the same lock delta in one run (DESIGN 19), and the first
`import torch, torch_npu` with and without bytecode.

The delta is the stage's install.txt (every pin its lower layers lack, each with its sha256), its files from the
host's wheel store mounted where a stage's build mounts them (/run/ascend-images/wheels). Every way installs it into a
throwaway container:
  pip, compiling .pyc        in the stage's parent (the target's arch: emulated on another host), as stages did
  pip --no-compile           the same, no bytecode
  uv --compile-bytecode      uv of the target's arch, in the parent
  uv, no .pyc                the same, no bytecode
  native                     the stage's native tool (its `installer` build stage: the host's arch) runs
                             install-packages, as the stage does: uv for the target platform, then compileall with
                             checked-hash .pyc; its own line splits the two
Sdists a stage builds on the target are not in the delta: they cost the same whichever way installs the wheels.
Each figure is timed inside its container (`date +%s%N` around the command), so container start-up is not in it.
"""

from __future__ import annotations

import os
import re
import shutil
import statistics
import zipfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import docker

from ascend_images.inputs.lockfile import GLIBC_FLOOR
from ascend_images.inputs.sources import INPUTS_DIR, BuildInputs
from ascend_images.inputs.wheelstore import StoredFile, WheelStore, stored_files
from ascend_images.stages.contexts import PYTHON_PREFIX
from ascend_images.stages.packages import stage_packages
from ascend_images.stages.stage import Stage

Out = Callable[[str], None]
NATIVE_FRACTION_MAX = 0.25  # of pip compiling, on the same delta in the same run
IMPORT = "import torch, torch_npu"
_TIMED = 's=$(date +%s%N); "$@"; e=$(date +%s%N); echo "bench-ns=$((e - s))"'
_NATIVE_LINE = re.compile(r"install-packages: installed in ([0-9.]+)s, bytecode in ([0-9.]+)s")


def _run(client: docker.DockerClient, image: str, command: list[str], bench_dir: Path,
         env: dict[str, str] | None = None) -> str:
    volumes = {str(bench_dir): {"bind": "/bench", "mode": "ro"}}
    if (bench_dir / "wheels").is_dir():  # where a stage's build mounts the wheel store
        volumes[str(bench_dir / "wheels")] = {"bind": f"{INPUTS_DIR}/wheels", "mode": "ro"}
    output = client.containers.run(image, command, remove=True, network_mode="host", environment=env or {},
                                   volumes=volumes, stderr=True)
    return output.decode(errors="replace")


def _timed(client: docker.DockerClient, image: str, command: list[str], bench_dir: Path,
           env: dict[str, str]) -> float:
    text = _run(client, image, ["sh", "-c", _TIMED, "sh", *command], bench_dir, env)
    found = re.findall(r"bench-ns=(\d+)", text)
    if not found:
        raise RuntimeError(f"no timing in the output of {' '.join(command)} on {image}:\n{text[-2000:]}")
    return int(found[-1]) / 1e9


def _target_uv(store: WheelStore, stage: Stage, bench_dir: Path) -> str:
    """uv for the target's arch, from the wheel store (pinned in matrix.yaml tools.uv), unpacked beside the delta."""
    uv = stage.variant.matrix.spec.tools["uv"]
    wheel = store.ensure([StoredFile("uv", uv.version, uv.files[stage.variant.arch].sha256)])[0]
    target = bench_dir / "uv-target" / "uv"
    target.parent.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(wheel) as archive:
        target.write_bytes(archive.read(f"uv-{uv.version}.data/scripts/uv"))
    target.chmod(0o755)
    return "/bench/uv-target/uv"


def _link(store: WheelStore, wanted: list[StoredFile], bench_dir: Path) -> None:
    """The files as the build mounts them (wheels/<sha256>/<file>) and flat (links/<file>: pip's and uv's
    --find-links): hard links into the store."""
    for item in wanted:
        found = store.path(item.sha256)
        assert found is not None, item
        for target in (bench_dir / "wheels" / item.sha256 / found.name, bench_dir / "links" / found.name):
            target.parent.mkdir(parents=True, exist_ok=True)
            if not target.exists():
                os.link(found, target)


def measure_install(client: docker.DockerClient, inputs: BuildInputs, store: WheelStore, stage: Stage,
                    installer: str, work: Path, out: Out) -> dict[str, Any]:
    """The five figures for `stage` (its parent and `installer`, its native tool as an image, built), and the native
    way's fraction of pip's."""
    packages = stage_packages(stage)
    bench_dir = work / "install"
    shutil.rmtree(bench_dir, ignore_errors=True)
    bench_dir.mkdir(parents=True)
    (bench_dir / "install.txt").write_text("".join(f"{line}\n" for line in packages.install))
    wanted = stored_files(packages.install)
    store.ensure(wanted)
    _link(store, wanted, bench_dir)
    uv = _target_uv(store, stage, bench_dir)
    parent = stage.parent.tag if stage.parent else stage.parent_ref
    platform = f"{stage.variant.arch}-{GLIBC_FLOOR}"
    figures: dict[str, Any] = {"stage": stage.tag, "parent": parent, "installer": installer,
                               "wheels": len(packages.install)}
    links = "/bench/links"
    pip = ["python3", "-m", "pip", "install", "-q", "--disable-pip-version-check", "--no-deps", "--no-index",
           "--require-hashes", "--find-links", links, "-r", "/bench/install.txt"]
    uv_pip = [uv, "pip", "install", "-q", "--python", f"{PYTHON_PREFIX}/bin/python3", "--no-deps", "--no-index",
              "--no-cache", "--require-hashes", "--find-links", links, "-r", "/bench/install.txt"]
    ways = [("pip_compile_s", "pip, compiling .pyc (target arch)", parent, pip),
            ("pip_no_compile_s", "pip --no-compile (target arch)", parent, [*pip, "--no-compile"]),
            ("uv_target_compile_s", "uv --compile-bytecode (target arch)", parent, [*uv_pip, "--compile-bytecode"]),
            ("uv_target_s", "uv, no .pyc (target arch)", parent, uv_pip)]
    for key, what, image, command in ways:
        out(f"  {what}: {len(packages.install)} wheels ...")
        figures[key] = round(_timed(client, image, command, bench_dir, {}), 1)
        out(f"    {figures[key]} s")
    out("  native: install-packages in the stage's native tool (uv for the target, then compileall checked-hash)")
    text = _run(client, installer, ["/usr/local/libexec/ascend-images/install-packages", PYTHON_PREFIX, platform,
                                    "/bench"], bench_dir)
    found = _NATIVE_LINE.search(text)
    if found is None:
        raise RuntimeError(f"install-packages printed no timing line:\n{text[-2000:]}")
    figures["native_install_s"] = float(found.group(1))
    figures["native_bytecode_s"] = float(found.group(2))
    figures["native_s"] = round(figures["native_install_s"] + figures["native_bytecode_s"], 1)
    figures["native_fraction_of_pip"] = round(figures["native_s"] / figures["pip_compile_s"], 3)
    figures["uv_target_fraction_of_pip"] = round(figures["uv_target_compile_s"] / figures["pip_compile_s"], 3)
    figures["target_fraction_max"] = NATIVE_FRACTION_MAX
    out(f"    {figures['native_install_s']} s + {figures['native_bytecode_s']} s bytecode = "
        f"{figures['native_fraction_of_pip']:.2f} of pip")
    return figures


def measure_import(client: docker.DockerClient, image: str, work: Path, runs: int, out: Out) -> dict[str, Any]:
    """Median seconds of the first `import torch, torch_npu` in a fresh container: with the image's .pyc, and with
    every .pyc of its Python prefix deleted (and none written), so each module compiles as it loads."""
    probe = f"import time; t = time.perf_counter(); {IMPORT}; print(f'bench-import={{time.perf_counter() - t:.3f}}')"
    drop = f"find {PYTHON_PREFIX} -name __pycache__ -type d -prune -exec rm -rf {{}} +"
    commands = {"with_pyc_s": ["python3", "-c", probe],
                "without_pyc_s": ["sh", "-c", f'{drop}; PYTHONDONTWRITEBYTECODE=1 exec python3 -c "$0"', probe]}
    figures: dict[str, Any] = {"image": image, "runs": runs}
    for key, command in commands.items():
        times = []
        for _ in range(runs):
            text = _run(client, image, command, work)
            found = re.findall(r"bench-import=([0-9.]+)", text)
            if not found:
                raise RuntimeError(f"`{IMPORT}` printed no time in {image}:\n{text[-2000:]}")
            times.append(float(found[-1]))
        figures[key] = round(statistics.median(times), 2)
        out(f"  {IMPORT} {key.removesuffix('_s').replace('_', ' ')}: {figures[key]} s (median of {runs})")
    return figures

