"""The groups of tests/conftest.py reach xdist's scheduler: `--dist loadgroup` keeps a group on one worker only
when the group is in the test's node id (`path::name@group`), which xdist's worker writes from the xdist_group
marks in its own collection hook. When that hook ran before ours (no marks yet), every test went to whichever worker
was free: two robustness tests built x86_64 chains at once, and one's cleanup removed layers the other's build was
using."""

from __future__ import annotations

import pytest

from tests.conftest import XDIST_WORKER


def test_this_test_carries_its_modules_group(request):
    if not XDIST_WORKER:
        pytest.skip("not on an xdist worker: the groups only matter with -n (CI runs -n 3)")
    assert request.node.nodeid.endswith("::test_this_test_carries_its_modules_group@tests.unit.test_xdist_groups"), \
        request.node.nodeid


def groups_of(request, *modules: str) -> dict[str, str]:
    """test node id (without its group) -> group, for the collected tests of `modules`."""
    if not XDIST_WORKER:
        pytest.skip("not on an xdist worker: the groups only matter with -n (CI runs -n 3)")
    ids = [item.nodeid for item in request.session.items if item.nodeid.startswith(modules)]
    if not ids:
        pytest.skip("neither module was collected in this run")
    return dict(nodeid.rsplit("@", 1) for nodeid in ids)


def test_the_modules_building_x86_64_chains_share_one_group(request):
    found = groups_of(request, "tests/integration/test_robustness.py::", "tests/integration/test_wheelhouse_x86.py::")
    groups = {test.split("::", 1)[1]: group for test, group in found.items()}
    # the one test that needs the CI images (a registry that is not there) stays with the CI images' groups
    assert groups.pop("test_unreachable_registry") == "tests.integration.test_robustness:ci"
    assert set(groups.values()) == {"x86_64-chains"}, groups


def test_the_modules_pushing_the_ci_images_share_one_group(request):
    """Each worker has a registry of its own: on one worker, an image test_publish pushed is mounted by test_attest's
    pushes, not compressed and uploaded again."""
    groups = groups_of(request, "tests/integration/test_publish.py::", "tests/integration/test_attest.py::")
    # those that push (they need the CI images) are in one group; the rest need no image and no registry
    pushing = {test: group for test, group in groups.items() if group.endswith(":ci")}
    assert pushing and set(pushing.values()) == {"registry-pushes:ci"}, groups
