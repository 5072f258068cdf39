"""`invoke lint`: ruff; the wings' import contract (import-linter); hadolint on every Dockerfile the matrix renders
(CANN from URLs and from official images);
the committed rendered/ Dockerfiles against the matrix; actionlint and zizmor on the workflow; the manual (docs/)
built by mkdocs --strict, so a broken link or anchor, or a page missing from its nav, fails."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

from ascend_images import console
from ascend_images.checkout import ROOT as PROJECT_ROOT
from ascend_images.cli.hadolint import hadolint_findings
from ascend_images.cli.options import Selection, SourceFlags, output_path
from ascend_images.cli.taskdef import MATRIX_HELP, exit_with, run_body, task
from ascend_images.console import Steps, fmt_seconds
from ascend_images.errors import AscendImagesError
from ascend_images.inputs.sources import CannSource, Sources
from ascend_images.matrix.model import Matrix, Variant
from ascend_images.matrix.selection import all_variants
from ascend_images.stages.drift import drift
from ascend_images.stages.plan import PlanOptions, make_plan
from ascend_images.stages.render import Renderer
from ascend_images.tools import which

Out = Callable[[str], None]


@task(name="lint", help={"matrix": MATRIX_HELP,
                         "work_dir": "where every variant is rendered (default: the project's build/)"})
def lint_task(c, matrix=None, work_dir=None):
    """ruff; the import contract; hadolint on every rendered Dockerfile of every release; the committed rendered/
    Dockerfiles; actionlint and zizmor on the workflow; the manual built by mkdocs --strict."""
    exit_with(run_body(lint, Selection(matrix), print, run_body(output_path, "--work-dir", work_dir, "build")))


def lint(sel: Selection, out: Out, work_dir: Path, ruff: bool = True, steps: Steps | None = None) -> int:
    steps = steps or Steps()
    status = 0
    if ruff:
        with steps.step("ruff"):
            result = subprocess.run([sys.executable, "-m", "ruff", "check", "src", "dev", "tests", "tasks.py"],
                                    cwd=PROJECT_ROOT, capture_output=True, text=True)
        out(f"ruff: {'clean' if result.returncode == 0 else 'FINDINGS'}")
        if result.returncode:
            out((result.stdout + result.stderr).strip())
        status |= result.returncode
    with steps.step("lint-imports"):
        status |= lint_imports(out)
    with steps.step("render every variant"):
        matrix = sel.load()
        variants = all_variants(matrix)
        dockerfiles = _render_all(matrix, variants, work_dir / "lint")
    hadolint = which("hadolint")
    if hadolint is None:
        raise AscendImagesError("hadolint is not installed: pip install -e '.[lint]'")
    with steps.step(f"hadolint ({len(dockerfiles)} Dockerfiles)"):
        result = hadolint_findings(hadolint, dockerfiles)
    findings = result.findings
    errors = [line for line in findings if " error:" in line]
    warnings = [line for line in findings if line not in errors]
    for line in errors + (warnings if console.is_verbose() else []):
        out(line)
    out(f"hadolint: {len(errors)} errors, {len(warnings)} warnings/infos on {len(dockerfiles)} rendered Dockerfiles "
        f"({len(variants)} variants, CANN sources url and image; {result.linted} read by hadolint this run, the rest "
        "known by their text)")
    status |= result.returncode
    with steps.step("rendered/"):
        result, directory = drift(sel.matrix_path)
    out(f"rendered/: {'up to date' if result.clean else result.summary(directory)}")
    status |= 0 if result.clean else 1
    status |= lint_workflows(out, steps)
    status |= lint_docs(out, work_dir / "site", steps)
    total = sum(steps.times.values())
    # the warnings are the one thing a green run hides: say how many, and where to see them
    seen = "" if console.is_verbose() or not warnings else " (--verbose shows them)"
    out(f"lint: {'passed' if status == 0 else 'FAILED'} in {fmt_seconds(total)}; "
        f"{len(warnings)} hadolint warnings/infos{seen}")
    return status


def _render_all(matrix: Matrix, variants: list[Variant], target: Path) -> list[Path]:
    """Every variant's Dockerfiles, with CANN from URLs and from official images."""
    sources = SourceFlags().sources(matrix, strict=False)
    renderer = Renderer()
    if target.exists():
        shutil.rmtree(target)
    dockerfiles = []
    for kind in ("url", "image"):
        cann = CannSource(kind, strict=False)  # type: ignore[arg-type]
        # official CANN images exist only for some OSes
        chosen = [v for v in variants if kind != "image" or v.os_spec.official_cann_os]
        plan = make_plan(chosen, PlanOptions(cann))
        for stage in plan.stages:
            record = renderer.record(stage, Sources(cann, sources.artifacts))
            dockerfiles.append(renderer.write(stage, target / kind, record) / "Dockerfile")
    return dockerfiles


