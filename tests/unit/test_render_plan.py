import dataclasses
import hashlib
import re
from pathlib import Path

import pytest

from ascend_images.errors import SelectionError
from ascend_images.inputs.sources import ArtifactSource, CannSource, Sources
from ascend_images.matrix.selection import select
from ascend_images.stages.plan import PlanOptions, make_plan, overlay_plan
from ascend_images.stages.render import Renderer, dockerfile_value

from .helpers import ROOT


def fake_cann_dir(tmp_path: Path, files: list[str]) -> Path:
    d = tmp_path / "cann"
    d.mkdir(exist_ok=True)
    for f in files:
        (d / f).write_text(f"payload of {f}")
    return d


def render_all(matrix, tmp_path, sources, **select_kwargs):
    variants = select(matrix, **select_kwargs)
    plan = make_plan(variants, PlanOptions(sources.cann))
    renderer = Renderer()
    out = {}
    for stage in plan.stages:
        record = renderer.record(stage, sources)
        out[stage.kind + ":" + stage.variant.device] = renderer.write(stage, tmp_path / "ctx", record)
    return plan, out


def url_sources():
    return Sources(CannSource("url", strict=False), ArtifactSource(strict=False))


def test_shared_stages_are_planned_once(matrix):
    variants = select(matrix, device="a2,a3", backend="none,vllm,sglang", release="cann8.5.0-pt2.8.0")
    plan = make_plan(variants, PlanOptions(url_sources().cann))
    kinds = [s.kind for s in plan.stages]
    assert kinds.count("base") == 1
    assert kinds.count("cann") == 2  # one per device, shared by none, vllm and sglang
    assert kinds.count("torch") == 2
    assert kinds.count("vllm") == 2 and kinds.count("sglang") == 2
    a3_cann = next(s for s in plan.stages if s.kind == "cann" and s.variant.device == "a3")
    assert {v.backend for v in a3_cann.users} == {"none", "vllm", "sglang"}
    for stage in plan.stages:  # parents first
        if stage.parent:
            assert plan.stages.index(stage.parent) < plan.stages.index(stage)


def test_overlay_only_for_nondefault_profile_or_env(matrix):
    (prod,) = select(matrix, device="a3")
    (debug,) = select(matrix, device="a3", profile="debug")
    plan = make_plan([prod, debug], PlanOptions(url_sources().cann))
    assert plan.top(prod).kind == "torch"
    assert plan.top(debug).kind == "overlay" and plan.top(debug).tag.endswith("-debug")
    assert plan.top(debug).parent is plan.top(prod)


def test_an_overlay_alone_is_the_whole_plans_overlay_over_an_image(matrix, tmp_path):
    """`run --build`'s plan: one stage whose tag and rendered context are the whole plan's overlay, FROM the
    image below by its tag (so BuildKit's cache keys, which hash both, are the same)."""
    (v,) = select(matrix, device="a3", backend="sglang", release="cann8.5.0-pt2.8.0", arch="aarch64",
                  framework="verl", profile="debug")
    whole = make_plan([v], PlanOptions(url_sources().cann))
    alone = overlay_plan(v, PlanOptions(url_sources().cann))
    (stage,) = alone.stages
    assert stage.tag.startswith("ascend-images/verl:") and stage.tag.endswith("-arm64-debug")
    assert stage.parent is None and stage.parent_ref == stage.tag.removesuffix("-debug")
    assert (stage.kind, stage.tag, stage.parent_ref) == ("overlay", whole.top(v).tag, whole.top(v).parent_ref)
    renderer = Renderer()
    texts = []
    for name, one in (("whole", whole.top(v)), ("alone", stage)):
        record = renderer.record(one, url_sources())
        texts.append(sorted((f.relative_to(tmp_path / name).as_posix(), f.read_bytes())
                            for f in renderer.write(one, tmp_path / name, record).rglob("*") if f.is_file()))
    assert texts[0] == texts[1]
    (plain,) = select(matrix, device="a3", backend="sglang", release="cann8.5.0-pt2.8.0", arch="aarch64")
    with pytest.raises(ValueError, match="has no overlay"):
        overlay_plan(plain, PlanOptions(url_sources().cann))


