"""A package a lock builds from its sdist is compiled once per engine, for its inputs (the sdist's sha256) and its
target (arch, Python, OS, torch): the vLLM stage's own built-wheel line (rendered from images/, only
arctic-inference's sdist swapped for a probe's) is built twice by BuildKit, `--no-cache`, over CI's base image, with
the wheel store as its named context and the built-wheels cache mount. The first compiles and keeps the wheel; the
second takes it from the cache mount and compiles nothing. Started twice at once, one compiles and the other waits
for it (the stage's lock on the key) and takes its wheel.

The probe is an sdist made here with an in-tree PEP 517 backend (no build requirement, as the stage builds without
isolation), in a wheel store under its sha256 like arctic-inference's."""

from __future__ import annotations

import hashlib
import io
import re
import subprocess
import tarfile
import uuid

import pytest

from ascend_images.inputs.sources import ArtifactSource, CannSource, Sources
from ascend_images.matrix.model import load_matrix
from ascend_images.matrix.selection import select
from ascend_images.stages.plan import PlanOptions, make_plan
from ascend_images.stages.render import Renderer
from tests.conftest import ROOT, TEST_DOCKER_ARCH, TEST_NAMESPACE

pytestmark = [pytest.mark.docker, pytest.mark.slow]

BACKEND = '''
import base64, hashlib, io, zipfile
def _record(name, data):
    return f"{name},sha256={base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b'=').decode()},{len(data)}"
def get_requires_for_build_wheel(config_settings=None):
    return []
def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
    with open("/tmp/probe-backend-ran", "w") as ran:  # pip shows a backend's output only when it fails
        ran.write("PROBE BACKEND COMPILED A WHEEL\\n")
    files = {"probe_pkg/__init__.py": b"", "probe_pkg-1.0.dist-info/METADATA":
             b"Metadata-Version: 2.1\\nName: probe-pkg\\nVersion: 1.0\\n",
             "probe_pkg-1.0.dist-info/WHEEL": b"Wheel-Version: 1.0\\nRoot-Is-Purelib: true\\nTag: py3-none-any\\n"}
    name = "probe_pkg-1.0-py3-none-any.whl"
    with zipfile.ZipFile(f"{wheel_directory}/{name}", "w") as whl:
        for n, d in files.items():
            whl.writestr(n, d)
        whl.writestr("probe_pkg-1.0.dist-info/RECORD", "\\n".join([*(_record(n, d) for n, d in files.items()),
                                                                   "probe_pkg-1.0.dist-info/RECORD,,"]) + "\\n")
    return name
'''


def probe_sdist(requires: str = "", backend: str = BACKEND) -> bytes:
    """The probe's sdist: its in-tree backend, with `requires` as build-system.requires (a TOML list's inside)."""
    files = {"probe-pkg-1.0/pyproject.toml": f'[build-system]\nrequires = [{requires}]\nbuild-backend = "backend"\n'
                                             'backend-path = ["."]\n[project]\nname = "probe-pkg"\nversion = "1.0"\n'
                                             .encode(),
             "probe-pkg-1.0/backend.py": backend.encode(),
             "probe-pkg-1.0/PKG-INFO": b"Metadata-Version: 2.1\nName: probe-pkg\nVersion: 1.0\n"}
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
        for name, data in files.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


def rendered_stage(backend: str) -> tuple[dict, str]:
    """The A3 aarch64 `backend` stage of matrix.yaml's default release, as images/ renders it: (context, Dockerfile)."""
    matrix = load_matrix(ROOT / "matrix.yaml")
    (variant,) = select(matrix, device="a3", backend=backend, arch="aarch64")
    sources = Sources(CannSource("url", strict=False), ArtifactSource(strict=False))
    stage = make_plan([variant], PlanOptions(sources.cann)).top(variant)
    record = Renderer().record(stage, sources)
    return dict(record.template), Renderer().render_text(stage, record)


