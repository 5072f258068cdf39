"""OCI artifacts attached to an image manifest (its SBOM, its provenance), as the distribution spec v1.1 says:
an OCI image manifest with an `artifactType`, the empty config, the document as its one layer and the image as its
`subject`. A registry with the referrers API indexes it itself (it answers with `OCI-Subject`); for one without
(Debian 12's docker-registry: distribution 2.8) the referrers tag schema is kept: the tag `sha256-<hex of the
subject digest>` holds an OCI index listing every referrer, read, appended to and written back."""

from __future__ import annotations

import datetime as dt
import hashlib
import json
from dataclasses import dataclass
from typing import Any

from ascend_images.release.registry import OCI_INDEX, OCI_MANIFEST, Manifest, RegistryClient, RegistryError

EMPTY_CONFIG = b"{}"
EMPTY_MEDIA_TYPE = "application/vnd.oci.empty.v1+json"
SBOM_ARTIFACT = "application/vnd.cyclonedx+json"
PROVENANCE_ARTIFACT = "application/vnd.in-toto+json"


@dataclass(frozen=True)
class Referrer:
    digest: str
    artifact_type: str
    annotations: dict[str, str]


def tag_schema_tag(subject_digest: str) -> str:
    """The referrers tag schema's tag for a subject: `sha256-<hex>`."""
    algorithm, _, hexdigest = subject_digest.partition(":")
    return f"{algorithm}-{hexdigest}"


def attach(registry: RegistryClient, repo: str, subject: Manifest, artifact_type: str, payload: bytes,
           annotations: dict[str, str] | None = None) -> str:
    """Push `payload` as an artifact whose subject is `subject`; its manifest digest."""
    config = registry.put_blob(repo, EMPTY_CONFIG)
    layer = registry.put_blob(repo, payload)
    notes = {"org.opencontainers.image.created": dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
             **(annotations or {})}
    manifest = {
        "schemaVersion": 2, "mediaType": OCI_MANIFEST, "artifactType": artifact_type,
        "config": {"mediaType": EMPTY_MEDIA_TYPE, "digest": config, "size": len(EMPTY_CONFIG)},
        "layers": [{"mediaType": artifact_type, "digest": layer, "size": len(payload)}],
        "subject": {"mediaType": subject.media_type, "digest": subject.digest, "size": subject.size},
        "annotations": notes,
    }
    body = json.dumps(manifest, indent=2).encode()
    digest = "sha256:" + hashlib.sha256(body).hexdigest()
    headers = registry.put_manifest_headers(repo, digest, body, OCI_MANIFEST)
    if not any(k.lower() == "oci-subject" for k in headers):  # no referrers API: keep the tag schema's index
        _append_to_tag_schema(registry, repo, subject.digest,
                              {"mediaType": OCI_MANIFEST, "digest": digest, "size": len(body),
                               "artifactType": artifact_type, "annotations": notes})
    return digest


def _append_to_tag_schema(registry: RegistryClient, repo: str, subject_digest: str, descriptor: dict[str, Any]) -> None:
    tag = tag_schema_tag(subject_digest)
    current = registry.manifest(repo, tag)
    manifests = [m for m in (current.body.get("manifests", []) if current else [])
                 if m.get("digest") != descriptor["digest"]]
    index = {"schemaVersion": 2, "mediaType": OCI_INDEX, "manifests": [*manifests, descriptor]}
    registry.put_manifest(repo, tag, json.dumps(index, indent=2).encode(), OCI_INDEX)


def referrers(registry: RegistryClient, repo: str, subject_digest: str) -> list[Referrer]:
    """Every artifact attached to a manifest: by the referrers API, or else by the tag schema's index."""
    listed = registry.referrers_api(repo, subject_digest)
    if listed is None:
        index = registry.manifest(repo, tag_schema_tag(subject_digest))
        listed = index.body.get("manifests", []) if index else []
    return [Referrer(m["digest"], m.get("artifactType", ""), dict(m.get("annotations") or {})) for m in listed]


def artifact(registry: RegistryClient, repo: str, referrer: Referrer) -> bytes:
    """The document an artifact carries (its one layer), checked against its digest."""
    manifest = registry.manifest(repo, referrer.digest)
    if manifest is None:
        raise RegistryError(f"{registry.host}/{repo}@{referrer.digest}: listed as a referrer, but not there")
    (layer,) = manifest.body.get("layers", [None])
    return registry.blob(repo, layer["digest"])
