"""What only a framework image (verl, ROLL over a backend) has: its lock installed exactly, and the modules its
Ascend documents use importing with torch's device-backend autoload on, as users run them. The module lists are
written out by hand from upstream (verl 0.9.1's code, MindSpeed core_r0.16.0, Megatron core, ROLL v0.3.0: what they
import at their top and what verl's engines need), not from matrix.yaml."""

from __future__ import annotations

import pytest

from tests.image.probe import FRAMEWORK_MODULES
from tests.image.test_image import installed

pytestmark = [pytest.mark.docker, pytest.mark.slow, pytest.mark.framework_image]


def test_framework_installs_exactly_its_lock(host, variant, image_locks):
    """Every package of the framework's lock at its locked version, and the backend's below it untouched but for
    what the framework lock moves (an override matrix.yaml explains)."""
    lock, backend = image_locks["framework"], image_locks["backend"]
    have = installed(host)
    assert len(lock.pins) > 20
    assert {n: (v, have.get(n)) for n, v in lock.pins.items() if have.get(n) != v} == {}
    moved = {n for n in lock.pins if n in backend.pins}
    assert {n: (v, have.get(n)) for n, v in backend.pins.items() if n not in moved and have.get(n) != v} == {}
    assert lock.header["framework"] == f"{variant.framework}=={variant.framework_pins.version}"


def test_framework_modules_import(python_stack, variant):
    framework_stack = python_stack["framework"]
    assert framework_stack["errors"] == {}, "\n".join(framework_stack["errors"].values())
    assert framework_stack["imported"] == FRAMEWORK_MODULES[variant.framework]
    if variant.framework == "verl":
        # each engine verl would choose on NPU exists: FSDP, Megatron, and MindSpeed's (which needs the adaptor)
        assert framework_stack["engines"] == {"FSDPEngineWithLMHead": True, "MegatronEngineWithLMHead": True,
                                              "MindspeedEngineWithLMHead": True}
    else:
        # ROLL picks its NPU platform as soon as torch_npu imports, device or not (roll/platforms/__init__.py)
        assert framework_stack["platform"] == ["NpuPlatform", "npu"]
        # ROLL's pins as its image installs them, written out from its requirements_common.txt (lines 1, 2, 6) and
        # docker/Dockerfile.A3:58 at 8eb27cc2: they win over vLLM-Ascend's where they differ
        versions = framework_stack["versions"]
        assert versions["ray"] == "2.48.0" and versions["datasets"] == "3.1.0"
        assert versions["numpy"].startswith("1.") and versions["transformers"] == "4.57.6", versions


def test_framework_archives_are_installed(host, variant):
    """The git archives (MindSpeed, ROLL) are installed as the distributions and versions upstream's setup.py says."""
    have = installed(host)
    want = {a.name: a.version for a in variant.framework_pins.archives}
    assert {n: have.get(n) for n in want} == want