def compile_once_line(sha256: str) -> tuple[str, str]:
    """The vLLM stage's line that builds arctic-inference's sdist once per host, as images/ renders it, for the
    probe's sdist instead; and its built-wheels key."""
    ctx, text = rendered_stage("vllm")
    (arctic,) = [b for b in ctx["packages"]["target_builds"] if b["what"].startswith("arctic-inference")]
    sdist = arctic["spec"].rsplit("#", 1)[1]
    match = re.search(rf"(/usr/local/libexec/ascend-images/built-wheel \S+ /wheels \\\n\s+\S+{sdist} \. - -)",
                      text)
    assert match, "the vLLM stage builds arctic-inference's sdist no more"
    # and the line before it, which waits for another build's compile of the same key
    lock = re.search(rf"if command -v flock >/dev/null; then exec 9>\S+/{re.escape(arctic['key'])}\.lock "
                     r"&& flock 9; fi", text)
    line = (f"{lock.group(0)} && " if lock else "") + match.group(1)
    key = arctic["key"].replace(sdist[:16], sha256[:16])
    return line.replace(sdist, sha256).replace(arctic["key"], key).replace("\\\n", " "), key


def test_a_wheel_compiled_by_one_build_is_taken_by_the_next(docker_client, ci_build, tmp_path):
    base = f"{TEST_NAMESPACE}/base:debian12-py3.11-{TEST_DOCKER_ARCH}"
    sdist = probe_sdist()
    sha256 = hashlib.sha256(sdist).hexdigest()
    store = tmp_path / "wheels"
    (store / sha256).mkdir(parents=True)
    (store / sha256 / "probe-pkg-1.0.tar.gz").write_bytes(sdist)
    line, key = compile_once_line(sha256)
    # the stage's cache mount, under an id of this test's own so that no earlier run has filled it
    cache = (f"--mount=type=cache,id=ascend-images-test-{uuid.uuid4().hex[:12]},"
             "target=/var/cache/ascend-images/built-wheels")
    context = tmp_path / "context"
    context.mkdir()
    outputs = []
    for build in range(2):  # two builds, only the cache mount between them
        # each build's RUN line its own (`: build N`), so the second cannot take the first one's layer; not
        # --no-cache, under which BuildKit gives every cache mount empty (seen with BuildKit 0.13)
        (context / "Dockerfile").write_text(
            f"FROM {base}\nRUN --mount=type=bind,from=wheels,target=/run/ascend-images/wheels {cache} \\\n"
            f"    {line} && (cat /tmp/probe-backend-ran 2>/dev/null || true) && ls /wheels "
            f"&& ls /var/cache/ascend-images/built-wheels/{key} && : build {build}\n")
        result = subprocess.run(["docker", "buildx", "build", "--progress", "plain", "--network", "host",
                                 "--platform", f"linux/{TEST_DOCKER_ARCH}", "--build-context", f"wheels={store}",
                                 "--output", "type=cacheonly", str(context)],
                                capture_output=True, text=True, timeout=900)
        assert result.returncode == 0, result.stderr[-3000:]
        outputs.append(result.stderr)
    first, second = outputs
    assert "PROBE BACKEND COMPILED A WHEEL" in first and "probe_pkg-1.0-py3-none-any.whl, compiled here" in first, \
        first[-2000:]
    assert "PROBE BACKEND COMPILED A WHEEL" not in second, second[-2000:]  # taken, not compiled again
    assert "compiled by an earlier build on this engine" in second, second[-2000:]
    assert second.count("probe_pkg-1.0-py3-none-any.whl") >= 2  # in /wheels, and kept under its inputs' key


# --- a pure-Python source tree, built natively (the SGLang stage's line): hashes enforced, a platform wheel refused --
HELPER = "probe_build_helper-1.0-py3-none-any.whl"


