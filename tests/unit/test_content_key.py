"""A stage's content key is its content and its parent's image id, never its name (DESIGN 14): the same stage
rendered under two namespaces has one key; a change of content or of parent gives another."""

from __future__ import annotations

import re

from ascend_images.builder.build import content_key
from ascend_images.inputs.sources import ArtifactSource, CannSource, Sources
from ascend_images.matrix.selection import select
from ascend_images.stages.plan import PlanOptions, make_plan
from ascend_images.stages.render import Renderer

PARENT = "sha256:" + "1" * 64
INSTALLER = "sha256:" + "3" * 64
SOURCES = Sources(CannSource("url", strict=False), ArtifactSource(strict=False))


def keys(matrix, tmp_path, namespace, parent=PARENT, installer=INSTALLER, **selection):
    variants = select(matrix, **selection)
    plan = make_plan(variants, PlanOptions(SOURCES.cann, namespace))
    renderer = Renderer()
    out = {}
    for stage in plan.stages:
        ctx, files = renderer.context(stage, SOURCES, captured={"ASCEND_HOME_PATH": "/x"}
                                      if stage.kind == "cann" else None)
        context = renderer.write(stage, tmp_path / namespace.replace("/", "_"), ctx, files)
        if stage.parent is not None:  # the context names its parent by tag, namespace and all
            assert re.search(rf"^FROM (--platform=\S+ )?{re.escape(namespace)}/", (context / "Dockerfile").read_text(),
                             re.M)
        tools = (installer,) if stage.needs else ()  # the installer image that installs its packages
        out[stage.kind] = content_key(context, parent, "linux/arm64", stage.namespace, tools)
    return out


def test_the_same_stages_under_two_namespaces_have_one_key(matrix, tmp_path):
    selection = {"device": "a3", "backend": "vllm", "release": "cann8.5.1-vllm0.18.0", "profile": "debug"}
    a = keys(matrix, tmp_path, "ascend-images-demo", **selection)
    b = keys(matrix, tmp_path, "registry.example.com:5000/ascend", **selection)
    assert list(a) == ["installer", "base", "cann-install", "cann", "torch", "vllm", "overlay"]
    assert a == b


def test_content_or_parent_changes_the_key(matrix, tmp_path):
    selection = {"device": "a3", "backend": "none", "release": "cann8.5.0-pt2.8.0"}
    plain = keys(matrix, tmp_path / "1", "ns", **selection)
    assert keys(matrix, tmp_path / "1b", "other-ns", **selection) == plain
    other_parent = keys(matrix, tmp_path / "2", "ns", parent="sha256:" + "2" * 64, **selection)
    assert all(plain[k] != other_parent[k] for k in plain)
    changed = keys(matrix, tmp_path / "3", "ns", env={"OMP_NUM_THREADS": "8"}, **selection)  # an overlay on top
    assert {k: v for k, v in changed.items() if k != "overlay"} == plain and "overlay" in changed
    a2 = keys(matrix, tmp_path / "4", "ns", **{**selection, "device": "a2"})
    assert a2["base"] == plain["base"] and a2["cann-install"] != plain["cann-install"]
    # another installer (another uv, another Python) installs the packages otherwise: each stage it installs for
    # has another key, the others keep theirs
    other = keys(matrix, tmp_path / "5", "ns", installer="sha256:" + "4" * 64, **selection)
    assert {k for k in plain if other[k] != plain[k]} == {"base", "torch"}
