"""Which image kind a check marked for one kind needs (tests/image/conftest.py): CI deselects the other images at
collection, and an --image run, which learns the kind from the image's labels, skips them. The table is written out
by hand from pyproject's marker descriptions."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from tests.image.conftest import unfit_kind


def node(*markers: str) -> SimpleNamespace:
    return SimpleNamespace(get_closest_marker=lambda name: name if name in markers else None)


NONE = SimpleNamespace(backend="none", framework="none")
SGLANG = SimpleNamespace(backend="sglang", framework="none")
VLLM = SimpleNamespace(backend="vllm", framework="none")
VERL = SimpleNamespace(backend="vllm", framework="verl")


@pytest.mark.parametrize(("markers", "variant", "unfit"), [
    ((), NONE, None),
    (("backend_image",), NONE, "a vLLM or SGLang image"),
    (("backend_image",), SGLANG, None),
    (("vllm_image",), SGLANG, "an image over vLLM-Ascend"),
    (("vllm_image",), VLLM, None),
    (("vllm_image",), VERL, None),
    (("framework_image",), VLLM, "a verl or ROLL image"),
    (("framework_image",), VERL, None),
    (("backend_image", "vllm_image"), SGLANG, "an image over vLLM-Ascend"),
])
def test_a_marked_check_needs_its_kind_of_image(markers, variant, unfit):
    assert unfit_kind(node(*markers), variant) == unfit