def helper_wheel() -> bytes:
    """A build requirement of the probe's (pure, as setuptools and wheel are), served from the wheel store."""
    import base64
    import zipfile

    files = {"probe_build_helper/__init__.py": b"",
             "probe_build_helper-1.0.dist-info/METADATA": b"Metadata-Version: 2.1\nName: probe-build-helper\n"
                                                          b"Version: 1.0\n",
             "probe_build_helper-1.0.dist-info/WHEEL": b"Wheel-Version: 1.0\nRoot-Is-Purelib: true\n"
                                                       b"Tag: py3-none-any\n"}
    record = [f"{n},sha256={base64.urlsafe_b64encode(hashlib.sha256(d).digest()).rstrip(b'=').decode()},{len(d)}"
              for n, d in files.items()] + ["probe_build_helper-1.0.dist-info/RECORD,,"]
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as whl:
        for n, d in files.items():
            whl.writestr(n, d)
        whl.writestr("probe_build_helper-1.0.dist-info/RECORD", "\n".join(record) + "\n")
    return buffer.getvalue()


def native_sdist(tag: str) -> bytes:
    """The probe's sdist, its backend needing the helper and writing a wheel tagged `tag`."""
    backend = BACKEND.replace("py3-none-any", tag).replace('"probe_pkg/__init__.py": b""',
                                                           '"probe_pkg/__init__.py": b"import probe_build_helper"')
    backend = "import probe_build_helper  # noqa: F401 (installed from the build constraints)\n" + backend
    return probe_sdist('"probe-build-helper"', backend)


def native_build_line() -> str:
    """The SGLang stage's line that builds its source tree natively, as images/ renders it."""
    ctx, text = rendered_stage("sglang")
    (what,) = [b["what"] for b in ctx["packages"]["native_builds"]]
    version = re.fullmatch(r"SGLang (\S+) from its source tree", what).group(1)
    assert not ctx["packages"]["target_builds"] and " AS built" not in text  # no emulated build stage left
    match = re.search(r"(/usr/local/libexec/ascend-images/build-env /usr/local/libexec/ascend-images/build-pure-wheel"
                      r" \\\n\s+\S+ \S+ /tmp/ascend-install/wheels"
                      rf" \\\n\s+\S+ python pyproject_npu.toml {re.escape(version)})", text)
    assert match, "the SGLang stage builds its source tree natively no more"
    return match.group(1).replace("\\\n", " ")


@pytest.mark.parametrize("case", ["pure", "platform wheel", "build requirement's hash"])
def test_a_pure_python_tree_is_built_natively_and_nothing_else_passes(docker_client, native_tool, tmp_path, case):
    """The SGLang stage's native line, in the stage's native tool (the build host's arch) with images/' copy of
    build-pure-wheel, the wheel store and a built-wheels cache mounted where the build mounts them:
    a pure-Python tree builds in isolation from its hashed build requirements; a tree whose wheel is tagged for this
    host's arch, or a build requirement whose file does not hash to its pin, stops it."""
    sdist = native_sdist("cp311-cp311-linux_x86_64" if case == "platform wheel" else "py3-none-any")
    sha256 = hashlib.sha256(sdist).hexdigest()
    helper = helper_wheel()
    helper_sha = hashlib.sha256(helper).hexdigest()
    store = tmp_path / "wheels"
    for data, name, digest in [(sdist, "probe-pkg-1.0.tar.gz", sha256), (helper, HELPER, helper_sha)]:
        (store / digest).mkdir(parents=True)
        (store / digest / name).write_bytes(data)
    pinned = "0" * 64 if case == "build requirement's hash" else helper_sha
    (tmp_path / "ctx").mkdir()
    (tmp_path / "ctx" / "build-requirements.txt").write_text(f"probe-build-helper==1.0 --hash=sha256:{pinned}\n")
    line = native_build_line()
    spec, project = re.search(r"(\S+#\S+) (python pyproject_npu.toml \S+)", line).groups()
    line = line.replace(f"{spec} {project}", f"/run/ascend-images/wheels/{sha256}#{sha256} . - -")
    line = line.replace("/tmp/ascend-install/build-requirements.txt", "/ctx/build-requirements.txt")
    script = f"set -e\nmkdir -p /tmp/ascend-install/wheels\n{line}\nls /tmp/ascend-install/wheels\n"
    (tmp_path / "built-wheels").mkdir()
    container = docker_client.containers.run(
        native_tool, ["bash", "-c", script], entrypoint=[], detach=True, network_mode="host",
        volumes={str(tmp_path / "ctx"): {"bind": "/ctx", "mode": "ro"},
                 str(store): {"bind": "/run/ascend-images/wheels", "mode": "ro"},
                 str(tmp_path / "built-wheels"): {"bind": "/var/cache/ascend-images/built-wheels", "mode": "rw"},
                 str(ROOT / "images" / "common" / "installer" / "build-pure-wheel"):
                     {"bind": "/usr/local/libexec/ascend-images/build-pure-wheel", "mode": "ro"}})
    code = container.wait(timeout=300)["StatusCode"]
    out = container.logs().decode(errors="replace")
    container.remove()
    if case == "pure":
        assert code == 0, out[-3000:]
        assert out.rstrip().endswith("probe_pkg-1.0-py3-none-any.whl"), out[-2000:]
    elif case == "platform wheel":
        assert code != 0, out[-3000:]
        assert "probe_pkg-1.0-cp311-cp311-linux_x86_64.whl is not pure Python" in out, out[-2000:]
        assert not any((tmp_path / "built-wheels").rglob("*.whl"))
    else:
        assert code != 0, out[-3000:]
        assert "Hash mismatch" in out and helper_sha in out, out[-2000:]



