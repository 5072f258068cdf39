"""Long work shows what it does and how far it is (issue 37 item 5), on stderr: `console.Steps` for lint, lock,
fetch, publish and bench; a build's step lines. A live line on a terminal, plain lines elsewhere, nothing with
--quiet; warnings counted at the end and shown in full with --verbose; results stay on stdout."""

from __future__ import annotations

import base64
import hashlib
import io
import os
import re
import subprocess
import sys
from collections.abc import Iterator

import pytest

from ascend_images import console
from ascend_images.builder.build import Builder, BuildSettings
from ascend_images.builder.progress import StageProgress
from ascend_images.console import Steps
from ascend_images.inputs.artifacts import Wanted
from ascend_images.inputs.cache import fetch_all
from ascend_images.inputs.download import Policy
from ascend_images.inputs.sources import CannSource, Sources
from ascend_images.matrix.model import load_matrix
from tests.conftest import ROOT
from tests.fixtures.httpserver import Server
from tests.fixtures.matrices import matrix_copy


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


@pytest.fixture
def voice() -> Iterator[None]:
    """Each test sets its own level; the next test starts at the normal one."""
    yield
    console.configure()


def test_steps_are_numbered_and_timed_one_plain_line_each(voice):
    out = io.StringIO()
    steps = Steps("lock", total=3, stream=out)
    for name in ("a/vllm/aarch64", "b/sglang/aarch64"):
        with steps.step(name):
            pass
    steps.begin("c/vllm/x86_64")
    steps.finish("12 packages")
    steps.end()
    assert out.getvalue().splitlines() == ["lock 1/3 a/vllm/aarch64 (0.0s)", "lock 2/3 b/sglang/aarch64 (0.0s)",
                                           "lock 3/3 c/vllm/x86_64 12 packages (0.0s)"]


def test_begin_finishes_the_open_step_first(voice):
    out = io.StringIO()
    steps = Steps("bench", total=2, stream=out)
    steps.begin("cold build")
    steps.begin("no-op rebuild")
    steps.end()
    assert [line.rsplit(" (", 1)[0] for line in out.getvalue().splitlines()] == ["bench 1/2 cold build",
                                                                                "bench 2/2 no-op rebuild"]


@pytest.mark.parametrize(("level", "says"), [
    ({}, ["fetch 1/1 f (0.0s)", "fetch: 2 warning(s) (--verbose shows them)"]),
    ({"verbose": True}, ["warning [r1]: one", "warning [r2]: two", "fetch 1/1 f (0.0s)", "fetch: 2 warning(s)"]),
    ({"quiet": True}, []),
])
def test_warnings_are_counted_and_shown_with_verbose(voice, level, says):
    console.configure(**level)
    out = io.StringIO()
    steps = Steps("fetch", total=1, stream=out)
    steps.warn("warning [r1]: one")
    steps.warn("warning [r2]: two")
    with steps.step("f"):
        pass
    steps.end()
    assert out.getvalue().splitlines() == says
    assert len(steps.warnings) == 2  # counted even when nothing is said


@pytest.mark.parametrize(("stream", "live"), [(Terminal, None), (io.StringIO, None), (Terminal, False)])
def test_a_live_line_only_on_a_terminal_and_only_when_asked(voice, stream, live):
    out = stream()
    steps = Steps("publish", total=1, stream=out, live=live)
    with steps.step("push r/x:1"):
        pass
    drawn = "\x1b[" in out.getvalue()  # rich's spinner line, gone when the step ends
    assert drawn is (stream is Terminal and live is None), repr(out.getvalue())
    assert out.getvalue().endswith("publish 1/1 push r/x:1 (0.0s)\n")