def test_render_a3_85_local(matrix, tmp_path):
    files = ["Ascend-cann-toolkit_8.5.0_linux-aarch64.run", "Ascend-cann-A3-ops_8.5.0_linux-aarch64.run",
             "Ascend-cann-nnal_8.5.0_linux-aarch64.run"]
    cann = fake_cann_dir(tmp_path, files)
    sources = Sources(CannSource("local", cann), ArtifactSource(strict=False))
    _, ctx = render_all(matrix, tmp_path, sources, device="a3", release="cann8.5.0-pt2.8.0", arch="aarch64")
    install = (ctx["cann-install:a3"] / "Dockerfile").read_text()
    assert install.startswith("# Rendered by ascend-images")
    assert "FROM ascend-images/base:debian12-py3.11-arm64" in install
    sha = hashlib.sha256(b"payload of Ascend-cann-A3-ops_8.5.0_linux-aarch64.run").hexdigest()
    # from the build's named context `cann`, checked against its sha256: a build arg whose default is the file's
    assert f"ARG SHA256_ASCEND_CANN_A3_OPS_8_5_0_LINUX_AARCH64_RUN={sha}\n" in install
    assert ("ops=/run/ascend-images/cann/Ascend-cann-A3-ops_8.5.0_linux-aarch64.run"
            "#${SHA256_ASCEND_CANN_A3_OPS_8_5_0_LINUX_AARCH64_RUN}") in install
    assert "--mount=type=bind,from=cann,target=/run/ascend-images/cann" in install
    assert "kernel/ascend910_93" in install  # the A3 device block
    assert 'io.ascend-images.soc-version="ascend910_9391"' in install
    cann_df = (ctx["cann:a3"] / "Dockerfile").read_text()
    # what CANN 8.5.0's scripts set (matrix.yaml cann.env_sets), checked against them in the same build
    assert 'ASCEND_HOME_PATH="/usr/local/Ascend/cann-8.5.0"' in cann_df
    assert "check-cann-env /tmp/env-scripts /etc/ascend-images/env.json" in cann_df
    # of the tuned layers the cann stage bakes what CANN reads, torch_npu's in the torch stage (DESIGN 26)
    assert 'HCCL_OP_EXPANSION_MODE="AIV"' in cann_df and "TASK_QUEUE_ENABLE" not in cann_df
    assert "SOC_VERSION" not in cann_df  # vLLM-Ascend's build reads it, and this chain ships none
    assert "ENV ASCEND_IMAGES_HDK_FLOOR=25.5.0" in cann_df
    scripts = (ctx["cann:a3"] / "etc/env-scripts").read_text().splitlines()
    assert scripts[1] == "/usr/local/Ascend/cann-8.5.0/share/info/ascendnpu-ir/bin/set_env.sh"
    torch = (ctx["torch:a3"] / "Dockerfile").read_text()
    assert (ctx["torch:a3"] / "constraints.txt").read_text() == "torch==2.8.0\ntorch-npu==2.8.0.post2\n"
    assert "--extra-index-url" not in torch  # aarch64 torch comes from PyPI
    assert 'TASK_QUEUE_ENABLE="2"' in torch and 'HCCL_CONNECT_TIMEOUT="3600"' in torch and "SOC_VERSION" not in torch


