"""End to end on a real Docker engine: the images CI tests, built first by README's command 2 (one bake), then
checked; and builds of a test's own that fail or stop before anything is built."""

from __future__ import annotations

import io
import json
import re
import tarfile
from pathlib import Path

import pytest

from ascend_images.cli.build import build_selection
from ascend_images.cli.options import InputFlags, Selection, SourceFlags
from ascend_images.errors import BuildError
from tests.conftest import (
    LEAK_MARKER_PREFIX,
    ROOT,
    TEST_ARCH,
    TEST_DOCKER_ARCH,
    TEST_NAMESPACE,
    image_history,
)
from tests.fixtures.matrices import matrix_copy
from tests.fixtures.saved_layers import uncompressed

pytestmark = [pytest.mark.docker, pytest.mark.slow]
# what a build must never leave in a layer: installers, build-helper temp dirs, pip config, netrc
LEFTOVER = re.compile(r"(\.run$|/\.ascend-build\.|/\.cann\.|pip\.conf$|netrc$)")


def run(client, image, cmd, **kwargs):
    """Output of `cmd` in a fresh container, bypassing the entrypoint like `docker exec` would."""
    out = client.containers.run(image, cmd, entrypoint=[], remove=True, stderr=True, **kwargs)
    return out.decode()


def test_one_bake_builds_each_shared_stage_once(ci_build):
    """Every image CI tests came out of one bake, each stage of the plan once: one base for every chain (one OS,
    Python and arch), one CANN 9.1.0 torch image of A3 under its none, vllm, verl, ROLL and overlay images."""
    kinds = [r.kind for r in ci_build.results]
    assert kinds.count("base") == 1, kinds
    base = next(s for s in ci_build.plan.stages if s.kind == "base")
    assert {v.device for v in base.users} == {"a2", "a3", "a5"}  # matrix.yaml ci.test: every device's chain
    assert {v.release_name for v in base.users} >= {"cann8.3.rc1-sglang0.5.8", "cann9.1.0-pt2.10.0"}
    torch = [s for s in ci_build.plan.stages if s.kind == "torch" and s.variant.device == "a3"
             and s.variant.release.cann == "9.1.0"]
    assert len(torch) == 1 and {v.backend for v in torch[0].users} == {"none", "vllm"}
    assert len({r.tag for r in ci_build.results}) == len(ci_build.results)


def test_labels(docker_client, ci_build):
    for variant, top in ci_build.plan.tops.items():
        labels = docker_client.images.get(top.tag).labels
        assert labels["io.ascend-images.device"] == variant.device
        assert labels["io.ascend-images.cann"] == variant.release.cann
        assert labels["io.ascend-images.hdk-floor"] == str(variant.hdk_floor)
        assert labels["io.ascend-images.torch"] == variant.torch
        assert labels["io.ascend-images.torch-npu"] == variant.torch_npu
        assert labels["io.ascend-images.backend"] == variant.backend
        pins = variant.backend_pins
        version = {"none": variant.torch_npu, "vllm": getattr(pins, "vllm_ascend", None),
                   "sglang": getattr(pins, "sglang", None)}[variant.backend]
        if variant.framework != "none":  # what the framework stage adds, over which backend
            version = f"{variant.framework_pins.version}-{variant.backend}{version}"
            assert labels["io.ascend-images.framework"] == variant.framework
        assert labels["org.opencontainers.image.version"] == version
        assert labels["org.opencontainers.image.created"]
        # written out by hand: where this definition lives (registries and update tools link an image to it by this)
        assert labels["org.opencontainers.image.source"] == "https://github.com/ascend-images/ascend-images"
        assert docker_client.images.get(top.tag).attrs["Architecture"] == variant.arch_spec.debian_arch


