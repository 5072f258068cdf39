"""A stage's content key is its content, its parent (by image id or content key) and what else its build is
given (the native stages' base, SOURCE_DATE_EPOCH, the builder's labels), never its name (DESIGN 14): the same stage
rendered under two namespaces has one key; a change of content, parent or what it is given gives another."""

from __future__ import annotations

import re

from ascend_images.builder.build import build_given, content_key
from ascend_images.inputs.sources import ArtifactSource, CannSource, Sources
from ascend_images.matrix.selection import select
from ascend_images.stages.plan import PlanOptions, make_plan
from ascend_images.stages.render import Renderer

PARENT = "sha256:" + "1" * 64
INSTALLER = "sha256:" + "3" * 64  # the native stages' base image, by its id
LABELS = {"org.opencontainers.image.created": "2026-11-28T00:00:00Z", "org.opencontainers.image.revision": "r"}
SOURCES = Sources(CannSource("url", strict=False), ArtifactSource(strict=False))


def keys(matrix, tmp_path, namespace, parent=PARENT, installer=INSTALLER, epoch=1795824000, labels=LABELS,
         **selection):
    variants = select(matrix, **selection)
    plan = make_plan(variants, PlanOptions(SOURCES.cann, namespace))
    renderer = Renderer()
    out = {}
    for stage in plan.stages:
        ctx, files = renderer.context(stage, SOURCES)
        context = renderer.write(stage, tmp_path / namespace.replace("/", "_"), ctx, files)
        if stage.parent is not None:  # the context names its parent by tag, namespace and all
            assert re.search(rf"^FROM (--platform=\S+ )?{re.escape(namespace)}/", (context / "Dockerfile").read_text(),
                             re.M)
        args = {"INSTALLER_BASE": installer} if stage.lock_layer else {}
        out[stage.kind] = content_key(context, parent, "linux/arm64", stage.namespace,
                                      build_given(args, labels, epoch))
    return out


def test_the_same_stages_under_two_namespaces_have_one_key(matrix, tmp_path):
    selection = {"device": "a3", "backend": "vllm", "release": "cann8.5.1-vllm0.18.0", "profile": "debug"}
    a = keys(matrix, tmp_path, "ascend-images-demo", **selection)
    b = keys(matrix, tmp_path, "registry.example.com:5000/ascend", **selection)
    assert list(a) == ["base", "cann-install", "cann", "torch", "vllm", "overlay"]
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
    # another base for the native stages (another Python) installs the packages otherwise: each stage it installs
    # for has another key, the others keep theirs
    other = keys(matrix, tmp_path / "5", "ns", installer="sha256:" + "4" * 64, **selection)
    assert {k for k in plain if other[k] != plain[k]} == {"base", "torch"}
    # another SOURCE_DATE_EPOCH or revision is another image (its file times, its labels): every key moves
    later = keys(matrix, tmp_path / "6", "ns", epoch=1795910400, **selection)
    assert all(later[k] != plain[k] for k in plain)
    revised = keys(matrix, tmp_path / "7", "ns", labels={**LABELS, "org.opencontainers.image.revision": "s"},
                   **selection)
    assert all(revised[k] != plain[k] for k in plain)
