"""CI's room-making (tests/fixtures/disk_room.py): which tags and scratch roots count as leftovers. Tags written out
by hand, as the tests and earlier runs name them."""

import os

from tests.fixtures.disk_room import leftover_tags, stale_scratch_roots


def test_leftovers_are_the_tests_own_namespaces_and_loopback_pushes():
    tags = [
        "ascend-images-robust-2136334c/torch-npu:2.13.0-cann8.5.0-a3-debian12-py3.11-amd64",
        "ascend-images-secrets-1a2b3c4d/base:debian12-py3.11-amd64",
        "ascend-images-fleet/cann:9.1.0-a2-debian12-py3.11-arm64",
        "127.0.0.1:35763/stage-cache-test-double/bench-pull:vllm-ascend-0.23.0-gzip",
        "localhost:5000/ascend-images/sglang:0.5.17",
    ]
    kept = [
        "ascend-images-test/sglang:0.5.17-cann9.0.0-a3-debian12-py3.11-arm64",  # the CI images: a warm run's
        "ascend-images/os:debian12-arm64",  # set-up's OS images
        "ascend-images/vllm-ascend:0.23.0-cann9.1.0-a3-debian12-py3.11-arm64",  # a user's own build
        "ascend-images-bench/base:debian12-py3.11-arm64",  # the bench's, measured from run to run
        "registry.example.com/ascend-images-robust-1/x:y",  # another registry's: not the tests'
        "quay.io/ascend/cann:8.5.0",
    ]
    assert leftover_tags(tags + kept) == tags


def test_a_scratch_root_is_stale_once_its_dockerd_is_gone(tmp_path):
    live = tmp_path / "ai-repro-live"
    dead = tmp_path / "ai-small-dead"
    never = tmp_path / "ai-scratch-never"  # stopped before its dockerd wrote a pidfile
    other = tmp_path / "ai-cache-x"  # not a scratch engine's prefix
    for root in (live, dead, never, other):
        root.mkdir()
    (live / "dockerd.pid").write_text(f"{os.getpid()}\n")
    (dead / "dockerd.pid").write_text("999999999\n")
    assert stale_scratch_roots(tmp_path) == [dead, never]
