"""Which image a stage reuses when several carry its content key (a forced rebuild, a second namespace)."""

from __future__ import annotations

import docker
import pytest

from ascend_images.builder.build import CONTENT_KEY_LABEL, Builder, BuildSettings
from ascend_images.inputs.sources import CannSource, Sources


class FakeApi:
    """The two engine calls the lookup makes, over an in-memory image list."""

    def __init__(self, images: dict[str, str], tags: dict[str, str]):
        self._images = images  # id -> content key label
        self._tags = tags

    def inspect_image(self, ref: str) -> dict:
        image_id = self._tags.get(ref)
        if image_id is None:
            raise docker.errors.ImageNotFound(ref)
        return {"Id": image_id, "Config": {"Labels": {CONTENT_KEY_LABEL: self._images[image_id]}}}

    def images(self, filters: dict) -> list[dict]:
        key = filters["label"].split("=", 1)[1]
        return [{"Id": i} for i, k in self._images.items() if k == key]


class FakeClient:
    def __init__(self, api: FakeApi):
        self.api = api


def _builder(api: FakeApi, tmp_path) -> Builder:
    return Builder(FakeClient(api), BuildSettings(Sources(CannSource("url", strict=False)), work_dir=tmp_path),
                   out=lambda line: None)


TAG = "ns/torch-npu:2.8.0.post2-cann8.5.0-a3-debian12-py3.11-arm64"


def test_the_tagged_image_wins_when_it_carries_the_key(tmp_path):
    """A forced rebuild on another engine state may leave two images of one key: the tagged one keeps the chain."""
    api = FakeApi({"sha256:b": "k1", "sha256:a": "k1"}, {TAG: "sha256:b"})
    assert _builder(api, tmp_path)._find_by_key("k1", TAG) == "sha256:b"


def test_without_a_matching_tag_one_image_of_the_key_is_taken_the_same_every_time(tmp_path):
    """Under another name (a second namespace): the first by id, so two lookups agree."""
    api = FakeApi({"sha256:b": "k1", "sha256:a": "k1", "sha256:x": "k2"}, {TAG: "sha256:x"})
    assert _builder(api, tmp_path)._find_by_key("k1", TAG) == "sha256:a"
    assert _builder(api, tmp_path)._find_by_key("k1", "other/ns:tag") == "sha256:a"  # no tag at all


@pytest.mark.parametrize("tags", [{}, {TAG: "sha256:x"}])
def test_no_image_with_the_key_means_build(tmp_path, tags):
    api = FakeApi({"sha256:x": "k2"}, tags)
    assert _builder(api, tmp_path)._find_by_key("k1", TAG) is None
