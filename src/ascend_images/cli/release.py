"""The release area: publishing images (publish, ci-matrix, published-refs, npu-gate), what travels with them (sbom,
provenance, verify) and what an image holds (inspect, diff)."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

from ascend_images import DEFAULT_NAMESPACE
from ascend_images.checkout import ROOT as CHECKOUT
from ascend_images.checkout import file_sha256, revision
from ascend_images.cli.options import Selection, checked_path, output_path
from ascend_images.cli.project import project_path
from ascend_images.cli.taskdef import MATRIX_HELP, SELECTION, exit_with, run_body, task
from ascend_images.console import Steps
from ascend_images.errors import SelectionError
from ascend_images.inputs.lockspec import locks_dir
from ascend_images.inputs.pins import pins_path, read_pins
from ascend_images.matrix.rules import enforce
from ascend_images.release import workflow
from ascend_images.stages.names import TEST_DOUBLE_LABEL

Out = Callable[[str], None]


@task(groups=(SELECTION,),
      help={"registry": "HOST[:PORT]/NAMESPACE to publish to",
            "dry_run": "check everything and say what would be pushed, push nothing",
            "force": "replace immutable tags that hold other images",
            "namespace": "local namespace the images were built under (default ascend-images)",
            "report": "where to write the JSON report of tags and digests (default: the project's "
                      "build/publish-report.json)",
            "only": "all (default) | arch (push this engine's per-arch tags) | lists (CI merge: lists + aliases)",
            "allow_test_double": "publish images built from test doubles (the project's own tests only)",
            "compression": "gzip (default: the layers as the engine holds them, for every client) | zstd (the same "
                           "images with zstd layers: smaller, quicker to pull; Docker >= 23, containerd >= 1.5)"})
def publish(c, sel, registry, dry_run=False, force=False, namespace=DEFAULT_NAMESPACE, report=None, only="all",
            allow_test_double=False, compression="gzip"):
    """Push per-arch tags, then manifest lists, then moving aliases; nothing partial."""

    report_path = run_body(output_path, "--report", report, "build/publish-report.json", "file-to-write")
    run_body(publish_selection, sel, print, registry=registry, dry_run=dry_run, force=force, namespace=namespace,
             report_path=report_path, only=only, allow_test_double=allow_test_double, compression=compression)


@task(name="ci-matrix", help={"matrix": MATRIX_HELP,
                              "lists": "one entry per manifest list (arches joined) instead of per arch"})
def ci_matrix(c, matrix=None, lists=False):
    """The selection CI publishes, as the JSON a GitHub Actions strategy.matrix takes."""
    print(json.dumps(run_body(lambda: workflow.ci_matrix(Selection(matrix).load(), lists))))


@task(name="published-refs", help={"report": "a publish report (repeatable)"}, iterable=["report"])
def published_refs(c, report=None):
    """REF@DIGEST of every tag the given publish reports pushed, one per line."""
    from ascend_images.release.publish import report_refs

    for ref in run_body(report_refs, [Path(p) for p in report or []]):
        print(ref)


@task(name="npu-gate", help={"report": "a publish report of the build jobs (repeatable)",
                             "runs": "TSV of REF<TAB>JUnit file, one line per image the NPU tests ran on (default: "
                                     "the project's build/npu/runs.tsv)"},
      iterable=["report"])
def npu_gate(c, report=None, runs=None):
    """Fail unless NPU tests really ran and passed in every pushed aarch64 image (never pass empty)."""
    if runs is not None and not runs.strip():
        run_body(checked_path, "--runs", runs, "file")  # the one-line refusal of an empty path
    print(run_body(workflow.npu_gate, [Path(p) for p in report or []], Path(project_path(runs, "build/npu/runs.tsv"))))


ATTEST_HELP = {"image": "a published image, read from its registry (HOST[:PORT]/REPO:TAG), or a local image's name",
               "arch": "of a published list: x86_64 or aarch64 (default aarch64)",
               "matrix": MATRIX_HELP}


@task(help={**ATTEST_HELP, "licenses": "sum the licences up instead of printing the SBOM"})
def sbom(c, image, arch="aarch64", matrix=None, licenses=False):
    """The image's SBOM (CycloneDX 1.6): made from the local image, or read from the registry it was published to."""
    run_body(show_sbom, image, print, matrix=matrix, arch=arch, licenses=licenses)


@task(help=ATTEST_HELP)
def provenance(c, image, arch="aarch64", matrix=None):
    """The image's provenance (in-toto statement, SLSA v1): made from the local image, or read from the registry."""
    run_body(show_provenance, image, print, matrix=matrix, arch=arch)


@task(help=ATTEST_HELP)
def verify(c, image, arch="aarch64", matrix=None):
    """Check an image's SBOM and provenance against this checkout: locks, pins.yaml, commit, stage digests, doubles."""
    exit_with(run_body(verify_image, image, print, matrix=matrix, arch=arch))


@task(help={"image": "image reference", "json": "print JSON"})
def inspect(c, image, json=False):
    """Labels, installed versions (CANN and Python packages) and environment of a built image."""
    run_body(inspect_image, image, print, json)


@task(help={"a": "first image", "b": "second image"})
def diff(c, a, b):
    """What differs between two images: labels, CANN packages, Python packages, environment."""
    run_body(diff_images, a, b, print)


def image_ref(flag: str, ref: str) -> str:
    """An image argument, refused when empty before any engine or registry is asked."""
    if not ref.strip():
        raise SelectionError(f"{flag} is empty: give an image reference (REPO:TAG, or HOST[:PORT]/REPO:TAG)")
    return ref


