"""What a change touches: the stage directories of rendered/ that differ from a revision (read from a git repository
made here), and the committed images over them (the expected names written out by hand from rendered/'s directories
and matrix.yaml's defaults)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from ascend_images.cli import doubles
from ascend_images.cli.doubles import FULL_TIER_RECORD, read_full_tier
from ascend_images.errors import SelectionError
from ascend_images.stages.changed import changed_stage_dirs, changed_variants
from ascend_images.stages.drift import committed_variants

A5_TORCH = "torch-npu--2.10.0.post4-cann9.1.0-a5-debian12-py3.11-arm64"
A3_SGLANG = "sglang--0.5.20-cann9.0.0-a3-debian12-py3.11-arm64"
BASE = "base--debian12-py3.11-arm64"


def git(root: Path, *args: str) -> str:
    return subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@t", *args], cwd=root, check=True,
                          capture_output=True, text=True).stdout.strip()


@pytest.fixture
def repo(tmp_path) -> tuple[Path, str]:
    """A repository with two stages' contexts and the bake file committed; its first revision."""
    for stage in (A5_TORCH, A3_SGLANG):
        (tmp_path / "rendered" / stage).mkdir(parents=True)
        (tmp_path / "rendered" / stage / "Dockerfile").write_text("FROM x\n")
    (tmp_path / "rendered" / "docker-bake.json").write_text("{}\n")
    git(tmp_path, "init", "-q")
    git(tmp_path, "add", ".")
    git(tmp_path, "commit", "-qm", "first")
    return tmp_path, git(tmp_path, "rev-parse", "HEAD")


def test_nothing_changed_is_no_stage(repo):
    root, first = repo
    assert changed_stage_dirs(root, first) == set()


def test_a_changed_file_an_untracked_one_and_a_commit_are_each_a_stage_but_the_bake_file_is_none(repo):
    root, first = repo
    (root / "rendered" / "docker-bake.json").write_text('{"x": 1}\n')
    assert changed_stage_dirs(root, first) == set()
    (root / "rendered" / A5_TORCH / "Dockerfile").write_text("FROM y\n")
    (root / "rendered" / BASE).mkdir()
    (root / "rendered" / BASE / "install.txt").write_text("pip==1\n")
    assert changed_stage_dirs(root, first) == {A5_TORCH, BASE}
    git(root, "add", ".")
    git(root, "commit", "-qm", "second")
    assert changed_stage_dirs(root, first) == {A5_TORCH, BASE}
    assert changed_stage_dirs(root, "HEAD") == set()


def test_a_revision_the_clone_lacks_is_an_error_saying_what_to_do(repo):
    root, _ = repo
    with pytest.raises(SelectionError, match=r"revision 0123456 .*not in the history.*--unshallow.*--full"):
        changed_stage_dirs(root, "0123456")


def test_a_stage_changes_every_committed_image_over_it(matrix):
    names = lambda dirs: sorted(v.name for v in changed_variants(matrix, dirs))  # noqa: E731
    assert names({A5_TORCH}) == sorted(["cann9.1.0-pt2.10.0/a5/none/debian12/aarch64/system",
                                        "cann9.1.0-pt2.10.0/a5/vllm/debian12/aarch64/system",
                                        "cann9.1.0-pt2.10.0/a5/vllm+roll/debian12/aarch64/system"])
    assert names({A3_SGLANG}) == ["cann9.0.0-sglang0.5.20/a3/sglang/debian12/aarch64/system"]
    assert names(set()) == []
    assert names({BASE}) == sorted(v.name for v in committed_variants(matrix))  # the base is under every image


def test_the_ci_run_checks_what_changed_and_ci_test_lacks(matrix, tmp_path, monkeypatch):
    """No record: nothing beyond ci.test. A record: what changed since its revision and ci.test lacks."""
    import ascend_images.stages.changed as changed

    assert doubles.changed_images(matrix, root=tmp_path) == []
    (tmp_path / FULL_TIER_RECORD).parent.mkdir(parents=True)
    (tmp_path / FULL_TIER_RECORD).write_text(json.dumps({
        "revision": "abc", "finished": "2026-12-05T00:00:00Z", "passed": 1, "skipped": 0, "seconds": 1,
        "engine": "dockerd 28.5.2, buildx 0.29.1"}))
    seen = []
    monkeypatch.setattr(changed, "changed_stage_dirs", lambda root, since, rendered: seen.append(since) or {A5_TORCH})
    changed_now = doubles.changed_images(matrix, root=tmp_path)
    assert seen == ["abc"]
    assert [v.name for v in changed_now] == ["cann9.1.0-pt2.10.0/a5/none/debian12/aarch64/system",
                                                  "cann9.1.0-pt2.10.0/a5/vllm+roll/debian12/aarch64/system"]


def test_a_record_missing_a_field_is_an_error_naming_the_file(tmp_path):
    (tmp_path / FULL_TIER_RECORD).parent.mkdir(parents=True)
    (tmp_path / FULL_TIER_RECORD).write_text(json.dumps({"revision": "abc"}))
    with pytest.raises(SelectionError, match=r"tests/full-tier.json: .*finished.*invoke test --ci --full"):
        read_full_tier(tmp_path)
