"""invoke tasks: parse flags, call ascend_images, print. `invoke --list` describes each one."""

from __future__ import annotations

import sys
from inspect import Parameter
from pathlib import Path

from invoke import Exit, Task
from invoke import task as invoke_task

sys.path.insert(0, str(Path(__file__).resolve().parent / "src"))

from ascend_images import DEFAULT_NAMESPACE, console
from ascend_images import commands as cli
from ascend_images.cli import install_suggestions
from ascend_images.errors import AscendImagesError
from ascend_images.flags import env_flag, short_flag, whole_number
from ascend_images.lint import lint as lint_all
from ascend_images.readme import readme as write_readme
from ascend_images.release import workflow

install_suggestions()  # `invoke biuld` and `invoke build --devcie` name the nearest task or flag, as ascend-images does

SELECTION_HELP = {
    "device": "a2, a3 or both (comma-separated); default: both",
    "backend": "none, vllm, sglang (comma-separated); default: none",
    "release": "a release name from matrix.yaml; default: the matrix's default for (device, backend)",
    "os": "debian12, ubuntu22.04, openeuler24.03; default: the matrix's",
    "arch": "x86_64, aarch64 (comma-separated); default: the matrix's",
    "python": "system or bisheng; default: the matrix's",
    "profile": "environment profile: production (default) or debug",
    "allocator": "memory allocator preloaded (LD_PRELOAD): jemalloc, tcmalloc or none; default: the backend's "
                 "(jemalloc for vllm and sglang, none for none)",
    "env": "KEY=VALUE over the tuned defaults (repeatable)",
    "framework": "RL framework over the backend: verl or roll; default: none",
    "matrix": "path of the version matrix (default ./matrix.yaml)",
}
SOURCE_HELP = {
    "cann_source": "image | url | local (default: the matrix's)",
    "cann_dir": "directory of CANN .run packages (implies --cann-source local)",
    "cann_image": "FROM this image instead of the official CANN image (--cann-source image)",
    "checksums": "sha256sum-style file for downloads the matrix has no checksum for",
    "artifacts_dir": "directory of other downloads (SGLang sources, sgl-kernel-npu zips, BiSheng Python)",
    "torch_index_url": "extra pip index for torch ('' for none); default per arch from the matrix",
}
CACHE_HELP = {"cache_dir": "download cache filled by `invoke fetch` (default ~/.cache/ascend-images/downloads)",
              "fetch": "run `invoke fetch` for the selection first, then build from the cache",
              "stage_cache": "REGISTRY/NAMESPACE shared stage store: pull a stage found there by content key instead "
                             "of building it, push what is built (or set ASCEND_IMAGES_STAGE_CACHE)",
              "stage_cache_read_only": "with --stage-cache: pull only, push nothing (e.g. CI on pull requests)"}
INPUT_HELP = {
    "os_mirror": "replaces the OS's package host during the build (the image keeps stock sources)",
    "pip_index_url": "pip index (may hold credentials; or set ASCEND_IMAGES_PIP_INDEX_URL)",
    "pip_extra_index_url": "extra pip index (repeatable)",
    "pip_trusted_host": "pip trusted host (repeatable)",
    "offline": "no pip index at all: install only from --wheelhouse",
    "wheelhouse": "directory of wheels pip may install from",
    "ca_bundle": "extra CA bundle for TLS during the build (never stored in the image)",
    "netrc": "netrc file with private index credentials (never stored in the image)",
    "base_image": "FROM this image for the base stage (default: ascend-images/os:<os>-<arch> if present)",
    "namespace": "repository namespace of the tags (default ascend-images)",
    "work_dir": "where contexts, logs and reports go (default ./build)",
    "force": "rebuild every stage even when an image carries its content key",
    "jobs": "stages built at once (default 1); siblings such as vllm and sglang on one torch build side by side",
}
SELECTION_ITERABLE = ["env"]


VOICE_HELP = {"quiet": "no notes or progress on stderr: only results (stdout) and errors",
              "verbose": "show everything in full (e.g. every hadolint warning, not only their count)"}


