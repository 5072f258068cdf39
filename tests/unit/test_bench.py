import os

import pytest

from dev.bench.run import PHASES, TARGETS, table, verdicts
from tests.conftest import ROOT


def report(**over):
    base = {
        "targets": TARGETS, "cold_seconds": 600.0, "alone_seconds": [500.0, 550.0], "alone_measured": True,
        "shared_speedup": 1.75, "noop_seconds": 6.0, "noop_fraction": 0.01,
        "incremental": {"seconds": 90.0, "rebuilt": ["a", "b"], "expected": ["a", "b"], "only_affected": True},
        "dive": {"ns/x:tag": 0.99}, "sizes": {"ns/x:tag": {"image_mb": 1400.0, "own_layers_mb": 500.0}},
        "startup_ms": {"overhead_ms": {"ns/x:tag": 12.0}}, "phases": list(PHASES),
        "downloads": {"stages": [{"tag": "t", "wanted": 30, "downloaded": 30}, {"tag": "v", "wanted": 20,
                                                                                "downloaded": 5}],
                      "wanted_total": 50, "downloaded": 35, "distinct_stored": 35, "each_once": True},
    }
    base.update(over)
    return base


def test_verdicts_report_hits_and_misses():
    v = verdicts(report())
    assert v == {"noop_within_3pct": True, "incremental_only_affected": True, "shared_at_least_1_8x": False,
                 "dive_at_least_0_98": True, "startup_within_30ms": True, "fleet_within_10pct": None,
                 "install_within_0_25_of_pip": None, "each_wheel_downloaded_once": True,
                 "rebuild_same_digest": None}
    v = verdicts(report(noop_fraction=0.05, dive={"ns/x:tag": None}, startup_ms={"overhead_ms": {"t": 45.0}}))
    assert v["noop_within_3pct"] is False and v["dive_at_least_0_98"] is None and v["startup_within_30ms"] is False


def test_table_prints_figures_and_verdicts():
    r = report()
    r["verdicts"] = verdicts(r)
    text = table(r)
    assert "shared-stage speed-up" in text and "1.75x (target >= 1.8x)" in text
    assert "target shared_at_least_1_8x" in text and "MISSED" in text
    assert "1.00% of cold" in text
    assert "DERIVED" not in text


def test_quick_figures_say_they_are_derived():
    r = report(alone_measured=False)
    r["verdicts"] = verdicts(r)
    lines = {line.split("  ", 1)[0]: line for line in table(r).splitlines()}
    assert "DERIVED from stage times" in lines["each variant alone (sum)"]
    assert "DERIVED" in lines["shared-stage speed-up"]
    assert "DERIVED" not in lines["no-op rebuild"]


def test_each_variant_alone_is_built_under_tags_of_its_own():
    """The alone builds are forced: under the selection's tags they would move the shared stages' tags to new images,
    and the no-op rebuild that follows would rebuild every child of them (it did: the vLLM stage, 12 min)."""
    from types import SimpleNamespace

    from ascend_images.inputs.sources import CannSource
    from dev.bench.run import _plan, alone_namespace
    from dev.bench.setup import BenchSetup

    settings = SimpleNamespace(sources=SimpleNamespace(cann=CannSource("url", strict=False)))
    selection = {"device": "a3", "backend": "vllm,sglang", "release": "cann8.5.0-pt2.8.0", "arch": "aarch64"}
    setup = BenchSetup(None, settings, ROOT / "matrix.yaml", selection, {}, "ascend-images-bench", print)
    plan, variants = _plan(setup)
    shared = [s.tag for s in plan.stages if s.kind in ("base", "cann-install", "cann", "torch")]
    assert len(variants) == 2 and len(shared) == 4, [s.tag for s in plan.stages]
    for v in variants:
        alone, _ = _plan(setup, namespace=alone_namespace(setup.namespace), device=v.device, backend=v.backend,
                         arch=v.arch, release=v.release_name)
        tags = {s.tag for s in alone.stages if s.kind != "installer"}  # the host's tool: built once, whatever runs
        assert len(tags) == 5 and not tags & {s.tag for s in plan.stages}, tags


