"""`invoke os-image --mirror URL`: a mirror with credentials is used by debootstrap and kept out of the image (its
history, its files); the image names the matrix's stock mirror in its sources, as every stage keeps stock sources.
debootstrap is replaced by what it leaves (a root file system whose sources.list names the mirror it was given) and
the engine by a recorder of the loaded tarball: what is checked is what this project writes."""

from __future__ import annotations

import io
import json
import tarfile
from pathlib import Path

import pytest

from ascend_images.errors import AscendImagesError
from ascend_images.inputs import osimage
from ascend_images.matrix.model import load_matrix
from tests.conftest import ROOT

MARKER = "os-image-mirror-s3cret"


class LoadRecorder:
    def __init__(self) -> None:
        self.loaded = b""
        self.api = self

    def load_image(self, handle) -> None:
        self.loaded = handle.read()

    def inspect_image(self, tag: str) -> dict:
        return {"Architecture": "amd64"}


def fake_debootstrap(spec: osimage.OsImageSpec, target: Path, log: Path) -> None:
    (target / "etc/apt").mkdir(parents=True)
    (target / "etc/apt/sources.list").write_text(f"deb {spec.mirror} {spec.suite} main\n")  # as debootstrap does
    log.write_text("I: Base system installed successfully.\n")


def image_files(tarball: bytes) -> tuple[dict, dict[str, bytes]]:
    with tarfile.open(fileobj=io.BytesIO(tarball)) as outer:
        manifest = json.loads(outer.extractfile("manifest.json").read())
        config = json.loads(outer.extractfile(manifest[0]["Config"]).read())
        layer = outer.extractfile(manifest[0]["Layers"][0]).read()
    with tarfile.open(fileobj=io.BytesIO(layer)) as inner:
        files = {m.name: inner.extractfile(m).read() for m in inner if m.isfile()}
    return config, files


def test_a_mirror_with_credentials_stays_out_of_the_os_image(monkeypatch, tmp_path):
    monkeypatch.setattr(osimage, "debootstrap", fake_debootstrap)
    spec = osimage.os_image_spec(load_matrix(ROOT / "matrix.yaml"), "debian12", "x86_64",
                                 f"http://mirror-user:{MARKER}@mirror.corp.example/debian")
    assert spec.public_mirror == "http://mirror.corp.example/debian"
    client = LoadRecorder()
    osimage.make_os_image(client, spec, tmp_path)
    assert MARKER.encode() not in client.loaded
    config, files = image_files(client.loaded)
    # written out by hand: Debian's own archive, as matrix.yaml's debootstrap mirror for debian12 names it
    assert files["./etc/apt/sources.list"] == b"deb http://deb.debian.org/debian bookworm main\n"
    assert config["history"][0]["created_by"].endswith("bookworm http://mirror.corp.example/debian")


def test_without_a_mirror_debootstraps_sources_are_kept(monkeypatch, tmp_path):
    monkeypatch.setattr(osimage, "debootstrap", fake_debootstrap)
    spec = osimage.os_image_spec(load_matrix(ROOT / "matrix.yaml"), "debian12", "x86_64")
    client = LoadRecorder()
    osimage.make_os_image(client, spec, tmp_path)
    sources = image_files(client.loaded)[1]["./etc/apt/sources.list"]
    assert sources == b"deb http://deb.debian.org/debian bookworm main\n"


def test_a_mirror_with_a_query_is_refused():
    with pytest.raises(AscendImagesError, match=r"--mirror http://mirror.corp.example/debian: a query or fragment"):
        osimage.os_image_spec(load_matrix(ROOT / "matrix.yaml"), "debian12", "x86_64",
                              "http://mirror.corp.example/debian?token=abc")
