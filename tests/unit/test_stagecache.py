"""The stage cache's flags (BuildKit's registry cache, DESIGN 14, 23): one ref per stage named by its tag without the
namespace, import always, export unless read-only, and a test double's steps only to a cache named as one."""

from __future__ import annotations

import pytest

from ascend_images.builder.stagecache import StageCache
from ascend_images.errors import SelectionError
from ascend_images.inputs.sources import CannSource
from ascend_images.matrix.selection import select
from ascend_images.stages.plan import PlanOptions, make_plan


@pytest.fixture
def torch_stage(matrix):
    (v,) = select(matrix, device="a3", backend="none", release="cann9.1.0-pt2.10.0", arch="aarch64")
    plan = make_plan([v], PlanOptions(CannSource("url", strict=False), "my-namespace"))
    return plan.top(v)


def test_import_and_export_one_ref_per_stage_whatever_the_namespace(torch_stage):
    said: list[str] = []
    flags = StageCache("reg.example:5000/cache", said.append).args(torch_stage, "")
    # written out by hand: the stage's repository and tag, without my-namespace
    ref = "reg.example:5000/cache/torch-npu:2.10.0.post4-cann9.1.0-a3-debian12-py3.11-arm64-buildcache"
    assert flags == ["--cache-from", f"type=registry,ref={ref}",
                     "--cache-to", f"type=registry,ref={ref},mode=max,oci-mediatypes=true,image-manifest=true,"
                                   "ignore-error=true"]
    assert said == []


def test_read_only_imports_only(torch_stage):
    flags = StageCache("reg.example/cache", print, read_only=True).args(torch_stage, "")
    assert flags[0] == "--cache-from" and "--cache-to" not in flags


def test_a_test_double_goes_only_to_a_cache_named_as_one(torch_stage):
    said: list[str] = []
    flags = StageCache("reg.example/cache", said.append).args(torch_stage, "cann")
    assert "--cache-to" not in flags and "--cache-from" in flags
    assert said and "test doubles (cann)" in said[0] and "test-double" in said[0]
    assert "--cache-to" in StageCache("reg.example/cache-test-double", said.append).args(torch_stage, "cann")


def test_a_bad_cache_name_is_refused_naming_the_flag():
    with pytest.raises(SelectionError, match="--stage-cache"):
        StageCache("Not A Name", print)
