"""Whether two builds of one image are the same image (DESIGN 24): the same digest, and where they are not, which
layers differ and how: each differing layer's entries listed by what differs in them (content, time, mode, owner;
seconds even for a layer of GBs), then diffoscope's words on the content (bounded by its own --timeout).

An image is read from the engine that has it (`docker save`, an OCI layout on a containerd image store), so the two
may be on two engines: the host's and a second one that built from nothing, or a published image pulled and its
rebuild."""

from __future__ import annotations

import gzip
import hashlib
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
DIFFOSCOPE_SECONDS = 120  # per layer: diffoscope took over 5 minutes on a 1.4 GB layer and had not finished
ENTRIES_SHOWN = 12  # differing entries named per layer


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
    """The layers of an image (by index) as uncompressed tars, from `docker save` (a docker or OCI layout), written to
    disk as they come (an image may be GBs)."""
    saved = out / "image.tar"
    with saved.open("wb") as handle:
        if subprocess.run(image.docker("save", image.ref), stdout=handle).returncode != 0:
            raise AscendImagesError(f"docker save {image} failed")
    written = {}
    with tarfile.open(saved) as archive:
        def blob(name: str) -> bytes:
            handle = archive.extractfile(name)
            assert handle is not None
            return handle.read()

        if "index.json" in archive.getnames():  # OCI: index -> manifest (maybe through another index) -> layers
            manifest = json.loads(blob(f"blobs/sha256/{json.loads(blob('index.json'))['manifests'][0]['digest'][7:]}"))
            while "manifests" in manifest:
                manifest = json.loads(blob(f"blobs/sha256/{manifest['manifests'][0]['digest'][7:]}"))
            names = [f"blobs/sha256/{layer['digest'][7:]}" for layer in manifest["layers"]]
        else:
            (entry,) = json.loads(blob("manifest.json"))
            names = list(entry["Layers"])
        for index in indexes:
            if index >= len(names):
                continue
            path = out / f"layer-{index + 1}.tar"
            source = archive.extractfile(names[index])
            assert source is not None
            with source, path.open("wb") as target:
                head = source.read(2)
                source.seek(0)
                shutil.copyfileobj(gzip.GzipFile(fileobj=source) if head == b"\x1f\x8b" else source, target)
            written[index] = path
    saved.unlink()
    return written


def _entries(layer: Path) -> dict[str, tuple]:
    """Each entry of a layer tar: what an image's file is made of (content, time, mode, owner, kind, link)."""
    found = {}
    with tarfile.open(layer) as archive:
        for member in archive:
            digest = ""
            if member.isfile():
                handle = archive.extractfile(member)
                assert handle is not None
                digest = hashlib.file_digest(handle, "sha256").hexdigest()
            found[member.name] = (digest, member.mtime, oct(member.mode), f"{member.uid}:{member.gid}",
                                  member.type, member.linkname, tuple(sorted(member.pax_headers.items())))
    return found


ASPECTS = ("content", "time", "mode", "owner", "kind", "link", "pax headers")


def entry_differences(left: Path, right: Path, limit: int = ENTRIES_SHOWN) -> str:
    """The entries two layer tars differ in, and in what: a count per aspect, then the first `limit` entries."""
    a, b = _entries(left), _entries(right)
    differing = [name for name in sorted(set(a) | set(b)) if a.get(name) != b.get(name)]
    if not differing:
        return "the same entries (the tars differ in order or padding)"
    counts: dict[str, int] = {}
    lines = []
    for name in differing:
        if name not in a or name not in b:
            aspects = [f"only in {'the first' if name in a else 'the second'}"]
        else:
            aspects = [aspect for aspect, x, y in zip(ASPECTS, a[name], b[name], strict=True) if x != y]
        for aspect in aspects:
            counts[aspect] = counts.get(aspect, 0) + 1
        if len(lines) < limit:
            shown = [f"{aspect} {a[name][1]} against {b[name][1]}" if aspect == "time" else aspect
                     for aspect in aspects]
            lines.append(f"  {name}: {', '.join(shown)}")
    more = f"\n  ... and {len(differing) - limit} more" if len(differing) > limit else ""
    tally = ", ".join(f"{n} {aspect}" for aspect, n in counts.items())
    return f"{len(differing)} of {len(a)} entries differ ({tally}):\n" + "\n".join(lines) + more


def diff_layers(a: ImageOn, b: ImageOn, indexes: list[int], work: Path,
                run: Callable[..., subprocess.CompletedProcess] = subprocess.run,
                seconds: int = DIFFOSCOPE_SECONDS) -> str:
    """Each differing layer: its entries by what differs in them, then diffoscope's text report on it (cut to
    DIFFOSCOPE_LINES lines, and stopped by its own --timeout)."""
    tool = which("diffoscope")
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
            parts.append(f"layer {index + 1}: {entry_differences(left[index], right[index])}")
            if tool is None:
                parts.append("  (diffoscope is not installed: `pip install diffoscope` shows how their contents "
                             "differ)")
                continue
            result = run([tool, "--text", "-", "--no-progress", "--timeout", str(seconds), str(left[index]),
                          str(right[index])], capture_output=True, text=True, timeout=seconds + 300)
            text = "\n".join(result.stdout.splitlines()[:DIFFOSCOPE_LINES])
            parts.append(f"layer {index + 1} (diffoscope):\n{text or result.stderr.strip()[-2000:]}")
        return "\n".join(parts)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
