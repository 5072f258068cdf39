"""Each image against real CANN's published facts (tests/fixtures/cann_facts/cann.yaml: the official
quay.io/ascend/cann images), not against matrix.yaml: the layout, the operator kernels of the device and
every variable and path entry the env scripts set, seen by a process with no shell profile."""

from __future__ import annotations

import re
import shlex

import pytest
import yaml

from tests.conftest import ROOT
from tests.image.paths import path_facts

pytestmark = [pytest.mark.docker, pytest.mark.slow]
FACTS = yaml.safe_load((ROOT / "tests/fixtures/cann_facts/cann.yaml").read_text())
PATH_LISTS = {"PATH", "LD_LIBRARY_PATH", "PYTHONPATH"}


def official_lines(facts: dict) -> list[str]:
    """The official image's ENV lines in order: the toolkit's, NNAL's, then those no script sets (9.0.1 on)."""
    env = facts["env"]
    return env["toolkit"] + env["nnal"] + env.get("other", [])


def golden_env(lines: list[str], atb_abi: str | None = None) -> dict[str, str]:
    """The official ENV lines applied in order from an empty environment, as Docker applies them; with
    `atb_abi`, ATB's home for that C++ ABI (the deliberate difference atb_abi), before it is expanded."""
    env: dict[str, str] = {}
    for line in lines:
        name, _, value = line.partition("=")
        value = value[1:-1] if value.startswith('"') and value.endswith('"') else value
        if name == "ATB_HOME_PATH" and atb_abi is not None:
            value = re.sub(r"cxx_abi_\d$", f"cxx_abi_{atb_abi}", value)
        if name == "ATB_CXX_ABI" and atb_abi is not None:
            value = atb_abi
        env[name] = re.sub(r"\$\{?(\w+)\}?", lambda m: env.get(m.group(1), ""), value)
    return env


@pytest.fixture(scope="module")
def facts(image, docker_client):
    version = docker_client.images.get(image).labels["io.ascend-images.cann"]
    if version not in FACTS["versions"]:
        pytest.skip(f"no upstream facts for CANN {version} in tests/fixtures/cann_facts")
    return FACTS["versions"][version]


@pytest.fixture(scope="module")
def chip(image, docker_client):
    device = docker_client.images.get(image).labels["io.ascend-images.device"]
    return FACTS["deliberate_differences"]["devices"]["map"][device]


@pytest.fixture(scope="module")
def seen_env(host) -> dict[str, str]:
    out = host.check_output("env -0 | base64 -w0")
    import base64

    return dict(p.split("=", 1) for p in base64.b64decode(out).decode().split("\0") if "=" in p)


def test_cann_layout_is_upstreams(host, facts):
    home, links = facts["layout"]["home"], facts["layout"]["links"]
    scripts = [script.split()[0] for script in facts["env_scripts"]]  # 9.x names NNAL's with its --cxx_abi argument
    required = [f"{home}/{directory}" for directory in facts["layout"]["required_by_torch_npu"]]
    seen = path_facts(host, [home, *links, *scripts, *required])
    assert seen[home].is_directory
    for link, target in links.items():
        assert seen[link].is_symlink, f"{link} is not a link"
        assert seen[link].linked_to.rstrip("/") == (target if target.startswith("/") else
                                                    f"{link.rsplit('/', 1)[0]}/{target}"), link
    for script in scripts:
        assert seen[script].is_file, script
    for directory in required:
        assert seen[directory].is_directory, directory


def test_operator_kernels_are_the_devices_only(host, facts, chip):
    kernels = f"{facts['layout']['home']}/opp/built-in/op_impl/ai_core/tbe/kernel"
    seen = path_facts(host, [f"{kernels}/{directory}" for directory in facts["kernel_dirs"].values()])
    assert seen[f"{kernels}/{facts['kernel_dirs'][chip]}"].is_directory
    for other, directory in facts["kernel_dirs"].items():
        if other != chip:
            assert not seen[f"{kernels}/{directory}"].exists, f"{directory} kernels in a {chip} image"


@pytest.fixture(scope="module")
def torch_abi(host, python_stack) -> str:
    """The installed torch's C++ ABI, as the image's one stack probe read it (probe.py); when torch_npu did not load
    there (test_torch_npu_loads says why), from torch alone, autoload off: this module checks CANN, not torch_npu."""
    if "cxx11_abi" in python_stack:
        return str(python_stack["cxx11_abi"])
    return host.check_output("TORCH_DEVICE_BACKEND_AUTOLOAD=0 python -c "
                             "'import torch; print(int(torch.compiled_with_cxx11_abi()))'")


def test_cann_env_is_upstreams(host, facts, seen_env, torch_abi):
    """Every variable the official image sets from the env scripts, with its value; every entry of its
    path lists present. The only differences allowed are the deliberate ones in cann.yaml."""
    want = golden_env(official_lines(facts), atb_abi=torch_abi)
    problems = []
    for name, value in want.items():
        if name in PATH_LISTS:
            have = seen_env.get(name, "").split(":")
            problems += [f"{name} lacks {entry}" for entry in value.split(":") if entry and entry not in have]
        elif seen_env.get(name) != value:
            problems.append(f"{name}={seen_env.get(name)!r}, upstream {value!r}")
    assert problems == [], "\n".join(problems)


def test_path_lists_keep_upstreams_order(host, facts, seen_env, torch_abi):
    """PATH, LD_LIBRARY_PATH and PYTHONPATH hold the official entries in the official order (9.x puts the
    toolkit home first in LD_LIBRARY_PATH), whatever else the image adds around them."""
    want = golden_env(official_lines(facts), atb_abi=torch_abi)
    for name in sorted(PATH_LISTS & set(want)):
        official = list(dict.fromkeys(e for e in want[name].split(":") if e))
        have = [e for e in dict.fromkeys(seen_env.get(name, "").split(":")) if e in official]
        assert have == official, f"{name}: {have} is not upstream's order {official}"


def test_every_path_entry_exists_in_the_image(host, facts, seen_env):
    """What the env names under /usr/local/Ascend exists (the driver's directories come from the host)."""
    want = golden_env(facts["env"]["toolkit"] + facts["env"]["nnal"])
    entries = {e for name in PATH_LISTS for e in want.get(name, "").split(":")
               if e.startswith("/usr/local/Ascend/") and "/driver/" not in e}
    quoted = " ".join(shlex.quote(e) for e in sorted(entries))
    missing = host.check_output(f"for d in {quoted}; do [ -d \"$d\" ] || echo \"$d\"; done")
    assert missing == ""
