"""Publishing to a real registry (Debian's docker-registry on 127.0.0.1): push, pull back, compare digests;
immutability; a registry stopped mid-publish, then restarted, and a re-run that finishes."""

from __future__ import annotations

import subprocess

import pytest

from ascend_images.cli.options import Selection
from ascend_images.cli.release import publish_selection, verify_image
from ascend_images.release.publish import PublishError
from ascend_images.release.registry import OCI_INDEX, RegistryClient, RegistryError
from tests.conftest import ROOT, TEST_ARCH, TEST_DOCKER_ARCH, TEST_NAMESPACE
from tests.fixtures.buildkit import build_image

pytestmark = [pytest.mark.docker, pytest.mark.registry, pytest.mark.slow]
# A2 and A3 on each one's default release for backend none (both CANN 9.1.0), both in CI's selection
SELECTION = {"device": "a2,a3", "backend": "none"}


def publish(registry, lines, **kwargs):
    """The CI images are built from the fake CANN, so these tests opt in with allow_test_double."""
    sel = Selection(matrix=str(ROOT / "matrix.yaml"), arch=TEST_ARCH, **SELECTION)
    kwargs.setdefault("allow_test_double", True)
    return publish_selection(sel, lines.append, registry=registry.namespace, namespace=TEST_NAMESPACE,
                       report_path=registry.root / "report.json", **kwargs)


def test_test_double_images_are_refused(docker_client, ci_build, registry):
    lines: list[str] = []
    refused = r"(?s)refusing to publish images built from test doubles.*test double: cann"
    with pytest.raises(PublishError, match=refused):
        publish(registry, lines, allow_test_double=False)
    assert registry.catalog() == []  # nothing pushed


def test_an_image_built_from_unpinned_downloads_is_refused_until_pins_yaml_pins_them(
        docker_client, ci_build, fake_cann_dir, registry, tmp_path):
    """An image whose CANN packages were trusted on first use on the build host (no pin in the committed pins.yaml)
    is not published; the same image is, once pins.yaml pins each package to the sha256 it was built from. The image
    is CI's A3 training base relabelled as built from real packages (the test-double label emptied)."""
    import hashlib

    import yaml

    from tests.conftest import remove_tags
    from tests.fixtures.matrices import matrix_copy
    from tests.image.conftest import ci_image_tags

    # the production one: not the -debug-tcmalloc-env... overlay
    wanted = f"torch-npu:2.10.0.post4-cann9.1.0-a3-debian12-py3.11-{TEST_DOCKER_ARCH}"
    (source,) = [t for t in ci_image_tags() if t.endswith(wanted)]
    namespace = "ascend-images-unpinned"
    tag = source.replace(TEST_NAMESPACE, namespace, 1)
    # as this checkout would build it from real packages: no test-double label, and this checkout's commit
    head = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "HEAD"], capture_output=True, text=True).stdout.strip()
    build_image(tag, f'FROM {source}\nLABEL io.ascend-images.test-double="" '
                     f'org.opencontainers.image.revision="{head}"\n')
    files = ["Ascend-cann-toolkit_9.1.0_linux-aarch64.run", "Ascend-cann-A3-ops_9.1.0_linux-aarch64.run",
             "Ascend-cann-nnal_9.1.0_linux-aarch64.run"]
    sha = {f: hashlib.sha256((fake_cann_dir / f).read_bytes()).hexdigest() for f in files}
    try:
        def publish_with(pins: dict) -> dict:
            path = matrix_copy(tmp_path / str(len(pins)), locks=True)
            (path.parent / "pins.yaml").write_text(yaml.safe_dump({"pins": pins}))
            sel = Selection(matrix=str(path), arch=TEST_ARCH, device="a3", backend="none")
            return publish_selection(sel, [].append, registry=registry.namespace, namespace=namespace,
                               report_path=tmp_path / "report.json")

        with pytest.raises(PublishError) as caught:
            publish_with({})
        message = str(caught.value)
        assert "refusing to publish images built from downloads pins.yaml does not pin" in message
        assert all(f"{f} (sha256 {sha[f]})" in message for f in files), message
        assert registry.catalog() == []  # nothing pushed
        pinned = {f: {"url": f"https://example.invalid/{f}", "size": 1, "sha256": sha[f]} for f in files}
        with pytest.raises(PublishError, match=files[1]):  # one pinned to other bytes: still refused
            publish_with({**pinned, files[1]: {**pinned[files[1]], "sha256": "0" * 64}})
        report = publish_with(pinned)
        assert registry.catalog() == [registry.repo("torch-npu")]
        # `invoke verify` on what the registry now holds, against this checkout with those pins: nothing to say
        ((ref, _),) = report["attestations"].items()
        lines: list[str] = []
        pinned_matrix = str(tmp_path / str(len(pinned)) / "matrix.yaml")
        # read from the registry, not made from a local image: the engine keeps no tag of it
        remove_tags(docker_client, f"{namespace}/")
        remove_tags(docker_client, f"{registry.namespace}/", noprune=True)
        assert verify_image(f"{registry.host}/{ref.split('/', 1)[1]}", lines.append, matrix=pinned_matrix) == 0, \
            lines
        assert lines[-1].endswith("0 finding(s) (SBOM and provenance read from the registry)")
    finally:
        remove_tags(docker_client, f"{namespace}/")


