"""Shared fixtures. Tests that need Docker skip without an engine, except in CI (CI=true), where a
missing engine is a failure."""

from __future__ import annotations

import contextlib
import functools
import json
import os
import re
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from ascend_images.matrix.model import Matrix, load_matrix  # noqa: E402
from tests.fixtures import ci_images as ci_images_module  # noqa: E402

IN_CI = os.environ.get("CI", "").lower() in ("1", "true", "yes")


def pytest_addoption(parser):
    parser.addoption("--image", action="append", default=[],
                     help="run tests/image against this existing image (repeatable); default: the CI selection")


def _forbidden_skips(config) -> list:
    """With CI=true nothing may skip outside tests/npu (which needs a real NPU host)."""
    reporter = config.pluginmanager.get_plugin("terminalreporter")
    if not IN_CI or os.environ.get("PYTEST_XDIST_WORKER") or reporter is None:
        return []
    return [r for r in reporter.stats.get("skipped", []) if not r.nodeid.startswith("tests/npu/")]


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    skipped = _forbidden_skips(config)
    if skipped:
        terminalreporter.section(f"CI=true: {len(skipped)} test(s) skipped outside tests/npu: the run fails", red=True)
        for report in skipped:
            reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else str(report.longrepr)
            terminalreporter.write_line(f"  {report.nodeid}: {reason}", red=True)


@pytest.hookimpl(trylast=True)
def pytest_sessionfinish(session, exitstatus):
    """A skip outside tests/npu under CI=true fails the run, whatever else passed (the summary names each); and the
    controller writes what each CI image's checks cost (`invoke ci-costs` adds the CI build's report to it for
    docs/tests.md's table)."""
    if _forbidden_skips(session.config):
        session.exitstatus = pytest.ExitCode.TESTS_FAILED
    if CHECKS and not os.environ.get("PYTEST_XDIST_WORKER"):
        path = ROOT / "build" / "test" / "main" / "ci-costs.json"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps({"checks": CHECKS}, indent=1) + "\n")


# The seconds of each test's unit (an image's checks `image:<tag suffix>`, or a module), as the controller gets them
CHECKS: dict[str, float] = {}


def pytest_runtest_logreport(report):
    if not os.environ.get("PYTEST_XDIST_WORKER"):
        unit = scope_of(report.nodeid, _image_ids())
        CHECKS[unit] = round(CHECKS.get(unit, 0.0) + report.duration, 2)


_CONFIG: list = []


def pytest_configure(config):
    _CONFIG.append(config)


@functools.cache
def _image_ids() -> list[str]:
    from tests.image.conftest import image_ids

    return image_ids(_CONFIG[0])


@pytest.fixture(autouse=True)
def normal_voice():
    """Each test starts at the console's normal level, whatever an in-process command before it set (`-q`)."""
    from ascend_images import console

    console.configure()


@pytest.fixture(autouse=True)
def own_state_dir(tmp_path_factory, monkeypatch) -> Path:
    """Each test's own state directory (the trust record lives there): a test never reads or writes this host's."""
    state = tmp_path_factory.mktemp("state")
    monkeypatch.setenv("ASCEND_IMAGES_STATE", str(state))
    return state


@pytest.fixture(scope="session")
def matrix() -> Matrix:
    return load_matrix(ROOT / "matrix.yaml")


@pytest.fixture(scope="session")
def docker_client():
    import docker

    try:
        client = docker.from_env(timeout=900)
        client.ping()
    except Exception as exc:
        if IN_CI:
            pytest.fail(f"CI=true but no Docker engine answers: {exc}")
        pytest.skip(f"no Docker engine: {exc}")
    return client


# --- the images CI tests: built before the session (README's command 2), read back here -------------------------
# matrix.yaml's ci.test (one image per stage kind and per default), built from the test doubles in one bake by
# `invoke build --ci test` (tests/fixtures/ci_images.py); aarch64, what most Ascend hosts run, under emulation.
TEST_ARCH = ci_images_module.ARCH
TEST_DOCKER_ARCH = {"aarch64": "arm64", "x86_64": "amd64"}[TEST_ARCH]  # the tags' arch suffix
TEST_NAMESPACE = ci_images_module.NAMESPACE
LEAK_MARKER_PREFIX = "ascend-images-leak-marker-"
HOST_CA = Path("/etc/ssl/certs/ca-certificates.crt")
XDIST_WORKER = os.environ.get("PYTEST_XDIST_WORKER", "")