def test_render_a2_83_url_x86(matrix, tmp_path):
    sources = Sources(CannSource("url", checksums={
        "Ascend-cann-toolkit_8.3.RC1_linux-x86_64.run": "a" * 64,
        "Ascend-cann-kernels-910b_8.3.RC1_linux-x86_64.run": "b" * 64,
        "Ascend-cann-nnal_8.3.RC1_linux-x86_64.run": "c" * 64}, strict=False), ArtifactSource(strict=False))
    _, ctx = render_all(matrix, tmp_path, sources, device="a2", release="cann8.3.rc1-sglang0.5.8", arch="x86_64")
    install = (ctx["cann-install:a2"] / "Dockerfile").read_text()
    # a download is fetch's (the host's download cache), never the build's: the build takes the file from its `cann`
    # context and checks it against the sha256 the checksums give
    assert f"ARG SHA256_ASCEND_CANN_KERNELS_910B_8_3_RC1_LINUX_X86_64_RUN={'b' * 64}\n" in install
    assert ("ops=/run/ascend-images/cann/Ascend-cann-kernels-910b_8.3.RC1_linux-x86_64.run"
            "#${SHA256_ASCEND_CANN_KERNELS_910B_8_3_RC1_LINUX_X86_64_RUN}") in install
    assert "kernel/ascend910b " in install or "kernel/ascend910b \\" in install
    assert "CANN_DOWNLOAD_REFERER=https://www.hiascend.com/" in install
    # x86_64's torch is PyTorch's CPU build, which no committed lock pins (arches.x86_64.unlocked): a preview says
    # so where the lock would be, and a build stops there
    missing = (ctx["torch:a2"] / "locks" / "LOCK-MISSING").read_text()
    assert "arches.x86_64.unlocked: x86_64's torch is the CPU build on PyTorch's CPU index" in missing
    assert (ctx["torch:a2"] / "constraints.txt").read_text().startswith("torch==2.7.1+cpu\n")
    assert "ascendnpu-ir" not in (ctx["cann:a2"] / "etc/env-scripts").read_text()


def test_render_is_deterministic(matrix, tmp_path):
    _, first = render_all(matrix, tmp_path / "a", url_sources(), device="a3", backend="sglang")
    _, second = render_all(matrix, tmp_path / "b", url_sources(), device="a3", backend="sglang")
    for key, path in first.items():
        a = sorted((p.relative_to(path), p.read_bytes(), p.stat().st_mode) for p in path.rglob("*") if p.is_file())
        b = sorted((p.relative_to(second[key]), p.read_bytes(), p.stat().st_mode)
                   for p in second[key].rglob("*") if p.is_file())
        assert a == b, key


def test_a_context_written_again_has_new_file_times(matrix, tmp_path):
    """BuildKit sends a context's file again only when its size or time changed (moby/buildkit#2592): a file of the
    same size with other content must not keep its time, or the build bakes the old one."""
    import time

    renderer = Renderer()
    (variant,) = select(matrix, device="a3", backend="sglang", arch="aarch64")
    stage = make_plan([variant], PlanOptions(url_sources().cann)).top(variant)
    record = renderer.record(stage, url_sources())
    before = renderer.write(stage, tmp_path, record) / "etc/env.json"
    written = before.stat().st_mtime_ns
    time.sleep(0.05)
    files = {**record.files, "etc/env.json": record.files["etc/env.json"].replace(b"1", b"2")}  # the same size
    after = renderer.write(stage, tmp_path, dataclasses.replace(record, files=files)) / "etc/env.json"
    assert after.read_bytes() == files["etc/env.json"] and after.stat().st_size == len(files["etc/env.json"])
    assert after.stat().st_mtime_ns > written


def test_shared_stage_context_does_not_depend_on_the_release(matrix, tmp_path):
    # the base serves every release on the same OS, Python and arch: its context must be identical
    _, a = render_all(matrix, tmp_path / "a", url_sources(), device="a2", release="cann8.5.0-pt2.8.0")
    _, b = render_all(matrix, tmp_path / "b", url_sources(), device="a2", release="cann8.3.rc1-sglang0.5.8")
    assert (a["base:a2"] / "Dockerfile").read_bytes() == (b["base:a2"] / "Dockerfile").read_bytes()