def test_publish_pull_back_republish_and_immutable_tags(docker_client, ci_build, registry):
    """Published, then pulled back with the same digests; published again: a no-op; another image pushed under a
    tag: refused without --force, replaced with it. One registry for all, since each push of the two images costs a
    minute on this machine."""
    lines: list[str] = []
    report = publish(registry, lines)
    client = RegistryClient(registry.host)
    per_arch = {ref: d for ref, d in report["tags"].items() if ref.endswith(("-arm64", "-amd64"))}
    assert len(per_arch) == 2, report
    for ref, digest in per_arch.items():
        repo, tag = ref.split("/", 1)[1].rsplit(":", 1)
        local_id = docker_client.images.get(f"{TEST_NAMESPACE}/{repo.split('/', 1)[1]}:{tag}").id
        docker_client.api.remove_image(ref)  # only the registry tag: the pull must resolve through the registry
        pulled = docker_client.images.pull(ref.rsplit(":", 1)[0], tag=tag)
        assert pulled.id == local_id
        assert f"{ref.rsplit(':', 1)[0]}@{digest}" in pulled.attrs["RepoDigests"]
        lst = client.manifest(repo, tag.removesuffix("-arm64").removesuffix("-amd64"))
        assert lst.media_type == OCI_INDEX
        assert [m["digest"] for m in lst.body["manifests"]] == [digest]
        # the base as this registry names it, written out by hand: the CANN stage of the same device and release,
        # under the namespace published to (the image itself names none), and that stage's digest here
        device = tag.split("-a", 1)[1][0]
        base = f"{registry.namespace}/cann:9.1.0-a{device}-debian12-py3.11-{TEST_DOCKER_ARCH}"
        annotations = lst.body["manifests"][0]["annotations"]
        assert annotations["org.opencontainers.image.base.name"] == base, annotations
        local_base = docker_client.images.get(f"{TEST_NAMESPACE}/{base.rsplit('/', 1)[1]}").id
        assert annotations["org.opencontainers.image.base.digest"] == local_base
        assert lst.body["manifests"][0]["platform"]["architecture"] == docker_client.images.get(ref).attrs[
            "Architecture"]
    aliases = {ref: d for ref, d in report["tags"].items() if ":latest-" in ref}
    assert set(a.rsplit(":", 1)[1] for a in aliases) == {"latest-a2-none", "latest-a3-none"}
    lists = {ref: d for ref, d in report["tags"].items() if ref.endswith("-py3.11")}
    for alias, digest in aliases.items():
        device = alias.rsplit(":", 1)[1].split("-")[1]
        (list_digest,) = [d for ref, d in lists.items() if f"-{device}-" in ref]
        assert digest == list_digest
    # published again: nothing to push; then somebody else's image under one tag
    again = publish(registry, lines)
    assert len(again["skipped"]) == 2  # both per-arch tags already there, identical
    a2_ref = next(r for r in report["tags"] if "-a2-" in r and r.endswith(f"-{TEST_DOCKER_ARCH}"))
    a3_ref = next(r for r in report["tags"] if "-a3-" in r and r.endswith(f"-{TEST_DOCKER_ARCH}"))
    # somebody pushes another image under the a3 tag
    repo, tag = a3_ref.rsplit(":", 1)
    docker_client.api.tag(a2_ref, repo, tag, force=True)
    for _ in docker_client.api.push(repo, tag=tag, stream=True, decode=True):
        pass
    with pytest.raises(PublishError, match="immutable tags already hold other images") as err:
        publish(registry, lines)
    assert tag in str(err.value) and "nothing was pushed" in str(err.value)
    fixed = publish(registry, lines, force=True)
    client = RegistryClient(registry.host)
    a3_local = docker_client.images.get(f"{TEST_NAMESPACE}/{repo.split('/', 2)[2]}:{tag}").id
    # the engine's containerd image store (setup-engine's) names an image by its manifest digest: the one pushed
    assert client.manifest(repo.split("/", 1)[1], tag).digest == a3_local
    assert a3_ref in fixed["tags"]


