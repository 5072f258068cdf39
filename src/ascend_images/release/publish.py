"""Publish built images: per-arch tags first, then one manifest list per variant, then moving aliases.

Order and guarantees:
1. every per-arch image of every variant must be on the local engine, built from no test double and from no download
   that the committed pins.yaml does not pin (its downloads labels name each file and sha256), or nothing is pushed;
2. every immutable tag (per-arch and list) already in the registry is compared with what would be pushed
   (by config digest, which equals the local image id): a different image is refused unless --force,
   before anything is pushed;
3. per-arch tags are pushed by the engine as it holds them (gzip layers); with `compression="zstd"`, BuildKit pushes
   the same image (the same config, so the same diff-ids and labels) with its layers compressed by zstd instead,
   smaller and quicker to pull for clients that read zstd (Docker >= 23, containerd >= 1.5); transient failures are
   retried, definitive ones are not;
4. a manifest list (an OCI index) is written only when every platform of its variant is in the registry; each entry
   is annotated with its base image as published here (`org.opencontainers.image.base.name`, `.base.digest`), the
   one place a registry path is known: the image itself names no namespace (DESIGN 27);
5. aliases (latest-<device>-<backend>) move only after every immutable tag of the selection is in place;
6. each per-arch image pushed gets its SBOM and provenance attached as OCI referrers (release.attest).
A failure at any point leaves no alias on a half-published variant; running again completes the job.
"""

from __future__ import annotations

import base64
import datetime as dt
import json
import os
import re
import subprocess
import tempfile
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import docker

from ascend_images.console import Steps
from ascend_images.errors import AscendImagesError
from ascend_images.inputs.pins import Pin
from ascend_images.matrix.model import Variant
from ascend_images.release.attest import Attestor
from ascend_images.release.inventory import labelled_downloads
from ascend_images.release.registry import OCI_INDEX, RegistryClient, RegistryError, image_index, retry
from ascend_images.stages.names import PARENT_LABEL, TEST_DOUBLE_LABEL, alias, image_tag, list_tag, repo_name

BASE_NAME = "org.opencontainers.image.base.name"
BASE_DIGEST = "org.opencontainers.image.base.digest"

Out = Callable[[str], None]
PUSH_BACKOFF = (1.0, 3.0)  # the engine already retries layer uploads itself
TRANSIENT_PUSH = re.compile(r"connection refused|connection reset|timeout|timed out|EOF|50[0-4]|429|"
                            r"no such host|i/o timeout|broken pipe", re.IGNORECASE)
PUSHED_DIGEST = re.compile(r": digest: (sha256:[0-9a-f]{64}) size: \d+")


class PublishError(AscendImagesError):
    """Publishing stopped; the message says where and what is in the registry."""


@dataclass(frozen=True)
class Target:
    registry: str  # host[:port]
    namespace: str  # path inside the registry ('' for none)

    @classmethod
    def parse(cls, text: str) -> Target:
        host, _, namespace = text.strip("/").partition("/")
        if not host or not re.fullmatch(r"[A-Za-z0-9.\-]+(:\d+)?|\[::1\](:\d+)?", host):
            raise PublishError(f"--registry {text!r}: expected HOST[:PORT]/NAMESPACE, e.g. 127.0.0.1:5000/ascend")
        return cls(host, namespace)

    def repo(self, name: str) -> str:
        return f"{self.namespace}/{name}" if self.namespace else name


@dataclass
class ArchImage:
    local: str  # local tag
    tag: str  # remote per-arch tag
    platform: dict[str, str]
    image_id: str = ""


@dataclass
class VariantRelease:
    repo: str  # remote repository
    list_tag: str
    alias: str | None
    images: dict[str, ArchImage] = field(default_factory=dict)  # docker arch -> image

    def refs(self, target: Target) -> list[str]:
        return [f"{target.registry}/{self.repo}:{t}" for t in [*(i.tag for i in self.images.values()), self.list_tag]]


def group_variants(variants: list[Variant], namespace: str, target: Target) -> list[VariantRelease]:
    """Variants that differ only by arch share one manifest list."""
    groups: dict[tuple[str, str], VariantRelease] = {}
    for v in variants:
        local = image_tag(v, namespace)
        darch = v.arch_spec.debian_arch
        repo = target.repo(repo_name(v))
        group = groups.setdefault((repo, list_tag(v)), VariantRelease(repo, list_tag(v), alias(v)))
        platform = {"architecture": darch, "os": "linux"}
        if v.arch_spec.docker_variant:
            platform["variant"] = v.arch_spec.docker_variant
        group.images[darch] = ArchImage(local, local.rpartition(":")[2], platform)
    return list(groups.values())

