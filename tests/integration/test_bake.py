"""rendered/docker-bake.json as a user's CI runs it (DESIGN 23): `invoke fetch --bake-inputs DIR` lays out each
target's inputs, then plain `docker buildx bake -f rendered/docker-bake.json TARGET` builds, no code of ours in its
loop, the inputs given as bake variables and `--set`. The target is the default A3 training base (torch 2.10.0.post4
on CANN 9.1.0): bake builds its chain (base, CANN install, CANN, torch) from the committed contexts, with the fake
CANN (a test double: the image is labelled so) and the host's wheel store.

The image it makes passes the image tests, and has the very layers `invoke build` made for CI's same image: the
committed contexts and the project's renders of them are one build."""

from __future__ import annotations

import hashlib
import os
import platform
import re
import subprocess
import sys

import pytest

from ascend_images.runtime.imagetests import run_image_suite
from tests.conftest import ROOT, TEST_ARCH, TEST_DOCKER_ARCH

pytestmark = [pytest.mark.docker, pytest.mark.slow]
BAKE = "rendered/docker-bake.json"
# written out by hand: the targets of the chain, as the bake file names them (rendered/'s directories)
TORCH = f"torch-npu--2_10_0_post4-cann9_1_0-a3-debian12-py3_11-{TEST_DOCKER_ARCH}"
TORCH_DIR = f"torch-npu--2.10.0.post4-cann9.1.0-a3-debian12-py3.11-{TEST_DOCKER_ARCH}"
CANN_INSTALL = f"cann-install--9_1_0-a3-debian12-py3_11-{TEST_DOCKER_ARCH}"
BASE = f"base--debian12-py3_11-{TEST_DOCKER_ARCH}"
TAG = "ascend-images-bake/torch-npu:plain-bake"


def digest(path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def sha256_arg(file: str) -> str:
    """A download's sha256 build arg, as README documents it: SHA256_ and the file name, upper case, every run of
    other characters one `_`."""
    return "SHA256_" + re.sub(r"[^A-Za-z0-9]+", "_", file).strip("_").upper()


@pytest.fixture(scope="module")
def baked(docker_client, ci_builds, fake_cann_dir, tmp_path_factory):
    """The image plain bake makes of the target, its inputs laid out by `invoke fetch --bake-inputs` from the
    ci_builds' wheel store (the torch lock's files) and the fake CANN."""
    files = [f"Ascend-cann-{part}_9.1.0_linux-{TEST_ARCH}.run" for part in ("toolkit", "A3-ops", "nnal")]
    inputs = tmp_path_factory.mktemp("bake-inputs")
    fetch = subprocess.run([sys.executable, "-m", "invoke", "fetch", "--device", "a3", "--backend", "none",
                            "--release", "cann9.1.0-pt2.10.0", "--arch", TEST_ARCH, "--cann-dir", str(fake_cann_dir),
                            "--bake-inputs", str(inputs)], cwd=ROOT, capture_output=True, text=True, timeout=1800)
    assert fetch.returncode == 0, fetch.stdout[-3000:] + fetch.stderr[-3000:]
    # what it laid out for the chain's torch target, read from the committed context: exactly the files its lock
    # pins and its Dockerfile names (uv), each under its sha256, not the wheel store's others (every CI selection's)
    context = ROOT / "rendered" / TORCH_DIR
    lock = (context / "locks" / f"torch-{TEST_ARCH}.txt").read_text()
    pinned = set(re.findall(r"--hash=sha256:([0-9a-f]{64})", lock))
    named = set(re.findall(r"/run/ascend-images/wheels/([0-9a-f]{64})", (context / "Dockerfile").read_text()))
    laid_out = {path.parent.name for path in (inputs / TORCH / "wheels").glob("*/*")}
    assert pinned and named and laid_out == pinned | named, (sorted(laid_out - pinned - named),
                                                             sorted((pinned | named) - laid_out))
    host = {"x86_64": "amd64", "aarch64": "arm64"}[platform.machine()]
    env = {**os.environ, "BAKE_INPUTS": str(inputs), "NETWORK": "host",
           "INSTALLER_BASE": f"ascend-images/os:debian12-{host}"}
    argv = ["docker", "buildx", "bake", "-f", BAKE, "--progress", "plain", TORCH,
            # the OS base this host has (no registry): the base target's FROM, as a named context
            "--set", f"{BASE}.contexts.debian:12=docker-image://ascend-images/os:debian12-{TEST_DOCKER_ARCH}",
            # the doubles' files instead of pins.yaml's, named in the image's labels; a test double, labelled so
            *[arg for f in files
              for arg in ("--set", f"{CANN_INSTALL}.args.{sha256_arg(f)}={digest(fake_cann_dir / f)}")],
            "--set", "*.labels.io.ascend-images.test-double=cann",
            # names of the test's own: the chain's stages untagged, the target under a namespace of its own
            "--set", "*.tags=", "--set", f"{TORCH}.tags={TAG}"]
    result = subprocess.run(argv, cwd=ROOT, env=env, capture_output=True, text=True, timeout=3600)
    assert result.returncode == 0, result.stderr[-4000:]
    yield TAG, result.stderr
    docker_client.images.remove(TAG, force=True)


def test_plain_bake_builds_the_chain_with_the_ci_images_layers(docker_client, baked, ci_builds):
    tag, output = baked
    for target in (BASE, CANN_INSTALL, TORCH):
        assert f"[{target} " in output or f"[{target}]" in output, target  # each stage of the chain, by bake
    ci_torch = next(s.tag for plan, _ in ci_builds for s in plan.stages if s.kind == "torch"
                    and s.variant.device == "a3" and s.variant.release_name == "cann9.1.0-pt2.10.0")
    mine, theirs = docker_client.api.inspect_image(tag), docker_client.api.inspect_image(ci_torch)
    assert mine["RootFS"]["Layers"] == theirs["RootFS"]["Layers"]
    labels = mine["Config"]["Labels"]
    assert labels["io.ascend-images.test-double"] == "cann"
    assert labels["org.opencontainers.image.created"] == "2026-11-28T00:00:00Z"  # matrix.yaml's source_date


def test_the_baked_image_passes_its_image_tests(baked, work_dir):
    tag, _ = baked
    result = run_image_suite(tag, work_dir)
    assert result.failed == [] and result.passed > 20, result.failed
