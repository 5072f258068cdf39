"""The stage-kind table is the one place a kind is decided: a kind added as one row and one template is planned,
named and rendered with no other change."""

import shutil

import pytest

from ascend_images.checkout import IMAGES_DIR
from ascend_images.inputs.sources import ArtifactSource, CannSource, Sources
from ascend_images.matrix.selection import select
from ascend_images.stages.kinds import KINDS, StageKind, register_kind, unregister_kind
from ascend_images.stages.names import image_tag, list_tag
from ascend_images.stages.plan import PlanOptions, make_plan
from ascend_images.stages.render import Renderer

PROBE_TEMPLATE = """{% include "common/partials/header.j2" %}
FROM {{ stage.parent }}
RUN echo probe
{% include "common/partials/labels.j2" %}
"""


@pytest.fixture
def probe_kind():
    """A throwaway kind on top of the vLLM stage: one row, taken out again after the test."""
    row = StageKind("probe", lambda v: v.backend == "vllm", lambda s: {"io.ascend-images.probe": "yes"},
                    lambda s: "a probe on the vLLM image", lambda *parts: None,
                    repo="probe", tag_scope="release", version=lambda v: "1.0", doubles=(("cann", "cann"),))
    register_kind(row, after="vllm")
    yield row
    unregister_kind("probe")
    assert "probe" not in KINDS


def test_a_kind_is_one_row_and_one_template(matrix, tmp_path, probe_kind):
    images = tmp_path / "images"
    shutil.copytree(IMAGES_DIR, images)
    (images / "common" / "probe.Dockerfile.j2").write_text(PROBE_TEMPLATE)
    (vllm,) = select(matrix, device="a3", backend="vllm", release="cann8.5.1-vllm0.18.0")
    (sglang,) = select(matrix, device="a3", backend="sglang", release="cann8.5.0-pt2.8.0")
    plan = make_plan([vllm, sglang], PlanOptions(CannSource("url", strict=False)))

    by_kind = {s.kind: s for s in plan.stages if vllm in s.users}
    assert list(by_kind) == ["base", "cann-install", "cann", "torch", "vllm", "probe"]
    assert "probe" not in [s.kind for s in plan.stages if sglang in s.users]  # its row says vllm only
    probe = by_kind["probe"]
    assert probe.parent is by_kind["vllm"]
    # names, written out by hand from the tag grammar in names.py's docstring
    assert probe.tag == "ascend-images/probe:1.0-cann8.5.1-a3-debian12-py3.11-arm64"
    assert image_tag(vllm) == probe.tag  # the last kind of the chain is the variant's image
    assert list_tag(vllm) == "1.0-cann8.5.1-a3-debian12-py3.11"

    renderer = Renderer(images)
    record = renderer.record(probe, Sources(CannSource("url", strict=False), ArtifactSource(strict=False)))
    text = renderer.render_text(probe, record)
    assert "FROM ascend-images/vllm-ascend:0.18.0-cann8.5.1-a3-debian12-py3.11-arm64\nRUN echo probe\n" in text
    assert 'io.ascend-images.probe="yes"' in text
    assert 'org.opencontainers.image.version="1.0"' in text
    assert 'io.ascend-images.stage="probe"' in text


def test_the_overlay_takes_its_name_from_the_kind_below(matrix, probe_kind):
    (v,) = select(matrix, device="a3", backend="vllm", release="cann8.5.1-vllm0.18.0", profile="debug")
    plan = make_plan([v], PlanOptions(CannSource("url", strict=False)))
    assert [s.kind for s in plan.stages][-2:] == ["probe", "overlay"]
    assert plan.top(v).tag == "ascend-images/probe:1.0-cann8.5.1-a3-debian12-py3.11-arm64-debug"


def test_a_kind_cannot_be_registered_twice(probe_kind):
    with pytest.raises(ValueError, match="'probe' exists already"):
        register_kind(probe_kind, after="vllm")