COMPRESSIONS = ("gzip", "zstd")


def same_image(image_id: str, remote: Any) -> bool:
    """Whether a manifest in the registry is the local image `image_id`: its digest on a containerd image store (the
    engine pushes the manifest it holds), its config's digest on a graph-driver store (whose ids are config digests),
    or in lists-only mode, where the ids are read from the registry as config digests."""
    return image_id in (remote.digest, remote.body.get("config", {}).get("digest"))


def unpinned_downloads(labels: Mapping[str, str], pins: Mapping[str, Pin]) -> list[tuple[str, str]]:
    """(file, sha256) of each download an image's labels name that `pins` does not pin to that sha256."""
    return [(file, sha256) for file, sha256 in sorted(labelled_downloads(labels).items())
            if file not in pins or pins[file].sha256 != sha256]


class Publisher:
    def __init__(self, client: docker.DockerClient | None, registry: RegistryClient, target: Target, out: Out,
                 *, force: bool = False, dry_run: bool = False, allow_test_double: bool = False,
                 on_step: Callable[[str, str], None] | None = None, pins: Mapping[str, Pin] | None = None,
                 attestor: Attestor | None = None, steps: Steps | None = None, compression: str = "gzip"):
        if compression not in COMPRESSIONS:
            raise PublishError(f"--compression {compression!r}: valid: {', '.join(COMPRESSIONS)}")
        self.compression = compression
        self.client = client
        self.steps = steps or Steps("publish")  # push i of n on stderr; the pushes' outcomes stay on `out`
        self.registry = registry
        self.target = target
        self.out = out
        self.force = force
        self.dry_run = dry_run
        self.allow_test_double = allow_test_double
        self.pins = dict(pins or {})  # the committed pins.yaml: the only record of a download publishing accepts
        self.attestor = attestor  # attaches each pushed image's SBOM and provenance (None: attach nothing)
        self.on_step = on_step or (lambda event, ref: None)
        self.report: dict[str, Any] = {"registry": f"{target.registry}/{target.namespace}".rstrip("/"),
                                       "tags": {}, "skipped": [], "dry_run": dry_run}

    def ref(self, repo: str, tag: str) -> str:
        return f"{self.target.registry}/{repo}:{tag}"

    def is_local(self, image: ArchImage, remote: Any, repo: str) -> bool:
        """Whether a manifest in the registry is this local image: by digest, or (pushed recompressed, zstd) by its
        config: the same layers by their uncompressed digests and the same labels."""
        if same_image(image.image_id, remote):
            return True
        if self.client is None or "config" not in remote.body:
            return False
        config = json.loads(self.registry.blob(repo, remote.body["config"]["digest"]))
        local = self.client.api.inspect_image(image.local)
        return (config.get("rootfs", {}).get("diff_ids") == local["RootFS"]["Layers"]
                and (config.get("config") or {}).get("Labels") == (local.get("Config") or {}).get("Labels"))

    # --- 1 and 2: check everything before writing anything ---------------------------------------
    def check_local(self, groups: list[VariantRelease]) -> None:
        missing, doubles, unpinned = [], [], []
        for group in groups:
            for image in group.images.values():
                try:
                    assert self.client is not None
                    attrs = self.client.api.inspect_image(image.local)
                except docker.errors.ImageNotFound:
                    missing.append(image.local)
                    continue
                image.image_id = attrs["Id"]
                labels = (attrs.get("Config") or {}).get("Labels") or {}
                double = labels.get(TEST_DOUBLE_LABEL)
                if double:
                    doubles.append(f"{image.local} (test double: {double})")
                    if self.allow_test_double:
                        continue  # its downloads are the doubles, which no pin file holds
                unpinned += [f"{image.local}: {file} (sha256 {sha256})" for file, sha256 in unpinned_downloads(
                    labels, self.pins)]
        if missing:
            raise PublishError("not on this engine (build them first; nothing was pushed):\n"
                               + "\n".join(f"  - {m}" for m in missing))
        if doubles and not self.allow_test_double:
            raise PublishError("refusing to publish images built from test doubles (fake CANN or fake kernels; "
                               "nothing was pushed). Build them from real packages; --allow-test-double exists "
                               "for the project's own tests only:\n" + "\n".join(f"  - {d}" for d in doubles))
        if unpinned:
            raise PublishError("refusing to publish images built from downloads pins.yaml does not pin (nothing was "
                               "pushed). On a connected host, `invoke fetch --record` with the same selection pins "
                               "them: review and commit pins.yaml, then build again:\n"
                               + "\n".join(f"  - {u}" for u in unpinned))
        for double in doubles:
            self.out(f"warning: publishing a test-double image (--allow-test-double): {double}")

    def adopt_remote(self, groups: list[VariantRelease]) -> None:
        """Lists-only mode (CI's merge job): the per-arch images are in the registry, not on this engine."""
        missing = []
        for group in groups:
            for darch, image in group.images.items():
                remote = self.registry.manifest(group.repo, image.tag)
                if remote is None:
                    missing.append(f"{self.ref(group.repo, image.tag)} ({darch})")
                else:
                    image.image_id = remote.body.get("config", {}).get("digest", "")
        if missing:
            raise PublishError("per-arch images missing from the registry; no list or alias was written:\n"
                               + "\n".join(f"  - {m}" for m in missing))

    def check_remote(self, groups: list[VariantRelease], lists: bool = True) -> None:
        conflicts = []
        for group in groups:
            expected = {a: i.image_id for a, i in group.images.items()}
            for image in group.images.values():
                remote = self.registry.manifest(group.repo, image.tag)
                if remote is None:
                    continue
                if not self.is_local(image, remote, group.repo):
                    conflicts.append(f"{self.ref(group.repo, image.tag)} holds image {remote.digest[:19]}, "
                                     f"this build is {image.image_id[:19]}")
            remote_list = self.registry.manifest(group.repo, group.list_tag) if lists else None
            if remote_list is not None:
                children = {}
                for child in remote_list.body.get("manifests", []):
                    m = self.registry.manifest(group.repo, child["digest"])
                    arch = child["platform"]["architecture"]
                    mine = group.images.get(arch)
                    children[arch] = expected.get(arch) if m and mine and self.is_local(mine, m, group.repo) else \
                        (m.digest if m else None)
                if children != expected:
                    conflicts.append(f"{self.ref(group.repo, group.list_tag)} lists other images "
                                     f"({', '.join(sorted(children))}) than this build ({', '.join(sorted(expected))})")
        if conflicts and not self.force:
            raise PublishError("immutable tags already hold other images (nothing was pushed; --force to replace):\n"
                               + "\n".join(f"  - {c}" for c in conflicts))
        for c in conflicts:
            self.out(f"--force: replacing {c}")

    # --- 3: per-arch images -------------------------------------------------------------------------
    def push_arch(self, group: VariantRelease, image: ArchImage) -> str:
        remote_repo = f"{self.target.registry}/{group.repo}"
        existing = self.registry.manifest(group.repo, image.tag)
        if existing is not None and self.is_local(image, existing, group.repo):
            self.out(f"  {remote_repo}:{image.tag} already published ({existing.digest[:19]})")
            self.report["skipped"].append(f"{remote_repo}:{image.tag}")
            return existing.digest
        if self.dry_run:
            self.out(f"  would push {image.local} -> {remote_repo}:{image.tag}")
            return ""
        assert self.client is not None, "per-arch pushes need the engine that holds the images"
        client = self.client
        client.api.tag(image.local, remote_repo, image.tag, force=True)
        # the engine reads `docker login` credentials itself; ours (the environment) must be handed to it
        auth = ({"username": self.registry.auth[0], "password": self.registry.auth[1]}
                if self.registry.auth else None)

        def push() -> str:
            digest = None
            for chunk in client.api.push(remote_repo, tag=image.tag, stream=True, decode=True, auth_config=auth):
                if "error" in chunk:
                    message = chunk.get("errorDetail", {}).get("message") or chunk["error"]
                    raise RegistryError(f"push {remote_repo}:{image.tag}: {message}",
                                        transient=bool(TRANSIENT_PUSH.search(message)))
                # a graph-driver store reports the digest in `aux`; a containerd image store only in the status line
                # ("TAG: digest: sha256:... size: N")
                pushed = PUSHED_DIGEST.search(chunk.get("status") or "")
                digest = chunk.get("aux", {}).get("Digest") or (pushed.group(1) if pushed else digest)
            if not digest:
                raise RegistryError(f"push {remote_repo}:{image.tag}: the engine reported no digest")
            return digest

        def recompressed() -> str:  # the same image, its layers recompressed by BuildKit
            return push_recompressed(client, image.local, f"{remote_repo}:{image.tag}", self.compression,
                                     self.registry.auth)

        self.out(f"  pushing {image.local} -> {remote_repo}:{image.tag}"
                 + (f" ({self.compression} layers)" if self.compression != "gzip" else ""))
        digest = retry(f"push {remote_repo}:{image.tag}", push if self.compression == "gzip" else recompressed,
                       self.registry.sleep, PUSH_BACKOFF)
        pushed = self.registry.manifest(group.repo, image.tag)
        if pushed is None or pushed.digest != digest:
            raise PublishError(f"{remote_repo}:{image.tag} reads back as {pushed.digest if pushed else 'missing'}, "
                               f"pushed {digest}")
        self.on_step("pushed", f"{remote_repo}:{image.tag}")
        return digest

    # --- 4 and 5: lists, then aliases -----------------------------------------------------------------
    def base_annotations(self, group: VariantRelease, image: ArchImage, manifest: Any) -> dict[str, str]:
        """The base image of a per-arch image as this registry names it: its parent stage (the parent label, in the
        image's own namespace) under the target namespace, and that parent's digest where the registry or the engine
        has it."""
        if self.client is not None:
            labels = (self.client.api.inspect_image(image.local).get("Config") or {}).get("Labels") or {}
        else:  # lists only: the image is in the registry, not here
            config = json.loads(self.registry.blob(group.repo, manifest.body["config"]["digest"]))
            labels = (config.get("config") or {}).get("Labels") or {}
        parent = labels.get(PARENT_LABEL)
        if not parent:
            return {}
        repo, _, tag = parent.rpartition(":")
        remote_repo = self.target.repo(repo)
        annotations = {BASE_NAME: self.ref(remote_repo, tag)}
        remote = self.registry.manifest(remote_repo, tag)
        digest = remote.digest if remote is not None else ""
        if not digest and self.client is not None:
            local = f"{image.local.rpartition('/')[0]}/{parent}" if "/" in image.local else parent
            try:
                digest = self.client.api.inspect_image(local)["Id"]
            except docker.errors.ImageNotFound:
                digest = ""
        if digest:
            annotations[BASE_DIGEST] = digest
        return annotations

    def write_list(self, group: VariantRelease) -> bytes | None:
        children = []
        for darch, image in sorted(group.images.items()):
            manifest = self.registry.manifest(group.repo, image.tag)
            if manifest is None:
                if self.dry_run:
                    return None
                raise PublishError(f"refusing to write {self.ref(group.repo, group.list_tag)}: platform {darch} "
                                   f"({image.tag}) is not in the registry")
            children.append((manifest, image.platform, self.base_annotations(group, image, manifest)))
        body = image_index(children)
        if self.dry_run:
            self.out(f"  would write list {self.ref(group.repo, group.list_tag)} ({', '.join(sorted(group.images))})")
            return body
        digest = self.registry.put_manifest(group.repo, group.list_tag, body, OCI_INDEX)
        self.report["tags"][self.ref(group.repo, group.list_tag)] = digest
        self.out(f"  list {self.ref(group.repo, group.list_tag)} -> {digest[:19]} ({', '.join(sorted(group.images))})")
        self.on_step("list", self.ref(group.repo, group.list_tag))
        return body

    def run(self, groups: list[VariantRelease], only: str = "all") -> dict[str, Any]:
        """only: all | arch (push per-arch tags) | lists (write lists and aliases from what is in the registry)."""
        if only not in ("all", "arch", "lists"):
            raise PublishError(f"--only {only!r}: valid: all, arch, lists")
        self.out(f"publishing {len(groups)} variant(s) to {self.report['registry']}"
                 + (f" ({only} only)" if only != "all" else "") + (" (dry run)" if self.dry_run else ""))
        if only == "lists":
            self.adopt_remote(groups)
        else:
            self.check_local(groups)
        self.check_remote(groups, lists=only != "arch")
        lists: dict[int, bytes | None] = {}
        self.steps.total = (sum(len(g.images) for g in groups) if only != "lists" else 0) + \
            (len(groups) if only != "arch" else 0)
        try:
            if only != "lists":
                for group in groups:
                    for image in group.images.values():
                        self.steps.begin(f"push {self.ref(group.repo, image.tag)}")
                        digest = self.push_arch(group, image)
                        if digest:
                            self.report["tags"][self.ref(group.repo, image.tag)] = digest
                        if digest and self.attestor is not None:
                            self.report.setdefault("attestations", {})[self.ref(group.repo, image.tag)] = \
                                self.attestor.attach(group.repo, image.local, digest)
            if only == "arch":
                self.steps.end()
                return self.report
            for i, group in enumerate(groups):
                self.steps.begin(f"list {self.ref(group.repo, group.list_tag)}")
                lists[i] = self.write_list(group)
            self.steps.end()
        except (RegistryError, docker.errors.APIError) as exc:
            raise PublishError(f"publishing stopped: {exc}\nNo alias was moved; what is in the registry is "
                               "complete per tag. Run the same command again to finish.") from None
        for i, group in enumerate(groups):
            body = lists.get(i)
            if group.alias and body is not None:
                if self.dry_run:
                    self.out(f"  would move alias {self.ref(group.repo, group.alias)}")
                    continue
                digest = self.registry.put_manifest(group.repo, group.alias, body, OCI_INDEX)
                self.report["tags"][self.ref(group.repo, group.alias)] = digest
                self.out(f"  alias {self.ref(group.repo, group.alias)} -> {digest[:19]}")
        return self.report


