"""README's generated sections (releases, locks, rendered/, short flags) agree with the matrix and the tree, and
docs/cli.md's (program options, exit codes, every task's flags) with the command line itself: `ascend-images readme
--check` as a user runs it, on this README and docs/cli.md and on copies broken on purpose."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from .helpers import ROOT

ENV = {**os.environ, "PYTHONPATH": str(ROOT / "src")}


def readme(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "ascend_images.cli", "readme", *args], cwd=ROOT, env=ENV,
                          capture_output=True, text=True, timeout=120)


def test_readme_says_what_the_tree_says():
    result = readme("--check")
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout == (f"{ROOT / 'README.md'}: generated sections up to date\n"
                             f"{ROOT / 'docs' / 'cli.md'}: generated sections up to date\n")


def broken_copy(tmp_path: Path, old: str, new: str) -> Path:
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    assert text.count(old) == 1, old
    copy = tmp_path / "README.md"
    copy.write_text(text.replace(old, new), encoding="utf-8")
    return copy


def test_a_wrong_count_fails_the_check_and_one_command_mends_it(tmp_path):
    count = len(list((ROOT / "locks").glob("*/*.txt")))
    copy = broken_copy(tmp_path, f"{count} locks are committed:", f"{count - 1} locks are committed:")
    result = readme("--check", "--readme", str(copy))
    assert result.returncode == 1
    assert f"-{count - 1} locks are committed:\n+{count} locks are committed:\n" in result.stdout
    assert f"{copy}: generated sections differ from the matrix and the tree; run: invoke readme\n" in result.stdout
    assert readme("--readme", str(copy)).returncode == 0
    assert copy.read_text(encoding="utf-8") == (ROOT / "README.md").read_text(encoding="utf-8")


def test_a_lost_marker_is_an_error(tmp_path):
    copy = broken_copy(tmp_path, "<!-- /generated:locks -->", "")
    result = readme("--check", "--readme", str(copy))
    assert result.returncode == 2
    assert result.stderr.startswith("error: README lacks the generated sections locks: add")


def cli_doc_copy(tmp_path: Path, old: str, new: str) -> Path:
    text = (ROOT / "docs" / "cli.md").read_text(encoding="utf-8")
    assert text.count(old) == 1, old
    copy = tmp_path / "cli.md"
    copy.write_text(text.replace(old, new), encoding="utf-8")
    return copy


def test_docs_cli_md_holds_every_task_flag_and_exit_code():
    """What a user looks up, written out by hand: each is in the reference as the command line has it."""
    text = (ROOT / "docs" / "cli.md").read_text(encoding="utf-8")
    for row in ("| `--volume VOLUME` | `-v` | yes |", "| `--device DEVICE` | `-d` |  |", "### `publish REGISTRY`",
                "### `diff A B`", "| `--project DIR` |  |", "| 3 | an engine, index or registry could not be reached",
                "| 130 | interrupted (Ctrl-C)", "| `--cann-source CANN_SOURCE` |  |  | image \\| url \\| local"):
        assert row in text, row
    assert text.count("\n### `") == 24  # every task of the collection once


def test_a_drifted_cli_reference_fails_the_check_and_one_command_mends_it(tmp_path):
    copy = cli_doc_copy(tmp_path, "| `--replicas REPLICAS` |  |  |", "| `--replicas REPLICAS` | `-n` |  |")
    result = readme("--check", "--cli-doc", str(copy))
    assert result.returncode == 1
    assert "-| `--replicas REPLICAS` | `-n` |  |" in result.stdout
    assert f"{copy}: generated sections differ from the command line; run: invoke readme\n" in result.stdout
    assert readme("--cli-doc", str(copy)).returncode == 0
    assert copy.read_text(encoding="utf-8") == (ROOT / "docs" / "cli.md").read_text(encoding="utf-8")


def test_a_lost_cli_reference_marker_is_an_error(tmp_path):
    copy = cli_doc_copy(tmp_path, "<!-- /generated:exit-codes -->", "")
    result = readme("--check", "--cli-doc", str(copy))
    assert result.returncode == 2
    assert result.stderr.startswith("error: docs/cli.md lacks the generated sections exit-codes: add")
