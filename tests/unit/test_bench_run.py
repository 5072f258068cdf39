"""`invoke bench`'s run (dev/bench/run.py) with fake engines and builds: which build carries the stage cache, where
the fleet build runs, what the rebuild, warm, pull and install phases build, and what stops the bench early."""

import contextlib
import io
import os
from typing import ClassVar

import pytest

from ascend_images.console import Steps
from dev.bench.run import table, verdicts
from tests.conftest import ROOT
from tests.unit.test_bench import install_figures, report


# --- run_bench with fake engines and builds: which build carries the cache, where the fleet build runs ------------
class FakeApi:
    def __init__(self, images=()):
        self.state = [dict(i) for i in images]
        self.removed: list[str] = []

    def images(self, name=None, all=False):
        found = [i for i in self.state if not name or name in i["RepoTags"]]
        return [{**i, "RepoTags": list(i["RepoTags"])} for i in found]  # the engine's answer, not its state

    def remove_image(self, ref):
        self.removed.append(ref)
        for image in self.state:
            if ref in image["RepoTags"]:
                image["RepoTags"].remove(ref)
        self.state = [i for i in self.state if i["RepoTags"]]


class FakeClient:
    def __init__(self, images=()):
        from types import SimpleNamespace

        self.api = FakeApi(images)
        self.version = lambda: {"Version": "fake"}
        self.ping = lambda: True
        self.info = SimpleNamespace


class FakeEngine:
    made: ClassVar[list] = []

    def __init__(self, root, data_root=None, extra_args=()):
        self.root, self.data_root, self.host = root, data_root, f"unix://{root}/docker.sock"
        self.started = self.stopped = False
        FakeEngine.made.append(self)

    def start(self):
        self.started = True

    def stop(self):
        import shutil

        self.stopped = True
        for path in (self.root, self.data_root):
            shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
def fake_bench(monkeypatch, tmp_path):
    """run_bench on fakes: each Builder records the engine it builds on (DOCKER_HOST, as buildx takes it) and its
    settings; a cold build (BuildKit's cache ignored) takes 600 s and builds every stage, a build on the fleet engine
    30 s and takes every stage from the cache, any other build 6 s and takes every stage from the cache."""
    from types import SimpleNamespace

    import dev.bench.fleet as bench_fleet
    import dev.bench.run as bench
    from ascend_images.builder.build import BuildSettings, StageResult
    from ascend_images.inputs.sources import CannSource
    from dev.bench.setup import STEPS, BenchSetup

    clock = [0.0]
    fleet_client = FakeClient([{"Id": "theirs", "RepoTags": ["someone/else:1"]}])
    builders, loaded, lines = [], [], []
    state = SimpleNamespace(builders=builders, loaded=loaded, lines=lines, fleet_client=fleet_client, fail=None,
                            host_client=FakeClient(), clock=clock)

    class FakeBuilder:
        def __init__(self, settings, out=None):
            self.settings = settings
            self.host = os.environ.get("DOCKER_HOST")
            self.on_fleet = any(self.host == engine.host for engine in FakeEngine.made)
            builders.append(self)

        @contextlib.contextmanager
        def workspace(self, plan):
            yield SimpleNamespace(plan=plan, wanted=0, downloaded=0)

        def build(self, workspace):
            plan = self.plan = workspace.plan
            if self.on_fleet and state.fail:
                raise state.fail
            clock[0] += 30.0 if self.on_fleet else 600.0 if self.settings.nocache else 6.0
            status = "built" if self.settings.nocache and not self.on_fleet else "cached"
            if self.on_fleet:
                fleet_client.api.state += [{"Id": f"id-{s.tag}", "RepoTags": [s.tag]} for s in plan.stages]
            return [StageResult(s.tag, s.kind, status, f"id-{s.tag}", 1.0, None, "") for s in plan.stages]

        def native_tool(self, stage, name):
            self.tool = (stage, name)
            return name

    def load(ref, host, source_host=None):
        loaded.append((ref, host))
        fleet_client.api.state.append({"Id": f"os-{ref}", "RepoTags": [ref]})

    FakeEngine.made = []
    monkeypatch.setattr(bench, "Builder", FakeBuilder)
    monkeypatch.setattr(bench, "time", SimpleNamespace(monotonic=lambda: clock[0]))
    monkeypatch.setattr(bench_fleet, "ScratchEngine", FakeEngine)
    monkeypatch.setattr(bench_fleet, "load_image", load)
    monkeypatch.setattr(bench_fleet, "missing_requirement", lambda: None)
    monkeypatch.setattr(bench_fleet, "_engine_client", lambda host: fleet_client)
    monkeypatch.setattr(bench, "_image_size", lambda client, ref: 1_000_000)
    monkeypatch.setattr(bench, "_dive", lambda ref, work: None)
    monkeypatch.setattr(bench, "_startup_ms", lambda client, ref, runs: 10.0)
    state.pulled = []
    monkeypatch.setattr(bench, "measure_pulls", lambda setup, tags: state.pulled.extend(tags) or {
        tag: {"gzip_mb": 900.0, "gzip_s": 30.0, "zstd_mb": 800.0, "zstd_s": 20.0} for tag in tags})

    def setup(**over):
        sources = SimpleNamespace(cann=CannSource("url", strict=False), artifacts=SimpleNamespace(test_double=False))
        settings = BuildSettings(sources, work_dir=tmp_path / "build")  # type: ignore[arg-type]
        selection = {"device": "a3", "backend": "none", "release": "cann8.5.0-pt2.8.0", "arch": "aarch64"}
        return BenchSetup(state.host_client, settings, ROOT / "matrix.yaml", selection, {},
                                "ascend-images-bench", lines.append,
                                **{"steps": Steps("bench", STEPS, stream=state.progress), **over})

    state.progress = io.StringIO()  # the steps' lines (stderr in a real run)
    state.setup = setup
    return state