def test_two_builds_of_one_key_at_once_compile_it_once(docker_client, ci_build, tmp_path):
    """A3's and the 950's vLLM stages compile arctic-inference at the same time, over two parents (seen in a CI
    bake: 374 s each, side by side): the stage's own lines, started twice at once with a probe whose compile lasts
    20 s, compile it once; the other build waits for it and takes the wheel."""
    base = f"{TEST_NAMESPACE}/base:debian12-py3.11-{TEST_DOCKER_ARCH}"
    sdist = probe_sdist(backend=BACKEND.replace("    with open(\"/tmp/probe-backend-ran\"",
                                                "    __import__('time').sleep(20)\n"
                                                "    with open(\"/tmp/probe-backend-ran\""))
    sha256 = hashlib.sha256(sdist).hexdigest()
    store = tmp_path / "wheels"
    (store / sha256).mkdir(parents=True)
    (store / sha256 / "probe-pkg-1.0.tar.gz").write_bytes(sdist)
    line, _ = compile_once_line(sha256)
    assert line.startswith("if command -v flock "), line  # the stage waits for another compile of its key
    cache = (f"--mount=type=cache,id=ascend-images-test-{uuid.uuid4().hex[:12]},"
             "target=/var/cache/ascend-images/built-wheels")
    runs = []
    for build in range(2):
        context = tmp_path / f"context-{build}"
        context.mkdir()
        (context / "Dockerfile").write_text(
            f"FROM {base}\nRUN --mount=type=bind,from=wheels,target=/run/ascend-images/wheels {cache} \\\n"
            f"    {line} && (cat /tmp/probe-backend-ran 2>/dev/null || true) && : build {build}\n")
        runs.append(subprocess.Popen(["docker", "buildx", "build", "--progress", "plain", "--network", "host",
                                      "--platform", f"linux/{TEST_DOCKER_ARCH}", "--build-context",
                                      f"wheels={store}", "--output", "type=cacheonly", str(context)],
                                     stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True))
    outputs = [run.communicate(timeout=900)[1] for run in runs]
    assert [run.returncode for run in runs] == [0, 0], "\n".join(o[-2000:] for o in outputs)
    compiled = [o for o in outputs if "PROBE BACKEND COMPILED A WHEEL" in o]
    taken = [o for o in outputs if "compiled by an earlier build on this engine" in o]
    assert len(compiled) == 1 and len(taken) == 1, "\n".join(o[-2000:] for o in outputs)
