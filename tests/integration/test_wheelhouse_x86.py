"""x86_64 with a local wheelhouse: torch 2.13.0's CPU wheel from pip's find-links folder on this machine,
served to the build by the loopback server, torch_npu 2.13.0 from PyPI; a test matrix adds that pair
(PyTorch's CPU index, which the real matrix uses on x86_64, is not reachable here)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from ascend_images import cli
from tests.conftest import ROOT, TEST_NAMESPACE

pytestmark = [pytest.mark.docker, pytest.mark.slow]
WHEELHOUSE = Path("/opt/wheels")
TORCH_WHEEL = "torch-2.13.0+cpu-cp311-cp311-manylinux_2_28_x86_64.whl"


@pytest.fixture(scope="module")
def x86_matrix(tmp_path_factory) -> Path:
    data = yaml.safe_load((ROOT / "matrix.yaml").read_text())
    data["torch"]["pairs"]["2.13.0"] = {"torch": "2.13.0", "cann": "8.5.0", "python": ">=3.10,<3.14",
                                        "cxx11_abi": 1, "source": "PyPI (test pair)"}
    data["releases"]["test-wheelhouse"] = {"description": "test: torch from a local wheelhouse", "cann": "8.5.0",
                                           "torch_npu": "2.13.0", "python": ["system"], "backends": {"none": {}},
                                           "source": "tests"}
    path = tmp_path_factory.mktemp("matrix") / "matrix.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


@pytest.fixture(scope="module")
def wheelhouse(tmp_path_factory) -> Path:
    if not (WHEELHOUSE / TORCH_WHEEL).exists():
        pytest.skip(f"{WHEELHOUSE / TORCH_WHEEL} is not on this machine")
    # only the torch wheel: whatever else pip needs must come from PyPI, so the log proves where torch came from
    house = tmp_path_factory.mktemp("wheelhouse")
    (house / TORCH_WHEEL).symlink_to(WHEELHOUSE / TORCH_WHEEL)
    return house


def test_x86_64_build_takes_torch_from_the_wheelhouse(docker_client, x86_matrix, wheelhouse, build_secrets,
                                                      work_dir):
    from tests.fixtures.fake_cann.make_packages import write_packages

    cann = work_dir / "fake-cann-x86_64"
    write_packages(cann, ROOT / "matrix.yaml", cann=["8.5.0"], arches=["x86_64"])
    if not docker_client.images.list(name="ascend-images/os:debian12-amd64"):
        cli.make_os_image(str(ROOT / "matrix.yaml"), "debian12", "x86_64", print)
    sel = cli.Selection(matrix=str(x86_matrix), device="a3", backend="none", release="test-wheelhouse",
                        arch="x86_64")
    lines: list[str] = []
    plan, results = cli.build_selection(
        sel, cli.SourceFlags(cann_dir=str(cann), torch_index_url=""),
        cli.InputFlags(wheelhouse=str(wheelhouse), ca_bundle=str(build_secrets["ca"])), lines.append,
        work_dir=work_dir, namespace=TEST_NAMESPACE)
    (variant,) = plan.tops
    image = plan.top(variant).tag
    assert image.endswith("-amd64")
    code = ("import importlib.metadata as m, json; "
            "print(json.dumps({p: m.version(p) for p in ('torch', 'torch-npu')}))")
    out = docker_client.containers.run(image, ["python", "-c", code], entrypoint=[], remove=True)
    assert json.loads(out) == {"torch": "2.13.0+cpu", "torch-npu": "2.13.0"}
    torch_stage = next(r for r in results if r.kind == "torch")
    if torch_stage.log:  # built now (not reused): the log shows where pip took torch from
        log = Path(torch_stage.log).read_text()
        assert f"/wheelhouse/{TORCH_WHEEL.replace('+', '%2B')}" in log or f"/wheelhouse/{TORCH_WHEEL}" in log
    assert docker_client.images.get(image).attrs["Architecture"] == "amd64"