def test_run_bench_skips_the_fleet_phase_without_a_stage_cache(fake_bench):
    from dev.bench.run import run_bench

    result = run_bench(fake_bench.setup(), runs=1, measure_alone=False)
    assert not FakeEngine.made and not fake_bench.loaded
    assert all(not b.on_fleet and b.settings.stage_cache is None for b in fake_bench.builders)
    assert result["stage_cache"] is None and result["fleet_seconds"] is None and result["fleet_fraction"] is None
    assert result["verdicts"]["fleet_within_10pct"] is None
    steps = fake_bench.progress.getvalue().splitlines()
    assert "bench 4/11 fleet: skipped (needs --stage-cache) (0.0s)" in steps
    assert "bench 5/11 pull: skipped (needs --stage-cache: its registry) (0.0s)" in steps
    assert [line.split(" ")[1] for line in steps] == [f"{k}/11" for k in range(1, 12)]
    assert not any(line.startswith("[bench ") or line.startswith("bench ") for line in fake_bench.lines)


def test_run_bench_measures_the_fleet_build_on_a_scratch_engine(fake_bench):
    """Only the cold build of the selection pushes to the cache; the fleet build runs the same plan on the second
    engine with the cache, after only the OS image was loaded there; the engine is stopped afterwards."""
    from dev.bench.fleet import fleet_inputs
    from dev.bench.run import run_bench, table

    result = run_bench(fake_bench.setup(stage_cache="localhost:5000/cache"), runs=1, measure_alone=False)
    cold, *rest = fake_bench.builders
    assert cold.settings.nocache and cold.settings.stage_cache == "localhost:5000/cache"
    (on_fleet,) = [b for b in rest if b.on_fleet]
    assert on_fleet.settings.stage_cache == "localhost:5000/cache" and not on_fleet.settings.nocache
    assert [s.tag for s in on_fleet.plan.stages] == [s.tag for s in cold.plan.stages]
    assert all(b.settings.stage_cache is None for b in rest if b is not on_fleet)
    (engine,) = FakeEngine.made
    assert engine.started and engine.stopped
    assert fake_bench.loaded == [(ref, engine.host) for ref in fleet_inputs(cold.plan)]
    assert len(fake_bench.loaded) == 1 and fake_bench.loaded[0][0].startswith("debian")  # the OS image, no stage
    stages = len(cold.plan.stages)
    assert result["fleet_seconds"] == 30.0 and result["fleet_fraction"] == 0.05 and result["cold_seconds"] == 600.0
    assert result["fleet_statuses"] == {"built": 0, "cached": stages}
    assert result["verdicts"]["fleet_within_10pct"] is True
    assert f"30.0 s = 5.00% of cold: {stages} cached, 0 built" in table(result)
    assert any(line.startswith("bench 4/11 fleet: a second, empty engine")
               for line in fake_bench.progress.getvalue().splitlines())