def lint_imports(out: Out, src: Path = PROJECT_ROOT / "src") -> int:
    """pyproject.toml's import-linter contracts (the wings' layers) over the package under `src`: that tree, not
    whichever copy of ascend_images happens to be installed."""
    binary = which("lint-imports")
    if binary is None:
        raise AscendImagesError("lint-imports is not installed: pip install -e '.[lint]'")
    result = subprocess.run([binary, "--config", str(PROJECT_ROOT / "pyproject.toml"), "--no-cache"],
                            capture_output=True, text=True, cwd=PROJECT_ROOT,
                            env={**os.environ, "PYTHONPATH": str(src)})
    out(f"lint-imports: {'contracts kept' if result.returncode == 0 else 'CONTRACT BROKEN'}")
    if result.returncode:
        broken = result.stdout.split("Broken contracts", 1)[-1].strip("-\n ")
        out(broken or (result.stdout + result.stderr).strip())
    return result.returncode


WORKFLOWS = PROJECT_ROOT / ".github" / "workflows"


def lint_workflows(out: Out, steps: Steps | None = None) -> int:
    """actionlint (with shellcheck on run: scripts) and zizmor's offline security audits, medium and up."""
    steps = steps or Steps()
    status = 0
    workflows = sorted(str(p) for p in WORKFLOWS.glob("*.yml"))
    for tool, args in (("actionlint", ["-no-color", *workflows]),
                       ("zizmor", ["--offline", "--min-severity", "medium", "--format", "plain", *workflows])):
        binary = which(tool)
        if binary is None:
            raise AscendImagesError(f"{tool} is not installed: pip install -e '.[lint]'")
        with steps.step(tool):
            result = subprocess.run([binary, *args], capture_output=True, text=True, cwd=PROJECT_ROOT)
        out(f"{tool}: {'clean' if result.returncode == 0 else 'FINDINGS'}")
        if result.returncode:
            out((result.stdout + result.stderr).strip())
        status |= result.returncode
    return status


def lint_docs(out: Out, site: Path, steps: Steps | None = None, root: Path = PROJECT_ROOT) -> int:
    """The manual: `mkdocs build --strict` of root's mkdocs.yml (docs/) into `site`. mkdocs.yml makes a link to a
    missing page or anchor, and a page left out of the nav, a warning; --strict fails the build on any warning."""
    steps = steps or Steps()
    binary = which("mkdocs")
    if binary is None:
        raise AscendImagesError("mkdocs is not installed: pip install -e '.[lint]'")
    with steps.step("mkdocs"):
        result = subprocess.run([binary, "build", "--strict", "--config-file", str(root / "mkdocs.yml"),
                                 "--site-dir", str(site)], capture_output=True, text=True, cwd=root)
    out(f"mkdocs: {'built' if result.returncode == 0 else 'FINDINGS'} ({site})")
    if result.returncode:
        # its warnings and errors (with the lines that continue them), not its INFO lines
        said = [line for line in (result.stderr + result.stdout).splitlines()
                if line.strip() and not line.startswith("INFO")]
        out("\n".join(said) or f"mkdocs exited {result.returncode}")
    return result.returncode
