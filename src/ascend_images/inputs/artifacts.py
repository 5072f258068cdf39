"""What a variant downloads that is not a Python package from an index: CANN .run packages, the
sgl-kernel-npu release zip or source tree, BiSheng Python, and the backend's source sdist. One list,
read by rendering (where each file comes from), `invoke fetch` (what to download) and the checks."""

from __future__ import annotations

import urllib.parse
from dataclasses import dataclass, field

from ascend_images.inputs.lockfile import Lock, LockError
from ascend_images.inputs.lockspec import VariantLocks, load_lock
from ascend_images.inputs.pypi import normalize
from ascend_images.matrix.model import Variant
from ascend_images.matrix.schema import SglangPins


@dataclass(frozen=True)
class WheelSpec:
    """A vendor wheel not yet pinned: which file it is, by its name's tags, and the indexes that list it."""

    name: str
    version: str
    arch: str
    python_tag: str
    index_urls: tuple[str, ...]

    def __str__(self) -> str:
        return f"{self.name}=={self.version} ({self.python_tag}, {self.arch})"


@dataclass(frozen=True)
class Wanted:
    key: str  # toolkit | ops | nnal | kernel_release | kernel_source | python | <lib> | sdist | wheel:<name>
    file: str  # "" for a vendor wheel whose file is not pinned yet (`wheel` says which it is)
    url: str
    mount: str  # the named build context that holds a local copy: cann | artifacts
    sha256: str | None = None  # published (matrix, lock); None when upstream publishes none
    headers: dict[str, str] = field(default_factory=dict)
    wheel: WheelSpec | None = None
    on_pypi: bool = False  # PyPI carries it (an sdist the lock pins): pinned by the lock, never by pins.yaml


def cann_wanted(v: Variant) -> list[Wanted]:
    cann = v.matrix.spec.cann
    version = urllib.parse.quote(v.release.cann)
    referer = {"Referer": cann.download_referer} if cann.download_referer else {}
    return [Wanted(kind, f, cann.download_url.format(version=version, file=f), "cann", v.cann.sha256.get(f), referer)
            for kind, f in v.package_files().items()]


def sglang_wanted(v: Variant) -> list[Wanted]:
    pins = v.backend_pins
    if v.backend != "sglang" or not isinstance(pins, SglangPins):
        return []
    spec = v.matrix.spec.backends["sglang"]
    fmt = {"version": pins.sglang, "tag": pins.sgl_kernel_npu.tag, "torch": v.torch,
           "cann": v.cann_version.tag, "chip": v.device_spec.chip, "arch": v.arch}
    key = "kernel_release" if pins.sgl_kernel_npu.from_ == "release" else "kernel_source"
    file = spec.artifacts[key].file.format(**fmt)
    return [Wanted(key, file, spec.artifacts[key].url.format(**fmt), "artifacts", spec.sha256.get(file))]


def bisheng_wanted(v: Variant) -> list[Wanted]:
    if v.python == "system":
        return []
    py = v.python_spec
    out = [Wanted("python", "py311_bisheng.tar.gz", py.tarball_url or "", "artifacts",
                  py.sha256.get("py311_bisheng.tar.gz"))]
    return out + [Wanted(lib, lib, f"{py.libs_url}{lib}", "artifacts", py.sha256.get(lib)) for lib in py.libs]


def source_wanted(lock: Lock) -> Wanted:
    """A lock's source tree: PyPI's sdist (the lock pins it) or a tag archive (pins.yaml pins it)."""
    file, url, sha256 = lock.source_sdist
    return Wanted("sdist", file, url, "artifacts", sha256, on_pypi=not lock.source_subdir)


def sdist_wanted(v: Variant) -> list[Wanted]:
    """The backend's source tree when PyPI does not carry it (a tag archive): PyPI's sdist is a file of the wheel
    store, pinned by the lock like every other."""
    if v.backend == "none":
        return []
    try:
        lock = load_lock(v)
    except LockError:
        return []  # a build stops on the missing lock itself, with the command that makes it
    wanted = source_wanted(lock)
    return [] if wanted.on_pypi else [wanted]


def off_pypi_wanted(v: Variant, locks: VariantLocks | None = None) -> list[Wanted]:
    """The locked wheels PyPI does not carry (the lock's `off-pypi` header): the file pins.yaml pinned when the lock
    was made, or one to find on the vendor's index (package_indexes) and pin on first fetch. `locks`: the variant's,
    loaded with its plan (else its backend lock is read here)."""
    if v.backend == "none":
        return []
    try:
        lock = locks.lock() if locks is not None else load_lock(v)
    except LockError:
        return []  # as sdist_wanted
    indexes = {normalize(name): tuple(spec.urls) for name, spec in v.matrix.spec.package_indexes.items()}
    out = []
    for f in lock.off_pypi:
        wheel = WheelSpec(f.name, f.version, v.arch, "cp" + v.python_version.replace(".", ""), indexes.get(f.name, ()))
        out.append(Wanted(f"wheel:{f.name}", f.file or "", f.url or "", "artifacts", f.sha256, wheel=wheel))
    return out


def framework_wanted(v: Variant) -> list[Wanted]:
    """A framework's tag archives (MindSpeed, ROLL): no index carries them, so pins.yaml pins them (or fetch records
    them on first use)."""
    pins = v.framework_pins
    if pins is None:
        return []
    return [Wanted(f"archive:{a.name}", a.file, a.url, "artifacts") for a in pins.archives]


def variant_wanted(v: Variant, cann: bool = True) -> list[Wanted]:
    """Everything the variant downloads, CANN first (the largest), in install order."""
    return [*(cann_wanted(v) if cann else []), *bisheng_wanted(v), *sglang_wanted(v), *sdist_wanted(v),
            *off_pypi_wanted(v), *framework_wanted(v)]