def push_recompressed(client: docker.DockerClient, local: str, remote: str, compression: str,
                      auth: tuple[str, str] | None) -> str:
    """Push `local` as `remote` with its layers recompressed: a build FROM the image alone (no step: BuildKit keeps
    its config byte for byte, SOURCE_DATE_EPOCH its created time), pushed by BuildKit with `force-compression`.
    Credentials given in the environment reach BuildKit through a docker config of this push's own; else the
    engine's (`docker login`)."""
    attrs = client.api.inspect_image(local)
    created = (attrs["Config"].get("Labels") or {}).get("org.opencontainers.image.created", "")
    platform = f"{attrs.get('Os', 'linux')}/{attrs['Architecture']}"
    with tempfile.TemporaryDirectory(prefix="ascend-push-") as scratch:
        Path(scratch, "Dockerfile").write_text(f"FROM {local}\n")
        env = dict(os.environ)
        if auth is not None:
            config = Path(scratch, "docker-config")
            config.mkdir(mode=0o700)
            host = remote.split("/", 1)[0]
            token = base64.b64encode(f"{auth[0]}:{auth[1]}".encode()).decode()
            (config / "config.json").write_text(json.dumps({"auths": {host: {"auth": token}}}))
            env["DOCKER_CONFIG"] = str(config)
        metadata = Path(scratch, "metadata.json")
        argv = ["docker", "buildx", "build", "--progress", "plain", "--provenance=false", "--sbom=false",
                "--platform", platform, "--metadata-file", str(metadata),
                "--output", f"type=image,name={remote},push=true,compression={compression},force-compression=true,"
                            "oci-mediatypes=true", scratch]
        if created:
            epoch = int(dt.datetime.fromisoformat(created.replace("Z", "+00:00")).timestamp())
            argv[3:3] = ["--build-arg", f"SOURCE_DATE_EPOCH={epoch}"]
        result = subprocess.run(argv, capture_output=True, text=True, env=env)
        if result.returncode != 0:
            message = result.stderr.strip().splitlines()[-1] if result.stderr.strip() else str(result.returncode)
            raise RegistryError(f"push {remote} ({compression}): {message}",
                                transient=bool(TRANSIENT_PUSH.search(result.stderr[-2000:])))
        return json.loads(metadata.read_text())["containerimage.digest"]