class ShortFlagTask(Task):
    """invoke's Task with two changes every task shares. Short letters come from one table (flags.SHORT_FLAGS), not
    from invoke's first-free-letter pick, which gave one flag different letters in different tasks. And every task
    takes --quiet/-q and --verbose, set for the whole process before the body runs (console.configure): the bodies
    never see them, so no signature repeats them."""

    def __init__(self, body, **kwargs):
        kwargs["help"] = {**VOICE_HELP, **(kwargs.get("help") or {})}
        super().__init__(body, **kwargs)

    def argspec(self, body):
        sig = super().argspec(body)
        voice = [Parameter(name, Parameter.KEYWORD_ONLY, default=False) for name in VOICE_HELP
                 if name not in sig.parameters]
        return sig.replace(parameters=[*sig.parameters.values(), *voice])

    def arg_opts(self, name, default, taken_names):
        opts = super().arg_opts(name, default, taken_names)
        letter = short_flag(name)
        opts["names"] = [opts["names"][0], *([letter] if letter else [])]
        return opts

    def __call__(self, *args, **kwargs):
        _run(console.configure, kwargs.pop("quiet", False), kwargs.pop("verbose", False))
        return super().__call__(*args, **kwargs)


def task(*args, **kwargs):
    """invoke's @task, making ShortFlagTasks."""
    return invoke_task(*args, klass=ShortFlagTask, **kwargs)


def _selection(*, matrix, device, backend, release, os, arch, python, profile, env, allocator,
               framework=None) -> cli.Selection:
    """The selection flags every task takes, named one by one."""
    return cli.Selection(matrix=matrix, device=device, backend=backend, release=release, os=os, arch=arch,
                         python=python, profile=profile, env=list(env or []), allocator=allocator,
                         framework=framework)


def _command_after_dashes(remainder: str) -> list[str]:
    """The command after `--`, word for word: invoke joins it into one string and loses the quoting, so
    `-- sh -c 'echo a; b'` would split; the process's own argv still has every word."""
    import shlex

    if "--" in sys.argv:
        return sys.argv[sys.argv.index("--") + 1:]
    return shlex.split(remainder or "")


def _run(fn, *args, **kwargs):
    """Every task's errors end as one message and an exit code, never as a traceback."""
    import docker
    import requests

    from ascend_images.builder.engine import explain
    from ascend_images.errors import Interrupted

    try:
        return fn(*args, **kwargs)
    except Interrupted as exc:
        raise Exit(f"interrupted: {exc}", code=130) from None
    except AscendImagesError as exc:
        raise Exit(f"error: {exc}", code=2) from None
    except (docker.errors.DockerException, requests.exceptions.RequestException, PermissionError) as exc:
        raise Exit(f"error: {explain(exc)}", code=2) from None
    except OSError as exc:  # a file error no flag check foresaw still reads as one line
        where = f"{exc.filename}: " if exc.filename else ""
        raise Exit(f"error: {where}{exc.strerror or exc}", code=2) from None
    finally:  # a step's live line must not outlive its task, however the task ended
        console.stop_live()


def _number(flag: str, value: str | int, minimum: int) -> int:
    """A number flag, or its one-line error."""
    return _run(whole_number, flag, value, minimum)


@task(help=SELECTION_HELP, iterable=SELECTION_ITERABLE)
def matrix(c, matrix="matrix.yaml", device=None, backend=None, release=None, os=None, arch=None, python=None,
           profile=None, env=None, allocator=None, framework=None):
    """Releases and every variant of matrix.yaml, with their compatibility status."""
    code = _run(cli.show_matrix, _selection(
        matrix=matrix, device=device, backend=backend, release=release, os=os, arch=arch, python=python,
        profile=profile, env=env, allocator=allocator, framework=framework), print)
    if code:
        raise Exit(code=code)


