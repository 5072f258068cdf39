"""An image's SBOM and provenance: made from the image on the engine, attached to its manifest in a registry as OCI
referrers on publish, read back from either place, and checked against this checkout (`invoke verify`)."""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ascend_images.checkout import revision
from ascend_images.errors import AscendImagesError
from ascend_images.inputs.lockfile import LockError, parse_lock
from ascend_images.inputs.lockspec import LAYERS, lock_file
from ascend_images.inputs.pins import Pin
from ascend_images.inputs.pypi import normalize
from ascend_images.release.inventory import read_inventory
from ascend_images.release.provenance import provenance, stage_chain
from ascend_images.release.referrers import PROVENANCE_ARTIFACT, SBOM_ARTIFACT, artifact, attach, referrers
from ascend_images.release.registry import DOCKER_LIST, OCI_INDEX, RegistryClient
from ascend_images.release.sbom import PROPERTY, build_sbom, load_sbom, sbom_json
from ascend_images.stages.names import LABEL_PREFIX

Out = Callable[[str], None]


class AttestError(AscendImagesError):
    """An image's SBOM or provenance cannot be made, found or read."""


@dataclass
class Attestations:
    """An image's two documents, and where they were read."""

    ref: str
    source: str  # "engine" (made now from the local image) or "registry" (attached referrers)
    sbom: dict[str, Any]
    provenance: dict[str, Any]


def make(client, ref: str, pins: Mapping[str, Pin], subject: tuple[str, str], *, commit: str,
         matrix_sha256: str) -> tuple[str, dict[str, Any]]:
    """(SBOM JSON text, provenance statement) of a local image, for the subject (name, digest) they describe."""
    inv = read_inventory(client, ref)
    statement = provenance(inv, stage_chain(client, ref), subject, engine_version=client.version().get("Version", ""),
                           commit=commit, matrix_sha256=matrix_sha256)
    return sbom_json(build_sbom(inv, pins)), statement


class Attestor:
    """Publish's last step for a per-arch image: attach its SBOM and provenance to the manifest just pushed, unless
    the registry holds them already (a re-run attaches nothing twice)."""

    def __init__(self, client, registry: RegistryClient, pins: Mapping[str, Pin], out: Out, *, commit: str,
                 matrix_sha256: str):
        self.client, self.registry, self.pins, self.out = client, registry, pins, out
        self.commit, self.matrix_sha256 = commit, matrix_sha256

    def attach(self, repo: str, local_ref: str, subject_digest: str) -> dict[str, str]:
        subject = self.registry.manifest(repo, subject_digest)
        if subject is None:
            raise AttestError(f"{self.registry.host}/{repo}@{subject_digest}: not in the registry to attach to")
        have = {r.artifact_type: r.digest for r in referrers(self.registry, repo, subject_digest)}
        if SBOM_ARTIFACT in have and PROVENANCE_ARTIFACT in have:
            return {"sbom": have[SBOM_ARTIFACT], "provenance": have[PROVENANCE_ARTIFACT]}
        text, statement = make(self.client, local_ref, self.pins, (f"{self.registry.host}/{repo}", subject_digest),
                               commit=self.commit, matrix_sha256=self.matrix_sha256)
        done = dict(have)
        if SBOM_ARTIFACT not in have:
            done[SBOM_ARTIFACT] = attach(self.registry, repo, subject, SBOM_ARTIFACT, text.encode(),
                                         {"org.opencontainers.image.title": "sbom.cdx.json",
                                          COMPRESSION_ANNOTATION: layer_compression(subject.body)})
        if PROVENANCE_ARTIFACT not in have:
            done[PROVENANCE_ARTIFACT] = attach(
                self.registry, repo, subject, PROVENANCE_ARTIFACT, json.dumps(statement, indent=2).encode(),
                {"org.opencontainers.image.title": "provenance.intoto.json", "in-toto.io/predicate-type":
                 statement["predicateType"]})
        self.out(f"  attached SBOM and provenance to {self.registry.host}/{repo}@{subject_digest[:19]}")
        return {"sbom": done[SBOM_ARTIFACT], "provenance": done[PROVENANCE_ARTIFACT]}


