"""Whether a newer SGLang release can be built here, judged by what upstream builds its NPU images with.

PyPI's sglang wheels are the CUDA build: their Python range and pins say nothing of the NPU install, which is the
git tag's tree with python/pyproject_npu.toml, on the CANN, Python and torch_npu of the release's NPU line
(backends.sglang.npu_lines), for the chips upstream still publishes images for.
"""

from __future__ import annotations

import tomllib
import urllib.error
from collections.abc import Callable
from dataclasses import dataclass, field

from packaging.requirements import InvalidRequirement, Requirement
from packaging.specifiers import InvalidSpecifier, SpecifierSet

from ascend_images.inputs.https import urlopen
from ascend_images.matrix.schema import ArtifactSpec, NpuLine

# the wheel's own findings are of the CUDA build: said, never a verdict
CUDA_WHEEL = "PyPI's wheel is the CUDA build, not what the image installs"

# a file of SGLang's tree at a release tag: (version, its path in the tree) -> (its text, "") or (None, why not)
TagFile = Callable[[str, str], tuple[str | None, str]]
# the tag's NPU project file, where backends.sglang.artifacts.npu_project_file is in the tree
PROJECT_FILE = "python/pyproject_npu.toml"


@dataclass
class LineVerdict:
    problems: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


def line_of(lines: list[NpuLine], version: str) -> NpuLine | None:
    return next((line for line in lines if line.covers(version)), None)


def read_tag_file(url: str, timeout: float = 20) -> tuple[str | None, str]:
    """A file of SGLang's tree at a tag, off GitHub: (its text, "") or (None, why it could not be read); GitHub is
    out of reach on many build hosts."""
    try:
        with urlopen(url, timeout) as answer:
            return answer.read().decode("utf-8"), ""
    except urllib.error.HTTPError as exc:
        return None, f"HTTP {exc.code}"
    except (urllib.error.URLError, OSError) as exc:
        return None, str(getattr(exc, "reason", exc))


def tag_files(project_file: ArtifactSpec | None) -> TagFile:
    """SGLang's tree at a release tag, where the matrix says the tag's NPU project file is
    (backends.sglang.artifacts.npu_project_file, its url formatted with the version): that file at its url, any
    other file of the tree beside it (the url's PROJECT_FILE replaced by its path); the address is the matrix's
    only."""
    def read(version: str, path: str) -> tuple[str | None, str]:
        if project_file is None:
            return None, "the matrix has no backends.sglang.artifacts.npu_project_file to read the tag from"
        if path == PROJECT_FILE:
            return read_tag_file(project_file.url.format(version=version))
        if not project_file.url.endswith(f"/{PROJECT_FILE}"):
            return None, (f"backends.sglang.artifacts.npu_project_file's url does not end in /{PROJECT_FILE}: no "
                          f"address for {path} beside it")
        return read_tag_file(project_file.url.removesuffix(PROJECT_FILE).format(version=version) + path)

    return read


def _project_findings(text: str, python: str) -> LineVerdict:
    found = LineVerdict()
    try:
        project = tomllib.loads(text).get("project", {})
    except tomllib.TOMLDecodeError as exc:
        found.problems.append(f"the tag's python/pyproject_npu.toml is not TOML ({exc})")
        return found
    requires = project.get("requires-python")
    try:
        if requires and not SpecifierSet(requires).contains(python + ".0"):
            found.problems.append(f"the tag's python/pyproject_npu.toml excludes Python {python} ({requires})")
    except InvalidSpecifier:
        found.problems.append(f"the tag's python/pyproject_npu.toml has requires-python {requires!r}, no specifier")
    listed = [*project.get("dependencies", []), *project.get("optional-dependencies", {}).get("srt_npu", [])]
    for text_req in listed:
        try:
            req = Requirement(text_req)
        except InvalidRequirement:
            continue
        if req.name.lower().replace("_", "-") in ("torch", "torch-npu"):
            found.notes.append(f"the tag's python/pyproject_npu.toml pins {req}")
    return found


def judge(version: str, lines: list[NpuLine], python: str, chips: dict[str, str],
          project: Callable[[str], tuple[str | None, str]] | None = None) -> LineVerdict:
    """What stands between `version` and an image here: its line's Python against `python` (the matrix's, for
    SGLang), the chips its line publishes against `chips` (device -> chip), and the tag's project file where
    `project(version)` can read it."""
    verdict = LineVerdict()
    line = line_of(lines, version)
    if line is None:
        verdict.problems.append(f"no NPU line recorded for {version} (backends.sglang.npu_lines): read its "
                                "docker/npu.Dockerfile and python/pyproject_npu.toml at the tag first")
    else:
        if line.python != python:
            verdict.problems.append(f"blocked: NPU line is Python {line.python} "
                                    f"({line.why or 'its base images'}; {line.source.split(' (')[0]})")
        verdict.notes.append(f"NPU line: CANN {line.cann}, Python {line.python}, torch_npu {line.torch_npu}, "
                             f"chips {', '.join(line.chips)}")
        dropped = [device for device, chip in chips.items() if chip not in line.chips]
        if dropped:
            verdict.notes.append(f"upstream publishes no {', '.join(chips[d] for d in dropped)} image on this line: "
                                 f"no {', '.join(dropped)} variant")
    if project is not None:
        text, why = project(version)
        if text is None:
            verdict.notes.append(f"its python/pyproject_npu.toml could not be read here ({why}): judged by the "
                                 "recorded line")
        else:
            read = _project_findings(text, python)
            verdict.problems += read.problems
            verdict.notes += read.notes
    return verdict