def publish_selection(sel: Selection, out: Out, *, registry: str, dry_run: bool = False, force: bool = False,
            namespace: str = DEFAULT_NAMESPACE, report_path: Path = Path("build/publish-report.json"),
            on_step: Callable[[str, str], None] | None = None, only: str = "all",
            allow_test_double: bool = False, compression: str = "gzip") -> dict:
    """Push the selection's images (as built: the same flags as `invoke build`) to REGISTRY."""
    from ascend_images.builder.engine import connect
    from ascend_images.release.attest import Attestor
    from ascend_images.release.publish import COMPRESSIONS, Publisher, Target, group_variants, write_report
    from ascend_images.release.registry import RegistryClient

    if compression not in COMPRESSIONS:
        raise SelectionError(f"--compression {compression!r}: valid: {', '.join(COMPRESSIONS)}")
    target = Target.parse(registry)
    matrix = sel.load()
    variants = sel.variants(matrix)
    steps = Steps("publish")
    enforce(variants, warn=steps.warn)
    groups = group_variants(variants, namespace, target)
    # the merge job writes lists from what the registry holds: it needs no engine, and may run where none is
    client = None if only == "lists" else connect()
    registry_client = RegistryClient(target.registry)
    pins = read_pins(pins_path(matrix))
    attestor = None if client is None or dry_run else Attestor(
        client, registry_client, pins, out, commit=revision(),
        matrix_sha256=file_sha256(matrix.path))
    publisher = Publisher(client, registry_client, target, out, force=force, dry_run=dry_run,
                          allow_test_double=allow_test_double, on_step=on_step, pins=pins, attestor=attestor,
                          steps=steps, compression=compression)
    report = publisher.run(groups, only=only)
    if not dry_run:
        write_report(report, report_path)
        out(f"report: {report_path}")
    return report


def image_attestations(ref: str, matrix_path: str | None, arch: str):
    """An image's SBOM and provenance: read from the registry a reference names (HOST[:PORT]/REPO:TAG; a list resolves
    to its `arch` image), else made now from the engine's image of that name."""
    from ascend_images.builder.engine import connect
    from ascend_images.release.attest import from_engine, from_registry, names_a_registry

    image_ref("IMAGE", ref)
    matrix = Selection(matrix_path).load()
    if arch not in matrix.spec.arches:
        raise SelectionError(f"--arch {arch!r}: valid: {', '.join(matrix.spec.arches)}")
    if names_a_registry(ref):
        return from_registry(ref, matrix.spec.arches[arch].debian_arch), matrix
    return from_engine(connect(), ref, read_pins(pins_path(matrix)), commit=revision(),
                       matrix_sha256=file_sha256(matrix.path)), matrix


def show_sbom(ref: str, out: Out, *, matrix: str | None = None, arch: str = "aarch64",
              licenses: bool = False) -> dict:
    from ascend_images.release.sbom import license_summary

    docs, _ = image_attestations(ref, matrix, arch)
    if licenses:
        rows = license_summary(docs.sbom)
        out(f"{'components':>10}  licence (as each package's metadata states it; {docs.source})")
        for licence, count in rows:
            out(f"{count:>10}  {licence}")
    else:
        out(json.dumps(docs.sbom, indent=2))
    return docs.sbom


def show_provenance(ref: str, out: Out, *, matrix: str | None = None, arch: str = "aarch64") -> dict:
    docs, _ = image_attestations(ref, matrix, arch)
    out(json.dumps(docs.provenance, indent=2))
    return docs.provenance


def verify_image(ref: str, out: Out, *, matrix: str | None = None, arch: str = "aarch64") -> int:
    """One line per finding, exit 1 when there is any (see release.attest.findings)."""
    from ascend_images.release.attest import findings

    docs, loaded = image_attestations(ref, matrix, arch)
    found = findings(docs, locks_dir=locks_dir(loaded), pins=read_pins(pins_path(loaded)), checkout=CHECKOUT)
    for line in found:
        out(f"FAIL  {line}")
    where = "made from the engine's image" if docs.source == "engine" else "read from the registry"
    out(f"{ref}: {len(found)} finding(s) (SBOM and provenance {where})")
    return 1 if found else 0


def inspect_image(ref: str, out: Out, as_json: bool = False) -> dict:
    from ascend_images.builder.engine import connect
    from ascend_images.release.imagemeta import image_facts

    facts = image_facts(connect(), image_ref("IMAGE", ref))
    if as_json:
        out(json.dumps(facts, indent=2))
        return facts
    out(f"{facts['ref']}  {facts['id'][:19]}  {facts['architecture']}  {facts['size_mb']} MB")
    double = facts["labels"].get(TEST_DOUBLE_LABEL)
    if double:
        out(f"TEST DOUBLE: built with fake {double} (tests/fixtures); invoke publish refuses it")
    for section in ("labels", "cann", "python", "env"):
        out(f"\n[{section}]")
        for key, value in facts[section].items():
            out(f"  {key} = {value}")
    return facts


def diff_images(a: str, b: str, out: Out) -> int:
    from ascend_images.builder.engine import connect
    from ascend_images.release.imagemeta import diff_facts, image_facts

    image_ref("A", a)
    image_ref("B", b)
    client = connect()
    rows = diff_facts(image_facts(client, a), image_facts(client, b))
    out(f"--- {a}\n+++ {b}")
    for section, key, left, right in rows:
        out(f"[{section}] {key}: {'(absent)' if left is None else left} -> {'(absent)' if right is None else right}")
    out(f"{len(rows)} difference(s)")
    return len(rows)
