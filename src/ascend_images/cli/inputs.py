"""The inputs area: what a build takes in. `fetch` fills the download cache, `lock` resolves and checks the locks,
`outdated` asks the index what is newer than the matrix."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from ascend_images.cli.options import (
    LockFlags,
    Selection,
    SourceFlags,
    checked_path,
    output_path,
    refuse_moot,
    whole_number,
)
from ascend_images.cli.taskdef import MATRIX_HELP, SELECTION, SOURCES, exit_with, run_body, task
from ascend_images.console import Steps, note
from ascend_images.errors import AscendImagesError, SelectionError
from ascend_images.inputs.checksums import parse_checksums
from ascend_images.inputs.lockfile import LockError, parse_lock
from ascend_images.inputs.lockspec import (
    check_lock,
    lock_name,
    lock_path,
    lock_spec,
    locks_dir,
    not_locked,
    variant_layers,
)
from ascend_images.inputs.pins import pins_path, read_pins
from ascend_images.matrix.model import Variant
from ascend_images.matrix.rules import enforce
from ascend_images.matrix.selection import all_variants, choices

if TYPE_CHECKING:
    from ascend_images.inputs.wheelstore import WheelStore

Out = Callable[[str], None]


@task(groups=(SELECTION, SOURCES.without("cache_dir")),
      help={"dest": "cache directory (default $XDG_CACHE_HOME/ascend-images/downloads, "
                    "~/.cache/ascend-images/downloads)",
            "record": "pin every download PyPI does not carry that pins.yaml lacks, there (review the diff, commit)",
            "bake_inputs": "also lay out each stage's build inputs under DIR/<bake target>/, the very files `invoke "
                           "build` gives it, for rendered/docker-bake.json (its BAKE_INPUTS; it reads "
                           "build/bake-inputs by default)"})
def fetch(c, sel, sources, dest=None, record=False, bake_inputs=None):
    """Download every file the selection needs (CANN, kernel zips, tag archives, vendor wheels, BiSheng Python,
    sdists) into the cache, verified against pins.yaml; what it lacks is trusted on first use on this host."""
    sources.cache_dir, sources.cache_flag = dest, "--dest"
    from ascend_images.stages.bake import INPUTS_DEFAULT

    # an empty --bake-inputs is output_path's error, not a silent no
    inputs_dir = None if bake_inputs is None else run_body(output_path, "--bake-inputs", bake_inputs, INPUTS_DEFAULT)
    run_body(fetch_selection, sel, sources, print, record=record, bake_inputs=inputs_dir)


@task(help={"release": "release name(s), comma-separated; default: every release with a backend",
            "backend": "vllm, sglang (comma-separated); default: both",
            "arch": "x86_64, aarch64 (comma-separated); default: both",
            "check": "only check that each lock exists and matches matrix.yaml (no network)",
            "index_url": "the package index to resolve against (default PyPI)",
            "torch_index_url": "index of the x86_64 torch CPU build (default: the matrix's)",
            "extra_index_url": "another index to resolve against (repeatable; builds need it too)",
            "matrix": MATRIX_HELP,
            "work_dir": "where the resolver's downloads are kept (default: the project's build/)",
            "framework": "only this framework's locks (over existing backend locks); default: every framework's",
            "layer": "base, torch, backend, framework (comma-separated); default: every layer, the lowest first",
            "find_links": "a local directory of wheels to resolve from too (repeatable; a --wheelhouse)"},
      iterable=["extra_index_url", "find_links"])
def lock(c, release=None, backend=None, arch=None, check=False, index_url=None, torch_index_url=None,
         extra_index_url=None, matrix=None, work_dir=None, framework=None, layer=None, find_links=None):
    """Resolve the locks of the selection for their target platform, every layer the lowest first: base
    (locks/base/), torch, the backends (locks/<release>/<backend>-<arch>.txt) and the frameworks over them."""
    from ascend_images.inputs.pypi import checked_index_url

    flags = LockFlags(release, backend, arch, run_body(checked_index_url, "--index-url", index_url)
                      if index_url is not None else "", torch_index_url, list(extra_index_url or []), framework,
                      layer, [str(run_body(checked_path, "--find-links", d, "dir")) for d in find_links or []])
    for url in flags.extra_index_urls:
        run_body(checked_index_url, "--extra-index-url", url)
    if torch_index_url:
        run_body(checked_index_url, "--torch-index-url", torch_index_url)
    cache = run_body(output_path, "--work-dir", work_dir, "build") / "cache" / "sdists"
    if check:  # checked above all the same: a wrong value is still wrong, and a note is not a refusal
        moot = [flag for flag, value in (("--index-url", index_url), ("--torch-index-url", torch_index_url),
                                         ("--extra-index-url", extra_index_url), ("--work-dir", work_dir),
                                         ("--find-links", find_links)) if value]
        if moot:
            note(f"note: {', '.join(moot)} {'has' if len(moot) == 1 else 'have'} no effect with --check, which asks "
                 "no index and resolves nothing: each lock is compared with matrix.yaml")
    exit_with(run_body(make_locks, Selection(matrix), flags, print, check=check, cache_dir=cache))


@task(help={"matrix": MATRIX_HELP, "index_url": "the PEP 503 index to ask (default PyPI)",
            "package": "only this package (repeatable): torch-npu, torch, vllm, vllm-ascend, triton-ascend, sglang",
            "pre": "include pre-releases", "limit": "newest N releases per package (default 5)", "json": "print JSON",
            "write": "draft the newest release judged ok (or --version's) of the one --package (sglang or "
                     "vllm-ascend) into matrix.yaml, then lock, render and regenerate the docs",
            "version": "with --write: the release to draft", "default": "with --write: make it the default, and "
                                                                        "CI's"},
      iterable=["package"])
def outdated(c, matrix=None, index_url="https://pypi.org/simple", package=None, pre=False, limit="5", json=False,
             write=False, version=None, default=False):
    """Newer releases of what the matrix pins: platforms, sdist, what they pin, and what blocks a build."""
    from ascend_images.inputs.pypi import checked_index_url

    url = run_body(checked_index_url, "--index-url", index_url)
    if not write:
        run_body(refuse_moot, {"--version": version, "--default": default or None}, "without --write")
        run_body(show_outdated, Selection(matrix), print, index_url=url, packages=list(package or []), pre=pre,
                 limit=run_body(whole_number, "--limit", limit, 1), as_json=json)
        return
    exit_with(run_body(write_release, Selection(matrix), print, index_url=url, packages=list(package or []),
                       version=version, default=default, pre=pre))


def write_release(sel: Selection, out: Out, *, index_url: str, packages: list[str], version: str | None,
                  default: bool, pre: bool = False, tag_file=None, follow_up: bool = True) -> int:
    """`outdated --write`: the draft, then (with nothing left to fill) the rules, the locks, the renders and the
    generated docs, each a command of this tool; 0 when it is drafted, whether or not a person must fill it."""
    from ascend_images.inputs.draft import Draft, draft_release, followed_release, releases_of, write_draft
    from ascend_images.inputs.outdated import outdated
    from ascend_images.inputs.sglangline import tag_files

    if len(packages) != 1 or packages[0] not in ("sglang", "vllm-ascend"):
        raise SelectionError("--write drafts one backend release: give --package sglang or --package vllm-ascend")
    matrix = sel.load()  # a draft whose placeholders are not all filled stops here, naming each
    drafted = [name for name, v in releases_of(matrix, packages[0]).items() if v == version]
    if drafted:  # drafted before, and filled since: go on from it
        out(f"releases.{drafted[0]}: in {matrix.path.name} already, filled; going on from it")
        if default:
            follows = followed_release(matrix, packages[0], below=version)
            for line in write_draft(matrix.path, Draft(drafted[0], follows, {}), default=True):
                out(f"wrote {line}")
        return run_follow_ups(sel, drafted[0], out) if follow_up else 0
    rows = outdated(matrix, index_url, note, packages=packages, pre=pre, limit=50)
    if version is not None:
        rows = [r for r in rows if r.version == version]
        if not rows:
            raise SelectionError(f"--version {version}: not a {packages[0]} release newer than the matrix's on "
                                 f"{index_url}")
    else:
        rows = [r for r in rows if not r.problems][:1]
        if not rows:
            raise SelectionError(f"no newer {packages[0]} release is judged ok (invoke outdated --package "
                                 f"{packages[0]} says why)")
    tag_file = tag_file or tag_files(matrix.spec.backends["sglang"].artifacts.get("npu_project_file"))
    draft = draft_release(matrix, rows[0], tag_file)
    for line in write_draft(matrix.path, draft, default):
        out(f"wrote {line}")
    if draft.unread:
        out(f"{len(draft.unread)} value(s) could not be read here, left as marked placeholders that `invoke matrix` "
            "refuses until they are filled:")
        for item in draft.unread:
            out(f"  - {item}")
    out(f"review: {draft.name}'s values and sources against upstream's release (docker/npu.Dockerfile, the wheel's "
        "metadata), and the test doubles' facts for it (tests/fixtures/release_facts.yaml, docs/matrix.md)")
    for item in draft.review:
        out(f"  - {item}")
    if draft.unread:
        out(f"then run: invoke outdated --write --package {packages[0]} --version {rows[0].version}"
            + (" --default" if default else "") + " (it keeps the draft and goes on)")
        return 0
    if follow_up:
        return run_follow_ups(sel, draft.name, out)
    return 0


def run_follow_ups(sel: Selection, release: str, out: Out) -> int:
    """The rules, the new release's locks (the arches its followed release is locked for), the committed renders and
    the generated docs, each as its own command, stopping at the first that fails (its tail shown)."""
    import subprocess
    import sys

    invoke = str(Path(sys.executable).with_name("invoke"))
    matrix = ["--matrix", sel.matrix] if sel.matrix else []
    steps = [[invoke, "matrix", *matrix], [invoke, "lock", "--release", release, "--arch", "aarch64", *matrix],
             [invoke, "render", "--update", *matrix], [invoke, "readme"]]
    for i, argv in enumerate(steps, 1):
        out(f"[{i}/{len(steps)}] {' '.join(argv[1:])}")
        done = subprocess.run(argv, capture_output=True, text=True, check=False)
        if done.returncode != 0:
            tail = (done.stdout + done.stderr).strip().splitlines()[-15:]
            out("\n".join(tail))
            out(f"failed: {' '.join(argv[1:])} (exit {done.returncode}); fix it, then run the rest")
            return done.returncode
    return 0


def fetch_selection(sel: Selection, flags: SourceFlags, out: Out, *, stream=None, record: bool = False,
                    wheels: bool = True, bake_inputs: Path | None = None) -> list:
    """`invoke fetch`: every download the selection needs, into the cache (CANN too, unless it comes from
    --cann-dir or an image), (`wheels`) every locked file into the host's wheel store, and (`bake_inputs`) each
    stage's build inputs laid out for the bake file."""
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
    if wheels:
        fill_wheel_store(variants, flags, out)
    if bake_inputs is not None:
        lay_out_for_bake(variants, flags, bake_inputs, out)
    return results