def test_the_rebuild_warm_and_pull_phases_build_as_they_say(fake_bench):
    """The rebuild is a second cold build (BuildKit's cache ignored), the warm build takes BuildKit's cache, neither
    touches the stage cache; the pull phase gets the selection's images."""
    from dev.bench.run import run_bench, table

    result = run_bench(fake_bench.setup(stage_cache="localhost:5000/cache"), runs=1, measure_alone=False)
    cold, rebuild, warm, *_ = fake_bench.builders
    assert (rebuild.settings.nocache, rebuild.settings.stage_cache) == (True, None)
    assert (warm.settings.nocache, warm.settings.stage_cache) == (False, None)
    assert result["rebuild_same"] is True and result["verdicts"]["rebuild_same_digest"] is True
    assert fake_bench.pulled == [cold.plan.stages[-1].tag]
    rows = {line.split("  ", 1)[0]: line for line in table(result).splitlines()}
    name = cold.plan.stages[-1].tag.rsplit(":", 1)[-1]
    assert rows[f"pull {name}"].endswith("gzip 30.0 s / 900.0 MB, zstd 20.0 s / 800.0 MB")
    assert "every stage the same" in rows["rebuild to the same digest"]
    assert "1.00% of cold" in rows["warm build (BuildKit's cache)"]  # the fake: 6 s from the cache, 600 s cold


def test_a_rebuild_to_another_digest_names_the_stages_and_misses_the_target():
    from ascend_images.builder.build import StageResult
    from dev.bench.run import rebuild_figures

    def results(*ids):
        return [StageResult(f"ns/s:{n}", "base", "built", i, 1.0, None, "") for n, i in enumerate(ids)]

    figures = rebuild_figures(results("sha256:a", "sha256:b"), results("sha256:a", "sha256:c"), 61.04)
    assert figures == {"rebuild_seconds": 61.0, "rebuild_same": False, "rebuild_different": ["ns/s:1"]}
    r = report(**figures)
    r["verdicts"] = verdicts(r)
    assert r["verdicts"]["rebuild_same_digest"] is False
    assert "DIFFERENT: ns/s:1" in table(r)
    (line,) = [line for line in table(r).splitlines() if "rebuild_same_digest" in line]
    assert "MISSED" in line


def test_a_failed_fleet_build_is_a_finding_and_the_engine_still_goes(fake_bench):
    from ascend_images.errors import BuildError
    from dev.bench.run import run_bench

    fake_bench.fail = BuildError("[1/4 base] x failed at step 3")
    result = run_bench(fake_bench.setup(stage_cache="localhost:5000/cache"), runs=1, measure_alone=False)
    (engine,) = FakeEngine.made
    assert engine.stopped
    assert result["fleet_error"] == "[1/4 base] x failed at step 3"
    assert result["verdicts"]["fleet_within_10pct"] is False
    assert "noop_seconds" in result and "startup_ms" in result  # the other phases still ran


