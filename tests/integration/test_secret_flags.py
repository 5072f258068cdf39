"""A marker password in every flag that may carry a credential, through a real build that uses each one: private
mirrors on 127.0.0.1 that want the credentials (and record that they got them) stand for the OS mirror, the pip
index, an extra pip index and the torch index; a netrc and a CA bundle carry markers of their own. Then no marker
may be in a rendered Dockerfile, a build log, the build's output, `docker history --no-trunc`, the images'
configuration (labels, env) or their files (`docker save` of the chain, every layer read).

x86_64 (native), torch 2.13.0's metadata-only double served by the private torch index (what is tested is where
the credentials go, not torch: the real wheel would add a 900 MB layer to build, save and scan). Every step runs
(`--no-cache`: a cache key sees no credential, so BuildKit would otherwise take the steps from its cache) under a
namespace of its own, on an engine of its own: on BuildKit 0.13 a `--no-cache` build replaces every cache mount it
uses with an empty one, which later builds then get, so on the host's engine this test emptied the built-wheels mount
(the wheels compiled on the target) in every CI run."""

from __future__ import annotations

import json
import subprocess
import tarfile
import uuid

import pytest

from tests.conftest import HOST_CA, LEAK_MARKER_PREFIX, X86_RELEASE, with_own_cann_stages
from tests.fixtures.buildkit import build_image
from tests.fixtures.private_mirror import PrivateMirror
from tests.fixtures.saved_layers import uncompressed
from tests.fixtures.small_engine import second_engine

pytestmark = [pytest.mark.docker, pytest.mark.slow]

FLAGS = ("os-mirror", "pip-index-url", "pip-extra-index-url", "torch-index-url", "netrc", "ca-bundle")


@pytest.fixture
def markers() -> dict[str, str]:
    return {flag: f"{LEAK_MARKER_PREFIX}{flag}-{uuid.uuid4().hex[:10]}" for flag in FLAGS}


@pytest.fixture
def mirrors(markers, light_wheelhouse):
    served = {flag: PrivateMirror(f"user-{flag}", markers[flag],
                                  light_wheelhouse if flag == "torch-index-url" else None)
              for flag in ("os-mirror", "pip-index-url", "pip-extra-index-url", "torch-index-url")}
    for mirror in served.values():
        mirror.start()
    yield served
    for mirror in served.values():
        mirror.stop()


@pytest.fixture
def own_engine(os_image_amd64, monkeypatch):
    """A real second dockerd holding only the host's x86_64 OS image, which this process's builds and docker
    commands use (DOCKER_HOST); its images and cache go with it."""
    for engine in second_engine(8000):
        engine.load_from_host(os_image_amd64)
        monkeypatch.setenv("DOCKER_HOST", engine.host)
        yield engine


def scan_stream(stream, markers: dict[str, str]) -> list[str]:
    """The flags whose marker is in `stream` (a tar of blobs: `docker save`): every member read in blocks as its
    uncompressed content, a marker split across two blocks found too. A layer is a tar whose files are stored whole,
    so reading its uncompressed bytes reads them."""
    found: set[str] = set()
    with tarfile.open(fileobj=stream, mode="r|") as outer:
        for member in outer:
            if not member.isfile():
                continue
            reader = uncompressed(outer.extractfile(member))
            tail = b""
            while block := reader.read(1 << 20):
                window = tail + block
                found |= {flag for flag, marker in markers.items() if marker.encode() in window}
                tail = window[-128:]
    return sorted(found)


