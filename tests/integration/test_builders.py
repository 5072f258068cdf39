"""The engine a user really has, met as a user meets it (issue 61): each unusable piece refused in one line before
anything is rendered or built, naming what is missing, what was found and the minimum; and a builder of another
engine (a second, real dockerd, as another docker context's builder) used through `--builder`, its images pushed to
a loopback registry and read from there."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import IN_CI, ROOT, X86_RELEASE, remove_tags, with_own_cann_stages
from tests.fixtures.old_engine import old_engine
from tests.fixtures.small_engine import second_engine

pytestmark = [pytest.mark.docker, pytest.mark.slow]


def invoke(*args: str, env: dict[str, str] | None = None, prefix: tuple[str, ...] = (),
           timeout: int = 300) -> subprocess.CompletedProcess:
    return subprocess.run([*prefix, sys.executable, "-m", "invoke", *args], cwd=ROOT, capture_output=True, text=True,
                          env={**os.environ, **(env or {})}, timeout=timeout)


def one_line(result: subprocess.CompletedProcess, code: int) -> str:
    assert result.returncode == code, result.stdout[-2000:] + result.stderr[-2000:]
    # (a rule's warning about the selection is a note of its own, before the refusal)
    lines = [line for line in result.stderr.splitlines() if line.strip() and not line.startswith("warning ")]
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr
    assert result.stdout.strip() == "", result.stdout  # nothing planned, rendered or built
    return lines[0]


def build(work: Path, *extra: str) -> list[str]:
    inputs = ROOT / "build" / "test" / "inputs"
    return ["build", "--device", "a3", "--backend", "none", "--cann-dir", str(inputs), "--namespace",
            "ascend-images-builders", "--work-dir", str(work), *extra]


def test_a_builder_that_does_not_exist_is_refused_naming_those_that_do(ci_build, tmp_path):
    said = one_line(invoke(*build(tmp_path / "work", "--builder", "nosuch")), 2)
    assert "--builder nosuch: no such builder (`docker buildx ls` has: default" in said, said
    said = one_line(invoke(*build(tmp_path / "work"), env={"BUILDX_BUILDER": "nosuch-either"}), 2)
    assert "BUILDX_BUILDER nosuch-either: no such builder" in said, said
    assert not (tmp_path / "work").exists()


def test_a_docker_cli_without_buildx_is_refused(ci_build, tmp_path):
    """The Docker CLI alone (the plugin directories hidden by an empty one, in a mount namespace of its own): what a
    host with docker-ce-cli and no docker-buildx-plugin has, as this machine had before set-up."""
    if shutil.which("unshare") is None:
        (pytest.fail if IN_CI else pytest.skip)("unshare (util-linux) is not installed")
    empty = tmp_path / "no-plugins"
    empty.mkdir()
    plugins = [d for d in ("/usr/libexec/docker/cli-plugins", "/usr/lib/docker/cli-plugins",
                           "/usr/local/lib/docker/cli-plugins", "/usr/local/libexec/docker/cli-plugins")
               if Path(d).is_dir()]
    hide = " && ".join(f"mount --bind {empty} {d}" for d in plugins)
    script = f"{hide} && exec {sys.executable} -m invoke {' '.join(build(tmp_path / 'work'))}"
    result = subprocess.run(["unshare", "--mount", "--propagation", "private", "sh", "-c", script], cwd=ROOT,
                            capture_output=True, text=True, env={**os.environ, "DOCKER_CONFIG": str(tmp_path)},
                            timeout=300)
    said = one_line(result, 3)
    assert "has no buildx plugin: builds need buildx >= 0.17" in said and shutil.which("docker") in said, said
    assert not (tmp_path / "work").exists()


@pytest.mark.parametrize(("version", "api"), [("20.10.24", "1.41"), ("26.1.5+dfsg1", "1.45")])
def test_an_engine_below_the_floor_is_refused_naming_its_version(ci_build, tmp_path, version, api):
    """Debian 12's own engine, and Debian 13's (BuildKit 0.13, without the fixes the build relies on)."""
    with old_engine(tmp_path / "docker.sock", version.split("+")[0]) as host:
        said = one_line(invoke(*build(tmp_path / "work"), env={"DOCKER_HOST": host}), 3)
    assert f"the Docker engine at {host} is {version} (API {api}): builds need Docker Engine >= 27.0" in said, said
    assert "scripts/setup-host.sh installs" in said, said
    assert not (tmp_path / "work").exists()


@pytest.fixture
def second_engine_context(os_image_amd64, tmp_path):
    """A second, real dockerd (on a loop-mounted file system of its own, with the host's x86_64 OS image), as the
    docker context `ai-second` of a docker config of the test's own: `docker buildx ls` lists it as a builder (the
    docker driver of that engine), whose images land there, not in the engine DOCKER_HOST names."""
    for engine in second_engine(8000):
        engine.load_from_host(os_image_amd64)
        config = tmp_path / "docker-config"
        config.mkdir()
        env = {"DOCKER_CONFIG": str(config)}
        subprocess.run(["docker", "context", "create", "ai-second", "--docker", f"host={engine.host}"],
                       env={**os.environ, **env}, check=True, capture_output=True)
        yield engine, env


def test_a_builder_of_another_engine_pushes_and_its_images_are_read_from_the_registry(
        docker_client, second_engine_context, registry, x86_light_matrix, fake_cann_both, light_wheelhouse,
        build_secrets, tmp_path):
    engine, env = second_engine_context
    matrix = with_own_cann_stages(x86_light_matrix, tmp_path / "matrix")
    args = ["build", "--matrix", str(matrix), "--device", "a2", "--backend", "none", "--release", X86_RELEASE,
            "--arch", "x86_64", "--cann-dir", str(fake_cann_both), "--wheelhouse", str(light_wheelhouse),
            "--ca-bundle", str(build_secrets["ca"]), "--work-dir", str(tmp_path / "work"), "--builder", "ai-second"]
    # its images would land in the second engine, which no later command here reads: refused, saying what to add
    said = one_line(invoke(*args, "--namespace", "ascend-images-second", env=env), 2)
    assert "builder 'ai-second' (driver docker" in said and "--push with --namespace REGISTRY/NAMESPACE" in said, said
    namespace = f"{registry.namespace}/pushed"
    # 77 s alone on 2 cores; a cold CI run, beside the reproducibility chain on another engine, took over 300 s
    done = invoke(*args, "--namespace", namespace, "--push", env=env, timeout=1200)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    top = f"{namespace}/torch-npu:2.13.0-cann8.5.0-a2-debian12-py3.11-amd64"
    assert f"image for test-wheelhouse/a2/none/debian12/x86_64/system: {top}" in done.stdout
    # built there, pushed to the registry, and not in this engine
    assert engine.docker("image", "inspect", top, check=False).returncode == 0
    assert not docker_client.images.list(name=top)
    try:
        inspected = invoke("inspect", top, "--json")  # pulled from the registry to be read
        assert inspected.returncode == 0, inspected.stderr[-2000:]
        facts = json.loads(inspected.stdout)
        assert facts["labels"]["io.ascend-images.stage"] == "torch"
        assert facts["labels"]["io.ascend-images.parent"] == "cann:8.5.0-a2-debian12-py3.11-amd64"
    finally:
        remove_tags(docker_client, f"{namespace}/")
