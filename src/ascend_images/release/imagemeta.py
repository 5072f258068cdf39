"""From a built image back to its variant: the labels name it, the matrix says what it must hold."""

from __future__ import annotations

import json

from ascend_images.errors import AscendImagesError
from ascend_images.matrix.model import Matrix, Variant
from ascend_images.matrix.selection import select
from ascend_images.stages.names import LABEL_PREFIX

REQUIRED = ("release", "device", "backend", "os", "arch", "python")


def variant_from_labels(matrix: Matrix, labels: dict[str, str], ref: str = "image") -> Variant:
    values = {key: labels.get(f"{LABEL_PREFIX}.{key}") for key in (*REQUIRED, "profile", "allocator")}
    missing = [f"{LABEL_PREFIX}.{k}" for k in REQUIRED if not values[k]]
    if missing:
        raise AscendImagesError(f"{ref} is not an ascend-images variant image: missing labels {', '.join(missing)}")
    user_env = labels.get(f"{LABEL_PREFIX}.user-env")
    env: dict[str, str] = {}
    if user_env:
        try:
            env = json.loads(user_env)
        except json.JSONDecodeError:
            raise AscendImagesError(f"{ref} was built with --env {user_env} by an older ascend-images: the values "
                                    "are not in its labels; test the image below it") from None
    (variant,) = select(matrix, device=values["device"], backend=values["backend"], release=values["release"],
                        os=values["os"], arch=values["arch"], python=values["python"],
                        profile=values["profile"] or None, env=env, allocator=values["allocator"] or None,
                        framework=labels.get(f"{LABEL_PREFIX}.framework") or None)
    return variant


def present(client, ref: str):
    """The image `ref`, pulled into the engine when it has it not: an image a builder of its own pushed to a registry
    (`invoke build --push`) is read from there."""
    import docker

    try:
        return client.images.get(ref)
    except docker.errors.ImageNotFound:
        first = ref.split("/", 1)[0]
        if "/" not in ref or not ("." in first or ":" in first or first == "localhost"):
            raise  # a local name: nowhere to pull it from
    repo, _, tag = ref.rpartition(":") if ":" in ref.rsplit("/", 1)[-1] else (ref, "", "latest")
    client.images.pull(repo, tag=tag)
    return client.images.get(ref)


def image_facts(client, ref: str) -> dict:
    """Labels, the in-image manifest of installed versions and the env table, read from the image."""
    import json

    image = present(client, ref)
    out = client.containers.run(ref, ["cat", "/etc/ascend-images/manifest.json", "/etc/ascend-images/env.json"],
                                entrypoint=[], remove=True).decode()
    decoder = json.JSONDecoder()
    manifest, end = decoder.raw_decode(out)
    env, _ = decoder.raw_decode(out[end:].lstrip())
    return {
        "ref": ref, "id": image.id, "architecture": image.attrs.get("Architecture"),
        "size_mb": round(image.attrs.get("Size", 0) / 1e6, 1),
        "labels": dict(sorted((image.labels or {}).items())),
        "python": manifest.get("python", {}), "cann": manifest.get("cann", {}),
        "env": {k: v["value"] for k, v in env.get("variables", {}).items()},
    }


def diff_facts(a: dict, b: dict) -> list[tuple[str, str, str | None, str | None]]:
    """(section, key, value in a, value in b) for every difference, sections in a stable order."""
    rows = []
    for section in ("labels", "cann", "python", "env"):
        left, right = a.get(section, {}), b.get(section, {})
        for key in sorted(set(left) | set(right)):
            if section == "labels" and key.endswith((".created", ".revision", ".content-key", "base.name")):
                continue
            if left.get(key) != right.get(key):
                rows.append((section, key, left.get(key), right.get(key)))
    return rows