def test_the_incremental_matrix_keeps_the_locks_beside_it(tmp_path):
    """The incremental step's matrix (one env default changed) lives in a directory of its own; a backend variant
    of it must still find its lock (the first A3 vLLM + SGLang bench stopped there: no lock beside the copy)."""
    from ascend_images.inputs.lockspec import load_lock
    from ascend_images.matrix.envs import effective_env
    from ascend_images.matrix.model import load_matrix
    from ascend_images.matrix.selection import select
    from dev.bench.run import matrix_with_env_default

    changed = matrix_with_env_default(ROOT / "matrix.yaml", tmp_path, "a3", "SOC_VERSION", "Ascend910_9391x")
    matrix = load_matrix(changed)
    assert matrix.path.parent == tmp_path
    (variant,) = select(matrix, device="a3", backend="vllm", release="cann8.5.0-pt2.8.0", arch="aarch64")
    assert effective_env(variant)["SOC_VERSION"].value == "Ascend910_9391x"
    assert load_lock(variant).pins["vllm-ascend"] == "0.13.0"


# --- the fleet figure: a second engine's build with the stage cache warm, as a fraction of the cold build ----------
def fleet(built=0, cached=4, seconds=30.0, **over):
    """A report whose cold build took 600 s and whose second engine took `seconds` with the stage cache warm."""
    return report(stage_cache="localhost:5000/cache", fleet_engine="scratch dockerd on this host",
                  fleet_seconds=seconds, fleet_fraction=round(seconds / 600.0, 4),
                  fleet_statuses={"built": built, "cached": cached}, fleet_error=None, **over)


def rows(r) -> dict[str, str]:
    r["verdicts"] = verdicts(r)
    return {line.split("  ", 1)[0].strip(): line.split("  ", 1)[1].strip() for line in table(r).splitlines()}


def test_fleet_figure_met_when_only_transfer_within_10pct_of_cold():
    r = fleet()
    assert verdicts(r)["fleet_within_10pct"] is True
    shown = rows(r)
    assert shown["fleet build (2nd engine, cache warm)"] == \
        "30.0 s = 5.00% of cold: 4 cached, 0 built (target <= 10%, nothing built)"
    assert shown["target fleet_within_10pct"] == "met"


def test_fleet_figure_missed_when_the_second_engine_built_anything():
    """Fast is not enough: a stage built there means the cache did not hold it, so the figure is not a transfer."""
    r = fleet(built=1, cached=3, seconds=42.0)
    assert verdicts(r)["fleet_within_10pct"] is False
    assert rows(r)["target fleet_within_10pct"] == "MISSED"
    assert "3 cached, 1 built" in rows(fleet(built=1, cached=3))["fleet build (2nd engine, cache warm)"]


def test_fleet_figure_missed_over_10pct_or_on_error():
    assert verdicts(fleet(seconds=66.0))["fleet_within_10pct"] is False  # 11% of cold, all pulled
    assert verdicts(fleet(seconds=60.0))["fleet_within_10pct"] is True  # 10% exactly: at most 10%
    failed = {**fleet(), "fleet_seconds": None, "fleet_fraction": None, "fleet_statuses": None,
              "fleet_error": "the scratch dockerd exited (1): ..."}
    assert verdicts(failed)["fleet_within_10pct"] is False
    assert rows(failed)["fleet build (2nd engine, cache warm)"].startswith("failed: the scratch dockerd exited")


def test_fleet_figure_not_measured_without_a_stage_cache():
    r = report()  # no stage_cache key at all, as a bench without --stage-cache (or an older bench.json) has
    assert verdicts(r)["fleet_within_10pct"] is None
    shown = rows(r)
    assert shown["fleet build (2nd engine, cache warm)"] == "not measured (needs --stage-cache)"
    assert shown["target fleet_within_10pct"] == "not measured"
    assert TARGETS["fleet_fraction_max"] == 0.10


