"""`invoke readme`: the counts, lists and tables of README.md and the manual (docs/*.md) made from the matrix, the
tree and the command line, between markers (`<!-- generated:NAME -->` ... `<!-- /generated:NAME -->`), so they cannot
drift from what they describe; `--check` fails when a document says otherwise. Each section is found in whichever
document holds it (once across them all), so text can move between pages with its markers. Only what the tree can say
is generated; the prose around it stays hand-written.
"""

from __future__ import annotations

import difflib
import re
from collections import Counter
from collections.abc import Callable
from pathlib import Path

from ascend_images.checkout import ROOT as PROJECT_ROOT
from ascend_images.cli.flags import SHORT_FLAGS
from ascend_images.cli.options import Selection
from ascend_images.cli.project import project_path
from ascend_images.cli.taskdef import DOC_SECTIONS, MATRIX_HELP, exit_with, run_body, task
from ascend_images.errors import AscendImagesError
from ascend_images.matrix.model import Matrix

Out = Callable[[str], None]
SECTION = re.compile(r"(<!-- generated:(?P<name>[a-z-]+) -->\n)(?P<body>.*?)(<!-- /generated:(?P=name) -->)", re.S)


def releases(matrix: Matrix, root: Path) -> str:
    spec = matrix.spec
    defaults: dict[str, list[str]] = {}
    for device, per_backend in spec.defaults.release.items():
        for backend, release in per_backend.items():
            defaults.setdefault(release, []).append(f"{device}/{backend}")
    lines = ["| release | CANN | HDK >= | torch | torch_npu | Python | backends | default for |",
             "|---|---|---|---|---|---|---|---|"]
    for name, rel in spec.releases.items():
        pair = spec.torch.pairs[rel.torch_npu]
        hdk = rel.hdk_floor or spec.cann.releases[rel.cann].hdk_floor
        backends = []
        for backend in sorted(rel.backends.model_fields_set - {"none"}):
            pins = getattr(rel.backends, backend)
            versions = {k: v for k, v in pins.model_dump().items() if isinstance(v, str)} \
                if hasattr(pins, "model_dump") else {}
            backends.append(f"{backend} ({', '.join(f'{k} {v}' for k, v in versions.items())})" if versions
                            else backend)
        shown = "; ".join(backends) or "none"
        if rel.blocked:
            shown += " (blocked: `invoke lock` cannot lock it, matrix.yaml says why)"
        lines.append(f"| `{name}` | {rel.cann} | {hdk} | {pair.torch} | {rel.torch_npu} | {', '.join(rel.python)} "
                     f"| {shown} | {', '.join(defaults.get(name, [])) or '-'} |")
    return "\n".join(lines)


def defaults(matrix: Matrix, root: Path) -> str:
    """What `invoke build --device D --backend B` builds with no --release, per device, and the frameworks over it."""
    from ascend_images.matrix.model import unsupported

    spec = matrix.spec
    names = {"vllm": ("vLLM-Ascend", "vllm_ascend"), "sglang": ("SGLang", "sglang")}
    backends = ["none", *names]
    lines = ["| device | " + " | ".join(f"`{b}`" for b in backends) + " | frameworks (`--framework`) |",
             "|---" * (len(backends) + 2) + "|"]
    for device, per_backend in spec.defaults.release.items():
        cells = []
        for backend in backends:
            release = per_backend.get(backend)
            if release is None:
                cells.append("-")
                continue
            rel = spec.releases[release]
            stack = f"CANN {rel.cann}, torch {spec.torch.pairs[rel.torch_npu].torch}, torch_npu {rel.torch_npu}"
            if backend in names:
                label, field = names[backend]
                stack = f"{label} {getattr(getattr(rel.backends, backend), field)} on {stack}"
            cells.append(stack)
        over = []
        for framework, per in spec.defaults.framework_release.items():
            for backend, release in per.items():
                pins = (spec.releases[release].frameworks or {}).get(framework)
                if pins is None or unsupported(spec, device, release, backend, framework) is not None:
                    continue
                name = spec.frameworks[framework].description.split(" ", 1)[0]
                where = "" if release == per_backend.get(backend) else f" (release `{release}`)"
                over.append(f"{name} {pins.version} over `{backend}`{where}")
        chip = spec.devices[device].description.split(":")[0]
        lines.append(f"| `{device}` ({chip}) | " + " | ".join(cells) + f" | {'; '.join(over) or '-'} |")
    return "\n".join(lines)