COMPRESSION_ANNOTATION = "io.ascend-images.layer-compression"


def layer_compression(manifest: Mapping[str, Any]) -> str:
    """How the subject's layers are compressed, read from their media types (`...tar+zstd`, `...tar+gzip`, Docker's
    `...tar.gzip`): what a client must read to pull the image."""
    kinds = {"zstd" if layer.get("mediaType", "").endswith("zstd") else
             "gzip" if "gzip" in layer.get("mediaType", "") else "none" for layer in manifest.get("layers", [])}
    return ",".join(sorted(kinds)) or "none"


def names_a_registry(ref: str) -> bool:
    """Whether a reference starts with a registry host (a dot or a port in its first part, or localhost), as Docker
    reads references."""
    host, sep, _ = ref.partition("/")
    return bool(sep) and ("." in host or ":" in host or host == "localhost")


def split_reference(ref: str) -> tuple[str, str, str]:
    """HOST/REPO:TAG or HOST/REPO@DIGEST -> (host, repo, reference)."""
    if not names_a_registry(ref):
        raise AttestError(f"{ref}: not a registry reference (HOST[:PORT]/REPO:TAG)")
    host, _, rest = ref.partition("/")
    if "@" in rest:
        repo, _, reference = rest.partition("@")
    else:
        repo, _, reference = rest.rpartition(":") if ":" in rest else (rest, "", "latest")
    return host, repo, reference


def from_registry(ref: str, arch: str) -> Attestations:
    """The documents attached to a published image (a list tag resolves to its `arch` image: amd64, arm64)."""
    host, repo, reference = split_reference(ref)
    registry = RegistryClient(host)
    manifest = registry.manifest(repo, reference)
    if manifest is None:
        raise AttestError(f"{ref}: no such tag in {host}/{repo}")
    if manifest.media_type in (DOCKER_LIST, OCI_INDEX):
        children = [m for m in manifest.body.get("manifests", []) if m.get("platform", {}).get("architecture") == arch]
        if not children:
            raise AttestError(f"{ref}: a list with no {arch} image (--arch amd64 or arm64)")
        manifest = registry.manifest(repo, children[0]["digest"]) or manifest
    found = {r.artifact_type: r for r in referrers(registry, repo, manifest.digest)}
    missing = [kind for kind in (SBOM_ARTIFACT, PROVENANCE_ARTIFACT) if kind not in found]
    if missing:
        raise AttestError(f"{ref} ({manifest.digest[:19]}) has no {' and no '.join(missing)} attached (publish it with "
                          "this version of ascend-images)")
    sbom = load_sbom(artifact(registry, repo, found[SBOM_ARTIFACT]))
    statement = json.loads(artifact(registry, repo, found[PROVENANCE_ARTIFACT]))
    return Attestations(ref, "registry", sbom, statement)


def from_engine(client, ref: str, pins: Mapping[str, Pin], *, commit: str, matrix_sha256: str) -> Attestations:
    image = client.images.get(ref)
    text, statement = make(client, ref, pins, (ref, image.id), commit=commit, matrix_sha256=matrix_sha256)
    return Attestations(ref, "engine", json.loads(text), statement)