def test_registry_down_mid_publish_then_rerun_finishes(docker_client, ci_build, registry):
    lines: list[str] = []
    stopped = []

    def stop_after_first_push(event, ref):
        if event == "pushed" and not stopped:
            registry.stop()
            stopped.append(ref)

    with pytest.raises(PublishError, match="publishing stopped") as err:
        publish(registry, lines, on_step=stop_after_first_push)
    assert stopped and "Run the same command again" in str(err.value)
    registry.start()
    client = RegistryClient(registry.host)
    for device in ("a2", "a3"):
        assert client.manifest(registry.repo("torch-npu"), f"latest-{device}-none") is None  # no alias moved
    report = publish(registry, lines)
    for device in ("a2", "a3"):
        alias = client.manifest(registry.repo("torch-npu"), f"latest-{device}-none")
        assert alias is not None and len(alias.body["manifests"]) == 1
    assert stopped[0] in report["skipped"]  # what was complete before the fault is not pushed again


def test_dry_run_pushes_nothing(docker_client, ci_build, registry):
    lines: list[str] = []
    publish(registry, lines, dry_run=True)
    assert any("would push" in line for line in lines)
    assert RegistryClient(registry.host).manifest(registry.repo("torch-npu"), "latest-a3-none") is None


# --- a registry that wants credentials ------------------------------------------------------------------
def test_publish_to_a_registry_that_requires_authentication(docker_client, ci_build, auth_registry, monkeypatch):
    """Per-arch pushes through the engine and lists through the registry API both authenticate; wrong or no
    credentials stop before anything is pushed, with a message that says what to do. The lists are written as CI's
    merge job writes them: where no engine answers, from what the per-arch step pushed."""
    from tests.conftest import AUTH_PASSWORD, AUTH_USER

    # one device: the subject is where credentials go, and each image a registry has not seen costs the engine a
    # minute of CPU compressing its layers
    sel = Selection(matrix=str(ROOT / "matrix.yaml"), arch=TEST_ARCH, device="a3", backend="none")
    kwargs = {"registry": auth_registry.namespace, "namespace": TEST_NAMESPACE,
              "report_path": auth_registry.root / "report.json", "allow_test_double": True}
    lines: list[str] = []
    monkeypatch.delenv("ASCEND_IMAGES_REGISTRY_USER", raising=False)
    monkeypatch.delenv("ASCEND_IMAGES_REGISTRY_PASSWORD", raising=False)
    with pytest.raises(RegistryError, match=r"asks for credentials and none are configured.*docker login"):
        publish_selection(sel, lines.append, **kwargs)
    monkeypatch.setenv("ASCEND_IMAGES_REGISTRY_USER", AUTH_USER)
    monkeypatch.setenv("ASCEND_IMAGES_REGISTRY_PASSWORD", "wrong")
    with pytest.raises(RegistryError, match="refused the credentials given"):
        publish_selection(sel, lines.append, **kwargs)
    assert auth_registry.catalog() == []  # nothing pushed
    monkeypatch.setenv("ASCEND_IMAGES_REGISTRY_PASSWORD", AUTH_PASSWORD)
    per_arch = publish_selection(sel, lines.append, only="arch", **kwargs)  # through the engine
    assert all(ref.endswith("-arm64") for ref in per_arch["tags"])
    # CI's merge job: the lists are written where no engine holds the images (here no engine at all)
    monkeypatch.setenv("DOCKER_HOST", "unix:///nonexistent/docker.sock")
    report = publish_selection(sel, lines.append, only="lists", **kwargs)  # through the registry API
    lists = [ref for ref in report["tags"] if ref.endswith("-py3.11")]
    assert len(lists) == 1, report
    client = RegistryClient(auth_registry.host)  # authenticates with the environment's credentials
    for ref in lists:
        repo, tag = ref.split("/", 1)[1].rsplit(":", 1)
        listed = client.manifest(repo, tag)
        assert listed is not None and listed.media_type == OCI_INDEX
        # written without an engine: the base's name from the image's labels as the registry holds them
        assert listed.body["manifests"][0]["annotations"]["org.opencontainers.image.base.name"].startswith(
            f"{auth_registry.namespace}/cann:")
        assert [m["platform"]["architecture"] for m in listed.body["manifests"]] == ["arm64"]
        # the very digests the per-arch job pushed
        assert [m["digest"] for m in listed.body["manifests"]] == [per_arch["tags"][f"{ref}-arm64"]]