@task(help={**SELECTION_HELP, "json": "print JSON"}, iterable=SELECTION_ITERABLE)
def env(c, device=None, backend=None, release=None, os=None, arch=None, python=None, profile=None, env=None,
        allocator=None, framework=None, matrix="matrix.yaml", json=False):
    """The environment a variant's image carries: name, value, layer and source."""
    _run(cli.show_env, _selection(
        matrix=matrix, device=device, backend=backend, release=release, os=os, arch=arch, python=python,
        profile=profile, env=env, allocator=allocator, framework=framework), print, json)


@task(help={**SELECTION_HELP, **SOURCE_HELP, "out": "output directory (default build/contexts)",
            "base_image": INPUT_HELP["base_image"], "namespace": INPUT_HELP["namespace"],
            "check": "compare the committed rendered/ Dockerfiles with what the matrix renders now (exit 1 on drift)",
            "update": "rewrite rendered/ (what CI publishes and every default image) from the matrix"},
      iterable=SELECTION_ITERABLE)
def render(c, device=None, backend=None, release=None, os=None, arch=None, python=None, profile=None, env=None,
           allocator=None, framework=None, matrix="matrix.yaml", out="build/contexts", cann_source=None, cann_dir=None,
           cann_image=None, checksums=None, artifacts_dir=None, torch_index_url=None, base_image=None,
           namespace=DEFAULT_NAMESPACE, check=False, update=False):
    """Render the build context (Dockerfile and files) of every stage of the selection; or check/update the
    committed Dockerfiles."""
    if check or update:
        code = _run(cli.committed_renderings, matrix, print, update=update, check=check)
        if code:
            raise Exit(code=code)
        return
    _run(cli.render_selection, _selection(
        matrix=matrix, device=device, backend=backend, release=release, os=os, arch=arch, python=python,
        profile=profile, env=env, allocator=allocator, framework=framework),
         cli.SourceFlags(cann_source, cann_dir, cann_image, checksums, artifacts_dir, torch_index_url),
         Path(out), print, namespace, base_image)


@task(help={**SELECTION_HELP, **SOURCE_HELP, **CACHE_HELP, **INPUT_HELP},
      iterable=[*SELECTION_ITERABLE, "pip_extra_index_url", "pip_trusted_host"])
def build(c, device=None, backend=None, release=None, os=None, arch=None, python=None, profile=None, env=None,
          allocator=None, framework=None,
          matrix="matrix.yaml", cann_source=None, cann_dir=None, cann_image=None, checksums=None,
          artifacts_dir=None, torch_index_url=None, cache_dir=None, fetch=False, os_mirror=None,
          pip_index_url=None, pip_extra_index_url=None, pip_trusted_host=None, offline=False, wheelhouse=None,
          ca_bundle=None, netrc=None, base_image=None, namespace=DEFAULT_NAMESPACE, work_dir="build", force=False,
          jobs="1", stage_cache=None, stage_cache_read_only=False):
    """Build the selection's images on the local Docker engine (shared stages built once)."""
    _run(cli.build_selection, _selection(
        matrix=matrix, device=device, backend=backend, release=release, os=os, arch=arch, python=python,
        profile=profile, env=env, allocator=allocator, framework=framework),
         cli.SourceFlags(cann_source, cann_dir, cann_image, checksums, artifacts_dir, torch_index_url, cache_dir),
         cli.InputFlags(os_mirror, pip_index_url, list(pip_extra_index_url or []), list(pip_trusted_host or []),
                        offline, wheelhouse, ca_bundle, netrc),
         print, work_dir=Path(work_dir), namespace=namespace, base_image=base_image, force=force, fetch=fetch,
         jobs=_number("--jobs", jobs, 1), stage_cache=stage_cache or env_flag("ASCEND_IMAGES_STAGE_CACHE"),
         stage_cache_read_only=stage_cache_read_only)


@task(help={**SELECTION_HELP, **SOURCE_HELP, "dest": "cache directory (default ~/.cache/ascend-images/downloads)",
            "record": "pin every download PyPI does not carry that pins.yaml lacks, there (review the diff, commit)"},
      iterable=SELECTION_ITERABLE)
