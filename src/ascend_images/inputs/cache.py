"""`invoke fetch`: download every file a selection needs into a local cache, verified.

A sha256 that upstream publishes (matrix.yaml, a backend lock, --checksums) is enforced, and so is every pin of the
committed pins.yaml. A file with neither (a CANN package or a release zip nobody pinned yet) is trusted on first use:
its pin goes into this host's trust record in the cache, enforced here from then on, and fetch prints the entry to
add to pins.yaml; `--record` adds it there itself. A vendor wheel the lock does not name yet is looked up on its
vendor's index first. A download that differs from what is expected is refused with both hashes, and nothing is
cached.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TextIO

from ascend_images.console import Steps, note
from ascend_images.errors import SelectionError
from ascend_images.inputs.artifacts import Wanted, variant_wanted
from ascend_images.inputs.download import (
    DownloadError,
    Policy,
    Request,
    _size,
    commit,
    fetch_file,
    host_cache,
    sha256_file,
)
from ascend_images.inputs.pins import Pin, add_pins, adopt_cached_trust, pins_path, read_pins, trust_record_path
from ascend_images.inputs.pypi import PackageIndexError, find_wheel, index_files
from ascend_images.inputs.sources import local_wheel
from ascend_images.matrix.model import Matrix, Variant

Out = Callable[[str], None]


def default_cache() -> Path:
    return host_cache("downloads", "ASCEND_IMAGES_CACHE")


@dataclass
class FetchResult:
    file: str
    path: Path
    sha256: str
    status: str  # cached | downloaded | trusted-on-first-use | recorded


def wanted_for(variants: list[Variant], cann: bool = True) -> list[Wanted]:
    seen: dict[str, Wanted] = {}
    for v in variants:
        for w in variant_wanted(v, cann=cann):
            seen.setdefault(w.file, w)
    return list(seen.values())


def name_from_index(w: Wanted) -> tuple[Wanted, str]:
    """The file of a vendor wheel the lock does not name: the one its vendor's index lists for the platform, and the
    sha256 the index shows for it ("" if none). That sha256 checks the download; it is no pin (pins.yaml is)."""
    if w.file or w.wheel is None:
        return w
    spec, errors = w.wheel, []
    for index in spec.index_urls:
        try:
            found = find_wheel(index_files(index, spec.name), spec.name, spec.version, spec.arch, spec.python_tag)
        except PackageIndexError as exc:
            errors.append(str(exc))
            continue
        if found is not None:
            return replace(w, file=found.file, url=found.url), found.sha256
    if errors:
        raise DownloadError(f"{spec}: its vendor index could not be read: {'; '.join(errors)}")
    raise DownloadError(f"{spec}: no such wheel on {', '.join(spec.index_urls) or 'any index matrix.yaml names'}")


def expectation(file: str, published: str | None, pin: Pin | None, trust: Pin | None, pin_file: Path,
                trust_file: Path) -> tuple[str | None, str]:
    """The sha256 a file must have and where that comes from: published (matrix, lock, --checksums), else the
    committed pin, else this host's trust record; (None, "") when nothing vouches for it yet."""
    if published and pin and published != pin.sha256:
        raise SelectionError(f"{file}: pins.yaml pins sha256 {pin.sha256}, but {published} is published "
                             "(matrix.yaml, the lock or --checksums); correct the wrong one")
    if published:
        return published, "published"
    if pin:
        return pin.sha256, f"pinned in {pin_file}"
    if trust:
        return trust.sha256, f"trusted on first use on this host ({trust_file})"
    return None, ""


def fetch_all(matrix: Matrix, wanted: list[Wanted], cache: Path, out: Out, *, checksums: dict[str, str] | None = None,
              policy: Policy | None = None, stream: TextIO | None = None, record: bool = False,
              steps: Steps | None = None, state_dir: Path | None = None) -> list[FetchResult]:
    """Download (or find in the cache) each file; a failure stops at once with nothing left under a final name.
    `record`: pin every file PyPI does not carry that pins.yaml lacks, there. `steps` says file i of n and its size
    on stderr; the download bar is the live line, so the steps draw none."""
    steps = steps or Steps("fetch", live=False)
    steps.total = len(wanted)
    pin_file = pins_path(matrix)
    pins = read_pins(pin_file)
    trust_file = trust_record_path(state_dir)
    adopt_cached_trust(cache, trust_file, note)
    trusted = read_pins(trust_file)
    given = checksums or {}
    results = []
    for w in wanted:
        steps.begin(w.file or (w.wheel.name if w.wheel else w.key))
        known = {p.file: p for p in (*trusted.values(), *pins.values())}
        index_sha256, lock_sha256 = "", w.sha256  # a lock's (PyPI's) sha256 is published; a named wheel's is a pin
        if not w.file:
            named = local_wheel(w, None, cache, known)
            w, index_sha256 = (named, "") if named else name_from_index(w)
        published = given.get(w.file) or lock_sha256
        pin, trust = pins.get(w.file), trusted.get(w.file)
        expected, origin = expectation(w.file, published, pin, trust, pin_file, trust_file)
        check = expected or index_sha256 or None  # an index's sha256 checks this download, and pins nothing
        target = cache / w.file
        if target.is_file():
            got = sha256_file(target)
            if expected and got != expected:
                raise SelectionError(f"{target}: sha256 {got}, but {expected} is expected ({origin}); "
                                     "delete it and fetch again, or review the pin")
            status = "cached"
        else:
            if not w.url:
                raise SelectionError(f"{w.file}: no download URL in matrix.yaml; put the file in {cache}")
            note(f"fetch {w.file} <- {w.url}")
            try:
                partial, got = fetch_file(Request(w.url, w.file, check, w.headers), cache, policy=policy,
                                          stream=stream, log=note)
            except DownloadError as exc:
                if check and "sha256" in str(exc):
                    said = origin or "shown by the vendor's index"
                    raise DownloadError(f"{exc}. The expected sha256 was {said}: the file upstream changed; "
                                        "refused") from None
                raise
            commit(partial, cache, w.file)
            status = "downloaded"
        this = Pin(w.file, w.url or (pin.url if pin else trust.url if trust else ""), target.stat().st_size, got)
        if not expected:
            add_pins(trust_file, [this])
            trusted[w.file] = this
            status = "trusted-on-first-use"
            if not record:
                note(f"TRUST ON FIRST USE: {w.file} has no pin in {pin_file.name}; its sha256 {got} is recorded in "
                    f"{trust_file} and enforced on this host. To pin it for every host (and for `invoke publish`), "
                    f"review it and add to {pin_file} (or run `invoke fetch --record`):\n{this.line()}")
        if record and not pin and not published and not w.on_pypi:
            add_pins(pin_file, [this])
            pins[w.file] = this
            status = "recorded"
            out(f"RECORDED: {w.file} sha256 {got} pinned in {pin_file} (review it in the diff and commit it)")
        out(f"{status:>20}  {w.file}  {got[:16]}")
        results.append(FetchResult(w.file, cache / w.file, got, status))
        steps.finish(f"{_size(target.stat().st_size)} {status}")
    steps.end()
    return results