def test_env_visible_without_a_shell_profile(docker_client, ci_build):
    for variant, top in ci_build.plan.tops.items():
        out = run(docker_client, top.tag, ["/usr/bin/env"])
        env = dict(line.split("=", 1) for line in out.splitlines() if "=" in line)
        assert env["ASCEND_HOME_PATH"] == variant.cann_home
        assert env["ASCEND_OPP_PATH"].endswith("/opp")
        assert env["ATB_HOME_PATH"].endswith("/cxx_abi_1")
        assert f"{variant.cann_home}/lib64" in env["LD_LIBRARY_PATH"].split(":")
        # SOC_VERSION only where vLLM-Ascend, which reads it, is (vllm_ascend/envs.py)
        assert env.get("SOC_VERSION") == (variant.device_spec.soc_version if variant.backend == "vllm" else None)
        assert env["ASCEND_IMAGES_HDK_FLOOR"] == str(variant.hdk_floor)
        assert env["PIP_CONSTRAINT"] == "/etc/ascend-images/constraints.txt"


def test_torch_and_torch_npu_versions(docker_client, ci_build):
    code = ("import importlib.metadata as m, json; "
            "print(json.dumps({p: m.version(p) for p in ('torch', 'torch-npu')}))")
    for variant, top in ci_build.plan.tops.items():
        versions = json.loads(run(docker_client, top.tag, ["python", "-c", code]))
        assert versions["torch"].split("+")[0] == variant.torch
        assert versions["torch-npu"] == variant.torch_npu


class MarkerScan(io.RawIOBase):
    """A file object that reads through `raw` and remembers whether `marker` went by (across read boundaries)."""

    def __init__(self, raw, marker: bytes):
        import hashlib

        self.raw, self.marker, self.tail, self.found = raw, marker, b"", False
        self.sha256 = hashlib.sha256()  # of a layer.tar: its diff-id

    def readable(self) -> bool:
        return True

    def readinto(self, buffer) -> int:
        data = self.raw.read(len(buffer))
        if data:
            self.sha256.update(data)
            self.found = self.found or self.marker in self.tail + data
            self.tail = data[-len(self.marker):]
            buffer[:len(data)] = data
        return len(data)


def scanned_clean_record() -> Path:
    """The diff-ids of layers this host has scanned and found clean. A diff-id is the sha256 of the layer's content,
    so its verdict never changes; the record is keyed by what is looked for, and lives beside the wheel store (a CI
    run is a fresh clone: a record in the checkout would be gone)."""
    import hashlib

    from ascend_images.inputs.download import host_cache

    key = hashlib.sha256(f"{LEAK_MARKER_PREFIX}\n{LEFTOVER.pattern}".encode()).hexdigest()[:16]
    return host_cache("test") / f"layers-scanned-clean-{key}.txt"


def test_every_ci_image_is_built_by_buildkit(docker_client, ci_images):
    """Each history entry above the OS image (an import, by debootstrap) says BuildKit's Dockerfile frontend made it:
    no step of any CI image comes from the legacy builder (whose entries carry no such comment)."""
    for tag in ci_images:
        history = image_history(docker_client, tag)  # newest first; the last: the OS image, one imported layer
        ours = history[:-1]
        assert ours and {entry.get("Comment") for entry in ours} == {"buildkit.dockerfile.v0"}, \
            (tag, [(entry.get("Comment"), entry.get("CreatedBy", "")[:60]) for entry in ours
                   if entry.get("Comment") != "buildkit.dockerfile.v0"])


def test_no_secret_left_where_the_build_ran(ci_build, build_secrets):
    """The build wrote its secrets to files of its own and removed them: nothing under its work directory (the
    contexts, the definition, the inputs, the logs, the report) holds the marker."""
    from tests.fixtures.ci_images import WORK

    files = [p for p in (ROOT / WORK).rglob("*") if p.is_file() and not p.is_symlink()]
    assert any(p.name == "docker-bake.json" for p in files) and any(p.suffix == ".log" for p in files)
    marker = str(build_secrets["marker"]).encode()
    assert [p for p in files if p.stat().st_size < 1 << 30 and marker in p.read_bytes()] == []


