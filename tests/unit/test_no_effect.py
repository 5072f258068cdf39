"""A flag that would change nothing in the combination given is refused, naming it and what it needs (issue 54,
item 3), as Docker refuses `--restart` with `--rm`; where refusing would cost a check the user relies on, it is named
in a one-line note instead (`lock --check` with index flags). Before, each was taken and silently ignored."""

from __future__ import annotations

import pytest

from tests.unit.inprocess import PROGRAMS

IMAGE = "reg.example/ai/img:1"


@pytest.fixture(autouse=True)
def no_engine(monkeypatch):
    """Were a refusal to regress, the task would run: against no engine, with a device the matrix lacks (build), it
    stops at once instead of building."""
    monkeypatch.setenv("DOCKER_HOST", "tcp://127.0.0.1:1")


@pytest.mark.parametrize("program", PROGRAMS.values(), ids=PROGRAMS.keys())
@pytest.mark.parametrize(("argv", "start"), [
    (["run", "--device", "a2", "--format", "docker,compose"],
     "error: --format docker,compose has no effect here: it says what --print prints; add --print"),
    (["run", "--print", "--device", "a3", "--replicas", "1"],
     "error: --replicas 1 has no effect here: it makes the Kubernetes form a Deployment; add --print --format k8s"),
    (["run", "--print", "--device", "a3", "--format", "docker", "--replicas", "0"],
     "error: --replicas 0 has no effect"),
    (["run", "--print", "--image", IMAGE, "--namespace", "team-x"], "error: --namespace team-x has no effect here"),
    (["run", "--print", "--image", IMAGE, "--backend", "vllm"], "error: --backend vllm has no effect here: it narrows"),
    (["run", "--print", "--image", IMAGE, "--release", "cann9.1.0-pt2.10.0"], "error: --release cann9.1.0-pt2.10.0"),
    (["run", "--print", "--device", "a3", "--mode", "runtime", "--driver-mounts", "full"],
     "error: --driver-mounts full has no effect here: the Ascend Docker Runtime (--mode runtime)"),
    (["run", "--print", "--device", "a3", "--mode", "runtime", "--host-root", "/srv/host"],
     "error: --host-root /srv/host has no effect here"),
    (["build", "--device", "a9", "--stage-cache-read-only"],
     "error: --stage-cache-read-only has no effect here: it says how the stage cache is used, and none is named"),
    (["render", "--check", "--out", "build/x"], "error: --out build/x has no effect here: --check and --update"),
    (["render", "--update", "--namespace", "team-x"], "error: --namespace team-x has no effect here"),
    (["render", "--check", "--cann-source", "url"], "error: --cann-source url has no effect here"),
    (["test", "--image", IMAGE, "--device", "a3"], "error: --device a3 has no effect here: --image names the images"),
    (["test", "--image", IMAGE, "--offline"], "error: --offline has no effect here"),
    (["test", "--image", IMAGE, "--stage-cache", "r.example/cache"], "error: --stage-cache r.example/cache has no"),
], ids=["format-without-print", "replicas-without-k8s", "replicas-0-without-k8s", "namespace-with-image",
        "backend-with-image", "release-with-image", "driver-mounts-runtime", "host-root-runtime", "read-only-build",
        "render-check-out", "render-update-namespace", "render-check-source", "test-image-device",
        "test-image-offline", "test-image-stage-cache"])
def test_refused(program, argv, start):
    code, out, err = program(argv)
    assert code == 2, (argv, out, err)
    assert err.startswith(start) and err.count("\n") == 1 and out == "", err


@pytest.mark.parametrize(("argv", "ok"), [
    (["run", "--print", "--device", "a3", "--format", "k8s", "--replicas", "2", "-q"], "kind: Deployment"),
    (["run", "--print", "--image", IMAGE, "--device", "a3", "-e", "X=1", "-q"], "X=1"),
    (["render", "--check", "-q"], "up to date"),
])
def test_the_same_flags_where_they_mean_something(argv, ok):
    code, out, err = PROGRAMS["ascend-images"](argv)
    assert code == 0 and ok in out, err


def test_lock_check_names_the_index_flags_it_does_not_use():
    code, _, err = PROGRAMS["ascend-images"](["lock", "--check", "--release", "cann9.1.0-pt2.10.0", "--index-url",
                                              "https://mirror.example/simple", "--work-dir", "/tmp/x"])
    assert code == 0, err
    assert err.splitlines()[0] == ("note: --index-url, --work-dir have no effect with --check, which asks no index "
                                   "and resolves nothing: each lock is compared with matrix.yaml")
