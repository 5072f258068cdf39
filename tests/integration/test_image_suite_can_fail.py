"""Every image check must be able to fail: break what it checks in an image derived from a good one,
run the suite against it, and see that exact check reported by name, while the rest still pass."""

from __future__ import annotations

import re

import pytest

from ascend_images.runtime.imagetests import run_image_suite
from tests.fixtures.buildkit import build_image

pytestmark = [pytest.mark.docker, pytest.mark.slow]

BREAKAGES = """
# a tuned default with the wrong value
ENV HCCL_CONNECT_TIMEOUT=120
# a duplicated PATH entry
ENV PATH=/usr/local/python/bin:$PATH
# a pip cache, apt lists and a leftover installer
RUN mkdir -p /root/.cache/pip/http-v2 && touch /root/.cache/pip/http-v2/x \\
 && touch /var/lib/apt/lists/deb.debian.org_debian_dists_bookworm_InRelease \\
 && touch /opt/Ascend-cann-toolkit_8.5.0_linux-aarch64.run \\
 && cd /usr/local/python/lib/python3.11/site-packages \
 && sed -i 's/^Version: .*/Version: 2.8.0.post1/' torch_npu-*.dist-info/METADATA
# no tini
ENTRYPOINT ["/usr/local/bin/ascend-entrypoint"]
"""
EXPECTED_FAILURES = {
    "test_tuned_defaults_exact[exec]", "test_tuned_defaults_exact[sh -c]",
    "test_no_duplicate_path_entries[exec]", "test_no_pip_cache", "test_no_apt_lists",
    "test_no_installers_or_build_secrets_left", "test_torch_and_torch_npu_pins", "test_pid1_is_tini",
}
MUST_STILL_PASS = {"test_python_is_the_variants", "test_cann_layout_is_upstreams", "test_labels",
                   "test_env_scripts_present", "test_operator_kernels_are_the_devices_only",
                   "test_exit_code_is_the_commands"}


@pytest.fixture(scope="module")
def broken_image(docker_client, ci_images):
    good = next(tag for tag in ci_images if "-a3-" in tag)
    platform = f"linux/{docker_client.images.get(good).attrs['Architecture']}"
    dockerfile = f"FROM {good}\n{BREAKAGES}"
    tag = "ascend-images-test/broken:latest"
    build_image(tag, dockerfile, platform=platform)
    yield tag
    docker_client.images.remove(tag, force=True)


def checks(names: set[str]) -> list[str]:
    """pytest -k for these checks only (the rest of the suite is not about these breakages: minutes under emulation)"""
    bases = sorted({name.split("[", 1)[0] for name in names})
    return ["-k", " or ".join(bases)]


def test_each_broken_thing_is_reported_by_name(broken_image, work_dir):
    result = run_image_suite(broken_image, work_dir, checks(EXPECTED_FAILURES | MUST_STILL_PASS))
    bases = {name.split("[", 1)[0] for name in result.ran}
    never_ran = {name.split("[", 1)[0] for name in EXPECTED_FAILURES | MUST_STILL_PASS} - bases
    assert not never_ran, f"no such checks (renamed?): {sorted(never_ran)}"
    failed = set(result.failed)
    missing = EXPECTED_FAILURES - failed
    assert not missing, f"checks that did not catch their breakage: {sorted(missing)}; failed: {sorted(failed)}"
    wrongly = MUST_STILL_PASS & failed
    assert not wrongly, f"unrelated checks failed: {sorted(wrongly)}"
    assert result.passed > 0


# --- the Python stack checks (CANN fidelity): two images that look fine but cannot load torch_npu ------
@pytest.fixture(scope="module")
def stack_base(docker_client, ci_images):
    return next(tag for tag in ci_images if "/torch-npu:" in tag and "-a3-" in tag)


def derived(docker_client, base: str, tag: str, body: str, context) -> str:
    """An image built FROM a good one with `body` appended, in the context directory `context`."""
    (context / "Dockerfile").write_text(f"FROM {base}\n{body}")
    build_image(tag, context=context, platform=f"linux/{docker_client.images.get(base).attrs['Architecture']}")
    return tag