def lay_out_for_bake(variants: list[Variant], flags: SourceFlags, root: Path, out: Out) -> list[Path]:
    """Each stage of the variants' plan: its named contexts under `root/<bake target>/` (builder.stageinputs), for
    the committed rendered/docker-bake.json: each stage's record as rendered/ holds it (pins.yaml's sha256), its
    files taken from where these flags say (the download cache, --cann-dir, --artifacts-dir) and the wheel store."""
    from ascend_images import DEFAULT_NAMESPACE
    from ascend_images.builder.stageinputs import lay_out_bake_inputs
    from ascend_images.stages.bake import render_plan
    from ascend_images.stages.drift import committed_sources
    from ascend_images.stages.plan import PlanOptions, make_plan

    matrix = variants[0].matrix
    committed = committed_sources(matrix)
    plan = make_plan(variants, PlanOptions(committed.cann, DEFAULT_NAMESPACE,
                                           {(v.os, v.arch): v.os_spec.image for v in variants}))
    records = {slug: r.record for slug, r in render_plan(plan, committed).items()}
    laid_out = lay_out_bake_inputs(plan, records, flags.sources(matrix), host_wheel_store(flags), root)
    out(f"bake inputs: {len(laid_out)} target(s) in {root} (docker buildx bake -f rendered/docker-bake.json, "
        f"BAKE_INPUTS={root})")
    return laid_out