# --- downloads, the install phase and --only --------------------------------------------------------------------------
def test_downloads_are_each_once_when_the_fetches_equal_the_distinct_files(tmp_path):
    from dev.bench.run import downloads

    store = tmp_path / "store"
    for key in ("a" * 64, "b" * 64, "c" * 64):
        (store / key).mkdir(parents=True)
    (store / ".downloads").mkdir()  # the staging directory is no stored file

    shared = downloads({"wanted": 4, "downloaded": 3}, 3, store)
    assert shared == {"stages": 3, "wanted_total": 4, "downloaded": 3, "distinct_stored": 3, "each_once": True}
    # a file fetched twice: more downloads than files stored
    assert downloads({"wanted": 4, "downloaded": 4}, 3, store)["each_once"] is False


def install_figures(native_s):
    return {"stage": "ns/sglang:t", "wheels": 149, "pip_compile_s": 300.0, "pip_no_compile_s": 120.0,
            "uv_target_compile_s": 180.0, "uv_target_s": 12.0, "native_install_s": 5.5,
            "native_bytecode_s": native_s - 5.5, "native_s": native_s, "native_fraction_of_pip": native_s / 300.0,
            "target_fraction_max": 0.25}


@pytest.mark.parametrize(("native_s", "verdict"), [(39.0, "met"), (75.0, "met"), (75.3, "MISSED")])
def test_the_native_install_is_held_to_a_quarter_of_pip(native_s, verdict):
    r = report(install=install_figures(native_s), **{"import": {"with_pyc_s": 4.1, "without_pyc_s": 19.5}})
    shown = rows(r)
    assert shown["target install_within_0_25_of_pip"] == verdict
    assert shown["install: uv, no .pyc"] == "12.0 s = 0.04 of pip"
    assert shown["first import torch, torch_npu"] == "4.1 s with .pyc, 19.5 s without"


def test_phases_not_run_are_not_measured_and_not_shown():
    r = {"targets": TARGETS, "phases": ["incremental"],
         "incremental": {"seconds": 9.0, "rebuilt": [], "expected": [], "only_affected": True}}
    shown = rows(r)
    assert shown["incremental rebuild"] == "9.0 s, 0 stage(s), only affected: True"
    assert "cold build (selection)" not in shown and "fleet build (2nd engine, cache warm)" not in shown
    assert [k for k, ok in r["verdicts"].items() if ok is not None] == ["incremental_only_affected"]


@pytest.mark.parametrize(("only", "expected"), [
    (None, PHASES), ("install", ("install",)), ("install, cold,noop", ("cold", "noop", "install")),
])
def test_only_picks_phases_in_the_bench_order(only, expected):
    from dev.benchmark import bench_phases

    assert bench_phases(only) == expected


@pytest.mark.parametrize(("only", "message"), [
    ("instal", "--only 'instal': 'instal' is not a phase; the phases: cold, rebuild, warm, fleet, pull, alone, "
               "noop, incremental, sizes, startup, install"),
    ("noop", "--only 'noop': noop is measured against the cold build; add it: --only cold,noop"),
    ("install,", "--only 'install,': '' is not a phase"),
])
def test_only_refuses_what_it_cannot_run(only, message):
    from ascend_images.errors import SelectionError
    from dev.benchmark import bench_phases

    with pytest.raises(SelectionError) as caught:
        bench_phases(only)
    assert str(caught.value).startswith(message)


def test_the_only_flags_help_names_every_phase():
    """--help is where a user learns the phases: each one the bench runs is named there."""
    from dev.bench.run import PHASES
    from dev.benchmark import bench

    text = bench.help["only"]
    assert [phase for phase in PHASES if phase not in text] == []


def test_the_fleet_build_runs_buildx_on_the_fleet_engine(monkeypatch):
    """buildx builds where DOCKER_HOST (or DOCKER_CONTEXT) points, not where the builder's client does: during the
    fleet build they name the fleet engine, and afterwards the bench's own again."""
    from dev.bench.fleet import _builds_on

    monkeypatch.setenv("DOCKER_HOST", "unix:///run/bench.sock")
    monkeypatch.setenv("DOCKER_CONTEXT", "farm")
    with _builds_on("unix:///tmp/ai-fleet-x/docker.sock"):
        assert os.environ["DOCKER_HOST"] == "unix:///tmp/ai-fleet-x/docker.sock"
        assert "DOCKER_CONTEXT" not in os.environ
    assert (os.environ["DOCKER_HOST"], os.environ["DOCKER_CONTEXT"]) == ("unix:///run/bench.sock", "farm")
