"""`invoke outdated --write`: a newer upstream release, judged `ok`, drafted into matrix.yaml beside the release it
follows, each value with its source; what cannot be read here is a marked placeholder, which loading the matrix
refuses (matrix/placeholders.py) until a person fills it.

The draft is text inserted into matrix.yaml (its comments and order kept), never a re-dump of the whole file: the
release block after the followed one, and with `default`, the followed release's name moved to the new one under
`defaults.release` and in `ci.publish`.
"""

from __future__ import annotations

import re
import tomllib
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import yaml
from packaging.version import Version

from ascend_images.errors import SelectionError
from ascend_images.inputs.outdated import Candidate
from ascend_images.inputs.sglangline import PROJECT_FILE, TagFile, line_of
from ascend_images.matrix.model import Matrix
from ascend_images.matrix.placeholders import is_placeholder, placeholder
from ascend_images.matrix.schema import LockedPins, SglangPins

# the files of SGLang's tree at the release's tag a draft reads (a TagFile reads each)
SGLANG_TAG_FILES = {
    "kernel_tag": ".github/workflows/release-docker-npu.yml",
    "dockerfile": "docker/npu.Dockerfile",
    "project": PROJECT_FILE,
}


@dataclass
class Draft:
    name: str  # the new release's name
    follows: str  # the release it is drafted beside
    block: dict  # the release, as matrix.yaml holds it
    files: dict[str, str] = field(default_factory=dict)  # path beside matrix.yaml -> text (upstream transcriptions)
    unread: list[str] = field(default_factory=list)  # what is left as a placeholder, and where to read it
    review: list[str] = field(default_factory=list)  # what a person must still check, written or not


def releases_of(matrix: Matrix, package: str) -> dict[str, str]:
    """release name -> the version of `package` (sglang or vllm-ascend) it pins, for the releases that are built."""
    out = {}
    for name, release in matrix.spec.releases.items():
        pins = release.backends.sglang if package == "sglang" else release.backends.vllm
        if not release.blocked and pins is not None:
            out[name] = pins.sglang if isinstance(pins, SglangPins) else pins.vllm_ascend
    return out


def followed_release(matrix: Matrix, package: str, below: str | None = None) -> str:
    """The release pinning the newest version of `package` the matrix builds (below `below`, when given), a default
    where there are several."""
    defaults = {name for per in matrix.spec.defaults.release.values() for name in per.values()}
    found = [(Version(v), name in defaults, name) for name, v in releases_of(matrix, package).items()
             if below is None or Version(v) < Version(below)]
    if not found:
        raise SelectionError(f"--write --package {package}: no release of the matrix pins {package} to follow")
    return max(found)[2]


def _requirement_pin(text: str, name: str) -> str | None:
    """`name`'s exact version in a Dockerfile's or workflow's text (`name==X`), or None."""
    match = re.search(rf"\b{re.escape(name)}==([0-9][^\s\"'\\]*)", text)
    return match.group(1) if match else None


def _project_lists(text: str, version: str, commit: str) -> dict:
    project = tomllib.loads(text)
    extras = project.get("project", {}).get("optional-dependencies", {})
    return {"project": "sglang", "version": version,
            "upstream": {"repository": "sgl-project/sglang", "path": "python/pyproject_npu.toml", "commit": commit,
                         "note": "read by `invoke outdated --write` from the tag"},
            "dependencies": list(project.get("project", {}).get("dependencies", [])),
            "srt_npu": list(extras.get("srt_npu", [])),
            "build-system-requires": list(project.get("build-system", {}).get("requires", []))}