def host_wheel_store(flags: SourceFlags, index_url: str | None = None) -> WheelStore:
    """The host's wheel store the flags name, fetching from `index_url` (default PyPI)."""
    from ascend_images.inputs.pypi import PYPI_SIMPLE
    from ascend_images.inputs.wheelstore import WheelStore

    return WheelStore(flags.store_root(), [index_url or PYPI_SIMPLE], out=note)


def fill_wheel_store(variants: list[Variant], flags: SourceFlags, out: Out, index_url: str | None = None) -> int:
    """Every locked file of the variants into the host's wheel store (those already there are checked): what an
    --offline build of them installs. Returns how many were downloaded."""
    from ascend_images.inputs.wheelstore import variant_files

    wanted = dict.fromkeys(f for v in variants for f in variant_files(v))
    store = host_wheel_store(flags, index_url)
    note(f"wheel store: {len(wanted)} locked file(s) for {len(variants)} variant(s) in {store.root}")
    store.ensure(wanted)
    out(f"wheel store: {len(wanted)} file(s) there, {len(store.downloaded)} downloaded now ({store.root})")
    return len(store.downloaded)


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


def lock_targets(sel: Selection, flags: LockFlags) -> list[tuple[str, Variant]]:
    """(layer, a variant of it) for every lock the selection names, once each, the lowest layer first: a lock made
    over another is made after it. The base layer is the same for every release; the others are per release."""
    from ascend_images.inputs.lockspec import LAYERS, lock_file

    matrix = sel.load()
    layers = choices("layer", "--layer", flags.layer, LAYERS)
    releases = choices("release", "--release", flags.release, matrix.spec.releases)
    backends = choices("backend", "--backend", flags.backend, ["vllm", "sglang"])
    frameworks = choices("framework", "--framework", flags.framework, matrix.spec.frameworks)
    arches = choices("arch", "--arch", flags.arch, matrix.spec.arches)
    if flags.framework and flags.layer is None:
        layers = ["framework"]  # --framework alone: its locks, over backend locks that exist
    seen: dict[Path, tuple[str, Variant]] = {}
    root = locks_dir(matrix)
    for layer in layers:
        for v in all_variants(matrix):
            if v.arch not in arches or v.os != matrix.spec.defaults.os or v.python != "system":
                continue
            if layer != "base" and v.release_name not in releases:
                continue
            if layer in ("backend", "framework") and v.backend not in backends:
                continue
            if layer == "framework" and v.framework not in frameworks:
                continue
            if layer not in variant_layers(v):
                continue
            path = lock_file(root, layer, release=v.release_name, backend=v.backend, framework=v.framework,
                             arch=v.arch, python_version=v.python_version)
            seen.setdefault(path, (layer, v))
    if not seen:
        raise SelectionError("the selection names no lock (no release of it has that layer for that arch)")
    return list(seen.values())