# --- invoke verify -------------------------------------------------------------------------------------------------
def in_history(checkout: Path, commit: str) -> bool:
    """Whether `commit` is HEAD or an ancestor of it in the checkout."""
    import subprocess

    try:
        result = subprocess.run(["git", "-C", str(checkout), "merge-base", "--is-ancestor", commit, "HEAD"],
                                capture_output=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return result.returncode == 0


def _labels(sbom: dict[str, Any]) -> dict[str, str]:
    props = sbom.get("metadata", {}).get("component", {}).get("properties", [])
    prefix = f"{PROPERTY}:label:"
    return {p["name"][len(prefix):]: p["value"] for p in props if p["name"].startswith(prefix)}


def findings(docs: Attestations, *, locks_dir: Path, pins: Mapping[str, Pin], checkout: Path) -> list[str]:
    """Why the image is not what this checkout publishes, a line each ([] when it is)."""
    out: list[str] = []
    sbom, statement = docs.sbom, docs.provenance
    labels = _labels(sbom)
    image_props = {p["name"]: p["value"] for p in sbom.get("metadata", {}).get("component", {}).get("properties", [])}
    if image_props.get(f"{PROPERTY}:test-double"):
        out.append(f"test double: built from {image_props[f'{PROPERTY}:test-double']} test doubles, never to be used")
    components = sbom.get("components", [])
    # installed from an index (pkg:pypi) or from a file (pkg:generic: a vendor wheel, a git archive): both are locked
    python = {c["name"]: c.get("version") for c in components
              if str(c.get("purl", "")).startswith(("pkg:pypi/", "pkg:generic/"))}
    release, backend, arch, framework, python_version = (labels.get(f"{LABEL_PREFIX}.{k}", "") for k in (
        "release", "backend", "arch", "framework", "python-version"))
    if release:
        # every layer the image's stages installed, the lowest first: a layer over another may move a pin, and wins
        layers = [layer for layer in LAYERS if layer in ("base", "torch") or (layer == "backend" and backend
                  not in ("", "none")) or (layer == "framework" and framework)]
        paths = [lock_file(locks_dir, layer, release=release, backend=backend, framework=framework, arch=arch,
                           python_version=python_version) for layer in layers]
        locked: dict[str, str] = {}
        try:
            for path in paths:
                locked |= parse_lock(path).pins
        except (OSError, LockError) as exc:
            out.append(f"lock: {path} cannot be read ({exc})")
        else:
            for name, version in sorted(locked.items()):
                have = python.get(normalize(name))
                if have is None:
                    out.append(f"lock: {name}=={version} is locked, and the SBOM has no {name}")
                elif have.split("+")[0] != version.split("+")[0]:
                    out.append(f"lock: {name}=={version} is locked, the SBOM has {name} {have}")
    for component in components:
        if component.get("type") != "file":
            continue
        sha256 = next((h["content"] for h in component.get("hashes", []) if h.get("alg") == "SHA-256"), "")
        pin = pins.get(component["name"])
        if pin is None:
            out.append(f"download: {component['name']} (sha256 {sha256}) has no pin in pins.yaml")
        elif pin.sha256 != sha256:
            out.append(f"download: {component['name']} has sha256 {sha256}, pins.yaml pins {pin.sha256}")
    version = statement.get("predicate", {}).get("runDetails", {}).get("builder", {}).get("version", {})
    built_at, head = version.get("commit", ""), revision(checkout)
    if not built_at:
        out.append("provenance: names no commit the image was built from")
    elif head and not in_history(checkout, built_at):  # a stage reused since: built at an ancestor, and that is fine
        out.append(f"provenance: built from commit {built_at}, which is not in this checkout's history (HEAD {head})")
    stages = [d for d in statement.get("predicate", {}).get("buildDefinition", {}).get("resolvedDependencies", [])
              if str(d.get("name", "")).startswith("stage:")]
    subject = next(iter(statement.get("subject") or []), {}).get("digest", {}).get("sha256", "")
    top = stages[0].get("digest", {}).get("sha256", "") if stages else ""
    recompressed = {b.get("digest", {}).get("sha256") for b in statement.get("predicate", {}).get(
        "runDetails", {}).get("byproducts", []) if b.get("name") == "recompressed-from"}
    if stages and top != subject and top not in recompressed:
        out.append(f"provenance: its top stage is sha256:{top}, not the image it describes (sha256:{subject})")
    return out