# the checks these breakages concern, and the ones that must stay green (the rest of the suite is not rerun)
STACK_CHECKS = ["-k", "torch_npu_loads or cann_env_is_upstreams or cann_layout_is_upstreams or pins or pip_check "
                "or test_labels"]


def failed_checks(docker_client, tag: str, work_dir, checks: list[str] = STACK_CHECKS) -> set[str]:
    """The checks (the stack's unless named) that fail on the broken image `tag` (removed afterwards); some must
    still pass."""
    try:
        result = run_image_suite(tag, work_dir, checks)
    finally:
        docker_client.images.remove(tag, force=True)
    assert result.passed > 0
    return set(result.failed)


@pytest.mark.full  # an emulated image of its own, for checks whose code changes rarely
def test_no_toolkit_lib64_on_the_library_path_is_caught(docker_client, stack_base, work_dir, tmp_path):
    env = dict(e.split("=", 1) for e in docker_client.images.get(stack_base).attrs["Config"]["Env"])
    # the toolkit's lib64 under either name: cann-<version>/lib64 and ascend-toolkit/latest/lib64
    kept = [p for p in env["LD_LIBRARY_PATH"].split(":") if not re.search(r"/(cann-[^/]+|latest)/lib64$", p)]
    assert len(kept) < len(env["LD_LIBRARY_PATH"].split(":"))
    tag = derived(docker_client, stack_base, "ascend-images-test/broken-libpath:latest",
                  f"ENV LD_LIBRARY_PATH={':'.join(kept)}\n", tmp_path)
    failed = failed_checks(docker_client, tag, work_dir)
    assert {"test_torch_npu_loads_and_sees_no_npu", "test_cann_env_is_upstreams"} <= failed, sorted(failed)
    assert not {"test_torch_and_torch_npu_pins", "test_pip_check", "test_cann_layout_is_upstreams"} & failed


@pytest.mark.full  # an emulated pip install into an image of its own, for checks whose code changes rarely
def test_torch_npu_built_for_another_torch_is_caught(docker_client, stack_base, work_dir, tmp_path):
    # torch_npu 2.7.1.post2 is built against torch 2.7.1; this image has torch 2.8.0. The wheel is fetched here
    # (the container has no index configuration of its own) and installed over the good one, its bytecode not
    # compiled (an emulated pip compiling a few thousand files, which no check here reads).
    from ascend_images.inputs.pypi import PYPI_SIMPLE, download, index_files

    (wheel,) = [f for f in index_files(PYPI_SIMPLE, "torch-npu")
                if f.file == "torch_npu-2.7.1.post2-cp311-cp311-manylinux_2_28_aarch64.whl"]
    download(wheel, tmp_path)
    tag = derived(docker_client, stack_base, "ascend-images-test/broken-torch-npu:latest",
                  f"COPY {wheel.file} /tmp/\nRUN PIP_CONSTRAINT= pip install --no-cache-dir --no-compile --no-deps "
                  f"/tmp/{wheel.file} && rm /tmp/{wheel.file}\n", tmp_path)
    failed = failed_checks(docker_client, tag, work_dir)
    assert {"test_torch_npu_loads_and_sees_no_npu", "test_torch_and_torch_npu_pins", "test_pip_check"} <= failed
    assert not {"test_cann_env_is_upstreams", "test_cann_layout_is_upstreams", "test_labels"} & failed