def locks(matrix: Matrix, root: Path) -> str:
    files = sorted((root / "locks").glob("*/*.txt"))
    lines = [f"{len(files)} locks are committed:", ""]
    for path in files:
        packages = sum(1 for line in path.read_text(encoding="utf-8").splitlines()
                       if line.strip() and not line.startswith("#"))
        lines.append(f"- `{path.relative_to(root)}` ({packages} packages)")
    return "\n".join(lines)


def rendered(matrix: Matrix, root: Path) -> str:
    stages = Counter(path.parent.name.split("--")[0] for path in (root / "rendered").glob("*/Dockerfile"))
    kinds = ", ".join(f"{kind} {count}" for kind, count in sorted(stages.items()))
    return f"`rendered/` holds {sum(stages.values())} Dockerfiles ({kinds})."


def flags(matrix: Matrix, root: Path) -> str:
    lines = ["| letter | flag |", "|---|---|"]
    lines += [f"| `-{letter}` | `--{flag}` |" for flag, letter in SHORT_FLAGS.items()]
    return "\n".join(lines)


SECTIONS: dict[str, Callable[[Matrix, Path], str]] = {"defaults": defaults, "releases": releases, "locks": locks,
                                                      "rendered": rendered, "flags": flags}
# what each section says, for the line that says it drifted (the command line's sections: cli/clidoc.py)
SOURCES = {"defaults": "the matrix", "releases": "the matrix", "locks": "locks/", "rendered": "rendered/",
           "flags": "the command line",
           "program": "the command line", "tasks": "the command line",
           "exit-codes": "the command line"}
DOCS = "docs"
OPEN = re.compile(r"<!-- generated:(?P<name>[a-z-]+) -->")
CLOSE = re.compile(r"<!-- /generated:(?P<name>[a-z-]+) -->")


def _label(path: Path, root: Path) -> str:
    """A document as a message names it: relative to the project (README.md, docs/locks.md), else as given."""
    try:
        return str(path.resolve().relative_to(root.resolve()))
    except ValueError:
        return str(path)


def documents(readme: Path, docs: Path) -> list[Path]:
    """The documents that may hold generated sections: README and every page of the manual."""
    return [readme, *(page for page in sorted(docs.glob("*.md")) if page.resolve() != readme.resolve())]


def place(texts: dict[str, str], known: set[str]) -> dict[str, list[str]]:
    """Which document (by label) holds each generated section. Every section is opened and closed once in one
    document, across them all; an unclosed or stray marker, a section twice, a marker no generator knows or a section
    no document holds is an error naming the document(s)."""
    where: dict[str, list[str]] = {}
    for label, text in texts.items():
        opened = [m["name"] for m in OPEN.finditer(text)]
        closed = [m["name"] for m in CLOSE.finditer(text)]
        if unknown := sorted(set(opened + closed) - known):
            raise AscendImagesError(f"{label} has markers no generator knows: {', '.join(unknown)}; "
                                    f"known: {', '.join(sorted(known))}")
        for name in sorted(set(opened) | set(closed)):
            if opened.count(name) != closed.count(name):
                raise AscendImagesError(
                    f"{label}: the generated section {name} is opened {opened.count(name)} time(s) and closed "
                    f"{closed.count(name)}: each needs one '<!-- generated:{name} -->' line and one "
                    f"'<!-- /generated:{name} -->' line after it")
            if opened.count(name) > 1:
                raise AscendImagesError(f"{label} holds the generated section {name} {opened.count(name)} times: "
                                        "keep one")
            where.setdefault(name, []).append(label)
        if sum(1 for _ in SECTION.finditer(text)) != len(set(opened)):
            raise AscendImagesError(f"{label}: a generated section's markers are out of order or not on lines of "
                                    f"their own ({', '.join(sorted(set(opened)))})")
    if twice := {name: labels for name, labels in where.items() if len(labels) > 1}:
        name, labels = sorted(twice.items())[0]
        raise AscendImagesError(f"the generated section {name} is in {' and '.join(labels)}: keep it in one of them")
    if missing := sorted(known - set(where)):
        raise AscendImagesError(f"no document holds the generated sections {', '.join(missing)} (looked in "
                                f"{', '.join(texts)}): add '<!-- generated:NAME -->' and '<!-- /generated:NAME -->' "
                                "lines where each goes")
    held: dict[str, list[str]] = {}
    for name, (label,) in sorted(where.items()):
        held.setdefault(label, []).append(name)
    return {label: held[label] for label in texts if label in held}


