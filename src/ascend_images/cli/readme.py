"""`invoke readme`: README's counts and lists made from the matrix and the tree, between markers
(`<!-- generated:NAME -->` ... `<!-- /generated:NAME -->`), so they cannot drift from what they describe; `--check`
fails when README says otherwise. Only what the tree can say is generated; the prose around it stays hand-written.
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
from ascend_images.cli.taskdef import MATRIX_HELP, exit_with, run_body, task
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


def ci_costs(matrix: Matrix, root: Path) -> str:
    from ascend_images.cli.cicosts import costs_table

    return costs_table(root)


SECTIONS: dict[str, Callable[[Matrix, Path], str]] = {"releases": releases, "locks": locks, "rendered": rendered,
                                                      "flags": flags, "ci-costs": ci_costs}


def regenerate(text: str, sections: dict[str, Callable[[], str]], document: str = "README") -> str:
    """The text with every generated section made anew; a marker no generator knows, or a section missing, is an
    error naming the document."""
    found = {m["name"] for m in SECTION.finditer(text)}
    if unknown := found - set(sections):
        raise AscendImagesError(f"{document} has markers no generator knows: {', '.join(sorted(unknown))}; "
                                f"known: {', '.join(sections)}")
    if missing := set(sections) - found:
        raise AscendImagesError(f"{document} lacks the generated sections {', '.join(sorted(missing))}: add "
                                f"'<!-- generated:NAME -->' and '<!-- /generated:NAME -->' lines where each goes")
    return SECTION.sub(lambda m: f"{m[1]}{sections[m['name']]()}\n{m[4]}", text)


@task(name="readme", help={"check": "only compare: print the difference and exit 1 when README or docs/cli.md says "
                                    "otherwise than the tree",
                           "readme": "the README to regenerate (default: the project's README.md)",
                           "cli_doc": "the command-line reference to regenerate (default: the project's docs/cli.md)",
                           "matrix": MATRIX_HELP})
def readme_task(c, check=False, readme=None, cli_doc=None, matrix=None):
    """Regenerate README's generated sections (releases, locks, rendered/, short flags) and docs/cli.md (tasks, flags,
    exit codes) from the matrix, the tree and the command line itself."""
    from ascend_images.cli import clidoc
    from ascend_images.cli.options import checked_path

    path = run_body(checked_path, "--readme", project_path(readme, "README.md"), "file")
    reference = run_body(checked_path, "--cli-doc", project_path(cli_doc, clidoc.PATH), "file")
    sel = Selection(matrix)
    codes = [run_body(write_readme, sel, print, path, check=check),
             run_body(write_document, reference, clidoc.SECTIONS, print, check=check, what="the command line",
                      document=clidoc.PATH)]
    exit_with(max(codes))


def write_readme(sel: Selection, out: Out, path: Path, root: Path = PROJECT_ROOT, check: bool = False) -> int:
    """Rewrite README's generated sections, or (check) say how they differ from the tree and fail."""
    matrix = sel.load()
    sections = {name: (lambda make=make: make(matrix, root)) for name, make in SECTIONS.items()}
    return write_document(path, sections, out, check=check, what="the matrix and the tree")


def write_document(path: Path, sections: dict[str, Callable[[], str]], out: Out, *, check: bool = False,
                   what: str = "the tree", document: str = "README") -> int:
    """Rewrite a document's generated sections, or (check) say how they differ from `what` and fail."""
    text = path.read_text(encoding="utf-8")
    new = regenerate(text, sections, document)
    if new == text:
        out(f"{path}: generated sections up to date")
        return 0
    if check:
        out("".join(difflib.unified_diff(text.splitlines(True), new.splitlines(True), str(path),
                                         f"{path} (from the tree)")))
        out(f"{path}: generated sections differ from {what}; run: invoke readme")
        return 1
    path.write_text(new, encoding="utf-8")
    out(f"{path}: generated sections rewritten")
    return 0
