"""What each image holds for its own chip, checked in a running container of it: the build of vLLM-Ascend its device
gets (upstream's own start-up check), the per-device downloads, and what upstream's image installs beside
vLLM-Ascend for run time."""

from __future__ import annotations

import json

import pytest

from ascend_images.inputs.pypi import normalize
from tests.image.probe import IMAGE_PACKAGE_MODULES, chip_socs

pytestmark = [pytest.mark.docker, pytest.mark.slow]


# The device type vLLM-Ascend's build records for each device's SOC_VERSION (its setup.py gen_build_info at v0.23.0:
# ascend910b* A2, ascend910_93* A3, ascend950* A5), written out by hand
DEVICE_TYPE = {"a2": "A2", "a3": "A3", "a5": "A5"}


@pytest.mark.vllm_image
def test_vllm_ascends_own_device_check_passes_on_the_images_chip_only(variant, python_stack):
    """vLLM-Ascend checks at start-up that the device its build records is the chip's (DESIGN 28). In the image, with
    only the chip's SOC number stubbed, its own check passes for the image's device and stops on another's."""
    checked = python_stack["device_checks"]["vllm-ascend"]
    own, other = chip_socs(variant.device).split(",")
    recorded = DEVICE_TYPE[variant.device]
    assert checked[own] == f"passed: {recorded}", checked
    assert checked[other].startswith("AssertionError: Current device type: AscendDeviceType.") and \
        f"installed version's device type: AscendDeviceType.{recorded}," in checked[other], checked


# Upstream's per-device files, written out by hand from their publishers' names: CANN's operator package (CCI
# cann/<ver>-<chip>-*/Dockerfile: Ascend-cann-910b-ops, Ascend-cann-A3-ops, Ascend-cann-950-ops; before 8.5.0
# Ascend-cann-kernels-910b and Atlas-A3-cann-kernels) and sgl-kernel-npu's release zip (its build_and_release.yml:
# ...-cann<ver>-910b-<arch>.zip, ...-a3-...), each chip's and no other's
DEVICE_FILES = {
    "a2": {"cann-install": ("Ascend-cann-910b-ops_", "Ascend-cann-kernels-910b_"), "sglang": ("-910b-",)},
    "a3": {"cann-install": ("Ascend-cann-A3-ops_", "Atlas-A3-cann-kernels_"), "sglang": ("-a3-",)},
    "a5": {"cann-install": ("Ascend-cann-950-ops_",), "sglang": ("-950-",)},
}
OPERATOR_PACKAGES = ("-ops_", "-kernels-", "-kernels_")


def test_the_device_specific_downloads_are_the_devices(docker_client, image, variant):
    """What the image installed from the downloads PyPI lacks (its labels, file -> sha256) holds the image's chip's
    build of each per-device file, and no other chip's."""
    labels = docker_client.images.get(image).labels or {}
    files = {kind: json.loads(labels.get(f"io.ascend-images.downloads.{kind}", "{}")) for kind in ("cann-install",
                                                                                                  "sglang")}
    own = DEVICE_FILES[variant.device]
    operators = [f for f in files["cann-install"] if any(m in f for m in OPERATOR_PACKAGES)]
    assert len(operators) == 1 and operators[0].startswith(own["cann-install"]), operators
    kernels = [f for f in files["sglang"] if f.startswith("sgl-kernel-npu-") and f.endswith(".zip")]
    if variant.backend == "sglang" and kernels:  # a release that builds the kernels from source has no zip
        assert len(kernels) == 1 and any(m in kernels[0] for m in own["sglang"]), kernels


def image_packages(variant) -> set[str]:
    """The distributions upstream's image installs beside the backend, as the variant's release lists them."""
    from packaging.requirements import Requirement

    return {normalize(Requirement(p.requirement).name) for p in variant.backend_pins.image_packages}


@pytest.mark.vllm_image
def test_what_upstreams_image_installs_beside_vllm_ascend_imports(variant, python_stack):
    """Ray (multi-node serving), ModelScope (downloads) and vLLM's audio extra, as upstream's image has them."""
    wanted = {IMAGE_PACKAGE_MODULES[n] for n in image_packages(variant) if n in IMAGE_PACKAGE_MODULES}
    if not wanted:
        pytest.skip(f"release {variant.release_name} lists no such package")
    found = python_stack["image_packages"]
    assert {m: found[m] for m in sorted(wanted) if found[m] != "imported"} == {}


# What Mooncake's transfer engine (mooncake-transfer-engine-npu 0.3.11.post1's aarch64 wheel) links beyond the C and
# C++ runtime and itself, read here with readelf: the OS's RDMA, NUMA and curl libraries, and CANN's own (AscendCL,
# LLM-DataDist, metadef), written out by hand
MOONCAKE_OS_LIBRARIES = {"libibverbs.so.1", "libnuma.so.1", "libcurl.so.4"}
MOONCAKE_CANN_LIBRARIES = {"libascendcl.so", "libllm_datadist.so", "libmetadef.so"}


@pytest.mark.vllm_image
def test_mooncakes_engine_finds_the_os_libraries_it_links(host, variant):
    """Every OS library Mooncake's shared objects need resolves in the image (libibverbs is installed for it); what
    stays unresolved is CANN's alone, whose LLM-DataDist and metadef libraries the CANN test double does not carry
    (tests/npu imports the engine on a real host)."""
    if "mooncake-transfer-engine-npu" not in image_packages(variant):
        pytest.skip(f"release {variant.release_name} does not install Mooncake")
    out = host.check_output("cd /usr/local/python/lib/python3.*/site-packages/mooncake && "
                            "for f in engine*.so lib*.so* store*.so; do ldd $f; done")
    libraries = {line.split()[0]: line.split("=>", 1)[1].strip() for line in out.splitlines() if "=>" in line}
    missing = {name for name, where in libraries.items() if where.startswith("not found")}
    assert set(libraries) >= MOONCAKE_OS_LIBRARIES, sorted(libraries)
    assert missing <= MOONCAKE_CANN_LIBRARIES, sorted(missing)