def test_no_secret_in_layers_or_history(docker_client, ci_images, build_secrets):
    """The marker in the CA bundle and netrc given to the builds is in no layer and no history entry, and no
    installer or build-time config is left in a layer. One `docker save` of every CI image with a layer this host has
    not scanned clean yet (shared layers once), read as a stream: nothing is held in memory but the current block;
    each layer's sha256 is taken on the way, so a clean one is recorded by its diff-id and never read again."""
    import subprocess

    ca_text = build_secrets["ca"].read_text()
    # a line of the extra bundle that Debian's own ca-certificates does not have: the marker
    assert LEAK_MARKER_PREFIX in ca_text
    diff_ids = {}
    for tag in ci_images:
        image = docker_client.images.get(tag)
        for entry in image_history(docker_client, tag):
            assert LEAK_MARKER_PREFIX not in entry.get("CreatedBy", ""), tag
            assert "ca-bundle.pem" not in entry.get("CreatedBy", "")
        diff_ids[tag] = image.attrs["RootFS"]["Layers"]
    record = scanned_clean_record()
    clean = set(record.read_text().split()) if record.is_file() else set()
    to_scan = [tag for tag in ci_images if not set(diff_ids[tag]) <= clean]
    if not to_scan:
        return  # every layer of every CI image was read and found clean on this host before
    save = subprocess.Popen(["docker", "save", *to_scan], stdout=subprocess.PIPE)
    scanned: set[str] = set()
    with tarfile.open(fileobj=save.stdout, mode="r|") as outer:
        for member in outer:
            if not member.isfile():
                continue
            # the marker and the diff-id are the uncompressed content's
            scan = MarkerScan(uncompressed(outer.extractfile(member)), LEAK_MARKER_PREFIX.encode())
            is_layer = False
            if member.name.endswith("layer.tar") or member.name.startswith("blobs/"):
                try:
                    with tarfile.open(fileobj=io.BufferedReader(scan, 1 << 20), mode="r|") as layer:
                        leftovers = [m.name for m in layer if LEFTOVER.search(m.name)]
                    is_layer = True
                except tarfile.ReadError:
                    leftovers = []
                assert not leftovers, f"{member.name}: {leftovers}"
            while scan.read(1 << 20):  # the rest (a tar's padding, or a file that is no tar)
                pass
            assert not scan.found, f"marker found in {member.name}"
            if is_layer:
                scanned.add(f"sha256:{scan.sha256.hexdigest()}")
    assert save.wait() == 0
    # every layer of the saved images was read (so the scan really read layers, and each one by its diff-id)
    missing = {d for tag in to_scan for d in diff_ids[tag]} - scanned
    assert not missing, f"layers of {to_scan} not read by the scan: {sorted(missing)}"
    record.parent.mkdir(parents=True, exist_ok=True)
    record.write_text("".join(f"{d}\n" for d in sorted(clean | scanned)))


