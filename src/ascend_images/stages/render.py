"""Render a stage into its build context directory: a Dockerfile plus the files it copies.

Output is deterministic (same inputs, same bytes), and a directory is written under a temporary
name and renamed into place only when complete, so a failed render never looks finished.
"""

from __future__ import annotations

import functools
import shlex
import shutil
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import jinja2

from ascend_images.checkout import IMAGES_DIR
from ascend_images.inputs.sources import INPUTS_DIR, Sources
from ascend_images.stages.contexts import DOWNLOADS_LABEL, INSTALLER_FILES, INSTALLER_OS
from ascend_images.stages.kinds import KINDS, image_labels, stage_doubles
from ascend_images.stages.record import NAMED_CONTEXTS, SECRETS, StageInputs, StageRecord
from ascend_images.stages.stage import Stage


def dockerfile_value(value: str, expands: bool = False) -> str:
    """A value for `ENV NAME=<value>`, quoted so the builder keeps it literally; with `expands`, its `${NAME}`s are
    left for the builder to expand (the image below's value of a list a CANN env line extends)."""
    escaped = value.replace("\\", "\\\\").replace('"', '\\"')
    if not expands:
        escaped = escaped.replace("$", "\\$")
    return f'"{escaped}"'


# Where a RUN step finds the build's inputs (DESIGN 5, 23): each named build context bind-mounted read-only under
# INPUTS_DIR; the secrets as secret mounts (record.py names both); the wheels compiled on the target kept in a cache
# mount between builds
BUILT_WHEELS_CACHE = "--mount=type=cache,id=ascend-images-built-wheels,target=/var/cache/ascend-images/built-wheels"


def artifact_arg(a: Mapping[str, str]) -> str:
    """`SOURCE#SHA256` as fetch takes it; a download PyPI does not carry names its sha256 build arg."""
    return f"{a['url']}#${{{a['arg']}}}" if a.get("arg") else f"{a['url']}#{a['sha256']}"


def mounts(*names: str) -> str:
    """The --mount flags of a RUN step that uses the named inputs ("secrets" and "built-wheels" too)."""
    flags = []
    for name in names:
        if name in NAMED_CONTEXTS:
            flags.append(f"--mount=type=bind,from={name},target={INPUTS_DIR}/{name}")
        elif name == "secrets":
            flags += [f"--mount=type=secret,id={secret}" for secret in SECRETS]
        elif name == "built-wheels":
            flags.append(BUILT_WHEELS_CACHE)
        else:
            raise ValueError(f"no build input named {name!r}")
    return " ".join(flags)


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
    # a downloads label names each file's sha256 build arg, which the build expands (contexts.download)
    env.filters["label_block"] = lambda labels: " \\\n      ".join(
        f"{k}={dockerfile_value(v, k.startswith(DOWNLOADS_LABEL))}" for k, v in labels.items()
    )
    env.filters["env_block"] = lambda items: " \\\n    ".join(
        f"{i['name']}={dockerfile_value(i['value'], i.get('expands', False))}" for i in items
    )
    env.globals["mounts"] = mounts
    # the first and last command of a step that writes: what it changed gets SOURCE_DATE_EPOCH (DESIGN 24)
    env.globals["clamp_begin"] = "/usr/local/libexec/ascend-images/clamp-mtimes --begin"
    env.globals["clamp_end"] = "/usr/local/libexec/ascend-images/clamp-mtimes"
    env.filters["artifact_arg"] = artifact_arg
    env.filters["cann_arg"] = lambda p: f"{p['kind']}={artifact_arg(p)}"
    return env


def _template_name(kind: str, device: str, images_dir: Path) -> str:
    own = images_dir / device / f"{kind}.Dockerfile.j2"
    return own.name if own.exists() else f"common/{kind}.Dockerfile.j2"


def test_doubles(stage: Stage, sources: Sources) -> list[str]:
    """Which inputs of this image (its own or its parents') are test doubles, as its kind's row says; an overlay
    built alone over an image of ours repeats that image's."""
    if stage.parent_doubles is not None:
        return list(stage.parent_doubles)
    off_pypi = sources.artifacts.test_double and bool(stage.off_pypi)
    return stage_doubles(stage, {"cann": sources.cann.test_double, "artifacts": sources.artifacts.test_double,
                                 "off-pypi": off_pypi})


