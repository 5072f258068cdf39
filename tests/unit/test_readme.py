"""The generated sections of README.md and the manual (docs/*.md) agree with what they describe: the releases, locks,
rendered/ count, CI costs and short flags with the matrix and the tree, docs/cli.md's program options, exit codes and
every task's flags with the command line itself. `ascend-images readme --check` as a user runs it, on this tree and
on copies broken on purpose. Each section is found in whichever document holds it, once across them all."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from .helpers import ROOT, documents_copy, holding

ENV = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
SECTIONS = ("releases", "locks", "rendered", "flags", "program", "tasks", "exit-codes")


def readme(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "ascend_images.cli", "readme", *args], cwd=ROOT, env=ENV,
                          capture_output=True, text=True, timeout=120)


def holders() -> list[Path]:
    """The documents of this tree that hold generated sections, in the order `invoke readme` reads them."""
    docs = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
    return [p for p in docs if "<!-- generated:" in p.read_text(encoding="utf-8")]


def test_the_documents_say_what_the_tree_says():
    result = readme("--check")
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout == "".join(f"{p}: generated sections up to date\n" for p in holders())


def test_every_section_is_in_exactly_one_document():
    for name in SECTIONS:
        assert holding(name, ROOT / "README.md", ROOT / "docs"), name


@pytest.fixture
def copies(tmp_path):
    readme_copy, docs = documents_copy(tmp_path)

    def run(*args: str) -> subprocess.CompletedProcess:
        return readme(*args, "--readme", str(readme_copy), "--docs", str(docs))

    run.readme, run.docs = readme_copy, docs
    return run


def edit(path: Path, old: str, new: str) -> None:
    text = path.read_text(encoding="utf-8")
    assert text.count(old) == 1, old
    path.write_text(text.replace(old, new), encoding="utf-8")


def test_a_wrong_count_fails_the_check_and_one_command_mends_it(copies):
    page = holding("locks", copies.readme, copies.docs)
    count = len(list((ROOT / "locks").glob("*/*.txt")))
    edit(page, f"{count} locks are committed:", f"{count - 1} locks are committed:")
    result = copies("--check")
    assert result.returncode == 1
    assert f"-{count - 1} locks are committed:\n+{count} locks are committed:\n" in result.stdout
    assert (f"{page}: generated sections differ from what they describe (locks: locks/); run: invoke readme\n"
            in result.stdout)
    assert copies().returncode == 0
    assert page.read_text(encoding="utf-8") == (ROOT / page.relative_to(copies.readme.parent)).read_text(
        encoding="utf-8")


def test_a_lost_marker_is_an_error_naming_the_file(copies):
    page = holding("locks", copies.readme, copies.docs)
    edit(page, "<!-- /generated:locks -->", "")
    result = copies("--check")
    assert result.returncode == 2
    assert result.stderr.startswith(f"error: {page}: the generated section locks is opened 1 time(s) and closed 0")


def test_a_section_no_document_holds_is_an_error(copies):
    page = holding("rendered", copies.readme, copies.docs)
    text = page.read_text(encoding="utf-8")
    start, end = text.index("<!-- generated:rendered -->"), text.index("<!-- /generated:rendered -->")
    page.write_text(text[:start] + text[end + len("<!-- /generated:rendered -->"):], encoding="utf-8")
    result = copies("--check")
    assert result.returncode == 2
    assert result.stderr.startswith("error: no document holds the generated sections rendered (looked in ")
    assert str(copies.readme) in result.stderr and str(copies.docs / "cli.md") in result.stderr


def test_a_section_in_two_documents_is_an_error_naming_both(copies):
    page = holding("flags", copies.readme, copies.docs)
    other = next(p for p in (copies.readme, *sorted(copies.docs.glob("*.md"))) if p != page)
    other.write_text(other.read_text(encoding="utf-8") + "\n<!-- generated:flags -->\n<!-- /generated:flags -->\n",
                     encoding="utf-8")
    result = copies("--check")
    assert result.returncode == 2
    first, second = sorted([str(page), str(other)], key=[str(copies.readme),
                                                          *map(str, sorted(copies.docs.glob("*.md")))].index)
    assert result.stderr == f"error: the generated section flags is in {first} and {second}: keep it in one of them\n"


def test_a_section_twice_in_one_document_is_an_error(copies):
    page = holding("releases", copies.readme, copies.docs)
    page.write_text(page.read_text(encoding="utf-8") + "\n<!-- generated:releases -->\n<!-- /generated:releases -->\n",
                    encoding="utf-8")
    result = copies("--check")
    assert result.returncode == 2
    assert result.stderr == f"error: {page} holds the generated section releases 2 times: keep one\n"


def test_a_section_moved_to_another_page_is_written_there(copies):
    """Text moves between pages with its markers: the generator finds the section where it now is."""
    page = holding("locks", copies.readme, copies.docs)
    text = page.read_text(encoding="utf-8")
    start = text.index("<!-- generated:locks -->")
    end = text.index("<!-- /generated:locks -->") + len("<!-- /generated:locks -->")
    page.write_text(text[:start] + text[end:], encoding="utf-8")
    new_page = copies.docs / "moved.md"
    new_page.write_text("# Moved\n\n<!-- generated:locks -->\nstale\n<!-- /generated:locks -->\n", encoding="utf-8")
    result = copies("--check")
    assert result.returncode == 1 and f"{new_page}: generated sections differ" in result.stdout
    assert copies().returncode == 0
    assert new_page.read_text(encoding="utf-8") == "# Moved\n\n" + text[start:end] + "\n"
    assert copies("--check").returncode == 0


def test_docs_cli_md_holds_every_task_flag_and_exit_code():
    """What a user looks up, written out by hand: each is in the reference as the command line has it."""
    text = (ROOT / "docs" / "cli.md").read_text(encoding="utf-8")
    for row in ("| `--volume VOLUME` | `-v` | yes |", "| `--device DEVICE` | `-d` |  |", "### `publish REGISTRY`",
                "### `diff A B`", "| `--project DIR` |  |", "| 3 | an engine, index or registry could not be reached",
                "| 130 | interrupted (Ctrl-C)", "| `--cann-source CANN_SOURCE` |  |  | image \\| url \\| local"):
        assert row in text, row
    assert text.count("\n### `") == 22  # every task of the collection once (dev/'s bench and ci-costs are not)


def test_a_drifted_cli_reference_fails_the_check_and_one_command_mends_it(copies):
    page = copies.docs / "cli.md"
    edit(page, "| `--replicas REPLICAS` |  |  |", "| `--replicas REPLICAS` | `-n` |  |")
    result = copies("--check")
    assert result.returncode == 1
    assert "-| `--replicas REPLICAS` | `-n` |  |" in result.stdout
    assert (f"{page}: generated sections differ from what they describe (tasks: the command line); "
            "run: invoke readme\n" in result.stdout)
    assert copies().returncode == 0
    assert page.read_text(encoding="utf-8") == (ROOT / "docs" / "cli.md").read_text(encoding="utf-8")


def test_a_lost_cli_reference_marker_is_an_error(copies):
    page = copies.docs / "cli.md"
    edit(page, "<!-- /generated:exit-codes -->", "")
    result = copies("--check")
    assert result.returncode == 2
    assert result.stderr.startswith(f"error: {page}: the generated section exit-codes is opened 1 time(s) and closed 0")
