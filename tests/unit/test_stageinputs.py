"""What a stage's build is given beside its context (DESIGN 5, 23): named build contexts holding exactly the files its
record names (and its Dockerfile: checked here by reading the committed ones, as nothing in the product does), and
secret files that exist only while it builds. Plus the CANN environment a cann stage bakes
(matrix/cannenv.py): the env lines applied as Docker applies ENV, path lists cleaned."""

from __future__ import annotations

import hashlib
import stat

import pytest

from ascend_images.builder.stageinputs import lay_out_contexts, secret_documents, write_secrets
from ascend_images.errors import BuildError, SelectionError
from ascend_images.inputs.sources import INPUTS_DIR, Artifact, ArtifactSource, BuildInputs, CannSource, Sources
from ascend_images.inputs.wheelstore import WheelStore
from ascend_images.matrix.cannenv import clean_path_list, expand
from ascend_images.stages.record import StageInputs, StageRecord
from tests.conftest import ROOT


def record_of(sdist: str, zip_file: str = "zip-1.zip", wanted: tuple[str, ...] = ()) -> StageRecord:
    """A stage whose render named one download (a zip) and one wheel-store sdist beside its locked wheels."""
    inputs = StageInputs()
    inputs.download(Artifact(zip_file, f"{INPUTS_DIR}/artifacts/{zip_file}", "0" * 64))
    inputs.wheel(sdist)
    inputs.want(wanted)
    return inputs.freeze("s", {}, {}, None, {})


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


@pytest.fixture
def store(tmp_path):
    root = tmp_path / "store"
    files = {"a-1.0-py3-none-any.whl": b"a", "b-2.0-py3-none-any.whl": b"b", "c-3.0.tar.gz": b"c",
             "other-9-py3-none-any.whl": b"unrelated"}
    for name, data in files.items():
        (root / sha(data)).mkdir(parents=True)
        (root / sha(data) / name).write_bytes(data)
    return WheelStore(root, out=lambda line: None)


def test_each_named_context_holds_exactly_what_the_stage_names(tmp_path, store):
    artifacts = tmp_path / "artifacts"
    artifacts.mkdir()
    (artifacts / "zip-1.zip").write_bytes(b"zip")
    (artifacts / "unrelated.zip").write_bytes(b"other")
    wanted = (f"a==1.0 --hash=sha256:{sha(b'a')}", f"b==2.0 --hash=sha256:{sha(b'b')}")
    record = record_of(sha(b"c"), wanted=wanted)
    assert record.contexts == {"wheels": tuple(sorted([sha(b"a"), sha(b"b"), sha(b"c")])),
                               "artifacts": ("zip-1.zip",)}
    sources = Sources(CannSource("url", strict=False), ArtifactSource(artifacts))
    given = lay_out_contexts(record, sources, store, tmp_path / "inputs")
    contexts = {name: sorted(p.relative_to(path).as_posix() for p in path.rglob("*") if p.is_file())
                for name, path in given.items()}
    # written out by hand: the two locked wheels and the sdist the stage names, by sha256; the one zip; no CANN
    assert contexts == {"wheels": sorted([f"{sha(b'a')}/a-1.0-py3-none-any.whl", f"{sha(b'b')}/b-2.0-py3-none-any.whl",
                                          f"{sha(b'c')}/c-3.0.tar.gz"]),
                        "artifacts": ["zip-1.zip"]}


def test_a_file_no_directory_holds_stops_before_the_build(tmp_path, store):
    sources = Sources(CannSource("url", strict=False), ArtifactSource(None))
    with pytest.raises(BuildError, match=r"/run/ascend-images/artifacts/zip-1.zip, and no local directory holds it"):
        lay_out_contexts(record_of(sha(b"c")), sources, store, tmp_path / "inputs")


