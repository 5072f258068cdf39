"""How far a backend package that CANN must compile builds from source here: vllm-ascend 0.23.0.post1 from PyPI's
sdist (the first vllm-ascend sdist that carries its catlass sources), built as the backend stage builds a locked
sdist (`pip --no-deps --no-build-isolation`, against the image's own packages and baked CANN env, no network), in
CI's A3 vLLM image (vLLM-Ascend 0.23.0) on the CANN 9.1.0 test double.

On a real CANN the build goes on to compile 42 custom operators; the double has no compiler. So the build must get
exactly that far: SOC_VERSION and ASCEND_HOME_PATH reach setup.py from the image, csrc/build_aclnn.sh takes its A3
branch and finds catlass, csrc/build.sh starts, and its first error is that CANN's BiSheng compiler is missing.
The expected lines are upstream's own (csrc/build_aclnn.sh and csrc/build.sh in that sdist), written out here."""

from __future__ import annotations

import re

import pytest

from ascend_images.inputs.pypi import IndexFile, download

pytestmark = [pytest.mark.docker, pytest.mark.slow, pytest.mark.network]

SDIST = IndexFile(
    file="vllm_ascend-0.23.0.post1.tar.gz",
    url="https://files.pythonhosted.org/packages/ab/7a/32a1b1f13467fb7372588206fa1ffb735f28dcd8504d562f5c7ccdbd90d0/"
        "vllm_ascend-0.23.0.post1.tar.gz",
    sha256="a3b9f4a5dd7aa50c37e03d1f35937c4ae5aeacc49b734cac74d59ce5757738e1",  # PyPI's
)
# csrc/build_aclnn.sh: the branch SOC_VERSION ascend910_93xx selects, then catlass found in the tree
REACHED = ("[build_aclnn] matched SOC branch: ascend910_93", "[build_aclnn] catlass include=")
# csrc/build.sh set_env(): `which bisheng` came back empty
STOPPED_AT = "Error: bisheng compilation tool not found"
BUILD = ("cd /tmp && tar -xzf /sdist/{file} && cd {dir} && TORCH_DEVICE_BACKEND_AUTOLOAD=0 "
         "pip wheel --no-deps --no-build-isolation --no-cache-dir -v -w /tmp/out . 2>&1")


@pytest.fixture(scope="module")
def sdist(work_dir):
    return download(SDIST, work_dir / "cache" / "sdists")  # the lock maker's own: checked against PyPI's sha256


def test_vllm_ascend_source_build_gets_to_cann_s_compiler(docker_client, ci_images, sdist):
    image = next(tag for tag in ci_images if "/vllm-ascend:" in tag and "-a3-" in tag)
    command = BUILD.format(file=SDIST.file, dir=SDIST.file.removesuffix(".tar.gz"))
    box = docker_client.containers.run(image, ["bash", "-c", command], entrypoint=[], detach=True,
                                       network_disabled=True,
                                       volumes={str(sdist.parent): {"bind": "/sdist", "mode": "ro"}})
    try:
        code = box.wait(timeout=1800)["StatusCode"]
        log = box.logs().decode(errors="replace")
    finally:
        box.remove(force=True)
    assert code != 0, log[-3000:]  # nothing to compile the operators with: a wheel here would be a fake
    for line in REACHED:
        assert line in log, f"stopped before {line!r}:\n{log[-3000:]}"
    first_error = next((ln for ln in log.splitlines() if re.search(r"\b(error|Error|ERROR)\b", ln)), "")
    assert STOPPED_AT in first_error, f"first error is not the missing compiler: {first_error!r}\n{log[-3000:]}"
