"""The inputs area: what a build takes in. `fetch` fills the download cache, `lock` resolves and checks the locks,
`outdated` asks the index what is newer than the matrix."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

from ascend_images.cli.options import LockFlags, Selection, SourceFlags, output_path, whole_number
from ascend_images.cli.taskdef import MATRIX_HELP, SELECTION, SOURCES, exit_with, run_body, task
from ascend_images.console import Steps, note
from ascend_images.errors import AscendImagesError, SelectionError
from ascend_images.inputs.checksums import parse_checksums
from ascend_images.inputs.lockfile import LockError, LockSpec, check_lock, lock_spec, lock_specs, locks_dir, parse_lock
from ascend_images.inputs.pins import pins_path, read_pins
from ascend_images.matrix.model import Matrix, Variant, all_variants, choices
from ascend_images.matrix.rules import enforce

Out = Callable[[str], None]


@task(groups=(SELECTION, SOURCES.without("cache_dir")),
      help={"dest": "cache directory (default ~/.cache/ascend-images/downloads)",
            "record": "pin every download PyPI does not carry that pins.yaml lacks, there (review the diff, commit)"})
def fetch(c, sel, sources, dest=None, record=False):
    """Download every file the selection needs (CANN, kernel zips, tag archives, vendor wheels, BiSheng Python,
    sdists) into the cache, verified against pins.yaml; what it lacks is trusted on first use on this host."""
    sources.cache_dir = dest
    run_body(fetch_selection, sel, sources, print, record=record)


@task(help={"release": "release name(s), comma-separated; default: every release with a backend",
            "backend": "vllm, sglang (comma-separated); default: both",
            "arch": "x86_64, aarch64 (comma-separated); default: both",
            "check": "only check that each lock exists and matches matrix.yaml (no network)",
            "index_url": "the package index to resolve against (default PyPI)",
            "torch_index_url": "index of the x86_64 torch CPU build (default: the matrix's)",
            "extra_index_url": "another index to resolve against (repeatable; builds need it too)",
            "matrix": MATRIX_HELP,
            "work_dir": "where the resolver's downloads are kept (default: the project's build/)",
            "framework": "only this framework's locks (over existing backend locks); default: backend locks, then "
                         "every framework's"},
      iterable=["extra_index_url"])
def lock(c, release=None, backend=None, arch=None, check=False, index_url=None, torch_index_url=None,
         extra_index_url=None, matrix=None, work_dir=None, framework=None):
    """Resolve each backend's lock (locks/<release>/<backend>-<arch>.txt) for its target platform, then each
    framework's over it (locks/<release>/<backend>-<framework>-<arch>.txt)."""
    from ascend_images.inputs.pypi import checked_index_url

    flags = LockFlags(release, backend, arch, run_body(checked_index_url, "--index-url", index_url)
                      if index_url is not None else "", torch_index_url, list(extra_index_url or []), framework)
    for url in flags.extra_index_urls:
        run_body(checked_index_url, "--extra-index-url", url)
    if torch_index_url:
        run_body(checked_index_url, "--torch-index-url", torch_index_url)
    cache = run_body(output_path, "--work-dir", work_dir, "build") / "cache" / "sdists"
    exit_with(run_body(make_locks, Selection(matrix), flags, print, check=check, cache_dir=cache))


@task(help={"matrix": MATRIX_HELP, "index_url": "the PEP 503 index to ask (default PyPI)",
            "package": "only this package (repeatable): torch-npu, torch, vllm, vllm-ascend, triton-ascend, sglang",
            "pre": "include pre-releases", "limit": "newest N releases per package (default 5)", "json": "print JSON"},
      iterable=["package"])
def outdated(c, matrix=None, index_url="https://pypi.org/simple", package=None, pre=False, limit="5", json=False):
    """Newer releases of what the matrix pins: platforms, sdist, what they pin, and what blocks a build."""
    from ascend_images.inputs.pypi import checked_index_url

    run_body(show_outdated, Selection(matrix), print, index_url=run_body(checked_index_url, "--index-url", index_url),
             packages=list(package or []), pre=pre, limit=run_body(whole_number, "--limit", limit, 1), as_json=json)