def fetch(c, device=None, backend=None, release=None, os=None, arch=None, python=None, profile=None, env=None,
          allocator=None, framework=None,
          matrix="matrix.yaml", cann_source=None, cann_dir=None, cann_image=None, checksums=None,
          artifacts_dir=None, torch_index_url=None, dest=None, record=False):
    """Download every file the selection needs (CANN, kernel zips, tag archives, vendor wheels, BiSheng Python,
    sdists) into the cache, verified against pins.yaml; what it lacks is trusted on first use on this host."""
    _run(cli.fetch_selection, _selection(
        matrix=matrix, device=device, backend=backend, release=release, os=os, arch=arch, python=python,
        profile=profile, env=env, allocator=allocator, framework=framework),
         cli.SourceFlags(cann_source, cann_dir, cann_image, checksums, artifacts_dir, torch_index_url, dest), print,
         record=record)


@task(name="os-image", help={"os": "debian12", "arch": "x86_64 or aarch64 (foreign arches need qemu-user-static)",
                             "mirror": "Debian mirror (default deb.debian.org)", "matrix": SELECTION_HELP["matrix"]})
def os_image(c, os="debian12", arch="aarch64", mirror=None, matrix="matrix.yaml"):
    """Make the OS base image locally with debootstrap (for hosts with no registry)."""
    _run(cli.make_os_image, matrix, os, arch, print, mirror)


@task(help={"matrix": SELECTION_HELP["matrix"], "work_dir": INPUT_HELP["work_dir"]})
def lint(c, matrix="matrix.yaml", work_dir="build"):
    """ruff; hadolint on every rendered Dockerfile of every release; the committed rendered/ Dockerfiles; actionlint
    and zizmor on the workflow."""
    code = _run(lint_all, cli.Selection(matrix), print, Path(work_dir))
    if code:
        raise Exit(code=code)



@task(help={"check": "only compare: print the difference and exit 1 when README says otherwise than the tree",
            "readme": "the README to regenerate (default ./README.md)", "matrix": SELECTION_HELP["matrix"]})
def readme(c, check=False, readme="README.md", matrix="matrix.yaml"):
    """Regenerate README's generated sections (releases, locks, rendered/, short flags) from the matrix and the
    tree."""
    code = _run(write_readme, cli.Selection(matrix), print, Path(readme), check=check)
    if code:
        raise Exit(code=code)

TEST_INPUT_HELP = {k: v for k, v in INPUT_HELP.items() if k not in ("base_image", "force", "jobs")}


@task(help={**SELECTION_HELP, **SOURCE_HELP, **TEST_INPUT_HELP, "image": "test this existing image (repeatable)",
            "stage_cache": CACHE_HELP["stage_cache"]},
      iterable=[*SELECTION_ITERABLE, "pip_extra_index_url", "pip_trusted_host", "image"])
def test(c, device=None, backend=None, release=None, os=None, arch=None, python=None, profile=None, env=None,
         allocator=None, framework=None,
         matrix="matrix.yaml", image=None, cann_source=None, cann_dir=None, cann_image=None,
         checksums=None, artifacts_dir=None, torch_index_url=None, os_mirror=None, pip_index_url=None,
         pip_extra_index_url=None, pip_trusted_host=None, offline=False, wheelhouse=None, ca_bundle=None, netrc=None,
         namespace=DEFAULT_NAMESPACE, work_dir="build", stage_cache=None):
    """Build what is missing, then run the image test suite against each image of the selection."""
    results = _run(cli.run_image_tests, _selection(
        matrix=matrix, device=device, backend=backend, release=release, os=os, arch=arch, python=python,
        profile=profile, env=env, allocator=allocator, framework=framework),
                   cli.SourceFlags(cann_source, cann_dir, cann_image, checksums, artifacts_dir, torch_index_url),
                   cli.InputFlags(os_mirror, pip_index_url, list(pip_extra_index_url or []),
                                  list(pip_trusted_host or []), offline, wheelhouse, ca_bundle, netrc),
                   print, images=list(image or []), work_dir=Path(work_dir), namespace=namespace,
                   stage_cache=stage_cache or env_flag("ASCEND_IMAGES_STAGE_CACHE"))
    if not all(r.ok for r in results):
        raise Exit(code=1)