def test_an_allocator_that_does_not_load_is_caught(docker_client, ci_images, work_dir, tmp_path):
    """A serving image whose LD_PRELOAD names a library that is not there (the soname of another jemalloc): every
    process still starts, ld.so only complains, so only the allocator checks can see it."""
    serving = next(tag for tag in ci_images if "/vllm-ascend:" in tag)
    env = dict(e.split("=", 1) for e in docker_client.images.get(serving).attrs["Config"]["Env"])
    assert env["LD_PRELOAD"].endswith("/libjemalloc.so.2")
    tag = derived(docker_client, serving, "ascend-images-test/broken-allocator:latest",
                  f"ENV LD_PRELOAD={env['LD_PRELOAD'][:-2]}.1\n", tmp_path)
    failed = failed_checks(docker_client, tag, work_dir, ["-k", "allocator or test_labels or test_pip_check"])
    assert {"test_allocator_is_preloaded", "test_tools_work_with_the_allocator_preloaded"} <= failed
    assert not {"test_labels", "test_pip_check"} & failed, failed


def test_a_gap_no_lock_header_explains_is_caught(docker_client, ci_images, work_dir, tmp_path):
    """CI's vLLM image installs triton-ascend 3.2.2 --no-deps, as upstream does (the lock's `off-pypi` header): what
    that package itself requires is not installed, and test_pip_check accepts exactly that. Given a requirement it
    does not meet, the image still passes; with the header line gone, the very same installed packages fail."""
    serving = next(tag for tag in ci_images if "/vllm-ascend:" in tag)
    lock = docker_client.containers.run(serving, "cat /etc/ascend-images/locks/vllm-aarch64.txt", remove=True,
                                        entrypoint="").decode()
    assert "\n# off-pypi: triton-ascend==3.2.2 " in lock, "CI's vLLM image installs nothing --no-deps any more"
    where = "python -c \"import importlib.metadata as m; print(m.distribution('triton-ascend')._path)\""
    # a header line, after Version: (appended at the end it would be the description's text)
    gap = f"RUN sed -i '/^Version: /a Requires-Dist: ascend-made-up-compiler>=1' \"$({where})/METADATA\"\n"
    (tmp_path / "2").mkdir()
    explained = derived(docker_client, serving, "ascend-images-test/no-deps-gap:latest", gap, tmp_path)
    unexplained = derived(docker_client, explained, "ascend-images-test/no-deps-gap-unexplained:latest",
                          "RUN sed -i '/^# off-pypi: /d' /etc/ascend-images/locks/vllm-aarch64.txt\n", tmp_path / "2")
    try:
        ok = run_image_suite(explained, work_dir, ["-k", "test_pip_check or test_labels"])
        bad = run_image_suite(unexplained, work_dir, ["-k", "test_pip_check or test_labels"])
    finally:
        docker_client.images.remove(unexplained, force=True)
        docker_client.images.remove(explained, force=True)
    assert not ok.failed, ok.failed
    assert "test_pip_check" in bad.failed and "test_labels" not in bad.failed, bad.failed


def test_another_devices_vllm_ascend_build_is_caught(docker_client, ci_images, work_dir, tmp_path):
    """CI's A3 vLLM-Ascend image with its build record replaced by the one PyPI's wheel carries (`__device_type__ =
    'A2'`, written out from vllm_ascend-0.23.0-cp311-cp311-manylinux_2_34_aarch64.whl): what the A3 image held before
    it was built for its chip. vLLM-Ascend's own start-up check stops it on A3's chip, and the check says so; the
    rest of the stack still loads."""
    a3 = next(tag for tag in ci_images if "/vllm-ascend:" in tag and "-a3-" in tag)
    where = "python -c \"import importlib.util as u; print(u.find_spec('vllm_ascend').submodule_search_locations[0])\""
    a2_record = "# Auto-generated file\\n__device_type__ = 'A2'\\n"
    tag = derived(docker_client, a3, "ascend-images-test/broken-device-build:latest",
                  f"RUN printf \"{a2_record}\" >\"$({where})/_build_info.py\"\n", tmp_path)
    failed = failed_checks(docker_client, tag, work_dir,
                           ["-k", "device_check or test_backend_loads or test_labels"])
    assert "test_vllm_ascends_own_device_check_passes_on_the_images_chip_only" in failed, failed
    assert not {"test_backend_loads", "test_labels"} & failed, failed