def test_backend_stage_sets_only_what_it_changes(matrix, tmp_path):
    _, ctx = render_all(matrix, tmp_path, url_sources(), device="a3", backend="vllm", release="cann8.5.0-pt2.8.0")
    df = (ctx["vllm:a3"] / "Dockerfile").read_text()
    # vLLM 0.13.0 has no VLLM_USE_V1 (V0 removed); vLLM-Ascend 0.13.0 reads FLASHCOMM1, the old FLASHCOMM as its
    # fallback, and PREFETCH_MLP, not DENSE_OPTIMIZE (0.11.0 only): vllm_ascend/envs.py at 0.13.0
    assert 'TASK_QUEUE_ENABLE="1"' in df and "VLLM_USE_V1" not in df and "DENSE_OPTIMIZE" not in df
    assert all(f'{name}="1"' in df for name in ("VLLM_ASCEND_ENABLE_FLASHCOMM1", "VLLM_ASCEND_ENABLE_FLASHCOMM",
                                                "VLLM_ASCEND_ENABLE_PREFETCH_MLP"))
    assert 'SOC_VERSION="ascend910_9391"' in df
    assert "HCCL_CONNECT_TIMEOUT" not in df
    # vLLM's sdist (PyPI's sha256, from the wheel store) built on the target with no CUDA, then installed natively
    assert re.search(r"built-wheel \S+ /wheels \\\n +/run/ascend-images/wheels/(4ad43db45fef\w+)#\1 \. - - "
                     r"VLLM_TARGET_DEVICE=empty", df), df
    assert "FROM --platform=$BUILDPLATFORM ${INSTALLER_BASE} AS installer" in df
    assert "FROM installer AS packages" in df and "install-packages /usr/local/python aarch64-manylinux_2_35" in df
    assert "pip-check" in df and "--no-binary" not in df
    install = (ctx["vllm:a3"] / "install.txt").read_text()
    assert "\ntriton-ascend==3.2.0 --hash=sha256:" in install  # PyPI carries 3.2.0: a locked file like any other
    assert (ctx["vllm:a3"] / "locks" / "vllm-aarch64.txt").is_file()


def test_image_source_needs_an_official_os(matrix):
    (v,) = select(matrix, device="a3", os="debian12")
    with pytest.raises(SelectionError, match="no official CANN image for os 'debian12'.*ubuntu22.04"):
        CannSource("image").official_image(v)
    (u,) = select(matrix, device="a3", os="ubuntu22.04", release="cann8.3.rc1-sglang0.5.8")
    assert CannSource("image").official_image(u) == "quay.io/ascend/cann:8.3.rc1-a3-ubuntu22.04-py3.11"


def test_a_build_takes_downloads_from_the_cache_never_the_network(matrix, tmp_path):
    """A build (strict) of a file not fetched yet stops before anything builds, naming it and what fetches it, even
    with its checksum known; once fetched into the cache, it is the build's (its `cann` context)."""
    (v,) = select(matrix, device="a3", release="cann8.5.0-pt2.8.0")
    toolkit = "Ascend-cann-toolkit_8.5.0_linux-aarch64.run"
    with pytest.raises(SelectionError, match=f"{toolkit} is not fetched yet; .*`invoke fetch`"):
        CannSource("url").packages(v)
    with pytest.raises(SelectionError, match=f"{toolkit} is not fetched yet"):
        CannSource("url", checksums={toolkit: "a" * 64}).packages(v)
    cache = fake_cann_dir(tmp_path, list(v.package_files().values()))
    packages = CannSource("url", cache=cache).packages(v)
    assert [p.url for p in packages] == [f"/run/ascend-images/cann/{f}" for f in v.package_files().values()]


def test_local_source_lists_what_is_missing(matrix, tmp_path):
    cann = fake_cann_dir(tmp_path, ["Ascend-cann-toolkit_8.5.0_linux-aarch64.run"])
    (v,) = select(matrix, device="a2", release="cann8.5.0-pt2.8.0")
    with pytest.raises(SelectionError) as err:
        CannSource("local", cann).packages(v)
    assert "Ascend-cann-910b-ops_8.5.0_linux-aarch64.run" in str(err.value)
    assert "it has: Ascend-cann-toolkit_8.5.0_linux-aarch64.run" in str(err.value)