def test_lock_check_through_the_console_script_counts_every_lock_on_stderr():
    """`ascend-images lock --check` as a user runs it, not on a terminal: one `lock i/n NAME (TIME)` line per lock
    on stderr, n the number of verdicts on stdout; stdout holds no progress; -q leaves stderr empty."""
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    argv = [sys.executable, "-m", "ascend_images.cli", "lock", "--check"]
    result = subprocess.run(argv, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stdout + result.stderr
    verdicts = [line for line in result.stdout.splitlines() if re.match(r"(ok|skipped|FAILED) ", line)]
    progress = result.stderr.splitlines()
    total = len(verdicts)
    assert total > 10
    assert [re.match(r"lock (\d+)/(\d+) \S+ \(\d+\.\ds\)$", line).groups() for line in progress] == \
        [(str(i), str(total)) for i in range(1, total + 1)], progress
    assert "cann9.1.0-pt2.10.0/vllm/aarch64" in result.stderr
    assert not any(line.startswith("lock ") for line in result.stdout.splitlines())
    quiet = subprocess.run([*argv, "-q"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert quiet.returncode == 0 and quiet.stderr == "" and quiet.stdout == result.stdout


def test_fetch_says_file_i_of_n_with_its_size_and_status(voice, tmp_path):
    server = Server()
    try:
        files = {"a.zip": b"x" * 1500, "b.zip": b"y" * 20}
        wanted = []
        for name, data in files.items():
            server.files[f"/{name}"] = data
            wanted.append(Wanted("test", name, server.url(f"/{name}"), "artifacts",
                                 hashlib.sha256(data).hexdigest()))
        progress, lines = io.StringIO(), []
        fetch_all(load_matrix(matrix_copy(tmp_path)), wanted, tmp_path / "cache", lines.append,
                  policy=Policy(attempts=1, timeout=10), stream=io.StringIO(), steps=Steps("fetch", stream=progress))
    finally:
        server.stop()
    assert [line.rsplit(" (", 1)[0] for line in progress.getvalue().splitlines()] == [
        "fetch 1/2 a.zip 1.5 KB downloaded", "fetch 2/2 b.zip 20 B downloaded"]
    assert not any(line.startswith("fetch 1/2") for line in lines)  # the results (`out`) hold no progress


def vertex(digest: str, name: str, started: bool = True, completed: bool = False, **more) -> dict:
    """One of BuildKit's vertices as buildx's rawjson writes it."""
    return {"digest": digest, "name": name, **({"started": "2026-11-28T13:31:38.214338175Z"} if started else {}),
            **({"completed": "2026-11-28T13:31:40.014338175Z"} if completed else {}), **more}


def test_a_builds_step_lines_go_to_stderr_and_its_outcome_to_stdout(voice, tmp_path, capsys):
    """StageProgress's step and heartbeat lines are progress (stderr, none with -q); the Builder's `out` gets what
    became of each stage."""
    output = base64.b64encode(b"some output\n").decode()
    events = [{"vertexes": [vertex("sha256:a", "[internal] load build definition from Dockerfile", completed=True)]},
              {"vertexes": [vertex("sha256:b", "[packages 1/3] FROM debian:12")]},
              {"logs": [{"vertex": "sha256:b", "stream": 1, "data": output}]},
              {"vertexes": [vertex("sha256:b", "[packages 1/3] FROM debian:12", completed=True)]}]
    for jobs in (1,):
        said: list[str] = []
        builder = Builder(BuildSettings(Sources(CannSource("url", strict=False)), work_dir=tmp_path),
                          out=said.append)
        with StageProgress("[1/4 base]", tmp_path / f"{jobs}.log", builder.progress) as stage:
            for event in events:
                stage.event(event)
        assert said == []
        captured = capsys.readouterr()
        assert captured.out == ""
        assert re.fullmatch(r"\[1/4 base\] step packages 1/3 \(\d+\.\ds\): FROM debian:12\n", captured.err), \
            captured.err
        # the log, as buildx's plain output numbers it: each vertex, its output and end, each step's start marked
        # with the stage's elapsed time
        assert re.fullmatch(r"#1 \[internal\] load build definition from Dockerfile\n#1 DONE 1\.8s\n"
                            r"#2 \[packages 1/3\] FROM debian:12\n\[ascend-images\] \d+\.\ds: step packages 1/3\n"
                            r"#2 some output\n#2 DONE 1\.8s\n\[ascend-images\] \d+\.\ds: stage ended\n",
                            (tmp_path / f"{jobs}.log").read_text()), (tmp_path / f"{jobs}.log").read_text()
    console.configure(quiet=True)
    with StageProgress("[1/4 base]", tmp_path / "q.log") as stage:  # the default is the same stderr note
        stage.event(events[1])
    assert capsys.readouterr() == ("", "")


def test_rawjson_objects_and_the_text_between_them_are_read_as_they_arrive():
    """buildx writes pretty-printed objects one after another, and its final `ERROR: ...` as plain text; a chunk
    may end anywhere."""
    from ascend_images.builder.progress import rawjson_events

    text = '{\n  "vertexes": [\n    {"digest": "d", "name": "n"}\n  ]\n}\n{"logs": []}\nERROR: failed to solve: x\n'
    chunks = [text[i:i + 7] for i in range(0, len(text), 7)]
    assert list(rawjson_events(chunks)) == [{"vertexes": [{"digest": "d", "name": "n"}]}, {"logs": []},
                                            "ERROR: failed to solve: x"]


def test_a_step_error_is_kept_for_the_failure_message(tmp_path):
    with StageProgress("[1/1 base]", tmp_path / "e.log", lambda line: None) as stage:
        stage.event({"vertexes": [vertex("sha256:c", "[stage-1 2/3] RUN false", completed=True,
                                         error="process did not complete successfully: exit code: 1")]})
    assert stage.error == "[stage-1 2/3] RUN false: process did not complete successfully: exit code: 1"
    assert "#1 ERROR: process did not complete successfully: exit code: 1" in (tmp_path / "e.log").read_text()


def test_a_task_that_fails_mid_step_leaves_no_live_line(voice):
    """tasks.py's wrapper around every task body: a body that raises inside a step ends as its one-line error, the
    rich line is stopped (the cursor shown again, the line cleared) and no plain line claims the step finished."""
    from invoke import Exit

    from ascend_images.cli.taskdef import run_body
    from ascend_images.errors import AscendImagesError

    out = Terminal()

    def body() -> None:
        Steps("publish", total=2, stream=out).begin("push r/x:1")
        assert console._drawing
        raise AscendImagesError("registry gone")

    with pytest.raises(Exit, match="error: registry gone"):
        run_body(body)
    assert not console._drawing
    assert "\x1b[?25h" in out.getvalue() and out.getvalue().endswith("\x1b[2K")
    assert "publish 1/2 push r/x:1 (" not in out.getvalue()


def test_a_stage_made_wholly_from_a_cache_counts_no_step_run(tmp_path):
    """What a second engine's build through the registry cache reported (its log, by hand): the FROM resolves the
    parent (DONE, never CACHED), the three RUN steps come from the cache. No step ran, so the stage is "every step
    from the stage cache", not "built"; a RUN that does run still counts."""
    with StageProgress("[2/4 cann-install]", tmp_path / "c.log", lambda line: None) as stage:
        stage.event({"vertexes": [vertex("sha256:i", "[internal] load build definition from Dockerfile",
                                         completed=True),
                                  vertex("sha256:f", "[stage-0 1/4] FROM docker.io/ns/base:debian12@sha256:85d7",
                                         completed=True)]})
        for digest, n in (("sha256:r2", 2), ("sha256:r3", 3), ("sha256:r4", 4)):
            stage.event({"vertexes": [vertex(digest, f"[stage-0 {n}/4] RUN true", started=False, cached=True)]})
    assert (stage.steps_run, stage.steps_cached) == (0, 3)
    with StageProgress("[2/4 cann-install]", tmp_path / "d.log", lambda line: None) as stage:
        stage.event({"vertexes": [vertex("sha256:r2", "[stage-0 2/4] RUN true", completed=True)]})
    assert (stage.steps_run, stage.steps_cached) == (1, 0)


def test_a_bakes_rawjson_is_told_apart_by_target_and_a_shared_step_logged_in_each(tmp_path):
    """buildx prefixes each vertex with its target (`[t1 packages 1/2]`, `[t1 internal]`, `[t1] exporting to
    image`); the same step in two targets is one digest under two names. Each target's log gets its own vertices
    with the prefix gone, the shared step's output once each; what names no target goes to the bake's log."""
    from ascend_images.builder.progress import BakeProgress

    shared = base64.b64encode(b"uv installed\n").decode()
    events = [{"vertexes": [vertex("sha256:d1", "[t1 internal] load build definition from Dockerfile", completed=True),
                            vertex("sha256:u", "[t1 installer 2/2] RUN install-uv")]},
              {"vertexes": [vertex("sha256:u", "[t1-x installer 2/2] RUN install-uv")]},
              # buildx sends the shared step's output in each target's stream: twice, the same
              {"logs": [{"vertex": "sha256:u", "stream": 1, "data": shared, "timestamp": "t"}]},
              {"logs": [{"vertex": "sha256:u", "stream": 1, "data": shared, "timestamp": "t"}]},
              {"vertexes": [vertex("sha256:u", "[t1 installer 2/2] RUN install-uv", completed=True),
                            vertex("sha256:e", "[t1] exporting to image", completed=True)]},
              {"vertexes": [vertex("sha256:u", "[t1-x installer 2/2] RUN install-uv", completed=True)]},
              {"vertexes": [vertex("sha256:l", "[internal] load local bake definitions", completed=True)]},
              "ERROR: target t1-x: failed to solve"]
    logs = {}
    said: list[str] = []
    with StageProgress("[1/2 base]", tmp_path / "t1.log", said.append) as one, \
            StageProgress("[2/2 torch]", tmp_path / "t1-x.log", said.append) as two, \
            StageProgress("[bake]", tmp_path / "bake.log", lambda line: None) as log:
        demux = BakeProgress({"t1": one, "t1-x": two}, log)
        for event in events:
            demux.event(event)
    for name in ("t1", "t1-x", "bake"):
        logs[name] = [line for line in (tmp_path / f"{name}.log").read_text().splitlines()
                      if not line.startswith("[ascend-images]")]
    assert logs["t1"] == ["#1 [internal] load build definition from Dockerfile", "#1 DONE 1.8s",
                          "#2 [installer 2/2] RUN install-uv", "#2 uv installed", "#2 DONE 1.8s",
                          "#3 exporting to image", "#3 DONE 1.8s"]
    assert logs["t1-x"] == ["#1 [installer 2/2] RUN install-uv", "#1 uv installed", "#1 DONE 1.8s"]
    assert logs["bake"] == ["#1 [internal] load local bake definitions", "#1 DONE 1.8s",
                            "ERROR: target t1-x: failed to solve"]
    assert one.exported and not two.exported
    # the shared step said once on stderr, by the first target that named it
    assert [line.split(" step ")[0] for line in said if "install-uv" in line] == ["[1/2 base]"]
    # t1-x is built over t1: the step it shares with it is t1's to count, once the build is over
    assert (one.steps_run, two.steps_run) == (1, 1)
    demux.finish({"t1": None, "t1-x": "t1"})
    assert (one.steps_run, two.steps_run) == (1, 0)


def test_a_name_another_build_created_that_moment_is_told_from_a_failed_step(tmp_path):
    """Two builds on one engine exporting one image at one moment: the containerd image store refuses the second name
    (`image "docker.io/ns/base:x": already exists`, docker/buildx#3576; 12 of 80 builds of one tag, four at a time, on
    dockerd 28.5.2 here). Only a build whose every failure is that one is baked again; a failed RUN is not."""
    from ascend_images.builder import quirks

    def stage(name: str, error: str) -> StageProgress:
        with StageProgress("[1/2 base]", tmp_path / f"{name}.log", lambda line: None) as progress:
            progress.event({"vertexes": [vertex(f"sha256:{name}", "exporting to image", completed=True,
                                                error=error)]})
        return progress

    race = stage("a", 'image "docker.io/ns/base:debian12-py3.11-amd64": already exists')
    cancelled = stage("b", "context canceled")
    failed = stage("c", "process did not complete successfully: exit code: 1")
    assert quirks.met((28, 5, 2), [race, cancelled]) is quirks.NAMING_RACE
    assert quirks.met(None, [race, cancelled]) is quirks.NAMING_RACE
    assert quirks.met((28, 5, 2), [race, failed]) is None
    assert quirks.met((28, 5, 2), [cancelled]) is None


def test_a_fault_no_quirk_names_is_not_baked_again(tmp_path):
    """BuildKit 0.13's own session deadline (moby/buildkit 4327) was baked again; from the floor's BuildKit on it is
    a failure like any other: one bake, and the failure names the bake's own error and log."""
    from ascend_images.builder import bake
    from ascend_images.builder.build import bake_error
    from ascend_images.errors import BuildError
    from ascend_images.stages.bake import target_name
    from ascend_images.stages.plan import PlanOptions, make_plan
    from tests.unit.helpers import variant

    def stage(name: str, error: str) -> StageProgress:
        with StageProgress("[1/2 base]", tmp_path / f"{name}.log", lambda line: None) as progress:
            progress.event({"vertexes": [vertex(f"sha256:{name}", "exporting to image", completed=True,
                                                error=error)]})
        return progress

    deadline = "#1 DONE 0.0s\nERROR: failed to solve: DeadlineExceeded: context deadline exceeded\n"
    assert bake_error(deadline) == "ERROR: failed to solve: DeadlineExceeded: context deadline exceeded"
    plan = make_plan([variant(tmp_path, backend="none", device="a3")], PlanOptions(CannSource("url", strict=False)))
    first = plan.stages[0]
    said: list[str] = []
    builder = Builder(BuildSettings(Sources(CannSource("url", strict=False)), work_dir=tmp_path), out=said.append)
    tries = []

    def bake_once(plan, files, metadata, suffix):
        tries.append(suffix)
        progresses = {target_name(s): stage(f"{suffix}{i}", "context canceled") for i, s in enumerate(plan.stages)}
        return bake.BakeOutcome(1, False), progresses, deadline, tmp_path / f"bake{suffix}.log"

    builder._bake_once = bake_once
    with pytest.raises(BuildError) as err:
        builder._bake(plan, (), tmp_path / "m.json")
    assert tries == [""] and not [line for line in said if "baking once more" in line]
    text = str(err.value)
    assert text.startswith("the bake failed: ERROR: failed to solve: DeadlineExceeded") and first.tag in text
    assert f"--- full log: {tmp_path / 'bake.log'}" in text, text


def test_a_stage_built_in_a_try_the_naming_race_ended_is_reported_built(tmp_path):
    """A bake that lost the naming race ran a stage's steps, and its try again found them in the cache: the stage was
    built by this build, and its report says so (as CI's overlapping builds met it: the first build's report said
    every stage but the base came from a cache, though nothing else had built them)."""
    from ascend_images.builder import bake
    from ascend_images.stages.bake import target_name
    from ascend_images.stages.plan import PlanOptions, make_plan
    from tests.unit.helpers import variant

    plan = make_plan([variant(tmp_path, backend="none", device="a3")], PlanOptions(CannSource("url", strict=False)))
    builder = Builder(BuildSettings(Sources(CannSource("url", strict=False)), work_dir=tmp_path), out=lambda _: None)
    race = 'image "docker.io/ns/base:debian12-py3.11-arm64": already exists'

    def stage(name: str, first: bool) -> StageProgress:
        with StageProgress("[1/2 x]", tmp_path / f"{name}.log", lambda line: None) as progress:
            step = vertex(f"sha256:{name}-run", "[x 1/1] RUN make", completed=True, **({} if first else
                                                                                       {"cached": True}))
            export = vertex(f"sha256:{name}-export", "exporting to image", completed=True,
                            **({"error": race} if first and name.endswith("0") else {}))
            progress.event({"vertexes": [step, export]})
        return progress

    tries = []

    def bake_once(plan, files, metadata, suffix):
        tries.append(suffix)
        first = len(tries) == 1
        progresses = {target_name(s): stage(f"{suffix}{i}", first) for i, s in enumerate(plan.stages)}
        return bake.BakeOutcome(1 if first else 0, False), progresses

    builder._bake_once = lambda *args: (*bake_once(*args), "", tmp_path / "bake.log")
    outcome, progresses, ran = builder._bake(plan, (), tmp_path / "m.json")
    assert tries == ["", "-again1"]
    results = builder._results(plan, outcome, progresses, ran, {s.slug: tmp_path for s in plan.stages})
    assert [r.status for r in results] == ["built"] * len(plan.stages)


def test_a_bake_that_fails_with_no_failed_step_names_its_full_log(tmp_path):
    """The disk filling while a stage's files were written into a snapshot (a CI run met it: BuildKit's `ERROR: ...
    no space left on device` in the bake's log and no step reporting an error) is told with the bake's own log: the
    hint what to do, its last lines and the path of the whole log, that of the try that failed."""
    from ascend_images.builder import bake
    from ascend_images.errors import BuildError
    from ascend_images.stages.bake import target_name
    from ascend_images.stages.plan import PlanOptions, make_plan
    from tests.unit.helpers import variant

    plan = make_plan([variant(tmp_path, backend="none", device="a3")], PlanOptions(CannSource("url", strict=False)))
    builder = Builder(BuildSettings(Sources(CannSource("url", strict=False)), work_dir=tmp_path), out=lambda _: None)
    full = ("#1 DONE 0.0s\nERROR: failed to solve: write /var/lib/docker/overlay2/x/uv.whl: "
            "no space left on device\n")

    def bake_once(plan, files, metadata, suffix):
        progresses = {}
        for i, s in enumerate(plan.stages):
            with StageProgress("[1/2 x]", tmp_path / f"{i}.log", lambda line: None) as progress:
                progress.event({"vertexes": [vertex(f"sha256:{i}", "[x 1/2] COPY a/ /a/", completed=True)]})
            progresses[target_name(s)] = progress
        return bake.BakeOutcome(1, False), progresses, full, tmp_path / "logs" / f"bake{suffix}.log"

    builder._bake_once = bake_once
    with pytest.raises(BuildError) as err:
        builder._bake(plan, (), tmp_path / "m.json")
    text = str(err.value)
    assert "no failed step" in text and "disk is full" in text and "docker system prune" in text, text
    assert f"--- full log: {tmp_path / 'logs' / 'bake.log'}" in text, text


def test_a_stage_buildkit_exported_as_the_signal_came_is_counted_finished(tmp_path):
    """Ctrl-C while a stage's export ends: BuildKit finishes it and sets the tag, but the progress saying so may never
    arrive. The interrupted line goes by the engine's tags: a stage whose tag names another image than before the
    build is finished and kept; one whose tag is absent, or names the image it named before, is unfinished."""
    from ascend_images.builder import bake
    from ascend_images.builder.build import Interrupted
    from ascend_images.stages.bake import target_name
    from ascend_images.stages.plan import PlanOptions, make_plan
    from tests.unit.helpers import variant

    plan = make_plan([variant(tmp_path, backend="none", device="a3")], PlanOptions(CannSource("url", strict=False)))
    first, *rest = plan.stages
    builder = Builder(BuildSettings(Sources(CannSource("url", strict=False)), work_dir=tmp_path), out=lambda _: None)

    def bake_once(plan, files, metadata, suffix):
        progresses = {}
        for i, s in enumerate(plan.stages):
            with StageProgress("[1/2 x]", tmp_path / f"{i}.log", lambda line: None) as progress:
                pass  # no stage's export was seen
            progresses[target_name(s)] = progress
        return bake.BakeOutcome(130, True), progresses, "", tmp_path / "bake.log"

    builder._bake_once = bake_once
    # before: the last stage's tag named an older image; after: the first stage's export landed with a new tag
    builder._tags_before = {rest[-1].tag: "sha256:old", "other/x:1": "sha256:x"}
    builder._engine_tags = lambda plan: {first.tag: "sha256:new", rest[-1].tag: "sha256:old", "other/x:1": "sha256:x"}
    with pytest.raises(Interrupted) as err:
        builder._bake(plan, (), tmp_path / "m.json")
    text = str(err.value)
    unfinished = text.split("unfinished (", 1)[1].split(")", 1)[0].split(", ")
    assert unfinished == [s.tag for s in rest], text
    assert "the 1 finished are kept" in text, text
    # without the engine's answer (a push, a builder of its own) the progress alone decides
    builder._engine_tags = lambda plan: None
    with pytest.raises(Interrupted) as err:
        builder._bake(plan, (), tmp_path / "m.json")
    assert f"stopped with {len(plan.stages)} of {len(plan.stages)}" in str(err.value)
