"""Which image a stage reuses when several carry its content key (forced rebuilds leave twins)."""

from __future__ import annotations

import docker
import pytest

from ascend_images.builder.build import CONTENT_KEY_LABEL, Builder, BuildSettings
from ascend_images.inputs.sources import CannSource, Sources


class FakeApi:
    """The two engine calls the lookup makes, over an in-memory image list."""

    def __init__(self, images: list[dict], tags: dict[str, str]):
        self._images = {i["Id"]: i for i in images}
        self._tags = tags

    def inspect_image(self, ref: str) -> dict:
        image_id = self._tags.get(ref)
        if image_id is None:
            raise docker.errors.ImageNotFound(ref)
        image = self._images[image_id]
        return {"Id": image_id, "Config": {"Labels": image["Labels"]}}

    def images(self, filters: dict, all: bool = False) -> list[dict]:
        assert all, "stage images with children are hidden without all=True"
        label = filters["label"]
        key = label.split("=", 1)[1]
        return [i for i in self._images.values() if i["Labels"].get(CONTENT_KEY_LABEL) == key]

    def history(self, image_id: str) -> list[dict]:
        return [{"CreatedBy": step} for step in self._images[image_id]["History"]]


class FakeClient:
    def __init__(self, api: FakeApi):
        self.api = api


def _image(image_id: str, key: str, created: int, own: bool = True) -> dict:
    """A stage image (its build ended with the builder's LABEL steps), or, with own=False, a layer left by a
    child's interrupted build: it inherited the key label, but its top step is the child's."""
    top = ["LABEL org.opencontainers.image.revision=r", f"LABEL {CONTENT_KEY_LABEL}={key}"] if own else \
        ["COPY file:abc in /etc/ascend-images/constraints.txt", "SHELL [/bin/bash]", "ARG ASCEND_BUILD_SERVER="]
    return {"Id": image_id, "Created": created, "Labels": {CONTENT_KEY_LABEL: key}, "History": [*top, "RUN x"]}


def _builder(api: FakeApi, tmp_path) -> Builder:
    return Builder(FakeClient(api), BuildSettings(Sources(CannSource("url", strict=False)), work_dir=tmp_path),
                   out=lambda line: None)


TAG = "ns/torch-npu:2.8.0.post2-cann8.5.0-a3-debian12-py3.11-arm64"


def test_the_tagged_twin_wins_over_a_newer_one(tmp_path):
    api = FakeApi([_image("sha256:old", "k1", 100), _image("sha256:new", "k1", 200)], {TAG: "sha256:old"})
    assert _builder(api, tmp_path)._find_by_key("k1", TAG) == "sha256:old"


def test_without_a_matching_tag_the_oldest_twin_wins(tmp_path):
    """The oldest is the one children were built on before any forced twin existed; a twin made later (a bench's
    cold build) must not orphan them for a build under another name."""
    api = FakeApi([_image("sha256:new", "k1", 200), _image("sha256:old", "k1", 100), _image("sha256:x", "k2", 300)],
                  {TAG: "sha256:x"})  # the tag points to an image with another key
    assert _builder(api, tmp_path)._find_by_key("k1", TAG) == "sha256:old"
    assert _builder(api, tmp_path)._find_by_key("k1", "other/ns:tag") == "sha256:old"  # no tag at all


@pytest.mark.parametrize("tags", [{}, {TAG: "sha256:x"}])
def test_no_image_with_the_key_means_build(tmp_path, tags):
    api = FakeApi([_image("sha256:x", "k2", 300)], tags)
    assert _builder(api, tmp_path)._find_by_key("k1", TAG) is None


def test_a_layer_left_by_an_interrupted_child_build_is_never_reused(tmp_path):
    """Seen here: a torch build killed after `COPY constraints.txt` left an untagged layer carrying the CANN
    image's labels; taken for the CANN stage, it changed the torch stage's key and forced a rebuild."""
    api = FakeApi([_image("sha256:stage", "k1", 100), _image("sha256:layer", "k1", 200, own=False),
                   _image("sha256:x", "k2", 300)], {TAG: "sha256:x"})
    assert _builder(api, tmp_path)._find_by_key("k1", TAG) == "sha256:stage"
    tagged_layer = FakeApi([_image("sha256:layer", "k1", 200, own=False)], {TAG: "sha256:layer"})
    assert _builder(tagged_layer, tmp_path)._find_by_key("k1", TAG) is None


def test_a_layer_one_step_above_the_stage_is_not_the_stage(tmp_path):
    """Seen in CI (b7ccd16): the CANN stage's build put one ENV layer on the cann-install image; the key label three
    steps below its top made the old check (the key among the top 4 steps) take it for cann-install, and a build of
    the same selection under another namespace then rebuilt cann and torch on it."""
    stage = _image("sha256:stage", "k1", 100)
    stage["History"] = ["LABEL org.opencontainers.image.revision=r", "LABEL org.opencontainers.image.created=t",
                        f"LABEL {CONTENT_KEY_LABEL}=k1", "RUN x"]
    child = {**stage, "Id": "sha256:child", "Created": 200, "History": ["ENV A=1", *stage["History"]]}
    api = FakeApi([stage, child], {})
    assert _builder(api, tmp_path)._find_by_key("k1", TAG) == "sha256:stage"


def test_of_one_builds_label_steps_only_the_top_one_is_the_stage(tmp_path):
    """The builder's labels are LABEL steps of their own: the layer after the key label is an image with the key on
    top too; the stage is the one above it."""
    mid = {**_image("sha256:mid", "k1", 300), "History": ["LABEL org.opencontainers.image.created=t",
                                                         f"LABEL {CONTENT_KEY_LABEL}=k1", "RUN x"]}
    top = {**_image("sha256:top", "k1", 100), "ParentId": "sha256:mid",
           "History": ["LABEL org.opencontainers.image.revision=r", *mid["History"]]}
    api = FakeApi([mid, top], {})
    assert _builder(api, tmp_path)._find_by_key("k1", TAG) == "sha256:top"
