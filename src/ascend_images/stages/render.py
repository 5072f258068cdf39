"""Render a stage into its build context directory: a Dockerfile plus the files it copies.

Output is deterministic (same inputs, same bytes), and a directory is written under a temporary
name and renamed into place only when complete, so a failed render never looks finished.
"""

from __future__ import annotations

import functools
import os
import shlex
import shutil
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import jinja2

from ascend_images.checkout import IMAGES_DIR
from ascend_images.inputs.artifacts import off_pypi_wanted
from ascend_images.inputs.sources import Sources
from ascend_images.stages.kinds import KINDS, stage_doubles, stage_label_version, stage_labels
from ascend_images.stages.names import TEST_DOUBLE_LABEL
from ascend_images.stages.stage import Stage

FIXED_MTIME = 946684800  # 2000-01-01: file times must not make two renders differ


def dockerfile_value(value: str) -> str:
    """A value for `ENV NAME=<value>`, quoted so the builder keeps it literally."""
    escaped = value.replace("\\", "\\\\").replace('"', '\\"').replace("$", "\\$")
    return f'"{escaped}"'


@functools.lru_cache(maxsize=16)
def _environment(device: str, images_dir: Path) -> jinja2.Environment:
    """One per device and templates directory, so each template is compiled once per process, not once per stage
    rendered (lint renders 874 variants: 10.3 s -> 3.5 s); jinja reloads a template whose file changed."""
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


def test_doubles(stage: Stage, sources: Sources) -> list[str]:
    """Which inputs of this image (its own or its parents') are test doubles, as its kind's row says."""
    off_pypi = sources.artifacts.test_double and bool(off_pypi_wanted(stage.variant))
    return stage_doubles(stage, {"cann": sources.cann.test_double, "artifacts": sources.artifacts.test_double,
                                 "off-pypi": off_pypi})


class Renderer:
    def __init__(self, images_dir: Path = IMAGES_DIR):
        self.images_dir = images_dir

    def context(self, stage: Stage, sources: Sources,
                captured: Mapping[str, str] | None = None) -> tuple[dict[str, Any], dict[str, bytes]]:
        """The template variables and the extra files of a stage's context: what every stage has, then its
        kind's part (stages.kinds.KINDS)."""
        v = stage.variant
        kind = KINDS[stage.kind]
        os_spec = v.os_spec
        ctx: dict[str, Any] = {
            "stage": {"kind": stage.kind, "parent": stage.parent_ref},
            "v": v.describe(),
            "labels": {
                "org.opencontainers.image.title": stage.repo.rsplit("/", 1)[-1],
                "org.opencontainers.image.description": kind.description(stage),
                "org.opencontainers.image.version": stage_label_version(stage.kind, v),
                "org.opencontainers.image.vendor": "ascend-images",
                "org.opencontainers.image.licenses": "Apache-2.0",
                "org.opencontainers.image.base.name": stage.parent_ref,
                **stage_labels(stage),
            },
            "os": {"family": os_spec.family, "python_bin": os_spec.python_bin,
                   "python_packages": list(os_spec.python_packages),
                   "python_dev_packages": list(os_spec.python_dev_packages),
                   # the Python headers too: triton(-ascend) compiles its kernel launchers against Python.h when a
                   # kernel first runs, torch's C++ extensions build against them, and so do the sdists a stage builds
                   "packages": list(os_spec.base_packages)
                   + (list(os_spec.python_packages) + list(os_spec.python_dev_packages) if v.python == "system"
                      else [])},
            "python": {"flavour": v.python, "version": v.python_version},
            "device": {"name": v.device, "opp_kernel_dir": v.device_spec.opp_kernel_dir,
                       "soc_version": v.device_spec.soc_version, "chip": v.device_spec.chip},
            "cann": {"version": v.release.cann, "home": v.cann_home, "ops_package": v.cann.ops_package,
                     "source": sources.cann.kind, "referer": v.matrix.spec.cann.download_referer,
                     "python_deps": v.cann_python_deps,
                     # the base is shared by every CANN release: it installs the matrix-wide list
                     "base_python_deps": list(v.matrix.spec.cann.python_deps), "packages": []},
            "env_scripts": v.env_scripts,
            "captured": None,
            "env": [],
            "layout_env": [],
            "off_pypi": [],
            "defaults": [],
            "user_env": bool(v.user_env),
            "allocator": None,
        }
        doubles = list(stage.parent_doubles) if stage.parent_doubles is not None else test_doubles(stage, sources)
        if doubles:
            ctx["labels"][TEST_DOUBLE_LABEL] = ",".join(doubles)
        files: dict[str, bytes] = {}
        if stage.starts_chain:
            files.update(self._rootfs())
        kind.context(stage, sources, captured, ctx, files)
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
                source = self.images_dir / "common" / rel  # a file of images/ keeps its mode (scripts run)
                if source.is_file():
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
