"""What a built image holds, read from the image itself (never from matrix.yaml): its OS packages from the package
database, every Python distribution with its license metadata, CANN's components from their install.info files, the
downloads its stages recorded (labels), and its labels. The SBOM and `invoke verify` are made from this."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from ascend_images.errors import AscendImagesError
from ascend_images.stages.kinds import DOWNLOADS_LABEL
from ascend_images.stages.names import TEST_DOUBLE_LABEL

# Runs inside the image with its own Python: stdlib only, one process (an emulated start costs seconds).
PROBE = r"""
import glob, importlib.metadata as md, json, os, re, subprocess
out = {"os": {}, "deb": [], "rpm": [], "python": [], "cann": []}
try:
    with open("/etc/os-release", encoding="utf-8") as handle:
        for line in handle:
            key, sep, value = line.strip().partition("=")
            if sep:
                out["os"][key] = value.strip('"')
except OSError:
    pass
def lines(cmd):
    try:
        return subprocess.run(cmd, capture_output=True, text=True, check=True).stdout.splitlines()
    except (OSError, subprocess.CalledProcessError):
        return []
def deb_licenses(name):
    # Debian's machine-readable copyright files (DEP-5) name each licence on a `License:` line
    found = []
    try:
        with open(f"/usr/share/doc/{name}/copyright", encoding="utf-8", errors="replace") as handle:
            for line in handle:
                if line.startswith("License:") and line[8:].strip() and line[8:].strip() not in found:
                    found.append(line[8:].strip())
    except OSError:
        pass
    return found
for line in lines(["dpkg-query", "-W", "-f", "${Package}\t${Version}\t${Architecture}\t${db:Status-Abbrev}\n"]):
    name, version, arch, status = (line.split("\t") + ["", "", "", ""])[:4]
    if status.startswith("ii"):
        out["deb"].append([name, version, arch, deb_licenses(name.split(":")[0])])
for line in lines(["rpm", "-qa", "--qf", "%{NAME}\t%{VERSION}-%{RELEASE}\t%{ARCH}\t%{LICENSE}\n"]):
    out["rpm"].append((line.split("\t") + ["", "", "", ""])[:4])
for dist in md.distributions():
    meta = dist.metadata
    if not meta["Name"]:
        continue
    classifiers = [c.split(" :: ")[-1] for c in (meta.get_all("Classifier") or []) if c.startswith("License ::")]
    out["python"].append({"name": meta["Name"], "version": dist.version,
                          "expression": meta.get("License-Expression") or "",
                          "license": (meta.get("License") or "").strip().splitlines()[0][:200]
                                     if (meta.get("License") or "").strip() else "",
                          "classifiers": classifiers,
                          # pip writes direct_url.json for what it installed from a file, path or URL, not an index
                          "direct": dist.read_text("direct_url.json") is not None})
seen = set()
for info in sorted(glob.glob("/usr/local/Ascend/**/*install.info", recursive=True)):
    info = os.path.realpath(info)  # `latest` links lead to the same files
    if info in seen:
        continue
    seen.add(info)
    fields = {}
    with open(info, encoding="utf-8", errors="replace") as handle:
        for line in handle:
            key, sep, value = line.strip().partition("=")
            if sep:
                fields[key] = value
    name = fields.get("package_name") or os.path.basename(os.path.dirname(info))
    version = fields.get("version") or fields.get("Version")
    if version:
        out["cann"].append([name, version, info])
print(json.dumps(out))
"""


class InventoryError(AscendImagesError):
    """The image could not be read."""


@dataclass(frozen=True)
class PythonDist:
    name: str
    version: str
    licenses: tuple[str, ...]  # an SPDX expression, else the License field, else the classifiers' names
    # installed from a file (a vendor wheel, a release zip's wheel, a git archive), not from an index: PyPI's
    # package of that name, if any, is not this one
    direct: bool = False


@dataclass
class Inventory:
    ref: str
    image_id: str
    architecture: str
    labels: dict[str, str]
    os_release: dict[str, str]
    deb: list[tuple[str, str, str, tuple[str, ...]]] = field(default_factory=list)  # name, version, arch, licences
    rpm: list[tuple[str, str, str, str]] = field(default_factory=list)  # name, version-release, arch, license
    python: list[PythonDist] = field(default_factory=list)
    cann: list[tuple[str, str, str]] = field(default_factory=list)  # package, version, install.info path

    @property
    def downloads(self) -> dict[str, str]:
        return labelled_downloads(self.labels)

    @property
    def test_double(self) -> str:
        return self.labels.get(TEST_DOUBLE_LABEL, "")


def labelled_downloads(labels: Mapping[str, str]) -> dict[str, str]:
    """file -> sha256 of every download PyPI does not carry that a stage of the image installed (its labels)."""
    out: dict[str, str] = {}
    for key, value in sorted(labels.items()):
        if key.startswith(f"{DOWNLOADS_LABEL}."):
            out.update(json.loads(value))
    return out


def _licenses(entry: dict[str, Any]) -> tuple[str, ...]:
    if entry.get("expression"):
        return (entry["expression"],)
    if entry.get("license") and entry["license"].upper() not in ("UNKNOWN", "NONE"):
        return (entry["license"],)
    return tuple(entry.get("classifiers") or ())


def read_inventory(client, ref: str) -> Inventory:
    """Run the probe in a throwaway container of `ref` (no entrypoint, no network) and parse what it found."""
    import docker.errors

    try:
        image = client.images.get(ref)
        raw = client.containers.run(ref, ["python", "-c", PROBE], entrypoint=[], remove=True, network_disabled=True,
                                    environment={"TORCH_DEVICE_BACKEND_AUTOLOAD": "0"})
    except docker.errors.ImageNotFound:
        raise InventoryError(f"{ref}: no such image on this engine (pull or build it first)") from None
    except docker.errors.ContainerError as exc:
        raise InventoryError(f"{ref}: reading its package databases failed: {exc}") from None
    try:
        found = json.loads(raw.decode().strip().splitlines()[-1])
    except (json.JSONDecodeError, IndexError):
        raise InventoryError(f"{ref}: the inventory probe printed no JSON: {raw[-500:]!r}") from None
    return Inventory(
        ref, image.id, image.attrs.get("Architecture", ""), dict(image.labels or {}), found["os"],
        [(d[0], d[1], d[2], tuple(d[3])) for d in found["deb"]], [tuple(r) for r in found["rpm"]],
        sorted((PythonDist(p["name"], p["version"], _licenses(p), bool(p.get("direct"))) for p in found["python"]),
               key=lambda d: d.name.lower()),
        [tuple(c) for c in found["cann"]])
