"""What a program reading the CLI's output relies on (issue 37): one JSON document, notes on stderr."""

from __future__ import annotations

import json
import subprocess
import sys

from tests.conftest import ROOT


def invoke(*argv: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "invoke", *argv], cwd=ROOT, capture_output=True, text=True,
                          timeout=120)


def test_env_json_is_one_list_and_warnings_go_to_stderr():
    # this release pairs torch_npu 2.7.1.post2 with CANN 8.3.RC1, which the rules warn about: one a2, one a3 variant
    result = invoke("env", "--release", "cann8.3.rc1-sglang0.5.8", "--arch", "x86_64", "--os", "debian12", "--json")
    assert result.returncode == 0, result.stderr
    doc = json.loads(result.stdout)  # fails on several documents one after the other ("Extra data")
    assert [d["variant"] for d in doc] == ["cann8.3.rc1-sglang0.5.8/a2/none/debian12/x86_64/system",
                                           "cann8.3.rc1-sglang0.5.8/a3/none/debian12/x86_64/system"]
    assert "warning [torch-npu-cann-pair]" in result.stderr


def test_env_json_of_one_variant_is_still_a_list():
    result = invoke("env", "--release", "cann8.3.rc1-sglang0.5.8", "--arch", "x86_64", "--os", "debian12",
                    "--device", "a2", "--json")
    assert result.returncode == 0, result.stderr
    doc = json.loads(result.stdout)
    assert isinstance(doc, list) and len(doc) == 1
    assert doc[0]["variant"] == "cann8.3.rc1-sglang0.5.8/a2/none/debian12/x86_64/system"