def draft_sglang(matrix: Matrix, cand: Candidate, tag_file: TagFile) -> Draft:
    follows = followed_release(matrix, "sglang")
    old = matrix.spec.releases[follows]
    old_pins = old.backends.sglang
    version = cand.version
    line = line_of(matrix.spec.backends["sglang"].npu_lines, version)
    if line is None:
        raise SelectionError(f"sglang {version}: no NPU line recorded (backends.sglang.npu_lines); record it first")
    name = re.sub(r"^cann[^-]+", f"cann{line.cann}", follows).replace(f"sglang{old_pins.sglang}", f"sglang{version}")
    draft = Draft(name, follows, {})

    def read(what: str, pattern: Callable[[str], str | None], hint: str) -> str:
        path = SGLANG_TAG_FILES[what]
        text, why = tag_file(version, path)
        value = pattern(text) if text is not None else None
        if value is None:
            where = f"{path} at v{version}"
            draft.unread.append(f"{hint}: read {where} ({why or 'not found in it'})")
            return placeholder(f"{hint}, from {where}")
        return value

    kernel = read("kernel_tag", lambda t: (m.group(1) if (m := re.search(r"SGLANG_KERNEL_NPU_TAG[=:]\s*\"?([\w.]+)", t))
                                           else None), "the sgl-kernel-npu tag (SGLANG_KERNEL_NPU_TAG)")
    triton = read("dockerfile", lambda t: _requirement_pin(t, "triton-ascend"), "the triton-ascend version")
    requirements = f"upstream/sglang-{version}-pyproject_npu.yaml"
    project_text, why = tag_file(version, SGLANG_TAG_FILES["project"])
    if project_text is None:
        draft.unread.append(f"the NPU project's dependency lists: transcribe python/pyproject_npu.toml at v{version} "
                            f"into {requirements} ({why})")
        requirements = placeholder(f"{requirements}, transcribed from python/pyproject_npu.toml at v{version}")
    else:
        draft.files[requirements] = yaml.safe_dump(_project_lists(project_text, version, f"v{version}"),
                                                   sort_keys=False, allow_unicode=True)
    pins: dict = {"sglang": version, "tree": "git-tag", "sgl_kernel_npu": {"tag": kernel, "from": "release"},
                  "triton_ascend": triton, "npu_requirements": requirements,
                  "from_sdist": {arch: list(v) for arch, v in old_pins.from_sdist.items()}}
    draft.review += overrides_left_behind(follows, old_pins)
    draft.block = {"description": f"SGLang {version} on its NPU line: CANN {line.cann}, torch_npu {line.torch_npu}, "
                                  "from SGLang's git tag",
                   "cann": line.cann, "torch_npu": line.torch_npu, "python": list(old.python),
                   "backends": {"none": {}, "sglang": pins},
                   "source": f"`invoke outdated --write` beside {follows}: {line.source}"}
    return draft


def _pin(cand: Candidate, name: str) -> str | None:
    spec = cand.pins.get(name, "")
    return spec[2:] if spec.startswith("==") else None


def overrides_left_behind(follows: str, pins: LockedPins) -> list[str]:
    """The followed release's overrides, which a draft does not carry over: a person judges whether they still hold."""
    if not pins.overrides:
        return []
    return [f"the overrides {follows} carries ({', '.join(o.requirement for o in pins.overrides)}) were not carried "
            "over: check whether the new release still needs them"]


def draft_vllm_ascend(matrix: Matrix, cand: Candidate) -> Draft:
    follows = followed_release(matrix, "vllm-ascend")
    old = matrix.spec.releases[follows]
    version = cand.version
    draft = Draft("", follows, {})
    torch_npu = _pin(cand, "torch-npu")
    if torch_npu is None:
        draft.unread.append("torch_npu: the wheel pins no exact torch-npu; read the release's Dockerfile.a3")
        torch_npu = placeholder("torch_npu, from vllm-ascend's Dockerfile.a3 at the tag")
        cann = placeholder("the CANN, from vllm-ascend's Dockerfile.a3 at the tag")
    else:
        pair = matrix.spec.torch.pairs.get(torch_npu)
        if pair is None:
            draft.unread.append(f"torch_npu {torch_npu} is no pair of torch.pairs: add it (its torch and CANN)")
            cann = placeholder(f"the CANN torch_npu {torch_npu} is made for (torch.pairs)")
        else:
            cann = pair.cann
    wanted = matrix.spec.backends["vllm"].vllm_exceptions.get(version) or [Version(version).base_version]
    vllm = _pin(cand, "vllm") or wanted[0]
    draft.name = f"vllm{version}" if is_placeholder(cann) else f"cann{cann}-vllm{version}"
    old_pins = old.backends.vllm
    pins: dict = {"vllm": vllm, "vllm_ascend": version, "triton_ascend": _pin(cand, "triton-ascend"),
                  "from_sdist": {arch: list(v) for arch, v in old_pins.from_sdist.items()}}
    draft.review += overrides_left_behind(follows, old_pins)
    draft.block = {"description": f"vLLM-Ascend {version} on CANN {cann} with torch_npu {torch_npu}",
                   "cann": cann, "torch_npu": torch_npu, "python": list(old.python),
                   "backends": {"none": {}, "vllm": pins},
                   "source": f"`invoke outdated --write` beside {follows}: PyPI (vllm_ascend-{version} wheel metadata)"}
    return draft


