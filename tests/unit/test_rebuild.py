"""`invoke rebuild IMAGE` reports the image it was asked about under the name it was given (DESIGN 27): an image names
no namespace, so the rebuild is tagged under the given name's, and the comparison names that image on both sides.
The engine, the build and the comparison are fakes here (test_reproducible.py runs the real one on CI's chain); on
the code before this (5fd61b3), the namespace came from the image's base.name label, which these labels lack."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

import ascend_images.cli.rebuild as rebuild
import ascend_images.release.reproduce as reproduce
from ascend_images.cli.options import InputFlags, SourceFlags
from ascend_images.errors import SelectionError

LABELS = {f"io.ascend-images.{k}": v for k, v in (("release", "cann9.0.0-sglang0.5.17"), ("device", "a3"),
                                                  ("backend", "sglang"), ("os", "debian12"), ("arch", "aarch64"),
                                                  ("python", "system"))}
DIGEST = "sha256:" + "9f" * 32


@pytest.fixture
def fakes(monkeypatch):
    seen: dict = {}

    def build(argv, **kwargs):
        seen["argv"] = argv
        namespace = argv[argv.index("--namespace") + 1]
        out = f"image for v: {namespace}/sglang:0.5.17-cann9.0.0-a3-debian12-py3.11-arm64\n"
        return subprocess.CompletedProcess(argv, 0, out, "")

    def compare(a, b, work, diffoscope=True):
        seen["compared"] = (a.ref, b.ref)
        return reproduce.Comparison(a, b, (DIGEST, DIGEST), ([], []))

    monkeypatch.setattr(rebuild, "engine_id", lambda host: {None: "this-engine"}.get(host, f"id-of-{host}"))
    monkeypatch.setattr(rebuild, "_labels", lambda image: dict(LABELS))
    monkeypatch.setattr(rebuild.subprocess, "run", build)
    monkeypatch.setattr(reproduce, "compare", compare)
    return seen


@pytest.mark.parametrize("image", ["ascend-images-test/sglang:0.5.17-cann9.0.0-a3-debian12-py3.11-arm64",
                                   "127.0.0.1:5000/team/sglang:0.5.17-cann9.0.0-a3-debian12-py3.11-arm64"])
def test_the_report_names_the_image_as_it_was_given(fakes, image, tmp_path):
    lines: list[str] = []
    code = rebuild.rebuild_image(image, SourceFlags(), InputFlags(), lines.append, engine="unix:///second.sock",
                                 from_tree=True, work_dir=tmp_path)
    assert code == 0
    namespace = image.rsplit("/", 1)[0]  # written out: what stands before /sglang
    assert fakes["argv"][fakes["argv"].index("--namespace") + 1] == namespace
    assert fakes["compared"] == (image, image)
    assert lines[-1] == f"{image} and {image} (on unix:///second.sock): the same image, {DIGEST}"


def test_an_image_with_no_namespace_is_refused_naming_the_form(fakes, tmp_path):
    with pytest.raises(SelectionError, match=r"IMAGE sglang:0.5.17: no namespace before its repository"):
        rebuild.rebuild_image("sglang:0.5.17", SourceFlags(), InputFlags(), [].append, engine="unix:///x",
                              from_tree=True, work_dir=Path(tmp_path))


@pytest.mark.parametrize("engine", [None, "", "  "])
def test_no_engine_is_refused_before_anything_runs(fakes, engine, tmp_path):
    with pytest.raises(SelectionError, match=r"--engine is required: the engine to rebuild on, another than this one "
                                             r"\(a DOCKER_HOST value: ssh://USER@HOST"):
        rebuild.rebuild_image("ascend-images-test/sglang:0.5.17", SourceFlags(), InputFlags(), [].append,
                              engine=engine, from_tree=True, work_dir=tmp_path)
    assert fakes == {}


def test_the_engine_that_holds_the_image_is_refused(fakes, monkeypatch, tmp_path):
    monkeypatch.setattr(rebuild, "engine_id", lambda host: "one-engine")  # DOCKER_HOST and --engine: the same daemon
    with pytest.raises(SelectionError, match=r"--engine unix:///var/run/docker.sock is the engine that holds "
                                             r"ascend-images-test/sglang:0.5.17: the rebuild, tagged under the "
                                             r"image's name, would replace it"):
        rebuild.rebuild_image("ascend-images-test/sglang:0.5.17", SourceFlags(), InputFlags(), [].append,
                              engine="unix:///var/run/docker.sock", from_tree=True, work_dir=tmp_path)
    assert fakes == {}


def test_an_engine_that_does_not_answer_is_named(tmp_path):
    with pytest.raises(SelectionError, match=rf"--engine unix://{tmp_path}/none.sock: no Docker engine answers there"):
        rebuild.engine_id(f"unix://{tmp_path}/none.sock")