def test_a_fleet_engine_of_ones_own_is_left_as_it_was(fake_bench):
    """--fleet-engine: no scratch engine; what the phase put there (the OS image, the pulled stages and their cache
    tags) is removed afterwards, what the engine held before stays."""
    from dev.bench.run import run_bench

    result = run_bench(fake_bench.setup(stage_cache="localhost:5000/cache", fleet_engine="tcp://fleet:2375"),
                       runs=1, measure_alone=False)
    assert not FakeEngine.made
    assert fake_bench.loaded[0][1] == "tcp://fleet:2375" and result["fleet_engine"] == "tcp://fleet:2375"
    assert result["verdicts"]["fleet_within_10pct"] is True
    assert fake_bench.fleet_client.api.state == [{"Id": "theirs", "RepoTags": ["someone/else:1"]}]


def test_what_would_stop_the_fleet_phase_stops_the_bench_before_the_cold_build(fake_bench, monkeypatch, tmp_path):
    import os

    import dev.bench.fleet as bench_fleet
    import dev.bench.run as bench
    from ascend_images.errors import SelectionError
    from ascend_images.inputs.sources import TEST_DOUBLE_MARKER, CannSource
    from dev import scratch_engine
    from dev.scratch_engine import ScratchEngineError

    monkeypatch.setattr(bench_fleet, "missing_requirement", scratch_engine.missing_requirement)
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    with pytest.raises(ScratchEngineError, match=r"needs root; this process runs as uid 1000: .* --fleet-engine"):
        bench.run_bench(fake_bench.setup(stage_cache="localhost:5000/cache"))
    with pytest.raises(SelectionError, match="--fleet-engine .* needs --stage-cache"):
        bench.run_bench(fake_bench.setup(fleet_engine="tcp://fleet:2375"))
    doubles = fake_bench.setup(stage_cache="localhost:5000/cache", fleet_engine="tcp://fleet:2375")
    fake_cann = tmp_path / "fake-cann"
    fake_cann.mkdir()
    (fake_cann / TEST_DOUBLE_MARKER).write_text("")
    doubles.settings.sources.cann = CannSource("local", fake_cann)
    with pytest.raises(SelectionError, match="test doubles: .* localhost:5000/cache-test-double"):
        bench.run_bench(doubles)
    assert not fake_bench.builders


def test_a_scratch_engine_needs_root(monkeypatch, tmp_path):
    import os

    from dev.scratch_engine import ScratchEngine, ScratchEngineError

    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    monkeypatch.setattr(ScratchEngine, "_start", lambda self: pytest.fail("it went on to start a dockerd"))
    engine = ScratchEngine(tmp_path / "engine")
    with pytest.raises(ScratchEngineError, match="needs root"):
        engine.start()
    assert not (tmp_path / "engine").exists()


def test_the_install_phase_measures_the_backend_stage_over_its_parent_with_its_installer(fake_bench, monkeypatch):
    import dev.bench.run as bench

    seen = {}

    def install(client, inputs, store, stage, installer, work, out):
        seen["install"] = (stage, installer)
        return install_figures(39.0)

    def imports(client, image, work, runs, out):
        seen["import"] = image
        return {"with_pyc_s": 4.0, "without_pyc_s": 20.0}

    monkeypatch.setattr(bench, "measure_install", install)
    monkeypatch.setattr(bench, "measure_import", imports)
    setup = fake_bench.setup()
    setup.selection = {**setup.selection, "backend": "sglang"}
    result = bench.run_bench(setup, runs=1, phases=("install",))
    stage, installer = seen["install"]
    # the stage's own native tool (its `installer` build stage), built as an image of the bench's namespace
    assert stage.kind == "sglang" and installer == f"{setup.namespace}/native-tool:arm64"
    assert fake_bench.builders[-1].tool == (stage, installer)
    assert seen["import"] == stage.parent.tag and stage.parent.kind == "torch"
    assert result["verdicts"]["install_within_0_25_of_pip"] is True
    assert "cold_seconds" not in result and not any(b.settings.nocache for b in fake_bench.builders)
    steps = fake_bench.progress.getvalue().splitlines()
    assert [line.split(" ")[1] for line in steps] == ["1/11", "2/11"]  # the fixture's Steps counts all eleven
