"""`invoke build` and the committed bake file are one mechanism (DESIGN 25): README's command 2 ran, for the images
CI tests, the very definition committed in rendered/docker-bake.json: its variables, each of its targets attribute
for attribute, and its `ci-test` group as what it built. The committed contexts are the matrix's own renders
(tests/unit/test_rendered.py); a build from other inputs (the doubles here) differs in its contexts only by what
those inputs are: the files' names and sha256, and the test-double label. No second build of the chain runs here:
every build is a bake of this definition."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from ascend_images.matrix.model import load_matrix
from ascend_images.stages.bake import target_name
from tests.conftest import ROOT
from tests.fixtures.ci_images import WORK, ci_plan

pytestmark = [pytest.mark.docker]
# (the recipe's test builds and pushes: slow)


def test_invoke_build_ran_the_committed_definition(ci_build):
    committed = json.loads((ROOT / "rendered" / "docker-bake.json").read_text())
    ran = json.loads((ROOT / WORK / "docker-bake.json").read_text())
    assert ran["variable"] == committed["variable"]
    assert ran["group"]["default"]["targets"] == committed["group"]["ci-test"]["targets"]
    # ci.test's bake alone: each changed image beside it has one of its own (cli/imagetest.py)
    assert sorted(ran["target"]) == sorted(target_name(stage) for stage in ci_plan(load_matrix()).stages)
    assert [name for name, target in ran["target"].items() if committed["target"].get(name) != target] == []


RECIPE_TARGET = "cann--9_1_0-a3-debian12-py3_11-arm64"


def checkout_copy(into: Path) -> Path:
    """The tracked files of this tree as they are now, as a fork's checkout holds them."""
    listed = subprocess.run(["git", "-C", str(ROOT), "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
                            capture_output=True, check=True).stdout.split(b"\0")
    for name in filter(None, (n.decode() for n in listed)):
        source = ROOT / name
        if source.is_file():
            (into / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, into / name)
    return into


def test_the_documented_ci_recipe_runs_as_written_against_a_registry(docker_client, fake_cann_dir, os_image,
                                                                     os_image_amd64, registry,
                                                                     tmp_path):
    """docs/building.md's recipe for a user's CI, in a checkout whose pins.yaml pins what it installs (as a fork's
    does after `invoke fetch --record`): `invoke fetch ... --bake-inputs`, then plain `docker buildx bake` of the
    committed file, pushing every stage and its registry cache to a registry. This host reaches neither Huawei nor
    Docker Hub: CANN comes from the test doubles (--cann-dir, fetch's air-gapped form of the same step), and
    `debian:12` is the local OS image under that name for the test's length."""
    from ascend_images.inputs.artifacts import cann_wanted
    from ascend_images.inputs.pins import Pin, write_pins
    from ascend_images.matrix.model import load_matrix
    from ascend_images.matrix.selection import select
    from tests.conftest import TEST_DOCKER_ARCH

    text = (ROOT / "docs" / "building.md").read_text(encoding="utf-8")
    recipe = text.split("## Building with bake", 1)[1].split("```bash\n", 1)[1].split("```", 1)[0]
    fetch_line, bake_line = [line for line in recipe.replace("\\\n", " ").splitlines() if line.strip()]
    assert fetch_line.startswith("invoke fetch ") and " --bake-inputs build/bake-inputs" in fetch_line, recipe
    assert "docker buildx bake -f rendered/docker-bake.json" in bake_line, recipe
    target = bake_line.split()[-1]
    committed = json.loads((ROOT / "rendered" / "docker-bake.json").read_text())
    assert target in committed["target"], f"the recipe's target {target} is not in the committed bake file"

    fork = checkout_copy(tmp_path / "fork")
    inputs = fake_cann_dir
    (v,) = select(load_matrix(fork / "matrix.yaml"), device="a3", backend="none", arch="aarch64")
    write_pins(fork / "pins.yaml", [Pin(w.file, w.url, (inputs / w.file).stat().st_size,
                                        hashlib.sha256((inputs / w.file).read_bytes()).hexdigest())
                                    for w in cann_wanted(v)])

    def run(*argv: str, env: dict[str, str] | None = None) -> str:
        done = subprocess.run(argv, cwd=fork, capture_output=True, text=True, env={**os.environ, **(env or {})},
                              timeout=1800)
        assert done.returncode == 0, f"{argv}: {done.stdout[-3000:]}{done.stderr[-3000:]}"
        return done.stdout

    invoke = (sys.executable, "-m", "invoke")
    run(*invoke, "render", "--update")
    # the recipe's fetch for this chain (A3, backend none), air-gapped: CANN from the doubles
    run(*invoke, "fetch", "--device", "a3", "--backend", "none", "--cann-dir", str(inputs), "--bake-inputs",
        "build/bake-inputs")
    namespace, cache = f"{registry.namespace}", f"{registry.namespace}-cache"
    os_image = docker_client.images.get(f"ascend-images/os:debian12-{TEST_DOCKER_ARCH}")
    os_image.tag("debian", "12")
    try:
        run("docker", "buildx", "bake", "-f", "rendered/docker-bake.json", RECIPE_TARGET,
            env={"NAMESPACE": namespace, "CACHE": cache, "PUSH": "true",
                 "INSTALLER_BASE": "ascend-images/os:debian12-amd64"})
    finally:
        docker_client.images.remove("debian:12", noprune=True)
    # the named target's image, and every stage's registry cache, is in the registry; the stages under the target
    # are its build's contexts (in its layers), so bake pushes no image of theirs
    listed = [r for r in json.loads(registry.get("_catalog?n=1000"))["repositories"]
              if r.startswith(f"{registry.prefix}")]
    chain = {"base": "base--debian12-py3_11-arm64", "cann-install": "cann-install--9_1_0-a3-debian12-py3_11-arm64",
             "cann": RECIPE_TARGET}
    assert sorted(listed) == sorted([f"{registry.prefix}/cann",
                                     *(f"{registry.prefix}-cache/{target}" for target in chain.values())]), listed
    tags = json.loads(registry.get(f"{registry.prefix}/cann/tags/list"))["tags"]
    assert tags == ["9.1.0-a3-debian12-py3.11-arm64"], tags
    for target in chain.values():
        assert json.loads(registry.get(f"{registry.prefix}-cache/{target}/tags/list"))["tags"] == ["buildcache"]
