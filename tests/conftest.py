"""Shared fixtures. Tests that need Docker skip without an engine, except in CI (CI=true), where a
missing engine is a failure."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from ascend_images.matrix.model import Matrix, load_matrix  # noqa: E402

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
    """A skip outside tests/npu under CI=true fails the run, whatever else passed (the summary names each); and each
    process writes what the CI images cost it (`invoke ci-costs` adds them up for docs/tests.md's table)."""
    if _forbidden_skips(session.config):
        session.exitstatus = pytest.ExitCode.TESTS_FAILED
    if CI_COSTS["builds"] or CI_COSTS["checks"]:
        path = ROOT / "build" / "test" / (os.environ.get("PYTEST_XDIST_WORKER") or "main") / "ci-costs.json"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(CI_COSTS, indent=1) + "\n")


# What each CI image costs a run: the stages built for it (seconds, by the process that built them), and the time of
# its checks (each xdist group's test durations, as the controller receives them: `...@image:<tag>`)
CI_COSTS: dict = {"builds": [], "checks": {}}


def pytest_runtest_logreport(report):
    group = report.nodeid.rpartition("@")[2] if "@" in report.nodeid else ""
    if group and not os.environ.get("PYTEST_XDIST_WORKER"):
        CI_COSTS["checks"][group] = round(CI_COSTS["checks"].get(group, 0.0) + report.duration, 2)


def record_ci_build(index: int, plan, results) -> None:
    CI_COSTS["builds"].append({"selection": index, "images": sorted(top.tag for top in plan.tops.values()),
                               "stages": [{"tag": r.tag, "kind": r.kind, "status": r.status,
                                           "seconds": round(r.seconds, 1)} for r in results]})


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


# --- images built once per session, shared by tests/integration and tests/image -------------------
# The CI selection (issue 44): every stage kind and every default once, on chains CI builds anyway; an image that only
# adds another combination (verl over SGLang 0.5.10 on CANN 8.5.0, the other releases) is rendered, locked and
# checked here (`lock --check`, `render --check`) and built by the publishing workflow. aarch64, what most Ascend
# hosts run, under emulation on x86_64 runners. Ordered so the quick images come first: each image's checks start as
# soon as it is built (tests/image/conftest.py), while the longer chains still build.
TEST_ARCH = os.environ.get("ASCEND_IMAGES_TEST_ARCH", "aarch64")
TEST_DOCKER_ARCH = {"aarch64": "arm64", "x86_64": "amd64"}[TEST_ARCH]  # the tags' arch suffix
TEST_NAMESPACE = "ascend-images-test"
CI_SELECTIONS = [
    # the CANN 9.1.0 line, the default of both devices' none and vllm: the 9.x env (ATB_CXX_ABI, toolkit home
    # first), the cann-versioned-atb-abi layout, torch 2.10.0
    {"device": "a2,a3", "backend": "none", "release": "cann9.1.0-pt2.10.0"},
    # the thin overlay on the A3 torch image, with all it can set: a profile, an --env value given at build time and
    # an allocator the backend does not preload by default (one image for the three, to keep CI's image count down:
    # each image's checks load the stack once under emulation)
    {"device": "a3", "backend": "none", "release": "cann9.1.0-pt2.10.0", "profile": "debug",
     "env": ["OMP_NUM_THREADS=8"], "allocator": "tcmalloc"},
    # the older layout: ascend-toolkit/latest (CANN 8.3.RC1, torch 2.7.1), A2
    {"device": "a2", "backend": "none", "release": "cann8.3.rc1-sglang0.5.8"},
    # SGLang's current NPU line (the default of both devices' sglang; the cann-versioned layout) from its tag archive
    # (the double: PyPI's wheel's code) and the committed dependency list's lock, with the fake sgl-kernel-npu
    # 2026.7.27 zip and triton-ascend 3.2.1.dev20260530
    {"device": "a3", "backend": "sglang", "release": "cann9.0.0-sglang0.5.17"},
    # vLLM-Ascend 0.23.0 (vLLM's sdist with VLLM_TARGET_DEVICE=empty, arctic-inference built from its sdist,
    # triton-ascend 3.2.2 --no-deps from the fake vendor wheel), and the framework kind over it: verl
    {"device": "a3", "backend": "vllm", "release": "cann9.1.0-pt2.10.0"},
    {"device": "a3", "backend": "vllm", "framework": "verl"},
    # ROLL over the same vLLM-Ascend image, with its own pins moving the backend's (numpy 1.x, datasets 3.1.0,
    # transformers 4.57.6): a framework stage only, its own imports checked
    {"device": "a3", "backend": "vllm", "framework": "roll"},
]
SGLANG_TAG = "0.5.17"  # the tag archive CI's SGLang image is built from (fake_sglang_tag)
LEAK_MARKER_PREFIX = "ascend-images-leak-marker-"
HOST_CA = Path("/etc/ssl/certs/ca-certificates.crt")