def test_every_committed_stages_record_names_what_its_dockerfile_names():
    """The record is what the bake writer and the workspace read instead of the Dockerfile: for every committed
    stage, what its Dockerfile mounts and names under each named context (read here from the text) is in its record,
    with nothing more, and INSTALLER_BASE is a build arg of exactly the stages that declare it."""
    import re

    from ascend_images.matrix.model import load_matrix
    from ascend_images.stages.bake import render_plan
    from ascend_images.stages.drift import committed_plan, committed_sources

    matrix = load_matrix(ROOT / "matrix.yaml")
    rendered = render_plan(committed_plan(matrix), committed_sources(matrix))
    assert len(rendered) > 20
    for slug, stage in rendered.items():
        named = {m for m in re.findall(r"--mount=type=bind,from=([\w-]+),", stage.dockerfile)}
        assert named & {"wheels", "cann", "artifacts"} <= set(stage.record.contexts), slug
        for name, paths in stage.record.contexts.items():
            found = set(re.findall(re.escape(f"{INPUTS_DIR}/{name}/") + r"([^\s#\"'/]+)", stage.dockerfile))
            if name == "wheels":  # its locked wheels are named in install.txt, not in the Dockerfile
                assert found <= set(paths), (slug, found - set(paths))
            else:
                assert found == set(paths), (slug, name, found, paths)
        assert ("ARG INSTALLER_BASE=" in stage.dockerfile) == (stage.record.installer_base is not None), slug


def test_secrets_are_private_files_of_the_build(tmp_path, store):
    ca = tmp_path / "ca.pem"
    ca.write_text("-----BEGIN CERTIFICATE-----\nmarker-ca\n")
    netrc = tmp_path / "netrc"
    netrc.write_text("machine pypi.corp login u password marker-pw\n")
    inputs = BuildInputs(ca_bundle=ca, netrc=netrc, pip_index_url="https://mirror.example/simple")
    secrets = write_secrets(inputs, tmp_path / "scratch" / "secrets")
    modes = {name: stat.S_IMODE(path.stat().st_mode) for name, path in secrets.items()}
    folder = stat.S_IMODE(secrets["ca"].parent.stat().st_mode)
    texts = {name: path.read_text() for name, path in secrets.items()}
    assert modes == {"ca": 0o600, "netrc": 0o600, "pip-conf": 0o600} and folder == 0o700
    assert texts["ca"] == ca.read_text() and texts["netrc"] == netrc.read_text()
    assert "index-url = https://mirror.example/simple" in texts["pip-conf"]


def test_the_pip_config_names_no_server_and_the_os_mirror_is_a_secret_of_its_own():
    docs = secret_documents(BuildInputs(pip_trusted_hosts=("pypi.corp",), os_mirror="http://deb.example/debian",
                                        os_mirror_credential=("deb.example", "u", "p")))
    assert docs["pip-conf"].decode() == ("[global]\nno-cache-dir = true\ndisable-pip-version-check = true\n"
                                         "trusted-host =\n    pypi.corp\n")
    assert docs["os-mirror"] == b"http://deb.example/debian\nu\np\n"
    assert set(secret_documents(BuildInputs())) == {"pip-conf"}


def test_input_validation(tmp_path):
    with pytest.raises(SelectionError, match="--wheelhouse .* does not exist"):
        BuildInputs(wheelhouse=tmp_path / "nope")
    with pytest.raises(SelectionError, match="--offline needs --wheelhouse"):
        BuildInputs(pip_offline=True)


def test_path_lists_lose_empty_and_repeated_entries():
    assert clean_path_list("::/x::/y:/x:") == "/x:/y"


def test_env_lines_apply_in_order_as_docker_applies_them():
    """Written out by hand: each line sees what the lines before set; the image below's PATH is left to Docker."""
    lines = ["HOME_A=/a", "LD_LIBRARY_PATH=${HOME_A}/lib:$LD_LIBRARY_PATH", "PATH=${HOME_A}/bin:$PATH",
             "LD_LIBRARY_PATH=/b/lib:${LD_LIBRARY_PATH}", 'EMPTY=""', "PATH=${HOME_A}/bin:${PATH}"]
    assert expand(lines, {"PATH": "${PATH}"}) == {"HOME_A": "/a", "LD_LIBRARY_PATH": "/b/lib:/a/lib",
                                                  "PATH": "/a/bin:${PATH}", "EMPTY": ""}
