"""README.md is the front page: what the project is, then its two commands (each short enough to read), 300 lines or
fewer, and a table of contents into the manual (docs/) whose every link and anchor resolves. mkdocs checks the links
between the manual's pages (`invoke lint`); README is not one of its pages, so its links into them are checked here,
with the anchors mkdocs makes, which are the ones GitHub makes too (a test holds every heading to that)."""

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
        "(docs/building.md#setting-up-a-build-host)", "(docs/building.md#setting-up-a-host)", 1)
    assert front_page_problems(broken) == [
        "README.md links to docs/building.md#setting-up-a-host: docs/building.md has no heading with that anchor",
        "README.md links to docs/lock.md: no such file"]


MAX_COMMAND = 160


def readme_commands(text: str) -> list[str]:
    """The commands of README's first shell block, as CI (.ci/run) reads them."""
    block = text.split("```bash\n", 1)[1].split("```", 1)[0]
    return [line for line in block.splitlines() if line and not line.startswith("#")]


def test_readme_says_what_the_project_is_then_gives_two_short_commands():
    """A newcomer reads what the project is before any command; CI and users run the two commands as they stand."""
    text = readme()
    assert text.startswith("# ascend-images\n\nContainer images for AI training and inference on Huawei Ascend NPUs")
    assert text.index("Container images") < text.index("```")
    commands = readme_commands(text)
    assert commands == ["bash scripts/setup-host.sh && .venv/bin/invoke build --device a3 --backend sglang --demo",
                        "bash scripts/setup-host.sh && .venv/bin/invoke test --ci"]
    assert all(len(c) <= MAX_COMMAND for c in commands)


def test_a_long_or_late_command_is_found():
    """The same checks on purpose-broken copies: a command over the length, and a command before the project."""
    text = readme()
    long = text.replace("--demo\n", "--demo" + " --namespace ascend-images-demo" * 3 + "\n", 1)
    assert [c for c in readme_commands(long) if len(c) > MAX_COMMAND]
    late = text.replace("# ascend-images\n\n", "# ascend-images\n\n```bash\ntrue\n```\n\n", 1)
    assert late.index("Container images") > late.index("```")


def test_the_test_command_builds_what_the_test_session_reads():
    """`invoke test --ci` builds CI's images where the session looks for them (tests/fixtures/ci_images takes the
    places from it), as the session builds them itself when it finds none."""
    from ascend_images.cli.doubles import CI_INPUTS, CI_NAMESPACE, CI_WORK_DIR
    from tests.fixtures import ci_images

    assert (Path("build/test/inputs"), "ascend-images-test",
                                                      Path("build/test/ci")) == (CI_INPUTS, CI_NAMESPACE, CI_WORK_DIR)
    assert (ci_images.NAMESPACE, ci_images.REPORT) == ("ascend-images-test", ROOT / "build/test/ci/build-report.json")


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
