from ascend_images.bench import TARGETS, table, verdicts
from tests.conftest import ROOT


def report(**over):
    base = {
        "targets": TARGETS, "cold_seconds": 600.0, "alone_seconds": [500.0, 550.0], "alone_measured": True,
        "shared_speedup": 1.75, "noop_seconds": 6.0, "noop_fraction": 0.01,
        "incremental": {"seconds": 90.0, "rebuilt": ["a", "b"], "expected": ["a", "b"], "only_affected": True},
        "dive": {"ns/x:tag": 0.99}, "sizes": {"ns/x:tag": {"image_mb": 1400.0, "own_layers_mb": 500.0}},
        "startup_ms": {"overhead_ms": {"ns/x:tag": 12.0}},
    }
    base.update(over)
    return base


def test_verdicts_report_hits_and_misses():
    v = verdicts(report())
    assert v == {"noop_within_3pct": True, "incremental_only_affected": True, "shared_at_least_1_8x": False,
                 "dive_at_least_0_98": True, "startup_within_30ms": True}
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

    from ascend_images.bench import BenchSetup, _plan, alone_namespace
    from ascend_images.inputs.sources import CannSource

    settings = SimpleNamespace(sources=SimpleNamespace(cann=CannSource("url", strict=False)))
    selection = {"device": "a3", "backend": "vllm,sglang", "release": "cann8.5.0-pt2.8.0", "arch": "aarch64"}
    setup = BenchSetup(None, settings, ROOT / "matrix.yaml", selection, {}, "ascend-images-bench", print)
    plan, variants = _plan(setup)
    shared = [s.tag for s in plan.stages if s.kind in ("base", "cann-install", "cann", "torch")]
    assert len(variants) == 2 and len(shared) == 4, [s.tag for s in plan.stages]
    for v in variants:
        alone, _ = _plan(setup, namespace=alone_namespace(setup.namespace), device=v.device, backend=v.backend,
                         arch=v.arch, release=v.release_name)
        tags = {s.tag for s in alone.stages}
        assert len(tags) == 5 and not tags & {s.tag for s in plan.stages}, tags


def test_the_incremental_matrix_keeps_the_locks_beside_it(tmp_path):
    """The incremental step's matrix (one env default changed) lives in a directory of its own; a backend variant
    of it must still find its lock (the first A3 vLLM + SGLang bench stopped there: no lock beside the copy)."""
    from ascend_images.bench import matrix_with_env_default
    from ascend_images.inputs.lockfile import load_lock
    from ascend_images.matrix.envs import effective_env
    from ascend_images.matrix.model import load_matrix, select

    changed = matrix_with_env_default(ROOT / "matrix.yaml", tmp_path, "a3", "SOC_VERSION", "Ascend910_9391x")
    matrix = load_matrix(changed)
    assert matrix.path.parent == tmp_path
    (variant,) = select(matrix, device="a3", backend="vllm", release="cann8.5.0-pt2.8.0", arch="aarch64")
    assert effective_env(variant)["SOC_VERSION"].value == "Ascend910_9391x"
    assert load_lock(variant).pins["vllm-ascend"] == "0.13.0"