def fetch_selection(sel: Selection, flags: SourceFlags, out: Out, *, stream=None, record: bool = False) -> list:
    """`invoke fetch`: every download the selection needs, into the cache (CANN too, unless it comes from
    --cann-dir or an image)."""
    from ascend_images.inputs.cache import fetch_all, wanted_for

    matrix = sel.load()
    variants = sel.variants(matrix)
    steps = Steps("fetch", live=False)  # the download bar is fetch's live line
    enforce(variants, warn=steps.warn)
    kind = flags.cann_kind or matrix.spec.defaults.cann_source
    wanted = wanted_for(variants, cann=kind == "url")
    if flags.artifacts_dir:  # those come from the directory the user named
        wanted = [w for w in wanted if w.mount != "artifacts"]
    cache = flags.cache()
    note(f"fetch: {len(wanted)} file(s) for {len(variants)} variant(s) into {cache}")
    given = parse_checksums(Path(flags.checksums)) if flags.checksums else {}
    results = fetch_all(matrix, wanted, cache, out, checksums=given, stream=stream, record=record, steps=steps,
                        state_dir=flags.trust_record().parent)
    counts: dict[str, int] = {}
    for r in results:
        counts[r.status] = counts.get(r.status, 0) + 1
    out("fetch: " + (", ".join(f"{n} {status}" for status, n in counts.items()) or "nothing to fetch"))
    return results


def show_outdated(sel: Selection, out: Out, *, index_url: str, packages: list[str] | None = None,
                  pre: bool = False, limit: int = 5, as_json: bool = False, err: Out = note) -> list:
    """The rows on `out`; a wheel whose metadata cannot be read is a warning on `err`, so --json stays one
    document."""
    from ascend_images.inputs.outdated import as_json as to_json
    from ascend_images.inputs.outdated import outdated, pinned_versions, table

    matrix = sel.load()
    known = list(pinned_versions(matrix))
    for name in packages or []:
        if name not in known:
            raise SelectionError(f"--package {name!r}: the matrix pins {', '.join(known)}")
    rows = outdated(matrix, index_url, err, packages=packages, pre=pre, limit=limit)
    if as_json:
        out(to_json(rows))
    else:
        out(table(rows, pinned_versions(matrix)) if rows else "nothing newer than the matrix on the index")
    return rows


def lock_selection(sel: Selection, flags: LockFlags) -> list[LockSpec]:
    matrix = sel.load()
    variants = all_variants(matrix)
    releases = choices("release", "--release", flags.release, matrix.spec.releases)
    backends = choices("backend", "--backend", flags.backend, ["vllm", "sglang"])
    arches = choices("arch", "--arch", flags.arch, matrix.spec.arches)
    chosen = [v for v in variants if v.release_name in releases and v.backend in backends and v.arch in arches]
    specs = lock_specs(matrix, chosen)
    if not specs:
        raise SelectionError("no release in the selection has a vllm or sglang backend to lock")
    return specs


