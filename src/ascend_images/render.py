"""Render a stage into its build context directory: a Dockerfile plus the files it copies.

Output is deterministic (same inputs, same bytes), and a directory is written under a temporary
name and renamed into place only when complete, so a failed render never looks finished.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import jinja2

from .artifacts import bisheng_wanted, sglang_wanted
from .envs import EnvValue, baked_env, effective_env
from .lockfile import LockError, load_lock
from .matrix import Variant
from .names import LABEL_PREFIX, TEST_DOUBLE_LABEL
from .plan import Stage
from .schema import SglangPins, VllmPins
from .sources import MISSING_SHA256, SERVER_VAR, Sources, sha256_file

IMAGES_DIR = Path(__file__).resolve().parents[2] / "images"
FIXED_MTIME = 946684800  # 2000-01-01: file times must not make two renders differ


def dockerfile_value(value: str) -> str:
    """A value for `ENV NAME=<value>`, quoted so the builder keeps it literally."""
    escaped = value.replace("\\", "\\\\").replace('"', '\\"').replace("$", "\\$")
    return f'"{escaped}"'


def _environment(device: str, images_dir: Path) -> jinja2.Environment:
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader([str(images_dir / device), str(images_dir)]),
        undefined=jinja2.StrictUndefined,
        keep_trailing_newline=True,
        trim_blocks=True,
        lstrip_blocks=True,
        autoescape=False,
    )
    env.filters["dockerfile_value"] = dockerfile_value
    env.filters["shell_quote"] = shlex.quote
    env.filters["label_block"] = lambda labels: " \\\n      ".join(
        f"{k}={dockerfile_value(v)}" for k, v in labels.items()
    )
    env.filters["env_block"] = lambda items: " \\\n    ".join(
        f"{i['name']}={dockerfile_value(i['value'])}" for i in items
    )
    env.filters["cann_arg"] = lambda p: f"{p['kind']}={p['url']}#{p['sha256']}"
    env.filters["artifact_arg"] = lambda a: f"{a['url']}#{a['sha256']}"
    return env


def _template_name(kind: str, device: str, images_dir: Path) -> str:
    own = images_dir / device / f"{kind}.Dockerfile.j2"
    return own.name if own.exists() else f"common/{kind}.Dockerfile.j2"


def stage_labels(stage: Stage) -> dict[str, str]:
    """The io.ascend-images.* labels a stage adds (its parents' labels are inherited)."""
    v = stage.variant
    labels = {f"{LABEL_PREFIX}.stage": stage.kind}
    if stage.kind == "base" or (stage.external_parent and stage.kind == "cann-install"):
        labels |= {
            f"{LABEL_PREFIX}.os": v.os,
            f"{LABEL_PREFIX}.arch": v.arch,
            f"{LABEL_PREFIX}.python": v.python,
            f"{LABEL_PREFIX}.python-version": v.python_version,
        }
    if stage.kind == "cann-install":
        labels |= {
            f"{LABEL_PREFIX}.device": v.device,
            f"{LABEL_PREFIX}.soc-version": v.device_spec.soc_version,
            f"{LABEL_PREFIX}.cann": v.release.cann,
            f"{LABEL_PREFIX}.cann-layout": v.cann.layout,
            f"{LABEL_PREFIX}.hdk-floor": str(v.hdk_floor),
        }
    if stage.kind == "torch":
        labels |= {
            f"{LABEL_PREFIX}.release": v.release_name,
            f"{LABEL_PREFIX}.backend": "none",
            f"{LABEL_PREFIX}.torch": v.torch,
            f"{LABEL_PREFIX}.torch-npu": v.torch_npu,
            f"{LABEL_PREFIX}.profile": v.matrix.spec.defaults.profile,
        }
    pins = v.backend_pins
    if stage.kind == "vllm" and isinstance(pins, VllmPins):
        labels |= {
            f"{LABEL_PREFIX}.backend": "vllm",
            f"{LABEL_PREFIX}.vllm": pins.vllm,
            f"{LABEL_PREFIX}.vllm-ascend": pins.vllm_ascend,
            f"{LABEL_PREFIX}.triton-ascend": pins.triton_ascend or "",
            f"{LABEL_PREFIX}.allocator": v.default_allocator,
        }
    if stage.kind == "sglang" and isinstance(pins, SglangPins):
        labels |= {
            f"{LABEL_PREFIX}.backend": "sglang",
            f"{LABEL_PREFIX}.sglang": pins.sglang,
            f"{LABEL_PREFIX}.sgl-kernel-npu": pins.sgl_kernel_npu.tag,
            f"{LABEL_PREFIX}.allocator": v.default_allocator,
        }
    if stage.kind == "overlay":
        labels[f"{LABEL_PREFIX}.profile"] = v.profile
        if v.allocator is not None:
            labels[f"{LABEL_PREFIX}.allocator"] = v.allocator
        if v.user_env:
            # the values too (they are in the image's ENV anyway): the image tests read their expectations here
            labels[f"{LABEL_PREFIX}.user-env"] = json.dumps(dict(v.user_env), sort_keys=True)
    return labels


def test_doubles(stage: Stage, sources: Sources) -> list[str]:
    """Which inputs of this image (its own or its parents') are test doubles: labels are inherited, but a
    stage that sets the label must name every double below it too."""
    out = []
    if stage.kind != "base" and sources.cann.test_double:
        out.append("cann")
    if stage.variant.backend == "sglang" and stage.kind in ("sglang", "overlay") and sources.artifacts.test_double:
        out.append("sgl-kernel-npu")
    return out


def _title(stage: Stage) -> tuple[str, str, str]:
    v = stage.variant
    version = {
        "base": f"{v.os}-py{v.python_version}",
        "cann-install": v.release.cann,
        "cann": v.release.cann,
        "torch": v.torch_npu,
    }.get(stage.kind, stage.tag.rsplit(":", 1)[-1])
    # an overlay is the image below it with other settings: the same version
    kind = v.backend if stage.kind == "overlay" and v.backend != "none" else stage.kind
    if stage.kind == "overlay" and v.backend == "none":
        version = v.torch_npu
    if kind == "vllm" and isinstance(v.backend_pins, VllmPins):
        version = v.backend_pins.vllm_ascend
    if kind == "sglang" and isinstance(v.backend_pins, SglangPins):
        version = v.backend_pins.sglang
    title = stage.repo.rsplit("/", 1)[-1]
    description = {
        "base": f"{v.os} with Python {v.python_version} ({v.python}), tini and the ascend-images entrypoint",
        "cann-install": f"CANN {v.release.cann} for {v.device} installed, environment not yet baked",
        "cann": f"CANN {v.release.cann} for {v.device} with its environment baked into ENV",
        "torch": f"torch {v.torch} + torch_npu {v.torch_npu} on CANN {v.release.cann} for {v.device}",
        "vllm": f"vLLM-Ascend on CANN {v.release.cann} for {v.device}",
        "sglang": f"SGLang on CANN {v.release.cann} for {v.device}",
        "overlay": f"{stage.parent_ref} with profile {v.profile}"
        + (f" and allocator {v.allocator}" if v.allocator is not None else ""),
    }[stage.kind]
    return title, description, version


def _env_items(values: Mapping[str, EnvValue]) -> list[dict[str, str]]:
    return [
        {"name": e.name, "value": e.value, "comment": f"{e.layer}; source: {e.source}"}
        for e in values.values()
    ]


def env_document(profile: str, values: Mapping[str, EnvValue], captured: Mapping[str, str] | None,
                 scripts: list[str]) -> dict[str, Any]:
    """/etc/ascend-images/env.json: every variable the image sets, with where it comes from. `profile` is the
    one baked into this image: the default below an overlay, so that choosing another profile changes no
    stage but the overlay."""
    doc: dict[str, Any] = {"profile": profile, "env_scripts": scripts, "variables": {}}
    for name, value in (captured or {}).items():
        doc["variables"][name] = {"value": value, "layer": "cann:set_env", "source": "captured from env_scripts"}
    for name, item in values.items():
        doc["variables"][name] = item.as_dict()
    doc["variables"] = dict(sorted(doc["variables"].items()))
    return doc


class Renderer:
    def __init__(self, images_dir: Path = IMAGES_DIR):
        self.images_dir = images_dir

    def context(self, stage: Stage, sources: Sources,
                captured: Mapping[str, str] | None = None) -> tuple[dict[str, Any], dict[str, bytes]]:
        """The template variables and the extra files of a stage's context."""
        v = stage.variant
        title, description, version = _title(stage)
        os_spec = v.os_spec
        official_image = sources.cann.official_image(v) if sources.cann.kind == "image" else None
        ctx: dict[str, Any] = {
            "stage": {"kind": stage.kind, "parent": stage.parent_ref},
            "v": v.describe(),
            "labels": {
                "org.opencontainers.image.title": title,
                "org.opencontainers.image.description": description,
                "org.opencontainers.image.version": version,
                "org.opencontainers.image.vendor": "ascend-images",
                "org.opencontainers.image.licenses": "Apache-2.0",
                "org.opencontainers.image.base.name": stage.parent_ref,
                **stage_labels(stage),
            },
            "os": {"family": os_spec.family, "python_bin": os_spec.python_bin,
                   "python_dev_packages": list(os_spec.python_dev_packages),
                   "packages": list(os_spec.base_packages)
                   + (list(os_spec.python_packages) if v.python == "system" else [])},
            "python": {"flavour": v.python, "version": v.python_version},
            "device": {"name": v.device, "opp_kernel_dir": v.device_spec.opp_kernel_dir,
                       "soc_version": v.device_spec.soc_version, "chip": v.device_spec.chip},
            "cann": {"version": v.release.cann, "home": v.cann_home, "ops_package": v.cann.ops_package,
                     "source": sources.cann.kind, "referer": v.matrix.spec.cann.download_referer,
                     "python_deps": list(v.matrix.spec.cann.python_deps), "packages": []},
            "env_scripts": v.env_scripts,
            "captured": None,
            "env": [],
            "defaults": [],
            "user_env": bool(v.user_env),
            "allocator": None,
        }
        doubles = test_doubles(stage, sources)
        if doubles:
            ctx["labels"][TEST_DOUBLE_LABEL] = ",".join(doubles)
        files: dict[str, bytes] = {}
        if stage.kind == "base" or (stage.kind == "cann-install" and official_image):
            files.update(self._rootfs())
        if stage.kind == "base" and v.python != "system":
            ctx["python"]["artifacts"] = _bisheng_artifacts(v, sources)
        if stage.kind == "cann-install":
            ctx["cann"]["packages"] = [
                {"kind": p.kind, "url": p.url, "sha256": p.sha256} for p in sources.cann.packages(v)
            ]
        if stage.kind == "cann":
            baked = baked_env(v, backend=False)
            if captured is not None:
                ctx["captured"] = ctx["env"] = [{"name": k, "value": val, "comment": ""}
                                                for k, val in captured.items()]
            ctx["defaults"] = _env_items(baked)
            files["etc/env.json"] = _json(env_document(v.matrix.spec.defaults.profile, baked, captured,
                                                       v.env_scripts))
            files["etc/env-scripts"] = ("\n".join(v.env_scripts) + "\n").encode()
        if stage.kind == "torch":
            local = v.arch_spec.torch_local_version
            index = v.arch_spec.torch_index_url if sources.torch_index_url is None else sources.torch_index_url
            ctx["torch"] = {"index_url": index, "requirements": ["torch", "torch-npu"]}
            files["constraints.txt"] = f"torch=={v.torch}{local}\ntorch-npu=={v.torch_npu}\n".encode()
        if stage.kind in ("vllm", "sglang"):
            baked = baked_env(v, backend=True)
            below = baked_env(v, backend=False)
            # only what the backend layer changes after profile precedence is applied
            ctx["defaults"] = _env_items({k: e for k, e in baked.items()
                                          if k not in below or below[k].value != e.value})
            ctx["pins"] = v.backend_pins.model_dump(by_alias=True) if v.backend_pins else {}
            files["etc/env.json"] = _json(env_document(v.matrix.spec.defaults.profile, baked, captured,
                                                       v.env_scripts))
        if stage.kind in ("vllm", "sglang"):
            ctx["lock"], files["backend-lock.txt"] = _backend_lock(v, sources)
            ctx["allocator"] = _allocator(v, v.default_allocator)
        if stage.kind == "sglang":
            ctx["artifacts"] = _sglang_artifacts(v, sources)
        if stage.kind == "overlay":
            full = effective_env(v)
            own = ("profile:", "user", *(("allocator:",) if v.allocator is not None else ()))
            ctx["env"] = _env_items({k: e for k, e in full.items() if e.layer.startswith(own)})
            if v.allocator is not None:
                ctx["allocator"] = _allocator(v, v.allocator)
            files["etc/env.json"] = _json(env_document(v.profile, full, captured, v.env_scripts))
        return ctx, files

    def _rootfs(self) -> dict[str, bytes]:
        root = self.images_dir / "common" / "rootfs"
        return {
            f"rootfs/{p.relative_to(root).as_posix()}": p.read_bytes()
            for p in sorted(root.rglob("*"))
            if p.is_file()
        }

    def render_text(self, stage: Stage, ctx: dict[str, Any]) -> str:
        env = _environment(stage.variant.device, self.images_dir)
        name = _template_name(stage.kind, stage.variant.device, self.images_dir)
        return env.get_template(name).render(**ctx)

    def write(self, stage: Stage, out_dir: Path, ctx: dict[str, Any], files: dict[str, bytes],
              dockerfile: str | None = None) -> Path:
        """Write the context to out_dir/<slug>; atomic: a temp dir renamed into place. `dockerfile` is the
        already rendered text, when the caller rendered it first."""
        out_dir.mkdir(parents=True, exist_ok=True)
        target = out_dir / stage.slug
        if dockerfile is None:
            dockerfile = self.render_text(stage, ctx)
        tmp = Path(tempfile.mkdtemp(prefix=f".{stage.slug}.", dir=out_dir))
        try:
            (tmp / "Dockerfile").write_text(dockerfile, encoding="utf-8")
            for rel, data in files.items():
                path = tmp / rel
                path.parent.mkdir(parents=True, exist_ok=True)
                path.write_bytes(data)
                if rel.startswith("rootfs/"):
                    source = self.images_dir / "common" / rel
                    path.chmod(source.stat().st_mode & 0o777)
            for path in [tmp, *tmp.rglob("*")]:
                os.utime(path, (FIXED_MTIME, FIXED_MTIME), follow_symlinks=False)
            if target.exists():
                shutil.rmtree(target)
            tmp.rename(target)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
        return target


def _allocator(v: Variant, name: str) -> dict[str, Any]:
    return {"name": name, "packages": v.allocator_packages(name), "library": v.allocator_library(name),
            "source": v.matrix.spec.allocators[name].source}


def _bisheng_artifacts(v: Variant, sources: Sources) -> list[dict[str, str]]:
    resolved = sources.artifacts.resolve(f"python {v.python}", bisheng_wanted(v))
    return [{"url": a.url, "sha256": a.sha256} for a in resolved.values()]


def _sglang_artifacts(v: Variant, sources: Sources) -> dict[str, dict[str, str]]:
    resolved = sources.artifacts.resolve(f"sglang {v.release_name}", sglang_wanted(v))
    return {key: {"file": a.file, "url": a.url, "sha256": a.sha256, "kind": key} for key, a in resolved.items()}


def _backend_lock(v: Variant, sources: Sources) -> tuple[dict[str, Any], bytes]:
    """The stage's lock (checked against the matrix) and the sdist its source package builds from:
    from --artifacts-dir when it holds the file (it must have the lock's sha256), else the index's URL.
    A preview render (not strict) of a missing or stale lock renders with a placeholder and says why."""
    try:
        lock = load_lock(v)
    except LockError as exc:
        if sources.artifacts.strict:
            raise
        sdist = {"file": "lock-missing.tar.gz", "url": "lock-missing", "sha256": MISSING_SHA256}
        return ({"sdist": sdist, "build_requirements": ["setuptools"], "from_source": [], "missing": str(exc)},
                f"# LOCK MISSING OR STALE: {exc}\n".encode())
    file, url, sha256 = lock.source_sdist
    directory = sources.artifacts.directory
    if directory is not None and (directory / file).is_file():
        local = sha256_file(directory / file)
        if local != sha256:
            raise LockError(f"{directory / file}: sha256 {local}, but {lock.path} pins {sha256} (PyPI's)")
        url = f"{SERVER_VAR}/artifacts/{file}"
    return ({"sdist": {"file": file, "url": url, "sha256": sha256}, "build_requirements": list(lock.build_requirements),
             "from_source": list(lock.from_source), "missing": ""}, lock.text.encode())


def _json(doc: Any) -> bytes:
    return (json.dumps(doc, indent=2, sort_keys=True) + "\n").encode()