def test_zstd_layers_are_the_same_image_smaller_and_pulled_back(docker_client, ci_build, registry):
    """`--compression zstd`: the A3 image pushed with zstd layers (BuildKit's force-compression of a build FROM the
    image alone): the registry holds zstd layers under the very config the local image has (its layers' diff-ids and
    labels); the SBOM says so in its annotations; pulled back into the engine it is that image, and it runs; and a
    second publish finds it there (nothing pushed)."""
    import json

    from ascend_images.release.referrers import referrers

    sel = Selection(matrix=str(ROOT / "matrix.yaml"), arch=TEST_ARCH, device="a3", backend="none")
    lines: list[str] = []
    report = publish_selection(sel, lines.append, registry=registry.namespace, namespace=TEST_NAMESPACE,
                               report_path=registry.root / "zstd.json", allow_test_double=True, compression="zstd")
    ((ref, digest),) = [(r, d) for r, d in report["tags"].items() if r.endswith(f"-{TEST_DOCKER_ARCH}")]
    repo, tag = ref.split("/", 1)[1].rsplit(":", 1)
    client = RegistryClient(registry.host)
    manifest = client.manifest(repo, tag)
    assert manifest.digest == digest
    # written out by hand: the OCI media type of a zstd layer
    assert {layer["mediaType"] for layer in manifest.body["layers"]} == {"application/vnd.oci.image.layer.v1.tar+zstd"}
    local = docker_client.api.inspect_image(f"{TEST_NAMESPACE}/{repo.split('/', 1)[1]}:{tag}")
    config = json.loads(client.blob(repo, manifest.body["config"]["digest"]))
    assert config["rootfs"]["diff_ids"] == local["RootFS"]["Layers"]
    assert config["config"]["Labels"] == local["Config"]["Labels"]
    (sbom,) = [r for r in referrers(client, repo, digest) if r.artifact_type.endswith("cyclonedx+json")]
    assert sbom.annotations["io.ascend-images.layer-compression"] == "zstd"
    docker_client.api.pull(ref.rsplit(":", 1)[0], tag=tag)
    pulled = docker_client.api.inspect_image(ref)
    assert pulled["RootFS"]["Layers"] == local["RootFS"]["Layers"]
    assert docker_client.containers.run(ref, ["true"], entrypoint=[], remove=True) == b""
    again: list[str] = []
    publish_selection(sel, again.append, registry=registry.namespace, namespace=TEST_NAMESPACE,
                      report_path=registry.root / "zstd2.json", allow_test_double=True, compression="zstd")
    assert any("already published" in line for line in again), again