def regenerate(text: str, sections: dict[str, Callable[[], str]]) -> str:
    """The text with each of its generated sections made anew."""
    return SECTION.sub(lambda m: f"{m[1]}{sections[m['name']]()}\n{m[4]}", text)


@task(name="readme", help={"check": "only compare: print the difference and exit 1 when README.md or a page of docs/ "
                                    "says otherwise than the tree",
                           "readme": "the README to regenerate (default: the project's README.md)",
                           "docs": "the manual's directory, whose *.md pages are regenerated too (default: the "
                                   "project's docs/)",
                           "matrix": MATRIX_HELP})
def readme_task(c, check=False, readme=None, docs=None, matrix=None):
    """Regenerate the generated sections of README.md and the manual's pages (docs/*.md: releases, locks, rendered/,
    CI costs, short flags; docs/cli.md's tasks, flags and exit codes) from the matrix, the tree and the command line."""
    from ascend_images.cli.options import checked_path

    path = run_body(checked_path, "--readme", project_path(readme, "README.md"), "file")
    manual = run_body(checked_path, "--docs", project_path(docs, DOCS), "dir")
    exit_with(run_body(write_documents, Selection(matrix), print, documents(path, manual), check=check))


def all_sections(sel: Selection, root: Path = PROJECT_ROOT) -> dict[str, Callable[[], str]]:
    """Every generated section by name: the matrix's and the tree's (the matrix loaded once, when first asked), and
    the command line's (cli/clidoc.py)."""
    from functools import cache

    load = cache(sel.load)
    made = {name: (lambda make=make: make(load(), root)) for name, make in SECTIONS.items()}
    return {**made, **DOC_SECTIONS}  # the command line's, registered by cli/entry.py above the tasks


def write_documents(sel: Selection, out: Out, paths: list[Path], root: Path = PROJECT_ROOT,
                    check: bool = False) -> int:
    """Rewrite the generated sections wherever they are, or (check) say how they differ from the tree and fail."""
    sections = all_sections(sel, root)
    texts = {_label(path, root): path.read_text(encoding="utf-8") for path in paths}
    paths_by_label = dict(zip(texts, paths, strict=True))
    status = 0
    for label, names in place(texts, set(sections)).items():
        status |= write_document(paths_by_label[label], texts[label], sections, out, check=check, names=names)
    return status


def write_document(path: Path, text: str, sections: dict[str, Callable[[], str]], out: Out, *, check: bool = False,
                   names: list[str] | None = None) -> int:
    """Rewrite one document's generated sections, or (check) say how they differ and fail."""
    new = regenerate(text, sections)
    if new == text:
        out(f"{path}: generated sections up to date")
        return 0
    if check:
        drifted = [m["name"] for m, n in zip(SECTION.finditer(text), SECTION.finditer(new), strict=True)
                   if m["body"] != n["body"]]
        out("".join(difflib.unified_diff(text.splitlines(True), new.splitlines(True), str(path),
                                         f"{path} (from the tree)")))
        said = ", ".join(f"{name}: {SOURCES.get(name, 'the tree')}" for name in drifted)
        out(f"{path}: generated sections differ from what they describe ({said}); run: invoke readme")
        return 1
    path.write_text(new, encoding="utf-8")
    out(f"{path}: generated sections rewritten ({', '.join(names or [])})")
    return 0