# --- three pytest-xdist workers on two cores (CI: `-n 3`; addopts: `--dist loadgroup`): an emulated check keeps one
# core busy, and the waits on the engine, registries and the network leave room for a third. A worker runs a whole
# group: one image's checks (its container and its one torch import are set up once), or one module's tests, split by
# whether they need the CI images. The first group is test_build's: its worker builds the CI images from the start,
# while the others run the groups that need none, the longest (the x86_64 chains) first and those on the emulated
# base that first worker is building last, so they seldom wait for it; then all share the rest, the long groups first
# and the image groups last, to fill the gaps at the end.
XDIST_WORKER = os.environ.get("PYTEST_XDIST_WORKER", "")
NEEDS_CI_IMAGES = {"ci_builds", "ci_images"}
BUILDS_FIRST = "tests.integration.test_build:ci"


# Their x86_64 chains start alike on one base, so Docker's layer cache shares the first layers between them; the
# robustness tests remove their namespaces afterwards, which prunes such a layer even while the other module's build
# has just found it in the cache ("No such image"). One worker runs them one after another.
X86_CHAINS = "x86_64-chains"
X86_CHAIN_MODULES = {"tests.integration.test_robustness", "tests.integration.test_wheelhouse_x86",
                     "tests.integration.test_secret_flags"}


# They push the CI torch images to this worker's registry: one worker runs them, so each image is compressed and
# uploaded once (53 s of the engine's CPU for the A3 one) and then mounted from the repository that has it.
PUSHES_CI_IMAGES = {"tests.integration.test_publish", "tests.integration.test_attest"}


def _group(item) -> str:
    image = item.callspec.params.get("image") if hasattr(item, "callspec") else None
    if image and item.path.parent.name == "image":
        return f"image:{image}"
    if NEEDS_CI_IMAGES & set(item.fixturenames):
        return "registry-pushes:ci" if item.module.__name__ in PUSHES_CI_IMAGES else f"{item.module.__name__}:ci"
    return X86_CHAINS if item.module.__name__ in X86_CHAIN_MODULES else item.module.__name__


def _rank(group: str, fixturenames: set[str]) -> int:
    """The build first, and beside it the x86_64 chains, the longest group that needs no CI image (870
    worker-seconds of a warm run at fa3ada4: started after the short ones, at 234 s, it ended the run 130 s after the
    other workers); then the rest of what needs no CI image; then each CI image's checks, in CI_SELECTIONS' order
    (each starts once its own image is built); the modules needing every CI image last."""
    if group in (BUILDS_FIRST, X86_CHAINS):
        return 0
    if group.startswith("image:"):
        return 3
    if group.endswith(":ci"):
        return 4
    return 2 if "os_image" in fixturenames else 1


# Worker-seconds of the longest groups after the first two, in a warm run of a fresh clone of 748d42e (--durations):
# within a rank the longest start first, so the short ones fill the gaps at the end (that run ended on
# test_image_suite_can_fail, started at 736 s of 877 on one worker while another was done at 798). The bake test is
# put first of the groups needing every CI image: 74 s when BuildKit's cache has its chain, 384-503 s when it does not.
LONGEST_GROUPS = {"tests.integration.test_bake:ci": 500, "tests.integration.test_image_suite_can_fail:ci": 141,
                  "registry-pushes:ci": 82, "tests.integration.test_off_pypi": 205,
                  "tests.integration.test_setup_host": 129, "tests.integration.test_lock": 86}