def test_failing_step_reports_log_and_sets_no_tag(docker_client, tmp_path, fake_cann_dir, build_secrets,
                                                  work_dir, ci_build):
    """A CANN installer that fails: the stage says where, shows the log's tail and its path, and gets no tag, nor
    does any stage over it; the stage below it (the base, taken from the cache) is kept."""
    import shutil

    from tests.conftest import with_own_cann_stages

    matrix = with_own_cann_stages(matrix_copy(tmp_path / "m", locks=True), tmp_path / "own")
    cann = tmp_path / "cann"
    shutil.copytree(fake_cann_dir, cann)
    (toolkit,) = cann.glob("Ascend-cann-toolkit_9.1.0_*.run")
    toolkit.write_text("#!/bin/sh\necho 'this installer is broken on purpose (marker-4711)' >&2\nexit 3\n")
    sel = Selection(matrix=str(matrix), device="a3", backend="none", release="cann9.1.0-pt2.10.0", arch=TEST_ARCH)
    lines: list[str] = []
    namespace = f"{TEST_NAMESPACE}-failing"
    with pytest.raises(BuildError) as err:
        build_selection(sel, SourceFlags(cann_dir=str(cann)), InputFlags(ca_bundle=str(build_secrets["ca"])),
                        lines.append, work_dir=work_dir / "failing", namespace=namespace)
    text = str(err.value)
    assert "[2/4 cann-install]" in text and "failed at step" in text
    assert "marker-4711" in text  # the log's tail
    log = re.search(r"full log: (\S+)", text).group(1)
    with open(log) as handle:
        assert "marker-4711" in handle.read()
    suffix = f"9.1.0-a3-debian12-py3.11-{TEST_DOCKER_ARCH}"
    unfinished = [f"{namespace}/cann-install:{suffix}", f"{namespace}/cann:{suffix}",
                  f"{namespace}/torch-npu:2.10.0.post4-cann{suffix}"]
    assert f"(no tag was set for {', '.join(unfinished)})" in text
    from tests.conftest import remove_tags

    try:
        for tag in unfinished:
            assert not docker_client.images.list(name=tag), tag
        # the stage below it is CI's base, taken from the cache and named
        base = docker_client.api.inspect_image(f"{namespace}/base:debian12-py3.11-{TEST_DOCKER_ARCH}")["Id"]
        assert base == next(r.image_id for r in ci_build.results if r.kind == "base")
    finally:
        remove_tags(docker_client, f"{namespace}/")


def test_stale_lock_stops_the_build_before_any_stage(docker_client, tmp_path, fake_cann_dir, build_secrets):
    from ascend_images.inputs.lockfile import LockError

    def other_triton(data: dict) -> None:
        data["releases"]["cann8.5.0-pt2.8.0"]["backends"]["vllm"]["triton_ascend"] = "3.2.1"

    matrix_copy(tmp_path, other_triton, locks=True)
    lines: list[str] = []
    sel = Selection(matrix=str(tmp_path / "matrix.yaml"), device="a2", backend="vllm",
                        release="cann8.5.0-pt2.8.0", arch=TEST_ARCH)
    flags = SourceFlags(cann_source="local", cann_dir=str(fake_cann_dir))
    inputs = InputFlags(ca_bundle=str(build_secrets["ca"]))
    namespace = "ascend-images-stale-lock-test"
    with pytest.raises(LockError, match=r"vllm-aarch64.txt is stale.*invoke lock --layer backend --release "
                                        r"cann8.5.0-pt2.8.0"):
        build_selection(sel, flags, inputs, lines.append, work_dir=tmp_path, namespace=namespace)
    assert not [line for line in lines if "building" in line or "cache" in line], lines
    assert docker_client.images.list(name=f"{namespace}/*") == []


def test_overlays_rebuild_nothing_below_and_carry_their_settings(docker_client, ci_build):
    """Choosing a profile, an allocator and a build-time --env adds one thin image on the shared chain: the overlay's
    parent is the very torch stage the plain images have."""
    overlays = [(v, top) for v, top in ci_build.plan.tops.items() if top.kind == "overlay"]
    assert len(overlays) == 1
    ((variant, top),) = overlays
    plain = next(t for v, t in ci_build.plan.tops.items() if t.kind == "torch" and v.device == variant.device
                 and v.release_name == variant.release_name)
    assert top.parent is plain
    env = run(docker_client, top.tag, ["/usr/bin/env"]).splitlines()
    # ref000's debug set, written out by hand
    for line in ("ASCEND_GLOBAL_LOG_LEVEL=0", "ASCEND_SLOG_PRINT_TO_STDOUT=1", "ASCEND_LAUNCH_BLOCKING=1"):
        assert line in env, env
    assert "OMP_NUM_THREADS=8" in env and "HCCL_CONNECT_TIMEOUT=3600" in env
    # --allocator tcmalloc on a backend that preloads nothing: ref004 2.2's library, Debian's soname
    assert f"LD_PRELOAD=/usr/lib/{TEST_ARCH}-linux-gnu/libtcmalloc.so.4" in env, env