def write_report(report: dict[str, Any], path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")


def report_refs(paths: list[Path]) -> list[str]:
    """Every tag the publish reports pushed, pinned to its digest (REF@sha256:...), so a later job
    (the NPU smoke tests) runs exactly the image that was pushed, even if a tag moves meanwhile."""
    refs = []
    for path in paths:
        if not str(path).strip():
            raise PublishError("--report is empty: name a publish report (the JSON `invoke publish` writes)")
        try:
            report = json.loads(path.read_bytes().decode("utf-8"))
        except FileNotFoundError:
            raise PublishError(f"{path}: no such file (a publish report `invoke publish --report` writes)") from None
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise PublishError(f"{path}: not a publish report ({exc})") from None
        tags = report.get("tags") if isinstance(report, dict) else None
        if not isinstance(tags, dict) or not all(isinstance(k, str) and isinstance(v, str | None)
                                                 for k, v in tags.items()):
            raise PublishError(f"{path}: not a publish report: it needs a \"tags\" object of REF: DIGEST strings "
                               "(what `invoke publish --report` writes)")
        for ref, digest in tags.items():
            if digest and not re.fullmatch(r"sha256:[0-9a-f]{64}", digest):
                raise PublishError(f"{path}: not a publish report: tags.{ref} is {digest!r}, not a digest "
                                   "(sha256:<64 hex>)")
        refs += [f"{ref}@{digest}" for ref, digest in sorted(tags.items()) if digest]
    return refs
