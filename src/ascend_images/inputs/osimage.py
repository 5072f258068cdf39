"""Make an OS base image locally, for hosts with no registry: debootstrap a root filesystem and
load it as a one-layer image whose config names the right architecture.

`docker import --platform` records amd64 whatever the root filesystem is, so the image tarball
(docker-save layout: manifest.json, config, layer.tar) is written here directly.
"""

from __future__ import annotations

import hashlib
import io
import json
import platform
import shutil
import subprocess
import tarfile
import tempfile
from dataclasses import dataclass
from pathlib import Path

from ascend_images import DEFAULT_NAMESPACE
from ascend_images.errors import AscendImagesError
from ascend_images.inputs.sources import split_url
from ascend_images.matrix.model import Matrix


@dataclass(frozen=True)
class OsImageSpec:
    os: str
    arch: str  # matrix arch: x86_64 | aarch64
    docker_arch: str  # amd64 | arm64
    suite: str
    mirror: str  # what debootstrap fetches from: --mirror, credentials and all, or the matrix's
    variant: str | None = None  # the platform variant (arm64: v8)
    stock_mirror: str = ""  # the matrix's: the image's sources name it, whichever mirror made it

    @property
    def public_mirror(self) -> str:
        """`mirror` without credentials: what the image's history and messages show."""
        return split_url("--mirror", self.mirror, "Debian mirror")[0]

    @property
    def tag(self) -> str:
        return local_os_image(self.os, self.docker_arch)


def local_os_image(os_name: str, docker_arch: str, namespace: str = DEFAULT_NAMESPACE) -> str:
    return f"{namespace}/os:{os_name}-{docker_arch}"


def os_image_spec(matrix: Matrix, os_name: str, arch: str, mirror: str | None = None) -> OsImageSpec:
    spec = matrix.spec.os.get(os_name)
    if spec is None or spec.debootstrap is None:
        can = [name for name, o in matrix.spec.os.items() if o.debootstrap]
        raise AscendImagesError(
            f"os-image can debootstrap {', '.join(can)}; for {os_name!r} pull or load "
            f"{matrix.spec.os[os_name].image if os_name in matrix.spec.os else 'its official image'} "
            "and pass it with --base-image"
        )
    if arch not in matrix.spec.arches:
        raise AscendImagesError(f"unknown arch {arch!r}; valid: {', '.join(matrix.spec.arches)}")
    arch_spec = matrix.spec.arches[arch]
    if mirror:
        split_url("--mirror", mirror, "Debian mirror")  # a bad one is refused here, before debootstrap
    stock = spec.debootstrap.mirror
    return OsImageSpec(os_name, arch, arch_spec.debian_arch, spec.debootstrap.suite, mirror or stock,
                       arch_spec.docker_variant, stock)


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for chunk in iter(lambda: handle.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def image_tarball(rootfs: Path, spec: OsImageSpec, workdir: Path, epoch: int = 0) -> Path:
    """A docker-save tarball of `rootfs` as one layer, tagged spec.tag, for spec.docker_arch. Times later than
    `epoch` (the matrix release's date) are clamped to it, as every stage over it clamps its own (DESIGN 24)."""
    layer = workdir / "layer.tar"
    # GNU tar keeps device nodes, hard links and numeric owners exactly as debootstrap made them
    clamp = [f"--mtime=@{epoch}", "--clamp-mtime"] if epoch else []
    subprocess.run(["tar", "--numeric-owner", "--xattrs", *clamp, "-C", str(rootfs), "-cf", str(layer), "."],
                   check=True)
    diff_id = f"sha256:{_sha256(layer)}"
    config: dict[str, object] = {
        "architecture": spec.docker_arch,
        "os": "linux",
        "config": {"Env": ["PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"],
                   "Cmd": ["/bin/bash"]},
        "rootfs": {"type": "layers", "diff_ids": [diff_id]},
        "history": [{"created_by": f"debootstrap --variant=minbase --arch={spec.docker_arch} "
                                   f"{spec.suite} {spec.public_mirror}"}],
    }
    if spec.variant:
        config["variant"] = spec.variant
    config_bytes = json.dumps(config, sort_keys=True).encode()
    config_name = f"{hashlib.sha256(config_bytes).hexdigest()}.json"
    manifest = [{"Config": config_name, "RepoTags": [spec.tag], "Layers": ["layer/layer.tar"]}]
    out = workdir / "image.tar"
    with tarfile.open(out, "w") as tar:
        for name, data in ((config_name, config_bytes), ("manifest.json", json.dumps(manifest).encode())):
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
        tar.add(layer, arcname="layer/layer.tar")
    layer.unlink()
    return out


def debootstrap(spec: OsImageSpec, target: Path, log: Path) -> None:
    if shutil.which("debootstrap") is None:
        raise AscendImagesError("debootstrap is not installed (apt-get install -y debootstrap)")
    cmd = ["debootstrap", "--variant=minbase", f"--arch={spec.docker_arch}", spec.suite, str(target), spec.mirror]
    with log.open("w") as handle:
        result = subprocess.run(cmd, stdout=handle, stderr=subprocess.STDOUT)
    if result.returncode != 0:
        tail = "\n".join(log.read_text(errors="replace").splitlines()[-15:])
        hint = ""
        if spec.arch != platform.machine():  # the matrix's arch names are the kernel's machine names
            hint = ("\n(a foreign arch needs qemu-user-static and binfmt-support, with binfmt_misc "
                    "mounted: apt-get install -y qemu-user-static binfmt-support)")
        raise AscendImagesError(f"debootstrap failed (exit {result.returncode}); log: {log}\n{tail}{hint}")


def make_os_image(client: object, spec: OsImageSpec, log_dir: Path, epoch: int = 0) -> str:
    """Debootstrap, load and verify; returns the image tag."""
    log_dir.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="ascend-os-") as tmp:
        work = Path(tmp)
        rootfs = work / "rootfs"
        debootstrap(spec, rootfs, log_dir / f"os-image-{spec.os}-{spec.docker_arch}.log")
        if spec.stock_mirror and spec.mirror != spec.stock_mirror:
            # debootstrap names the mirror it used (credentials and all); the image keeps the stock one, as every
            # stage does (`--os-mirror` serves a build its mirror)
            (rootfs / "etc/apt/sources.list").write_text(f"deb {spec.stock_mirror} {spec.suite} main\n")
        for cache in ("var/cache/apt/archives", "var/lib/apt/lists"):
            for item in (rootfs / cache).glob("*"):
                if item.is_file():
                    item.unlink()
        tarball = image_tarball(rootfs, spec, work, epoch)
        with tarball.open("rb") as handle:
            client.api.load_image(handle)  # type: ignore[attr-defined]
    attrs = client.api.inspect_image(spec.tag)  # type: ignore[attr-defined]
    if attrs.get("Architecture") != spec.docker_arch:
        raise AscendImagesError(
            f"{spec.tag} loaded as {attrs.get('Architecture')}, expected {spec.docker_arch}"
        )
    return spec.tag