def release_span(lines: list[str], name: str) -> tuple[int, int]:
    """[first, end) of release `name`'s block in matrix.yaml's lines (two-space key under `releases:`)."""
    start = next((i for i, line in enumerate(lines) if line.rstrip() == f"  {name}:"), None)
    if start is None:
        raise SelectionError(f"matrix.yaml has no release block `  {name}:` under releases")
    end = start + 1
    while end < len(lines) and (not lines[end].strip() or lines[end].startswith("   ")):
        end += 1
    while end > start + 1 and not lines[end - 1].strip():
        end -= 1
    return start, end


class _Dumper(yaml.SafeDumper):
    """Versions quoted, as matrix.yaml writes them: an unquoted 2.10 or 8.5 would read back as a number."""


_Dumper.add_representer(str, lambda dumper, value: dumper.represent_scalar(
    "tag:yaml.org,2002:str", value, style='"' if re.fullmatch(r"[0-9][0-9A-Za-z.+_-]*", value) else None))


def block_text(draft: Draft) -> list[str]:
    body = yaml.dump({draft.name: draft.block}, Dumper=_Dumper, sort_keys=False, allow_unicode=True, width=110)
    return ["  " + line if line else line for line in body.splitlines()]


def moved_default(lines: list[str], follows: str, name: str) -> int:
    """`follows` -> `name` under defaults.release (its device lines) and in ci.publish's entries; how many lines."""
    moved = 0
    section = ""
    for i, line in enumerate(lines):
        if line and not line[0].isspace():
            section = line.split(":")[0]
        device_line = section == "defaults" and re.match(r"\s+[a-z]\w*: \{", line)
        publish_line = section == "ci" and "release: " in line
        if device_line or publish_line:
            new = re.sub(rf"(?<![\w.-]){re.escape(follows)}(?![\w.-])", name, line)
            moved += new != line
            lines[i] = new
    return moved


def write_draft(path: Path, draft: Draft, default: bool) -> list[str]:
    """Insert the draft after the release it follows (and, with `default`, move the defaults and ci.publish to it);
    each file of the draft beside matrix.yaml. What changed, one line each."""
    lines = path.read_text(encoding="utf-8").splitlines()
    changed = []
    if draft.block:
        _, end = release_span(lines, draft.follows)
        lines[end:end] = block_text(draft)
        changed.append(f"releases.{draft.name}: drafted after {draft.follows}")
    if default:
        moved = moved_default(lines, draft.follows, draft.name)
        changed.append(f"defaults and ci.publish: {draft.follows} -> {draft.name} ({moved} line(s))")
    tmp = path.with_name(f".{path.name}.draft")
    tmp.write_text("\n".join(lines) + "\n", encoding="utf-8")
    for name, body in draft.files.items():
        target = path.parent / name
        target.parent.mkdir(parents=True, exist_ok=True)
        header = (f"# {name}: python/pyproject_npu.toml's lists, as `invoke outdated --write` read them from the tag "
                  "(facts, cited); referenced by matrix.yaml\n")
        target.write_text(header + body, encoding="utf-8")
        changed.append(f"{name}: written")
    tmp.replace(path)  # matrix.yaml last, whole: a failure before leaves it as it was
    return changed


def draft_release(matrix: Matrix, cand: Candidate, tag_file: TagFile) -> Draft:
    if cand.problems:
        raise SelectionError(f"{cand.package} {cand.version} is not `ok`: {'; '.join(cand.problems)}; "
                             "only a release judged ok is drafted")
    if cand.package == "sglang":
        return draft_sglang(matrix, cand, tag_file)
    if cand.package == "vllm-ascend":
        return draft_vllm_ascend(matrix, cand)
    raise SelectionError(f"--write drafts a backend release: --package sglang or vllm-ascend, not {cand.package}")