def test_no_credential_of_any_flag_reaches_an_image_a_dockerfile_or_a_log(own_engine, x86_light_matrix,
                                                                          light_wheelhouse, fake_cann_both,
                                                                          os_image_amd64, tmp_path, markers,
                                                                          mirrors):
    from ascend_images.cli.build import build_selection
    from ascend_images.cli.options import InputFlags, Selection, SourceFlags

    docker_client = own_engine.client()
    namespace = f"ascend-images-secrets-{uuid.uuid4().hex[:8]}"

    secrets = tmp_path / "secrets"
    secrets.mkdir()
    (secrets / "netrc").write_text(f"machine private.example login ci password {markers['netrc']}\n")
    (secrets / "ca.pem").write_text(f"# {markers['ca-bundle']}\n{HOST_CA.read_text() if HOST_CA.exists() else ''}")
    matrix = with_own_cann_stages(x86_light_matrix, tmp_path / "matrix")
    build_dir = tmp_path / "work"

    sel = Selection(matrix=str(matrix), device="a2", backend="none", release=X86_RELEASE, arch="x86_64",
                        allocator="jemalloc")
    # an empty wheel store of its own, so every locked file is fetched through the private indexes here
    flags = SourceFlags(cann_source="local", cann_dir=str(fake_cann_both),
                        torch_index_url=mirrors["torch-index-url"].url("/simple/"),
                        wheel_store=str(tmp_path / "wheel-store"))
    inputs = InputFlags(os_mirror=mirrors["os-mirror"].url("/debian"),
                            pip_index_url=mirrors["pip-index-url"].url("/pypi/simple/"),
                            pip_extra_index_url=[mirrors["pip-extra-index-url"].url("/simple/")],
                            ca_bundle=str(secrets / "ca.pem"), netrc=str(secrets / "netrc"))
    lines: list[str] = []
    # from nothing (BuildKit's cache too): each stage's steps must really go through the mirrors, whatever an
    # earlier build of the same steps left in an engine's cache
    plan, results = build_selection(sel, flags, inputs, lines.append, work_dir=build_dir, namespace=namespace,
                                    no_cache=True)
    output = "\n".join(lines)
    assert [r.status for r in results] == ["built"] * len(plan.stages), output
    assert [s.kind for s in plan.stages] == ["base", "cann-install", "cann", "torch", "overlay"], output

    # each credential was used: the mirrors saw it (so the build really went through them)
    assert mirrors["os-mirror"].authorized("/debian/dists/bookworm/InRelease")
    assert mirrors["os-mirror"].authorized("/debian/pool/main/j/jemalloc/")  # the overlay's install, too
    assert mirrors["pip-index-url"].authorized("/pypi/simple/")
    assert mirrors["pip-extra-index-url"].authorized("/simple/")
    (torch_wheel,) = (w.name for w in light_wheelhouse.glob("torch-*.whl"))
    assert mirrors["torch-index-url"].authorized(f"/files/{torch_wheel}")

    leaks: dict[str, list[str]] = {}

    def check(where: str, text: str) -> None:
        hit = [flag for flag, marker in markers.items() if marker in text]
        if hit:
            leaks[where] = hit

    check("the build's output", output)
    for path in sorted(build_dir.rglob("*")):  # rendered contexts (Dockerfiles) and every stage's build log
        if path.is_file():
            check(str(path.relative_to(build_dir)), path.read_text(errors="replace"))
    tags = [s.tag for s in plan.stages]
    for tag in tags:
        history = subprocess.run(["docker", "history", "--no-trunc", "--format", "{{.CreatedBy}}", tag],
                                 capture_output=True, text=True, check=True).stdout
        check(f"docker history {tag}", history)
        check(f"docker inspect {tag}", json.dumps(docker_client.api.inspect_image(tag)))
    save = subprocess.Popen(["docker", "save", tags[-1]], stdout=subprocess.PIPE)
    in_files = scan_stream(save.stdout, markers)
    assert save.wait() == 0
    if in_files:
        leaks[f"docker save {tags[-1]}"] = in_files
    assert not leaks, f"credentials found (where: which flags): {leaks}"

    # and the scan sees a marker when there is one: an image whose layer BuildKit made (compressed, as every layer
    # of the chain above) holds a file with the netrc's marker, copied in, so that no history entry names it
    probe = f"ascend-images-secrets-probe/{namespace.rsplit('-', 1)[-1]}:marker"
    context = tmp_path / "probe"
    context.mkdir()
    (context / "probe").write_text(markers["netrc"])
    build_image(probe, f"FROM {os_image_amd64}\nCOPY probe /etc/probe\n", context=context, platform="linux/amd64")
    try:
        save = subprocess.Popen(["docker", "save", probe], stdout=subprocess.PIPE)
        assert scan_stream(save.stdout, markers) == ["netrc"]
        assert save.wait() == 0
    finally:
        docker_client.images.remove(probe, force=True)