def make_locks(sel: Selection, flags: LockFlags, out: Out, *, check: bool, cache_dir: Path,
               steps: Steps | None = None) -> int:
    """--check: report each lock's state without network (exit 1 when any is missing or stale).
    Otherwise resolve and write each lock; one failure does not stop the others."""
    from ascend_images.inputs.lockgen import LockMaker
    from ascend_images.inputs.pypi import PYPI_SIMPLE

    matrix = sel.load()
    root = locks_dir(matrix)
    specs = [] if flags.framework else lock_selection(sel, flags)
    frameworks = framework_lock_variants(matrix, flags)
    steps = steps or Steps("lock")
    steps.total = len(specs) + len(frameworks)
    failed = skipped = 0
    maker = LockMaker(note, cache_dir, flags.index_url or PYPI_SIMPLE, flags.torch_index_url,
                      tuple(flags.extra_index_urls), pins=read_pins(pins_path(matrix)))
    for spec in specs:
        path = spec.path(root)
        steps.begin(f"{spec.release}/{spec.backend}/{spec.arch}")
        try:
            blocked = matrix.spec.releases[spec.release].blocked
            if check:
                why = not_locked(matrix, spec)
                if why and not path.is_file():  # the matrix says it is not to be had: listed, with why; no failure
                    skipped += 1
                    out(f"skipped {path.relative_to(root.parent)}: {why}")
                    continue
                if not path.is_file():
                    raise LockError(f"missing: {spec.command}")
                check_lock(spec, parse_lock(path))
                out(f"ok      {path.relative_to(root.parent)}")
                continue
            if blocked:  # the matrix knows it cannot be locked: say why instead of failing in the resolver
                raise LockError(f"matrix.yaml marks release {spec.release} as blocked: {blocked}")
            started = time.monotonic()
            written = maker.make(spec, root)
            pins = parse_lock(written).pins
            out(f"wrote   {written.relative_to(root.parent)}: {len(pins)} packages "
                f"({time.monotonic() - started:.1f}s)")
        except AscendImagesError as exc:
            failed += 1
            out(f"FAILED  {path.relative_to(root.parent)}: {exc}")
    for v in frameworks:
        steps.begin(f"{v.release_name}/{v.backend}+{v.framework}/{v.arch}")
        why = not_locked(matrix, lock_spec(v))
        if why:  # no backend lock to resolve over: the framework's is not to be had either
            skipped += 1
            out(f"skipped {v.release_name}/{v.backend}-{v.framework}-{v.arch}: its backend's lock: {why}")
            continue
        failed += _framework_lock(v, root, out, check=check, index_url=flags.index_url or PYPI_SIMPLE,
                                  cache_dir=cache_dir)
    steps.end()
    counted = len(specs) + len(frameworks) - skipped
    out(f"{counted - failed} of {counted} locks {'fresh' if check else 'written'}"
        + (f", {skipped} skipped (the matrix says why)" if skipped else ""))
    return 1 if failed else 0


def framework_lock_variants(matrix: Matrix, flags: LockFlags) -> list[Variant]:
    """One variant per (release, backend, framework, arch) the selection has a framework lock for."""
    releases = choices("release", "--release", flags.release, matrix.spec.releases)
    backends = choices("backend", "--backend", flags.backend, ["vllm", "sglang"])
    arches = choices("arch", "--arch", flags.arch, matrix.spec.arches)
    frameworks = choices("framework", "--framework", flags.framework, matrix.spec.frameworks)
    seen: dict[tuple[str, str, str, str], Variant] = {}
    for v in all_variants(matrix):
        if (v.framework in frameworks and v.release_name in releases and v.backend in backends and v.arch in arches
                and v.os == matrix.spec.defaults.os):
            seen.setdefault((v.release_name, v.backend, v.framework, v.arch), v)
    if flags.framework and not seen:
        raise SelectionError(f"--framework {flags.framework}: no release in the selection pins it")
    return [seen[k] for k in sorted(seen)]


def _framework_lock(v: Variant, root: Path, out: Out, *, check: bool, index_url: str, cache_dir: Path) -> int:
    """Check or make one framework lock; 1 when it failed (said), else 0. A framework lock needs its backend's lock
    fresh: when that is missing or stale, the framework's fails and says so."""
    from ascend_images.inputs.frameworklock import check_framework_lock, framework_lock_spec, make_framework_lock

    where = f"{v.release_name}/{v.backend}-{v.framework}-{v.arch}"
    try:
        spec = framework_lock_spec(v)
        path = spec.path(root)
        where = str(path.relative_to(root.parent))
        if check:
            if not path.is_file():
                raise LockError(f"missing: {spec.command}")
            check_framework_lock(spec, parse_lock(path))
            out(f"ok      {where}")
            return 0
        started = time.monotonic()
        written = make_framework_lock(spec, root, note, cache_dir, index_url)
        out(f"wrote   {where}: {len(parse_lock(written).pins)} packages ({time.monotonic() - started:.1f}s)")
        return 0
    except AscendImagesError as exc:
        out(f"FAILED  {where}: {exc}")
        return 1


def not_locked(matrix, spec: LockSpec) -> str:
    """Why matrix.yaml says a lock is not to be had ("" when it should exist): its release is blocked, or the release
    names no locked build for that arch (from_sdist lists per arch what a committed lock builds from sdists)."""
    release = matrix.spec.releases[spec.release]
    if release.blocked:
        return f"release blocked: {release.blocked}"
    if spec.from_sdist is None:
        return (f"matrix.yaml locks no {spec.arch} build of {spec.backend} for this release "
                f"(releases.{spec.release}.backends.{spec.backend}.from_sdist has no {spec.arch})")
    return ""
