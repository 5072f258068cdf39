"""An image's SBOM (CycloneDX 1.6 JSON), made from what the image holds (release.inventory), never from the matrix:
OS packages, Python distributions with their licenses, CANN's components, and every download PyPI does not carry
with its sha256 and whether pins.yaml pins it. Test doubles are named as such."""

from __future__ import annotations

import functools
import json
from collections import Counter
from collections.abc import Mapping

from cyclonedx.model import HashAlgorithm, HashType, Property
from cyclonedx.model.bom import Bom
from cyclonedx.model.component import Component, ComponentType
from cyclonedx.model.license import DisjunctiveLicense, LicenseExpression
from cyclonedx.output.json import JsonV1Dot6
from cyclonedx.schema import SchemaVersion
from packageurl import PackageURL

from ascend_images.errors import AscendImagesError
from ascend_images.inputs.pins import Pin
from ascend_images.inputs.pypi import normalize
from ascend_images.release.inventory import Inventory

SBOM_MEDIA_TYPE = "application/vnd.cyclonedx+json"
PROPERTY = "ascend-images"  # prefix of our own CycloneDX properties
# CANN's packages carry Huawei's end-user licence, not an open-source one; its name as CANN's downloads show it
CANN_LICENSE = "Huawei CANN End User License Agreement (proprietary)"


class SbomError(AscendImagesError):
    """An SBOM that does not validate, or that cannot be read."""


def _licenses(texts) -> list:
    """One SPDX expression where that is all a package states; otherwise each licence by its name (CycloneDX allows
    no expression beside other licences)."""
    texts = list(texts)
    if len(texts) == 1 and _looks_spdx(texts[0]):
        return [LicenseExpression(texts[0])]
    return [DisjunctiveLicense(name=t) for t in texts]


@functools.cache
def _spdx_licensing():
    """license-expression's SPDX licensing, built once per process: it reads the licence index and builds its matcher
    anew on every call (24 ms of CPU), and an image lists hundreds of packages."""
    from license_expression import get_spdx_licensing

    return get_spdx_licensing()


@functools.lru_cache(maxsize=4096)
def _looks_spdx(text: str) -> bool:
    try:
        parsed = _spdx_licensing().parse(text, validate=True, strict=True)
    except Exception:  # the library raises several kinds for a text that is no expression
        return False
    return parsed is not None


def build_sbom(inv: Inventory, pins: Mapping[str, Pin]) -> Bom:
    distro = f"{inv.os_release.get('ID', '')}-{inv.os_release.get('VERSION_ID', '')}"
    bom = Bom()
    image = Component(type=ComponentType.CONTAINER, name=inv.ref.rsplit(":", 1)[0], version=inv.ref.rsplit(":", 1)[-1],
                      bom_ref=f"image:{inv.image_id}",
                      properties=[Property(name=f"{PROPERTY}:image-id", value=inv.image_id),
                                  *(Property(name=f"{PROPERTY}:label:{k}", value=v)
                                    for k, v in sorted(inv.labels.items()) if k.startswith("io.ascend-images."))])
    bom.metadata.component = image
    double = inv.test_double
    for name, version, deb_arch, licences in inv.deb:
        purl = PackageURL("deb", inv.os_release.get("ID", "debian"), name, version,
                          {"arch": deb_arch, "distro": distro})
        bom.components.add(Component(type=ComponentType.LIBRARY, name=name, version=version, purl=purl,
                                     bom_ref=f"deb:{name}@{version}",
                                     licenses=_licenses(licences)))
    for name, version, rpm_arch, licence in inv.rpm:
        purl = PackageURL("rpm", inv.os_release.get("ID", "openeuler"), name, version,
                          {"arch": rpm_arch, "distro": distro})
        bom.components.add(Component(type=ComponentType.LIBRARY, name=name, version=version, purl=purl,
                                     bom_ref=f"rpm:{name}@{version}",
                                     licenses=_licenses([licence] if licence else [])))
    for dist in inv.python:
        key = normalize(dist.name)
        # what pip installed from a file is not PyPI's package of that name (mindspeed from its git archive, the
        # sgl-kernel-npu zip's wheels, a vendor's triton-ascend): a generic purl, and the file is among the downloads
        kind = "generic" if dist.direct else "pypi"
        bom.components.add(Component(type=ComponentType.LIBRARY, name=key, version=dist.version,
                                     purl=PackageURL(kind, None, key, dist.version),
                                     bom_ref=f"{kind}:{key}@{dist.version}",
                                     licenses=_licenses(dist.licenses)))
    for package, version, info in sorted(set(inv.cann)):
        bom.components.add(Component(type=ComponentType.FRAMEWORK, name=package, version=version,
                                     bom_ref=f"cann:{package}@{version}",
                                     licenses=[DisjunctiveLicense(name=CANN_LICENSE)],
                                     properties=[Property(name=f"{PROPERTY}:install-info", value=info)]))
    for file, sha256 in sorted(inv.downloads.items()):
        pin = pins.get(file)
        pinned = "yes" if pin is not None and pin.sha256 == sha256 else "no"
        props = [Property(name=f"{PROPERTY}:pinned-in-pins.yaml", value=pinned)]
        if pin is not None:
            props.append(Property(name=f"{PROPERTY}:url", value=pin.url))
        if double:
            props.append(Property(name=f"{PROPERTY}:test-double", value=double))
        bom.components.add(Component(type=ComponentType.FILE, name=file, bom_ref=f"file:{file}",
                                     hashes=[HashType(alg=HashAlgorithm.SHA_256, content=sha256)],
                                     properties=props))
    if double:
        image.properties.add(Property(name=f"{PROPERTY}:test-double", value=double))
    bom.register_dependency(image, list(bom.components))  # the image holds every component
    return bom


def sbom_json(bom: Bom) -> str:
    """The BOM as CycloneDX 1.6 JSON, validated against CycloneDX's schema before it is returned."""
    # imported here: jsonschema's format checks compile rfc3987-syntax's grammars on import, 3 s of CPU that every
    # process importing this module (published-refs, npu-gate, verify) would pay for a check only this function makes
    from cyclonedx.validation.json import JsonStrictValidator

    text = JsonV1Dot6(bom).output_as_string(indent=2)
    error = JsonStrictValidator(SchemaVersion.V1_6).validate_str(text)
    if error is not None:
        raise SbomError(f"the SBOM does not validate against CycloneDX 1.6: {error}")
    return text


def license_summary(sbom: dict) -> list[tuple[str, int]]:
    """(licence, number of components) over an SBOM document, most first; 'none stated' where a component says none."""
    counts: Counter[str] = Counter()
    for component in sbom.get("components", []):
        if component.get("type") == "file":
            continue
        names = [entry.get("expression") or entry.get("license", {}).get("id") or entry.get("license", {}).get("name")
                 for entry in component.get("licenses", [])]
        for name in names or ["none stated"]:
            counts[name or "none stated"] += 1
    return sorted(counts.items(), key=lambda item: (-item[1], item[0]))


def load_sbom(text: str | bytes) -> dict:
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise SbomError(f"not an SBOM (JSON): {exc}") from None
