"""Every task with a --json switch prints exactly one JSON document on stdout and nothing else there; its notes
and warnings go to stderr (DESIGN 18, issue 37). Run through the installed `ascend-images` script where no
Docker engine is needed; `inspect` (which reads an engine's image) in-process over a stand-in engine."""

from __future__ import annotations

import hashlib
import inspect
import json
from pathlib import Path

import pytest

from ascend_images.cli.collection import tasks as all_tasks
from ascend_images.cli.release import inspect_image
from tests.fixtures.httpserver import Server
from tests.fixtures.matrices import matrix_copy
from tests.unit import console_script

# the tasks whose `json` flag is a switch, each with its test below; bench's --json names a file to write instead
SWITCHES = {"env", "outdated", "inspect"}


@pytest.fixture(scope="module")
def script(tmp_path_factory) -> Path:
    return console_script.find_or_install(tmp_path_factory.mktemp("venv"))


def one_document(stdout: str):
    """The whole of stdout as one JSON document: a second document or any note there fails json.loads."""
    return json.loads(stdout)


def test_every_json_switch_has_its_test_here():
    tasks = all_tasks()
    switches = set()
    for name in tasks.task_names:
        params = inspect.signature(tasks[name].body).parameters
        if "json" in params and params["json"].default is False:
            switches.add(name)
    assert switches == SWITCHES, "a task gained or lost a --json switch: test that it prints one document"


def test_env_json_with_several_variants_and_a_rule_warning(script):
    result = console_script.run(script, "env", "--release", "cann8.3.rc1-sglang0.5.8", "--arch", "x86_64",
                                "--os", "debian12", "--json")
    assert result.returncode == 0, result.stderr
    doc = one_document(result.stdout)
    assert [d["variant"].split("/")[1] for d in doc] == ["a2", "a3"]
    assert "warning [torch-npu-cann-pair]" in result.stderr


@pytest.fixture
def index_with_an_unreadable_wheel():
    """A PEP 503 index on 127.0.0.1 holding one torch-npu newer than the matrix whose wheel is not a zip: reading
    its metadata fails, which `outdated` reports as a warning and keeps going."""
    srv = Server()
    name = "torch_npu-9.9.0-cp311-cp311-manylinux_2_28_aarch64.whl"
    data = b"not a wheel"
    srv.files[f"/files/{name}"] = data
    srv.files["/simple/torch-npu/"] = (f'<a href="/files/{name}#sha256={hashlib.sha256(data).hexdigest()}">{name}'
                                       "</a>").encode()
    yield srv
    srv.stop()


def test_outdated_json_keeps_its_warning_off_stdout(script, index_with_an_unreadable_wheel, tmp_path):
    result = console_script.run(script, "outdated", "--index-url", index_with_an_unreadable_wheel.url("/simple"),
                                "--package", "torch-npu", "--matrix", str(matrix_copy(tmp_path, locks=True)),
                                "--json")
    assert result.returncode == 0, result.stderr
    doc = one_document(result.stdout)
    assert [(row["package"], row["version"]) for row in doc] == [("torch-npu", "9.9.0")]
    assert "warning: " in result.stderr and "torch_npu-9.9.0" in result.stderr
    quiet = console_script.run(script, "outdated", "--index-url", index_with_an_unreadable_wheel.url("/simple"),
                               "--package", "torch-npu", "--matrix", str(matrix_copy(tmp_path, locks=True)),
                               "--json", "-q")
    assert quiet.stderr == "" and one_document(quiet.stdout) == doc


def test_inspect_json_is_the_facts_alone(monkeypatch):
    from ascend_images.builder import engine
    from ascend_images.release import imagemeta

    facts = {"ref": "ns/x:1", "id": "sha256:" + "0" * 64, "architecture": "arm64", "size_mb": 1,
             "labels": {"io.ascend-images.test-double": "cann"}, "cann": {}, "python": {}, "env": {}}
    monkeypatch.setattr(engine, "connect", lambda: object())
    monkeypatch.setattr(imagemeta, "image_facts", lambda client, ref: facts)
    lines: list[str] = []
    inspect_image("ns/x:1", lines.append, as_json=True)
    assert one_document("\n".join(lines)) == facts  # no TEST DOUBLE line, no sections: the document alone


def test_ci_matrix_is_one_document_too(script):
    """Not a switch (it always prints JSON), and read by CI's workflow with fromJSON."""
    result = console_script.run(script, "ci-matrix")
    assert result.returncode == 0, result.stderr
    assert one_document(result.stdout)["include"]