# --- three pytest-xdist workers on two cores (CI: `-n 3`): an emulated check keeps one core busy, and the waits on
# the engine, registries and the network leave room for a third. A worker takes a whole unit at a time: one module
# (its module fixtures, a stock Debian root or a registry, made once), or, in tests/image, one image across every
# module there (its container made once per worker, and what it says of itself asked once per session: tests/image's
# facts). That is xdist's own loadscope with the image as the scope of an image check.
def scope_of(nodeid: str, image_ids: list[str]) -> str:
    """The unit a worker takes: `image:<id>` for a check of one image (whatever its other parameters), else its
    module."""
    path, _, rest = nodeid.partition("::")
    if path.startswith("tests/image/"):
        for image in sorted(image_ids, key=len, reverse=True):  # the longest first: an overlay's id holds its base's
            if re.search(rf"[\[-]{re.escape(image)}[\]-]", rest):
                return f"image:{image}"
    return path


def pytest_xdist_make_scheduler(config, log):
    from xdist.scheduler import LoadScopeScheduling

    from tests.image.conftest import image_ids

    ids = image_ids(config)

    class ByModuleOrImage(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return scope_of(nodeid, ids)

    return ByModuleOrImage(config, log)


@pytest.fixture(scope="session")
def work_dir() -> Path:
    """Per xdist worker: what a test writes for itself (CA bundles, fake inputs, logs), never another worker's."""
    path = ROOT / "build" / "test" / (XDIST_WORKER or "main")
    path.mkdir(parents=True, exist_ok=True)
    return path


@pytest.fixture(scope="session")
def ci_build(docker_client, os_image, matrix, pytestconfig) -> ci_images_module.CiBuild:
    """What README's command 2 built before the tests (the plan of ci.test, each stage's result); built now, once,
    when the engine lacks it."""
    return ci_images_module.ensure(docker_client, matrix, live_output(pytestconfig))


@pytest.fixture(scope="session")
def ci_images(ci_build) -> list[str]:
    """Every variant image CI tests."""
    return ci_build.images


@pytest.fixture(scope="session")
def build_secrets(ci_build) -> dict[str, Path | str]:
    """The CI build's CA bundle (the host's, which pip needs through the TLS proxy, plus a marker line) and netrc
    (a marker credential): neither may appear in any layer, history entry, label or log."""
    return ci_images_module.secrets()


@pytest.fixture(scope="session")
def fake_cann_dir(work_dir: Path) -> Path:
    from tests.fixtures.fake_cann.make_packages import write_packages

    out = work_dir / "fake-cann"
    write_packages(out, arches=[TEST_ARCH])
    return out


@pytest.fixture(scope="session")
def fake_artifacts_dir(work_dir: Path) -> Path:
    """The test doubles of every download PyPI does not carry but CANN, served like an --artifacts-dir: the
    sgl-kernel-npu release zips, the triton-ascend wheels, SGLang's tag archive with PyPI's wheel's code, and the
    MindSpeed and ROLL archives."""
    from tests.fixtures.fake_framework_archives.make_archives import write_archives
    from tests.fixtures.fake_sgl_kernel_npu.make_zips import write_zips
    from tests.fixtures.fake_sglang_tag.make_archive import default_versions, wheel_sources, write_archive
    from tests.fixtures.fake_triton_ascend.make_wheel import write_wheels

    out = work_dir / "fake-artifacts"
    write_zips(out, arches=[TEST_ARCH])
    write_wheels(out, arches=[TEST_ARCH], pypi_code=work_dir / "pypi")
    for version in default_versions():  # the tag archives of the SGLang defaults CI builds
        write_archive(out, version, wheel_sources(version, work_dir / "pypi"))
    write_archives(out)
    return out


@contextlib.contextmanager
def host_lock(name: str):
    """One process of this host at a time in the block (xdist workers, and another run)."""
    import fcntl

    path = ROOT / "build" / "test" / f".{name}.lock"
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a+") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        yield


def _os_image_once(docker_client, tag: str, make) -> str:
    """`tag`, made by `make()` unless the engine has it, once even when two xdist workers ask at the same moment."""
    from ascend_images.builder.engine import image_exists

    with host_lock(f"os-image-{tag.replace('/', '_').replace(':', '_')}"):
        if not image_exists(docker_client, tag):
            make()
    return tag


def debian12_os_image(docker_client, arch: str) -> str:
    """The debootstrap OS image for `arch`, made once even when two xdist workers ask at the same moment."""
    from ascend_images.cli.build import make_os_image
    from ascend_images.inputs.osimage import local_os_image

    tag = local_os_image("debian12", {"aarch64": "arm64", "x86_64": "amd64"}[arch])
    return _os_image_once(docker_client, tag,
                          lambda: make_os_image(str(ROOT / "matrix.yaml"), "debian12", arch, print))


def debian13_os_image(docker_client, matrix: Matrix) -> str:
    """A stock Debian 13 (trixie) root, amd64, for the set-up tests (scripts/setup-venv.sh and setup-engine.sh on the
    other Debian README names): debootstrap minbase as `invoke os-image` makes debian12's, from the matrix's Debian
    mirror, with a spec of its own, since trixie is no OS the matrix builds images for. Made once per host, then
    kept and reused like the debian12 images."""
    from ascend_images.inputs.osimage import OsImageSpec, make_os_image

    mirror = matrix.spec.os["debian12"].debootstrap.mirror
    spec = OsImageSpec("debian13", "x86_64", "amd64", "trixie", mirror, stock_mirror=mirror)
    return _os_image_once(docker_client, spec.tag,
                          lambda: make_os_image(docker_client, spec, ROOT / "build" / "logs"))


@pytest.fixture(scope="session")
def os_image(docker_client) -> str:
    return debian12_os_image(docker_client, TEST_ARCH)


def build_selection_here(selection: dict, fake_cann_dir: Path, secrets: dict, work_dir: Path, out=print,
                         artifacts_dir: Path | None = None, namespace: str = TEST_NAMESPACE, **options):
    """A selection of a test's own, built as README's commands build (cli.build.build_selection), from the doubles."""
    from ascend_images.cli.build import build_selection
    from ascend_images.cli.options import InputFlags, Selection, SourceFlags

    sel = Selection(matrix=str(options.pop("matrix", ROOT / "matrix.yaml")), arch=TEST_ARCH, **selection)
    flags = SourceFlags(cann_source="local", cann_dir=str(fake_cann_dir),
                        artifacts_dir=str(artifacts_dir) if artifacts_dir else None)
    inputs = InputFlags(ca_bundle=str(secrets["ca"]), netrc=str(secrets["netrc"]))
    return build_selection(sel, flags, inputs, out, work_dir=work_dir, namespace=namespace, **options)


def live_output(config):
    """Print past pytest's capture: a build takes minutes and CI logs must show its progress."""
    capture = config.pluginmanager.getplugin("capturemanager")

    def out(line: str) -> None:
        with capture.global_and_fixture_disabled():  # stderr: an xdist worker's stdout is its channel
            print(line, file=sys.stderr, flush=True)

    return out


@pytest.fixture(scope="session")
def native_tool(ci_build, build_secrets, work_dir, pytestconfig):
    """The native tool of CI's SGLang stage (its `installer` build stage: the build host's Python, uv and the install
    scripts) as an image, built from the stage's own Dockerfile (BuildKit's cache has it once the stage is built)."""
    import platform

    from ascend_images.builder.build import Builder, BuildSettings, source_date
    from ascend_images.cli.options import InputFlags, SourceFlags
    from ascend_images.inputs.osimage import local_os_image

    stage = next(s for s in ci_build.plan.stages if s.kind == "sglang")
    inputs_dir = ROOT / ci_images_module.INPUTS
    flags = SourceFlags(cann_source="local", cann_dir=str(inputs_dir), artifacts_dir=str(inputs_dir))
    host = {"x86_64": "amd64", "aarch64": "arm64"}[platform.machine()]
    inputs = InputFlags(ca_bundle=str(build_secrets["ca"])).inputs()
    settings = BuildSettings(flags.sources(stage.variant.matrix), inputs, work_dir / "native-tool",
                             source_date=source_date(stage.variant.matrix),
                             installer_base=local_os_image("debian12", host))
    return Builder(settings, out=live_output(pytestconfig)).native_tool(stage, f"{TEST_NAMESPACE}/native-tool:{host}")


# --- a real registry on loopback (Debian's docker-registry), which tests may stop and restart ----------
def _registry_binary() -> None:
    import shutil

    if shutil.which("docker-registry") is None and not Path("/usr/bin/docker-registry").exists():
        if IN_CI:
            pytest.fail("CI=true but docker-registry is not installed (apt-get install docker-registry)")
        pytest.skip("docker-registry is not installed")


def remove_tags(docker_client, prefix: str, **remove_kwargs) -> None:
    """Untag every image whose tag starts with `prefix`."""
    from tests.fixtures.disk_room import all_tags, untag

    untag(docker_client, [tag for tag in all_tags(docker_client) if tag.startswith(prefix)], **remove_kwargs)


@pytest.fixture(scope="session")
def kept_registries(tmp_path_factory, docker_client):
    """The registries this worker's tests push to, one per module, each kept on this host across runs
    (~/.cache/ascend-images/test/registries/<group>: tests/fixtures/registry.py says why), started when first asked
    for. Tests use them through prefixes of their own (`registry`), so what earlier runs left is never theirs."""
    from ascend_images.inputs.download import host_cache
    from tests.fixtures.registry import LocalRegistry, kept_registry

    started: dict[str, LocalRegistry] = {}

    def get(name: str, users: dict[str, str] | None = None) -> LocalRegistry:
        if name not in started:
            _registry_binary()
            reg = kept_registry(host_cache("test") / "registries" / name, users)
            if reg is None:  # another run on this host holds it: a registry of this session's own
                reg = LocalRegistry(tmp_path_factory.mktemp(f"registry-{name}"), users)
            reg.start()
            started[name] = reg
        return started[name]

    yield get
    for reg in started.values():
        reg.close()
        remove_tags(docker_client, f"{reg.host}/", noprune=True)


def _area(registry, tmp_path, docker_client):
    import uuid

    from tests.fixtures.registry import RegistryArea

    area = RegistryArea(registry, f"t{uuid.uuid4().hex[:10]}", tmp_path)
    yield area
    if registry.process is None:  # a test that stopped it and failed before starting it again
        registry.start()
    remove_tags(docker_client, f"{area.namespace}/", noprune=True)


@pytest.fixture
def registry(kept_registries, request, tmp_path, docker_client):
    """This test's own repositories (a prefix of its own) in the registry its module shares."""
    yield from _area(kept_registries(request.node.module.__name__.rsplit(".", 1)[-1]), tmp_path, docker_client)


AUTH_USER, AUTH_PASSWORD = "publisher", "s3cret-for-tests"


@pytest.fixture
def auth_registry(kept_registries, tmp_path, docker_client):
    """This test's own repositories in a second registry, which requires basic authentication (htpasswd, bcrypt)."""
    yield from _area(kept_registries("authentication", {AUTH_USER: AUTH_PASSWORD}), tmp_path, docker_client)


# --- an x86_64 variant that builds natively in minutes: torch 2.13.0+cpu from a local wheelhouse -----------------
TORCH_WHEEL = "torch-2.13.0+cpu-cp311-cp311-manylinux_2_28_x86_64.whl"
TORCH_CPU_INDEX = "https://download.pytorch.org/whl/cpu"
X86_RELEASE = "test-wheelhouse"


def _wheelhouse_matrix(directory: Path, lock_cache: Path, wheelhouse: Path, arches: str,
                       x86_torch_local: str | None = None) -> Path:
    """matrix.yaml plus a test release whose torch pair (2.13.0) takes torch from `wheelhouse`, with its locks: the
    committed base locks, and the torch layer's made here (`invoke lock`'s own code) for `arches`. `x86_torch_local`:
    the local version of x86_64's torch, where it is not PyTorch's CPU build (the matrix's)."""
    from ascend_images.inputs.lockgen import LockMaker
    from ascend_images.inputs.lockspec import lock_spec, locks_dir
    from ascend_images.matrix.model import load_matrix
    from ascend_images.matrix.selection import select
    from tests.fixtures.matrices import matrix_copy

    def with_wheelhouse_release(data: dict) -> None:
        data["torch"]["pairs"]["2.13.0"] = {"torch": "2.13.0", "cann": "8.5.0", "python": ">=3.10,<3.14",
                                            "cxx11_abi": 1, "source": "PyPI (test pair)"}
        data["releases"]["test-wheelhouse"] = {"description": "test: torch from a local wheelhouse", "cann": "8.5.0",
                                               "torch_npu": "2.13.0", "python": ["system"],
                                               "backends": {"none": {}}, "source": "tests"}
        data["arches"]["x86_64"]["torch_index_url"] = ""  # PyTorch's CPU index is unreachable: the wheelhouse has it
        if x86_torch_local is not None:
            data["arches"]["x86_64"]["torch_local_version"] = x86_torch_local
        data["arches"]["x86_64"].pop("unlocked", None)  # its locks are made below

    path = matrix_copy(directory, with_wheelhouse_release, locks=True)
    matrix = load_matrix(path)
    maker = LockMaker(lambda line: None, lock_cache, find_links=(wheelhouse,))
    for v in select(matrix, device="a2", backend="none", release=X86_RELEASE, arch=arches):
        maker.make(lock_spec(v, "torch", locks_dir(matrix)), locks_dir(matrix))
    return path


@pytest.fixture(scope="session")
def x86_matrix(tmp_path_factory, wheelhouse) -> Path:
    """The test release on both arches, x86_64's torch the real CPU wheel (aarch64's the metadata-only double)."""
    return _wheelhouse_matrix(tmp_path_factory.mktemp("matrix"), tmp_path_factory.mktemp("lock-cache"), wheelhouse,
                              "x86_64,aarch64")


@pytest.fixture(scope="session")
def light_wheelhouse(tmp_path_factory) -> Path:
    """torch 2.13.0's metadata-only double for x86_64 (and nothing else): for the builds whose subject is the
    orchestration (overlapping, cached, credentialed), not torch. The real wheel's 900 MB layer would be
    installed, committed, pushed and pulled by each of them; `test_wheelhouse_x86` and the interrupted builds keep
    it."""
    from tests.fixtures.fake_sgl_kernel_npu.make_zips import wheel_bytes

    house = tmp_path_factory.mktemp("light-wheelhouse")
    name, data = wheel_bytes("torch", "2.13.0+testdouble", "torch", [], "x86_64", "instead of a 900 MB CPU torch")
    (house / name).write_bytes(data)
    return house


@pytest.fixture(scope="session")
def x86_light_matrix(tmp_path_factory, light_wheelhouse) -> Path:
    """The test release on x86_64 whose torch is the metadata-only double (`light_wheelhouse`)."""
    return _wheelhouse_matrix(tmp_path_factory.mktemp("light-matrix"), tmp_path_factory.mktemp("lock-cache"),
                              light_wheelhouse, "x86_64", x86_torch_local="+testdouble")


def with_own_cann_stages(matrix: Path, directory: Path) -> Path:
    """`directory`/matrix.yaml: `matrix` with a CANN download referer of its own, which is rendered into the
    cann-install stage's RUN line: the caller's cann-install, cann and torch stages are its own, really built,
    since a content key sees no namespace. The base stays shared."""
    import shutil
    import uuid

    import yaml

    data = yaml.safe_load(matrix.read_text())
    data["cann"]["download_referer"] += f"?test={uuid.uuid4().hex[:12]}"
    directory.mkdir(parents=True)
    own = directory / "matrix.yaml"
    own.write_text(yaml.safe_dump(data, sort_keys=False))
    for beside in ("locks", "upstream", "pins.yaml"):  # what the matrix finds beside itself
        source = matrix.parent / beside
        if source.is_dir():
            shutil.copytree(source, directory / beside)
        elif source.is_file():
            shutil.copyfile(source, directory / beside)
    return own


def pip_find_links() -> list[Path]:
    """The local directories pip is configured to find wheels in (`pip config`, PIP_FIND_LINKS)."""
    import subprocess

    listed = subprocess.run([sys.executable, "-m", "pip", "config", "list"], capture_output=True, text=True).stdout
    values = [line.split("=", 1)[1].strip("'\"") for line in listed.splitlines() if ".find-links=" in line]
    values += os.environ.get("PIP_FIND_LINKS", "").split()
    return [Path(p.removeprefix("file://")) for v in values for p in v.split() if not p.startswith("http")]


def torch_cpu_wheel(cache: Path) -> Path:
    """PyTorch's x86_64 CPU wheel of torch 2.13.0: from pip's configured find-links when a directory there has it,
    else downloaded (verified) from PyTorch's CPU index into the test cache."""
    for directory in pip_find_links():
        if (directory / TORCH_WHEEL).is_file():
            return directory / TORCH_WHEEL
    from ascend_images.inputs.pypi import PackageIndexError, download, index_files

    try:
        (item,) = [f for f in index_files(TORCH_CPU_INDEX, "torch") if f.file == TORCH_WHEEL]
        return download(item, cache)
    except (PackageIndexError, ValueError) as exc:
        message = (f"{TORCH_WHEEL} is in none of pip's find-links ({', '.join(map(str, pip_find_links())) or 'none'}) "
                   f"and {TORCH_CPU_INDEX} did not give it: {exc}")
        if IN_CI:
            pytest.fail(f"CI=true: {message}")
        pytest.skip(message)


@pytest.fixture(scope="session")
def wheelhouse(tmp_path_factory, work_dir: Path) -> Path:
    """Only the torch wheels: whatever else pip needs comes from PyPI, so a log proves where torch came from."""
    torch = torch_cpu_wheel(work_dir.parent / "cache" / "torch-cpu")
    # only the torch wheel: whatever else pip needs must come from PyPI, so the log proves where torch came from
    from tests.fixtures.fake_sgl_kernel_npu.make_zips import wheel_bytes

    house = tmp_path_factory.mktemp("wheelhouse")
    (house / TORCH_WHEEL).symlink_to(torch)
    name, data = wheel_bytes("torch", "2.13.0+testdouble", "torch", [], "aarch64", "instead of a 4 GB CUDA torch")
    (house / name).write_bytes(data)
    return house




@pytest.fixture(scope="session")
def os_image_amd64(docker_client) -> str:
    return debian12_os_image(docker_client, "x86_64")


@pytest.fixture(scope="session")
def os_image_debian13_amd64(docker_client, matrix) -> str:
    return debian13_os_image(docker_client, matrix)


@pytest.fixture(scope="session")
def fake_cann_both(work_dir: Path) -> Path:
    from tests.fixtures.fake_cann.make_packages import write_packages

    out = work_dir / "fake-cann-both"
    write_packages(out, cann=["8.5.0"], arches=["x86_64", "aarch64"])
    return out


def image_history(docker_client, tag: str) -> list[dict]:
    """The image's history entries, newest first. On a containerd image store the engine (26.1) answers history
    only for an unpacked image, and an image BuildKit's cache pruning has left packed says "snapshot ... does not
    exist": creating a container unpacks it (what `docker run` does), and then it answers."""
    import docker.errors

    try:
        return docker_client.api.history(tag)
    except docker.errors.NotFound as exc:
        if "snapshot" not in str(exc):
            raise
    container = docker_client.api.create_container(tag, entrypoint=["true"])
    docker_client.api.remove_container(container["Id"])
    return docker_client.api.history(tag)