def test_failed_render_leaves_no_directory(matrix, tmp_path, monkeypatch):
    (v,) = select(matrix, device="a3")
    plan = make_plan([v], PlanOptions(url_sources().cann))
    stage = plan.stages[0]
    renderer = Renderer()
    record = renderer.record(stage, url_sources())
    record = dataclasses.replace(record, files={**record.files, "bad/../../escape": b"x"})
    monkeypatch.setattr(Path, "write_bytes", lambda self, data: (_ for _ in ()).throw(OSError("disk full")))
    with pytest.raises(OSError):
        renderer.write(stage, tmp_path, record)
    assert list(tmp_path.iterdir()) == []


def test_dockerfile_value_escapes():
    assert dockerfile_value('a"b$c\\d') == '"a\\"b\\$c\\\\d"'


def test_templates_dir_is_the_repo():
    assert (ROOT / "images" / "a3" / "cann-install.Dockerfile.j2").exists()


def test_a_profile_or_build_time_env_changes_only_the_overlay(tmp_path):
    """Every stage below the overlay renders to the same bytes whatever the profile or --env (found when the
    debug overlay's chain rebuilt its CANN and torch stages: their env.json named the profile)."""
    from ascend_images.matrix.model import load_matrix

    matrix = load_matrix(ROOT / "matrix.yaml")
    sources = Sources(CannSource("url", strict=False), ArtifactSource(strict=False))
    renders = {}
    for name, extra in {"default": {}, "debug": {"profile": "debug"}, "env": {"env": {"OMP_NUM_THREADS": "8"}}}.items():
        (variant,) = select(matrix, device="a3", backend="vllm", arch="aarch64", **extra)
        plan = make_plan([variant], PlanOptions(sources.cann))
        renders[name] = {}
        for stage in plan.stages:
            record = Renderer().record(stage, sources)
            renders[name][stage.kind] = (Renderer().render_text(stage, record), record.files)
    assert "overlay" not in renders["default"]
    for name in ("debug", "env"):
        assert set(renders[name]) == {*renders["default"], "overlay"}
        for kind, rendered in renders["default"].items():
            assert renders[name][kind] == rendered, f"{name}: the {kind} stage differs"


def test_image_tag_needs_no_plan_and_is_the_plans_top(matrix):
    """names.image_tag answers without a plan or a CANN source; a plan's top stage carries the same tag."""
    from ascend_images.matrix.selection import all_variants
    from ascend_images.stages.names import image_tag

    variants = all_variants(matrix) + select(matrix, device="a3", backend="vllm,sglang,none", profile="debug",
                                             allocator="tcmalloc", env={"A": "1"})
    plan = make_plan(variants, PlanOptions(CannSource("url", strict=False), "ns"))
    assert [plan.top(v).tag for v in variants] == [image_tag(v, "ns") for v in variants]
    # written out by hand: the tag scheme README documents, with the versions of the A3 vllm default (moving it
    # changes no test)
    default = matrix.spec.releases[matrix.spec.defaults.release["a3"]["vllm"]]
    (v,) = select(matrix, device="a3", backend="vllm", allocator="none")
    assert image_tag(v, "ns") == (f"ns/vllm-ascend:{default.backends.vllm.vllm_ascend}-cann{default.cann.lower()}"
                                  "-a3-debian12-py3.11-arm64-nopreload")


def test_the_backend_sdist_a_stage_builds_is_among_the_files_the_wheel_store_must_hold(matrix):
    """vLLM's sdist comes from the wheel store (PyPI's file): the builder fills the store with it before the build,
    as with every locked file (the CI build of vLLM 0.23.0 failed on a 404 for it when it was not)."""
    (v,) = select(matrix, device="a3", backend="vllm", release="cann9.1.0-pt2.10.0", arch="aarch64")
    stage = make_plan([v], PlanOptions(CannSource("url", strict=False))).top(v)
    record = Renderer().record(stage, url_sources())
    # PyPI's vllm-0.23.0.tar.gz, sha256 as PyPI's simple index lists it
    sdist = "760269db3d9611e12e524681df1bca0977d5d2f5fcb4481cc34d33efc4ae7ff5"
    assert f"vllm==0.23.0 --hash=sha256:{sdist}" in record.wanted and sdist in record.contexts["wheels"]
    assert f"/run/ascend-images/wheels/{sdist}#{sdist}" in Renderer().render_text(stage, record)
