"""The manual says what is true now (DESIGN 31): measurements belong to `dev/` (the runs, each with its commit and
engine) and a page keeps a figure only where it drives a decision, so the manual and README together hold at most
MAX_FIGURES measured figures; and no page names the project's own work sessions ("stop 55"), which its readers
cannot look up."""

from __future__ import annotations

import re
from pathlib import Path

from .helpers import ROOT

MAX_FIGURES = 60
# a number with a unit of time or size, or a percentage: what a measurement reads as ("46 s", "1.5 GB", "0.48 %")
FIGURE = re.compile(r"\b\d+(?:[.,]\d+)? ?(?:ms|s|min|minutes|seconds|hours|GB|GiB|MB|MiB|KB|%)(?![\w-])")
SESSION = re.compile(r"\bstop \d+\b", re.I)


def pages(root: Path = ROOT) -> list[Path]:
    return [root / "README.md", *sorted((root / "docs").glob("*.md"))]


def figures(text: str) -> list[str]:
    return FIGURE.findall(text)


def prose_problems(texts: dict[str, str]) -> list[str]:
    """What keeps these pages from saying only what is true now: too many figures in all, and each session number."""
    problems = []
    counts = {name: len(figures(text)) for name, text in texts.items()}
    total = sum(counts.values())
    if total > MAX_FIGURES:
        worst = ", ".join(f"{name} {n}" for name, n in sorted(counts.items(), key=lambda kv: -kv[1])[:3])
        problems.append(
            f"the docs hold {total} measured figures, more than {MAX_FIGURES} (most: {worst}): move the runs to dev/"
        )
    for name, text in texts.items():
        for line_number, line in enumerate(text.splitlines(), 1):
            if SESSION.search(line):
                problems.append(f"{name}:{line_number} names a work session ({SESSION.search(line)[0]!r})")
    return problems


def the_docs() -> dict[str, str]:
    return {str(page.relative_to(ROOT)): page.read_text(encoding="utf-8") for page in pages()}


def test_the_docs_keep_few_figures_and_no_session_numbers():
    assert prose_problems(the_docs()) == []


def test_the_figure_pattern_reads_measurements_written_out_by_hand():
    text = "took 46 s against 1 s, 1.5 GB, 0.48 % of cold, 4 min 32 s; not py3.11, k8s, 2x or a3-debian12"
    assert figures(text) == ["46 s", "1 s", "1.5 GB", "0.48 %", "4 min", "32 s"]


def test_a_lab_notebook_page_and_a_session_number_are_found():
    docs = the_docs()
    notebook = dict(docs, **{"docs/runs.md": "a run took 12 s.\n" * (MAX_FIGURES + 1)})
    [problem] = prose_problems(notebook)
    assert "more than 60" in problem and "docs/runs.md 61" in problem
    named = dict(docs, **{"docs/tests.md": docs["docs/tests.md"] + "\nAs Stop 55's CI showed.\n"})
    [problem] = prose_problems(named)
    assert problem.startswith("docs/tests.md:") and "'Stop 55'" in problem