# A wrapper, so the marks are set before every other implementation runs: xdist's worker turns the xdist_group marks
# into node ids (`...@group`) in its own pytest_collection_modifyitems, and with no mark yet every test goes to
# whichever worker is free.
@pytest.hookimpl(wrapper=True)
def pytest_collection_modifyitems(config, items):
    groups = {item: _group(item) for item in items}
    rank: dict[str, int] = {}
    for item, group in groups.items():
        item.add_marker(pytest.mark.xdist_group(group))
        rank[group] = max(rank.get(group, 0), _rank(group, set(item.fixturenames)))
    # stable: pytest's own order is kept within a group; the image groups in CI_SELECTIONS' order
    order = {f"image:{tag}": i for i, tag in enumerate(_ci_image_order())}
    items.sort(key=lambda item: (rank[groups[item]], -LONGEST_GROUPS.get(groups[item], 0), order.get(groups[item], 0)))
    return (yield)


def _ci_image_order() -> list[str]:
    from tests.image.conftest import ci_image_tags

    return ci_image_tags()


@pytest.fixture(scope="session")
def work_dir() -> Path:
    """Per xdist worker: the CA bundle with its marker, the fake CANN and the logs are written here, and two workers
    writing one file at once would hand a build a half-written bundle."""
    path = ROOT / "build" / "test" / (XDIST_WORKER or "main")
    path.mkdir(parents=True, exist_ok=True)
    return path


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
    from tests.fixtures.fake_sglang_tag.make_archive import wheel_sources, write_archive
    from tests.fixtures.fake_triton_ascend.make_wheel import write_wheels

    out = work_dir / "fake-artifacts"
    write_zips(out, arches=[TEST_ARCH])
    write_wheels(out, arches=[TEST_ARCH], pypi_code=work_dir / "pypi")
    write_archive(out, SGLANG_TAG, wheel_sources(SGLANG_TAG, work_dir / "pypi"))
    write_archives(out)
    return out


@pytest.fixture(scope="session")
def build_secrets(work_dir: Path) -> dict[str, Path | str]:
    """A CA bundle (the host's, which pip needs through the TLS proxy, plus a marker line) and a netrc
    holding a marker credential: neither may appear in any layer or in docker history."""
    import uuid

    marker = f"{LEAK_MARKER_PREFIX}{uuid.uuid4().hex}"
    ca = work_dir / "ca-bundle.pem"
    base = HOST_CA.read_text() if HOST_CA.exists() else ""
    ca.write_text(f"# {marker}\n{base}")
    netrc = work_dir / "netrc"
    netrc.write_text(f"machine private-index.invalid login ci password {marker}\n")
    return {"ca": ca, "netrc": netrc, "marker": marker}


def _os_image_once(docker_client, tag: str, make) -> str:
    """`tag`, made by `make()` unless the engine has it, once even when two xdist workers ask at the same moment."""
    from ascend_images.builder.claims import claim, claims_dir
    from ascend_images.builder.engine import image_exists

    with claim(claims_dir(docker_client.info().get("ID", "engine")), f"os-image-{tag.replace('/', '_')}", tag,
               lambda line: print(line, file=sys.stderr)):
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


def build_ci_selection(selection: dict, fake_cann_dir: Path, secrets: dict, work_dir: Path, out=print,
                       artifacts_dir: Path | None = None, jobs: int = 2, namespace: str = TEST_NAMESPACE):
    from ascend_images.cli.build import build_selection
    from ascend_images.cli.options import InputFlags, Selection, SourceFlags

    sel = Selection(matrix=str(ROOT / "matrix.yaml"), arch=TEST_ARCH, **selection)
    flags = SourceFlags(cann_source="local", cann_dir=str(fake_cann_dir),
                            artifacts_dir=str(artifacts_dir) if artifacts_dir else None)
    inputs = InputFlags(ca_bundle=str(secrets["ca"]), netrc=str(secrets["netrc"]))
    # two stages at once by default: an emulated build keeps one core busy, and this machine has two
    return build_selection(sel, flags, inputs, out, work_dir=work_dir, namespace=namespace, jobs=jobs)


