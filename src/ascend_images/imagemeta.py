"""From a built image back to its variant: the labels name it, the matrix says what it must hold."""

from __future__ import annotations

from .errors import AscendImagesError
from .matrix import Matrix, Variant, select
from .render import LABEL_PREFIX

REQUIRED = ("release", "device", "backend", "os", "arch", "python")


def variant_from_labels(matrix: Matrix, labels: dict[str, str], ref: str = "image") -> Variant:
    values = {key: labels.get(f"{LABEL_PREFIX}.{key}") for key in (*REQUIRED, "profile")}
    missing = [f"{LABEL_PREFIX}.{k}" for k in REQUIRED if not values[k]]
    if missing:
        raise AscendImagesError(f"{ref} is not an ascend-images variant image: missing labels {', '.join(missing)}")
    user_keys = labels.get(f"{LABEL_PREFIX}.user-env")
    if user_keys:
        raise AscendImagesError(
            f"{ref} was built with --env {user_keys}: its values are not in the labels; test the image below it"
        )
    (variant,) = select(matrix, device=values["device"], backend=values["backend"], release=values["release"],
                        os=values["os"], arch=values["arch"], python=values["python"],
                        profile=values["profile"] or None)
    return variant