@task(help={**SELECTION_HELP, "image": "run this image instead of the selection's",
            "devices": "NPU numbers on the host, e.g. 0-3,6 (default 0)",
            "mode": "manual (--device and driver mounts) or runtime (Ascend Docker Runtime, ASCEND_VISIBLE_DEVICES)",
            "host_root": "look host devices and driver files up under this directory (default /)",
            "driver_mounts": "auto (default: full for 2+ NPUs or A3), minimal (driver lib64 + version.info), full "
                             "(the whole driver tree: HCCL topology files, hccn_tool)",
            "shm_size": "shared memory size (default 16g)", "ipc_host": "--ipc host",
            "network_host": "--network host (multi-node, serving)", "name": "container name",
            "volume": "HOST:CONTAINER[:ro|rw], as docker run -v (repeatable; the host path must exist)",
            "publish": "[IP:]HOST:CONTAINER[/tcp|/udp], as docker run -p (repeatable)",
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
      iterable=[*SELECTION_ITERABLE, "volume", "publish"])
def run(c, device=None, backend=None, release=None, os=None, arch=None, python=None, profile=None, env=None,
        allocator=None, framework=None, matrix="matrix.yaml", image=None, devices="0", mode="manual", host_root="/",
        driver_mounts="auto", shm_size="16g", ipc_host=False, network_host=False, name=None, print=False,
        volume=None, publish=None, detach=False, restart=None, workdir=None, format="docker,compose", replicas="0",
        build=False, namespace=DEFAULT_NAMESPACE):
    """Run an image with Ascend device passthrough, checking the host first; command after `--`."""
    from builtins import print as echo

    code = _run(cli.run_image, _selection(
        matrix=matrix, device=device, backend=backend, release=release, os=os, arch=arch, python=python,
        profile=profile, env=env, allocator=allocator, framework=framework),
                cli.RunFlags(devices, mode, host_root, driver_mounts, shm_size, ipc_host, network_host, name,
                             volumes=list(volume or []), publish=list(publish or []), detach=detach,
                             restart=restart, workdir=workdir, format=format,
                             replicas=_number("--replicas", replicas, 0), build=build), echo,
                image=image, command=_command_after_dashes(c.remainder), print_only=print, namespace=namespace)
    if code:
        raise Exit(code=code)


@task(help={**SELECTION_HELP, **SOURCE_HELP, **TEST_INPUT_HELP, "json": "where to write the JSON report",
            "release": "default cann8.5.0-pt2.8.0: a release with both backends, so they share base, CANN and torch",
            "runs": "start-up timing runs, a number (median; default 7)",
            "quick": "derive each-variant-alone times from the cold build's stage times instead of rebuilding",
            "stage_cache": "REGISTRY/NAMESPACE: the cold build pushes its stages there and the fleet figure is "
                           "measured (a second, empty engine builds the selection pulling them); or set "
                           "ASCEND_IMAGES_STAGE_CACHE",
            "stage_cache_read_only": "with --stage-cache: the cold build pushes nothing; the fleet build pulls what "
                                     "the cache already holds",
            "fleet_engine": "DOCKER_HOST of an existing, empty engine for the fleet build (default: a scratch "
                            "dockerd started and removed here, which needs root)"},
      iterable=[*SELECTION_ITERABLE, "pip_extra_index_url", "pip_trusted_host"])
def bench(c, device="a3", backend="vllm,sglang", release="cann8.5.0-pt2.8.0", os=None, arch=None, python=None,
          profile=None, env=None,
          allocator=None, framework=None,
          matrix="matrix.yaml", cann_source=None, cann_dir=None, cann_image=None, checksums=None,
          artifacts_dir=None, torch_index_url=None, os_mirror=None, pip_index_url=None, pip_extra_index_url=None,
          pip_trusted_host=None, offline=False, wheelhouse=None, ca_bundle=None, netrc=None,
          namespace="ascend-images-bench", work_dir="build", json="build/bench.json", runs="7", quick=False,
          stage_cache=None, stage_cache_read_only=False, fleet_engine=None):
    """Measure cold, fleet (with --stage-cache), shared, no-op and incremental builds, sizes, dive efficiency and
    start-up cost."""
    _run(cli.bench, _selection(
        matrix=matrix, device=device, backend=backend, release=release, os=os, arch=arch, python=python,
        profile=profile, env=env, allocator=allocator, framework=framework),
         cli.SourceFlags(cann_source, cann_dir, cann_image, checksums, artifacts_dir, torch_index_url),
         cli.InputFlags(os_mirror, pip_index_url, list(pip_extra_index_url or []), list(pip_trusted_host or []),
                        offline, wheelhouse, ca_bundle, netrc),
         print, json_path=Path(json), work_dir=Path(work_dir), namespace=namespace, runs=_number("--runs", runs, 1),
         measure_alone=not quick, stage_cache=stage_cache or env_flag("ASCEND_IMAGES_STAGE_CACHE"),
         stage_cache_read_only=stage_cache_read_only, fleet_engine=fleet_engine)


@task(help={**SELECTION_HELP, "registry": "HOST[:PORT]/NAMESPACE to publish to",
            "dry_run": "check everything and say what would be pushed, push nothing",
            "force": "replace immutable tags that hold other images",
            "namespace": "local namespace the images were built under (default ascend-images)",
            "report": "where to write the JSON report of tags and digests",
            "only": "all (default) | arch (push this engine's per-arch tags) | lists (CI merge: lists + aliases)",
            "allow_test_double": "publish images built from test doubles (the project's own tests only)"},
      iterable=SELECTION_ITERABLE)
def publish(c, registry, device=None, backend=None, release=None, os=None, arch=None, python=None, profile=None,
            env=None, allocator=None, framework=None,
            matrix="matrix.yaml", dry_run=False, force=False, namespace=DEFAULT_NAMESPACE,
            report="build/publish-report.json", only="all", allow_test_double=False):
    """Push per-arch tags, then manifest lists, then moving aliases; nothing partial."""
    _run(cli.publish, _selection(
        matrix=matrix, device=device, backend=backend, release=release, os=os, arch=arch, python=python,
        profile=profile, env=env, allocator=allocator, framework=framework), print,
         registry=registry, dry_run=dry_run, force=force, namespace=namespace, report_path=Path(report), only=only,
         allow_test_double=allow_test_double)


@task(name="ci-matrix", help={"matrix": SELECTION_HELP["matrix"],
                              "lists": "one entry per manifest list (arches joined) instead of per arch"})
def ci_matrix(c, matrix="matrix.yaml", lists=False):
    """The selection CI publishes, as the JSON a GitHub Actions strategy.matrix takes."""
    import json

    print(json.dumps(_run(lambda: workflow.ci_matrix(cli.Selection(matrix).load(), lists))))


@task(name="published-refs", help={"report": "a publish report (repeatable)"}, iterable=["report"])
def published_refs(c, report=None):
    """REF@DIGEST of every tag the given publish reports pushed, one per line."""
    from ascend_images.release.publish import report_refs

    for ref in _run(report_refs, [Path(p) for p in report or []]):
        print(ref)


@task(help={"matrix": SELECTION_HELP["matrix"], "index_url": "the PEP 503 index to ask (default PyPI)",
            "package": "only this package (repeatable): torch-npu, torch, vllm, vllm-ascend, triton-ascend, sglang",
            "pre": "include pre-releases", "limit": "newest N releases per package (default 5)", "json": "print JSON"},
      iterable=["package"])
def outdated(c, matrix="matrix.yaml", index_url="https://pypi.org/simple", package=None, pre=False, limit="5",
             json=False):
    """Newer releases of what the matrix pins: platforms, sdist, what they pin, and what blocks a build."""
    _run(cli.show_outdated, cli.Selection(matrix), print, index_url=index_url, packages=list(package or []),
         pre=pre, limit=_number("--limit", limit, 1), as_json=json)


@task(name="npu-gate", help={"report": "a publish report of the build jobs (repeatable)",
                             "runs": "TSV of REF<TAB>JUnit file, one line per image the NPU tests ran on"},
      iterable=["report"])
def npu_gate(c, report=None, runs="build/npu/runs.tsv"):
    """Fail unless NPU tests really ran and passed in every pushed aarch64 image (never pass empty)."""
    print(_run(workflow.npu_gate, [Path(p) for p in report or []], Path(runs)))


@task(help={"release": "release name(s), comma-separated; default: every release with a backend",
            "backend": "vllm, sglang (comma-separated); default: both",
            "arch": "x86_64, aarch64 (comma-separated); default: both",
            "check": "only check that each lock exists and matches matrix.yaml (no network)",
            "index_url": "the package index to resolve against (default PyPI)",
            "torch_index_url": "index of the x86_64 torch CPU build (default: the matrix's)",
            "extra_index_url": "another index to resolve against (repeatable; builds need it too)",
            "matrix": SELECTION_HELP["matrix"], "work_dir": INPUT_HELP["work_dir"],
            "framework": "only this framework's locks (over existing backend locks); default: backend locks, then "
                         "every framework's"},
      iterable=["extra_index_url"])
def lock(c, release=None, backend=None, arch=None, check=False, index_url="", torch_index_url=None,
         extra_index_url=None, matrix="matrix.yaml", work_dir="build", framework=None):
    """Resolve each backend's lock (locks/<release>/<backend>-<arch>.txt) for its target platform, then each
    framework's over it (locks/<release>/<backend>-<framework>-<arch>.txt)."""
    flags = cli.LockFlags(release, backend, arch, index_url, torch_index_url, list(extra_index_url or []), framework)
    code = _run(cli.make_locks, cli.Selection(matrix), flags, print, check=check,
                cache_dir=Path(work_dir) / "cache" / "sdists")
    if code:
        raise Exit(code=code)


@task(help={"image": "image reference", "json": "print JSON"})
def inspect(c, image, json=False):
    """Labels, installed versions (CANN and Python packages) and environment of a built image."""
    _run(cli.inspect_image, image, print, json)


ATTEST_HELP = {"image": "a published image, read from its registry (HOST[:PORT]/REPO:TAG), or a local image's name",
               "arch": "of a published list: x86_64 or aarch64 (default aarch64)",
               "matrix": SELECTION_HELP["matrix"]}


@task(help={**ATTEST_HELP, "licenses": "sum the licences up instead of printing the SBOM"})
def sbom(c, image, arch="aarch64", matrix="matrix.yaml", licenses=False):
    """The image's SBOM (CycloneDX 1.6): made from the local image, or read from the registry it was published to."""
    _run(cli.show_sbom, image, print, matrix=matrix, arch=arch, licenses=licenses)


@task(help=ATTEST_HELP)
def provenance(c, image, arch="aarch64", matrix="matrix.yaml"):
    """The image's provenance (in-toto statement, SLSA v1): made from the local image, or read from the registry."""
    _run(cli.show_provenance, image, print, matrix=matrix, arch=arch)


@task(help=ATTEST_HELP)
def verify(c, image, arch="aarch64", matrix="matrix.yaml"):
    """Check an image's SBOM and provenance against this checkout: locks, pins.yaml, commit, content key, doubles."""
    code = _run(cli.verify_image, image, print, matrix=matrix, arch=arch)
    if code:
        raise Exit(code=code)


@task(help={"a": "first image", "b": "second image"})
def diff(c, a, b):
    """What differs between two images: labels, CANN packages, Python packages, environment."""
    _run(cli.diff_images, a, b, print)