class Renderer:
    def __init__(self, images_dir: Path = IMAGES_DIR):
        self.images_dir = images_dir

    def record(self, stage: Stage, sources: Sources) -> StageRecord:
        """What rendering the stage gives its build (record.py): the template variables and the extra files of its
        context, what every stage has and then its kind's part (stages.kinds.KINDS), and what its build is given."""
        v = stage.variant
        kind = KINDS[stage.kind]
        os_spec = v.os_spec
        ctx: dict[str, Any] = {
            "stage": {"kind": stage.kind, "parent": stage.parent_ref},
            "v": v.describe(),
            "labels": image_labels(stage, test_doubles(stage, sources)),
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
                       "soc_version": v.device_spec.soc_version, "chip": v.device_spec.chip,
                       "control_nodes": list(v.device_spec.control_nodes)},
            "cann": {"version": v.release.cann, "home": v.cann_home, "ops_package": v.cann.ops_package,
                     "source": sources.cann.kind, "referer": v.matrix.spec.cann.download_referer,
                     "python_deps": v.cann_python_deps,
                     # the base is shared by every CANN release: it installs the matrix-wide list
                     "base_python_deps": list(v.matrix.spec.cann.python_deps), "packages": []},
            "env_scripts": v.env_scripts,
            "installer": {"base": v.matrix.spec.os[INSTALLER_OS].image,
                          "python_packages": list(v.matrix.spec.os[INSTALLER_OS].python_packages)},
            "env": [],
            "layout_env": [],
            "off_pypi": [],
            "defaults": [],
            "user_env": bool(v.user_env),
            "allocator": None,
            "image_os": {"needed_by": [], "packages": []},
        }
        files: dict[str, bytes] = {}
        if stage.starts_chain:
            files.update(self._rootfs())
        inputs = StageInputs()
        kind.context(stage, sources, ctx, files, inputs)
        labels = ctx.pop("labels")
        # the native stages (the kinds that install a lock) start FROM INSTALLER_BASE, a build arg of their own
        base = ctx["installer"]["base"] if stage.lock_layer is not None else None
        return inputs.freeze(stage.slug, ctx, files, base, labels)

    def _rootfs(self) -> dict[str, bytes]:
        root = self.images_dir / "common" / "rootfs"
        return {
            f"rootfs/{p.relative_to(root).as_posix()}": p.read_bytes()
            for p in sorted(root.rglob("*"))
            if p.is_file()
        }

    def render_text(self, stage: Stage, record: StageRecord) -> str:
        """The stage's Dockerfile, rendered from its record."""
        env = _environment(stage.variant.device, self.images_dir)
        name = _template_name(stage.kind, stage.variant.device, self.images_dir)
        return env.get_template(name).render(**record.variables())

    def write(self, stage: Stage, out_dir: Path, record: StageRecord, dockerfile: str | None = None) -> Path:
        """Write the context to out_dir/<slug>; atomic: a temp dir renamed into place. `dockerfile` is the
        already rendered text, when the caller rendered it first. The files keep the time they were written at:
        BuildKit sends a context's file again only when its size or time changed (moby/buildkit#2592, #4817), so
        one time for every render baked a changed file of the same size stale; the images never see these times
        (images/common/partials/image-files.j2 gives what they copy SOURCE_DATE_EPOCH)."""
        out_dir.mkdir(parents=True, exist_ok=True)
        target = out_dir / stage.slug
        if dockerfile is None:
            dockerfile = self.render_text(stage, record)
        tmp = Path(tempfile.mkdtemp(prefix=f".{stage.slug}.", dir=out_dir))
        try:
            (tmp / "Dockerfile").write_text(dockerfile, encoding="utf-8")
            for rel, data in record.files.items():
                path = tmp / rel
                path.parent.mkdir(parents=True, exist_ok=True)
                path.write_bytes(data)
                # a file of images/ keeps its mode (scripts run)
                source = self.images_dir / "common" / INSTALLER_FILES.get(rel, rel)
                if source.is_file():
                    path.chmod(source.stat().st_mode & 0o777)
            if target.exists():
                shutil.rmtree(target)
            tmp.rename(target)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
        return target
