"""An image's provenance: an in-toto Statement v1 with an SLSA Provenance v1 predicate, made from what the image and
its stage images say of themselves (labels: the matrix row, the parent, the downloads) and from the
engine and checkout that publish it. Inputs are recorded by digest; no flag's value is, so no credential can be."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ascend_images.checkout import version
from ascend_images.release.inventory import Inventory
from ascend_images.stages.names import LABEL_PREFIX, PARENT_LABEL

STATEMENT_TYPE = "https://in-toto.io/Statement/v1"
PREDICATE_TYPE = "https://slsa.dev/provenance/v1"
BUILD_TYPE = "https://github.com/ascend-images/ascend-images/blob/main/DESIGN.md#build-v1"
BUILDER_ID = "https://github.com/ascend-images/ascend-images"
# what a build was asked for: the matrix row and the selection (labels), never an input's location or credential
SELECTION = ("release", "device", "backend", "os", "arch", "python", "profile", "allocator", "user-env")

# What a provenance says of the build's secrets: how they reached it, as the Dockerfiles mount them (stages/render.py
# SECRETS), and where they are not
SECRETS_STATEMENT = ("the CA bundle, pip configuration, netrc and OS-mirror credentials reach the build as BuildKit "
                     "secret mounts (type=secret, a file for the one RUN step that names it): in no layer, build arg, "
                     "label, history entry or cache key, and recorded nowhere")


@dataclass(frozen=True)
class StageRecord:
    """One image of the chain, top first, as its own labels describe it."""

    ref: str
    image_id: str
    kind: str
    created: str


def stage_chain(client, ref: str) -> list[StageRecord]:
    """The image and every stage image below it, found through each one's parent label (`<repo>:<tag>`, in the
    namespace of the image's own name: the labels name none)."""
    out: list[StageRecord] = []
    seen: set[str] = set()
    repo, _, _ = ref.rpartition(":")
    namespace = repo.rsplit("/", 1)[0] if "/" in repo else ""
    current: str | None = ref
    while current and current not in seen:
        seen.add(current)
        try:
            attrs = client.api.inspect_image(current)
        except Exception:  # a parent no longer here: the chain ends there
            break
        labels = (attrs.get("Config") or {}).get("Labels") or {}
        if f"{LABEL_PREFIX}.stage" not in labels:
            break
        out.append(StageRecord(current, attrs["Id"], labels[f"{LABEL_PREFIX}.stage"],
                               labels.get("org.opencontainers.image.created", "")))
        parent = labels.get(PARENT_LABEL)
        current = (f"{namespace}/{parent}" if namespace else parent) if parent else None
    return out


def provenance(inv: Inventory, chain: list[StageRecord], subject: tuple[str, str], *, engine_version: str,
               commit: str, matrix_sha256: str) -> dict[str, Any]:
    """The statement for `subject` (name, manifest digest) of the image `inv` read."""
    name, digest = subject
    labels = inv.labels
    selection = {key: labels[f"{LABEL_PREFIX}.{key}"] for key in SELECTION if f"{LABEL_PREFIX}.{key}" in labels}
    dependencies = [{"name": f"stage:{s.kind}", "uri": s.ref, "digest": {"sha256": s.image_id.removeprefix("sha256:")},
                     "annotations": {"created": s.created}} for s in chain]
    dependencies += [{"name": f"download:{file}", "digest": {"sha256": sha256}}
                     for file, sha256 in sorted(inv.downloads.items())]
    created = sorted(s.created for s in chain if s.created)
    local = chain[0].image_id.removeprefix("sha256:") if chain else ""
    return {
        "_type": STATEMENT_TYPE,
        "subject": [{"name": name, "digest": {"sha256": digest.removeprefix("sha256:")}}],
        "predicateType": PREDICATE_TYPE,
        "predicate": {
            "buildDefinition": {
                "buildType": BUILD_TYPE,
                "externalParameters": {"selection": selection},
                "internalParameters": {
                    "matrix.yaml": {"sha256": matrix_sha256},
                    # how the CA bundle and credentials reached the build (DESIGN 5): named, never their values
                    "secrets": SECRETS_STATEMENT,
                },
                "resolvedDependencies": dependencies,
            },
            "runDetails": {
                "builder": {"id": BUILDER_ID, "version": {
                    "ascend-images": version(),
                    "commit": labels.get("org.opencontainers.image.revision", ""),
                    "docker-engine": engine_version}},
                "metadata": {
                    # the image is its own identity: its digest, the same wherever the same inputs built it
                    "invocationId": digest,
                    "startedOn": created[0] if created else "",
                    "finishedOn": created[-1] if created else "",
                },
                "byproducts": [{"name": "published-from-checkout", "annotations": {"commit": commit}},
                               # pushed with its layers recompressed (zstd): the same image, another manifest
                               *([{"name": "recompressed-from", "digest": {"sha256": local}}]
                                 if local and local != digest.removeprefix("sha256:") else [])],
            },
        },
    }