def make_locks(sel: Selection, flags: LockFlags, out: Out, *, check: bool, cache_dir: Path,
               steps: Steps | None = None) -> int:
    """--check: report each lock's state without network (exit 1 when any is missing or stale).
    Otherwise resolve and write each lock, the lowest layer first; one failure does not stop the others (but the
    locks made over a failed one fail too, saying so)."""
    from ascend_images.inputs.lockgen import LockMaker
    from ascend_images.inputs.pypi import PYPI_SIMPLE

    matrix = sel.load()
    root = locks_dir(matrix)
    targets = lock_targets(sel, flags)
    steps = steps or Steps("lock")
    steps.total = len(targets)
    failed = skipped = 0
    maker = LockMaker(note, cache_dir, flags.index_url or PYPI_SIMPLE, flags.torch_index_url,
                      tuple(flags.extra_index_urls), pins=read_pins(pins_path(matrix)),
                      find_links=tuple(Path(p) for p in flags.find_links))
    for layer, v in targets:
        where = lock_name(layer, release=v.release_name, backend=v.backend, framework=v.framework, arch=v.arch)
        steps.begin(where)
        why = not_locked(v, layer)
        try:
            spec = lock_spec(v, layer, root)
            path = lock_path(root, spec)
            where = str(path.relative_to(root.parent))
            if check:
                if not path.is_file() and why:  # the matrix says it is not to be had: listed, with why; no failure
                    skipped += 1
                    out(f"skipped {where}: {why}")
                    continue
                if not path.is_file():
                    raise LockError(f"missing: {spec.command}")
                check_lock(spec, parse_lock(path))
                out(f"ok      {where}")
                continue
            if why:  # the matrix knows it cannot be locked: say why instead of failing in the resolver
                skipped += 1
                out(f"skipped {where}: {why}")
                continue
            started = time.monotonic()
            written = maker.make(spec, root)
            out(f"wrote   {where}: {len(parse_lock(written).pins)} packages ({time.monotonic() - started:.1f}s)")
        except AscendImagesError as exc:
            if why:
                skipped += 1
                out(f"skipped {where}: {why}")
                continue
            failed += 1
            out(f"FAILED  {where}: {exc}")
    steps.end()
    counted = len(targets) - skipped
    out(f"{counted - failed} of {counted} locks {'fresh' if check else 'written'}"
        + (f", {skipped} skipped (the matrix says why)" if skipped else ""))
    return 1 if failed else 0
