"""README.md is the front page (issue 54, item 7): 300 lines or fewer, the two commands first, and a table of contents
into the manual (docs/) whose every link and anchor resolves. mkdocs checks the links between the manual's pages
(`invoke lint`); README is not one of its pages, so its links into them are checked here, with the anchors mkdocs
makes, which are the ones GitHub makes too (a test holds every heading to that)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from .helpers import ROOT

MAX_LINES = 300
LINK = re.compile(r"\]\(([^)\s]+)\)")


def headings(text: str) -> list[str]:
    """The text of each Markdown heading outside fenced blocks."""
    return re.findall(r"^#{1,6} (.+)$", re.sub(r"^```.*?^```", "", text, flags=re.S | re.M), re.M)


def site_anchors(text: str) -> list[str]:
    """The anchors the site gives a page's headings: Python-Markdown's toc, with the extensions mkdocs always uses."""
    markdown = pytest.importorskip("markdown")
    md = markdown.Markdown(extensions=["toc", "tables", "fenced_code"])
    md.convert(text)
    found: list[str] = []

    def walk(tokens: list[dict]) -> None:
        for token in tokens:
            found.append(token["id"])
            walk(token["children"])

    walk(md.toc_tokens)
    return found


def github_anchor(heading: str) -> str:
    """The anchor GitHub gives a heading: its text (link targets, backticks and emphasis dropped), lower case, every
    character but letters, digits, `_`, `-` and spaces dropped, each space a hyphen."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading).replace("`", "").replace("*", "")
    return re.sub(r"[^\w\- ]", "", text.strip().lower()).replace(" ", "-")


def front_page_problems(text: str, base: Path = ROOT) -> list[str]:
    """What keeps a README text from being the front page: its length, and each link into the tree that does not
    resolve (a missing file, or a page without the anchor)."""
    problems = []
    lines = text.count("\n")
    if lines > MAX_LINES:
        problems.append(f"README.md has {lines} lines, more than {MAX_LINES}: move the text into a page of docs/")
    for target in LINK.findall(text):
        if re.match(r"[a-z]+:", target):
            continue  # https:, mailto:
        path, _, anchor = target.partition("#")
        page = base / path if path else None
        if page is not None and not page.exists():
            problems.append(f"README.md links to {target}: no such file")
            continue
        if anchor:
            page_text = page.read_text(encoding="utf-8") if page else text
            if anchor not in site_anchors(page_text):
                problems.append(f"README.md links to {target}: {path or 'README.md'} has no heading with that anchor")
    return problems


def readme() -> str:
    return (ROOT / "README.md").read_text(encoding="utf-8")


def test_readme_is_a_front_page_whose_links_resolve():
    assert front_page_problems(readme()) == []


def test_a_long_readme_and_a_broken_link_are_found():
    """The check on purpose-broken copies: one line too many, a page that is not there, an anchor a page lacks."""
    text = readme()
    longer = text + "\n" * (MAX_LINES + 1 - text.count("\n"))
    assert front_page_problems(longer) == [
        f"README.md has {MAX_LINES + 1} lines, more than {MAX_LINES}: move the text into a page of docs/"]
    broken = text.replace("(docs/locks.md)", "(docs/lock.md)", 1).replace(
        "(docs/building.md#command-1-measured)", "(docs/building.md#command-one-measured)", 1)
    assert front_page_problems(broken) == [
        "README.md links to docs/building.md#command-one-measured: docs/building.md has no heading with that anchor",
        "README.md links to docs/lock.md: no such file"]


def test_readme_opens_with_the_two_commands():
    """CI and users run them as they stand: the title, then the block of the two set-up commands, first."""
    text = readme()
    assert text.startswith("# ascend-images\n\n```bash\n# 1. Set up this host and build the A3 SGLang image chain")
    block = text.split("```bash\n", 1)[1].split("```", 1)[0]
    commands = [line for line in block.splitlines() if line and not line.startswith("#")]
    assert len(commands) == 2 and all(c.startswith("bash scripts/setup-host.sh && ") for c in commands), commands
    # the second builds what CI tests as the test session builds it when it finds nothing (tests/fixtures/ci_images),
    # then runs the tests
    from tests.fixtures.ci_images import build_command, inputs_command

    made, built, tested = commands[1].removeprefix("bash scripts/setup-host.sh && ").split(" && ")
    assert made.split()[1:] == [a for a in inputs_command()[1:] if a not in ("--arch", "aarch64")]
    assert built.split()[1:] == [a for a in build_command()[3:] if a not in ("--arch", "aarch64")]
    assert built.startswith(".venv/bin/invoke build ") and made.startswith(".venv/bin/python ")
    assert tested == "CI=true .venv/bin/python -m pytest -p no:cacheprovider -n 3"


def nav_pages() -> list[str]:
    config = yaml.safe_load((ROOT / "mkdocs.yml").read_text(encoding="utf-8"))
    return [page for entry in config["nav"] for page in entry.values()]


def test_the_contents_name_every_page_of_the_manual():
    pages = nav_pages()
    assert sorted(pages) == sorted(p.name for p in (ROOT / "docs").glob("*.md"))  # mkdocs --strict holds this too
    linked = {target.split("#")[0] for target in LINK.findall(readme())}
    assert [p for p in pages if p != "index.md" and f"docs/{p}" not in linked] == []
    index = {target.split("#")[0] for target in LINK.findall((ROOT / "docs" / "index.md").read_text())}
    assert [p for p in pages if p != "index.md" and p not in index] == []


def test_every_heading_has_the_same_anchor_on_github_and_in_the_site():
    """A link written as page.md#anchor then works where the page is read: on GitHub and in the built manual."""
    for path in (ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))):
        text = path.read_text(encoding="utf-8")
        names = headings(text)
        assert [github_anchor(h) for h in names] == site_anchors(text), path.name