def live_output(config):
    """Print past pytest's capture: a cold build takes minutes and CI logs must show its progress."""
    capture = config.pluginmanager.getplugin("capturemanager")

    def out(line: str) -> None:
        with capture.global_and_fixture_disabled():  # stderr: an xdist worker's stdout is its channel
            print(line, file=sys.stderr, flush=True)

    return out


@pytest.fixture(scope="session")
def ci_builds(docker_client, os_image, fake_cann_dir, fake_artifacts_dir, build_secrets, work_dir, pytestconfig):
    """[(plan, results)] for each CI selection, built (or reused) once per session, in CI_SELECTIONS' order. One
    selection at a time, its stages one by one: an emulated stage keeps a core busy, and the other core runs the
    checks of the images built so far (a worker's image group builds just its own image, which this worker has built
    or is building: it waits on that stage's claim, then reuses it)."""
    out = live_output(pytestconfig)
    built = []
    for index, selection in enumerate(CI_SELECTIONS):
        built.append(build_ci_selection(selection, fake_cann_dir, build_secrets, work_dir, out=out,
                                        artifacts_dir=fake_artifacts_dir, jobs=1))
        record_ci_build(index, *built[-1])
    return built


@pytest.fixture(scope="session")
def ci_image_builder(docker_client, os_image, fake_cann_dir, fake_artifacts_dir, build_secrets, work_dir,
                     pytestconfig):
    """build(selection) -> (plan, results): one CI selection, built or reused (per worker, once)."""
    out = live_output(pytestconfig)
    done: dict[int, tuple] = {}

    def build(index: int):
        if index not in done:
            done[index] = build_ci_selection(CI_SELECTIONS[index], fake_cann_dir, build_secrets, work_dir, out=out,
                                             artifacts_dir=fake_artifacts_dir, jobs=1)
            record_ci_build(index, *done[index])
        return done[index]

    return build


@pytest.fixture(scope="session")
def native_tool(docker_client, ci_builds, fake_cann_dir, fake_artifacts_dir, build_secrets, work_dir, pytestconfig):
    """The native tool of CI's SGLang stage (its `installer` build stage: the build host's Python, uv and the install
    scripts) as an image, built from the stage's own Dockerfile (BuildKit's cache has it once the stage is built)."""
    import platform

    from ascend_images.builder.build import Builder, BuildSettings, source_date
    from ascend_images.cli.options import InputFlags, SourceFlags
    from ascend_images.inputs.osimage import local_os_image

    stage = next(s for plan, _ in ci_builds for s in plan.stages if s.kind == "sglang")
    flags = SourceFlags(cann_source="local", cann_dir=str(fake_cann_dir), artifacts_dir=str(fake_artifacts_dir))
    host = {"x86_64": "amd64", "aarch64": "arm64"}[platform.machine()]
    inputs = InputFlags(ca_bundle=str(build_secrets["ca"])).inputs()
    settings = BuildSettings(flags.sources(stage.variant.matrix), inputs, work_dir,
                             source_date=source_date(stage.variant.matrix),
                             installer_base=local_os_image("debian12", host))
    return Builder(docker_client, settings, out=live_output(pytestconfig)).native_tool(
        stage, f"{TEST_NAMESPACE}/native-tool:{host}")


@pytest.fixture(scope="session")
def ci_images(ci_builds) -> list[str]:
    """Every variant image of the CI selections."""
    return sorted({top.tag for plan, _ in ci_builds for top in plan.tops.values()})


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
    """The registries this worker's tests push to, one per xdist group, each kept on this host across runs
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
    """This test's own repositories (a prefix of its own) in the registry its xdist group shares."""
    yield from _area(kept_registries(_group(request.node).replace(":", "-")), tmp_path, docker_client)


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
