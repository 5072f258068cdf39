"""Whether two builds of one image are the same image (DESIGN 24): the same digest, and where they are not, which
layers differ and how, in diffoscope's words (the layers' uncompressed tars compared file by file).

An image is read from the engine that has it (`docker save`, an OCI layout on a containerd image store), so the two
may be on two engines: the host's and a second one that built from nothing, or a published image pulled and its
rebuild."""

from __future__ import annotations

import gzip
import json
import shutil
import subprocess
import tarfile
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from ascend_images.errors import AscendImagesError
from ascend_images.tools import which

DIFFOSCOPE_LINES = 60  # of its text report per differing layer: enough to name what differs


@dataclass(frozen=True)
class ImageOn:
    """An image and the engine that has it (None: the one DOCKER_HOST names)."""

    ref: str
    host: str | None = None

    def docker(self, *args: str) -> list[str]:
        return ["docker", *(["--host", self.host] if self.host else []), *args]

    def __str__(self) -> str:
        return self.ref if self.host is None else f"{self.ref} (on {self.host})"


@dataclass
class Comparison:
    a: ImageOn
    b: ImageOn
    digests: tuple[str, str]  # the images' ids: their manifest digests on a containerd image store
    layers: tuple[list[str], list[str]]  # their diff-ids
    differing: list[int] = field(default_factory=list)  # indexes of layers that differ
    report: str = ""  # diffoscope's summary of each differing layer (or why there is none)

    @property
    def same(self) -> bool:
        return self.digests[0] == self.digests[1]

    def summary(self) -> str:
        if self.same:
            return f"{self.a} and {self.b}: the same image, {self.digests[0]}"
        head = (f"{self.a} is {self.digests[0]}, {self.b} is {self.digests[1]}: "
                f"{len(self.differing)} of {len(self.layers[0])} layers differ "
                f"({', '.join(str(i + 1) for i in self.differing) or 'none: the config does'})")
        return head + (f"\n{self.report}" if self.report else "")


def _inspect(image: ImageOn) -> dict:
    result = subprocess.run(image.docker("image", "inspect", image.ref), capture_output=True, text=True)
    if result.returncode != 0:
        raise AscendImagesError(f"{image}: {result.stderr.strip() or 'no such image'}")
    (found,) = json.loads(result.stdout)
    return found


def compare(a: ImageOn, b: ImageOn, work: Path, diffoscope: bool = True) -> Comparison:
    """The two images' ids and layers; where they differ, each differing layer's diffoscope summary."""
    facts = _inspect(a), _inspect(b)
    layers = (facts[0]["RootFS"]["Layers"], facts[1]["RootFS"]["Layers"])
    found = Comparison(a, b, (facts[0]["Id"], facts[1]["Id"]), layers)
    if found.same:
        return found
    found.differing = [i for i in range(max(map(len, layers)))
                       if i >= min(map(len, layers)) or layers[0][i] != layers[1][i]]
    if diffoscope and found.differing:
        found.report = diff_layers(a, b, found.differing, work)
    elif not found.differing:
        found.report = config_difference(facts[0], facts[1])
    return found


def config_difference(a: dict, b: dict) -> str:
    """What differs in the images' configs when their layers do not: labels, environment, history."""
    lines = []
    for key in ("Labels", "Env", "Entrypoint", "Cmd", "WorkingDir"):
        left, right = (a.get("Config") or {}).get(key), (b.get("Config") or {}).get(key)
        if left != right:
            lines.append(f"config {key}: {left!r} against {right!r}")
    return "\n".join(lines) or "the configs differ in what `docker inspect` does not show (history, created)"


def _layer_tars(image: ImageOn, indexes: list[int], out: Path) -> dict[int, Path]:
    """The layers of an image (by index) as uncompressed tars, from `docker save` (a docker or OCI layout)."""
    save = subprocess.Popen(image.docker("save", image.ref), stdout=subprocess.PIPE)
    blobs: dict[str, bytes] = {}
    assert save.stdout is not None
    with tarfile.open(fileobj=save.stdout, mode="r|") as archive:
        for member in archive:
            if member.isfile():
                handle = archive.extractfile(member)
                assert handle is not None
                blobs[member.name] = handle.read()
    if save.wait() != 0:
        raise AscendImagesError(f"docker save {image} failed")
    if "index.json" in blobs:  # OCI: index -> manifest (maybe through another index) -> layers
        def blob(digest: str) -> bytes:
            return blobs[f"blobs/sha256/{digest.split(':', 1)[1]}"]

        manifest = json.loads(blob(json.loads(blobs["index.json"])["manifests"][0]["digest"]))
        while "manifests" in manifest:
            manifest = json.loads(blob(manifest["manifests"][0]["digest"]))
        names = [blob(layer["digest"]) for layer in manifest["layers"]]
    else:
        (entry,) = json.loads(blobs["manifest.json"])
        names = [blobs[name] for name in entry["Layers"]]
    written = {}
    for index in indexes:
        if index >= len(names):
            continue
        data = names[index]
        if data[:2] == b"\x1f\x8b":
            data = gzip.decompress(data)
        path = out / f"layer-{index + 1}.tar"
        path.write_bytes(data)
        written[index] = path
    return written


def diff_layers(a: ImageOn, b: ImageOn, indexes: list[int], work: Path,
                run: Callable[..., subprocess.CompletedProcess] = subprocess.run) -> str:
    """diffoscope's text report of each differing layer, cut to DIFFOSCOPE_LINES lines each."""
    tool = which("diffoscope")
    if tool is None:
        return "(diffoscope is not installed: `pip install diffoscope` shows what differs in each layer)"
    work.mkdir(parents=True, exist_ok=True)
    scratch = Path(tempfile.mkdtemp(prefix="reproduce-", dir=work))
    try:
        (scratch / "a").mkdir()
        (scratch / "b").mkdir()
        left, right = _layer_tars(a, indexes, scratch / "a"), _layer_tars(b, indexes, scratch / "b")
        parts = []
        for index in indexes:
            if index not in left or index not in right:
                parts.append(f"layer {index + 1}: only in {a if index in left else b}")
                continue
            result = run([tool, "--text", "-", "--no-progress", str(left[index]), str(right[index])],
                         capture_output=True, text=True, timeout=900)
            text = "\n".join(result.stdout.splitlines()[:DIFFOSCOPE_LINES])
            parts.append(f"layer {index + 1} (diffoscope):\n{text or result.stderr.strip()[-2000:]}")
        return "\n".join(parts)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
