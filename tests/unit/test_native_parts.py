"""Which stages' native parts are built ahead when a stage builds: the locked stages that descend from it, in plan
order (the expected lists are written out by hand for two chains that share a base)."""

from __future__ import annotations

from ascend_images.builder.native import later_locked_stages
from ascend_images.stages.stage import Stage


def plan() -> list[Stage]:
    def stage(kind: str, tag: str, parent: Stage | None, needs: tuple[Stage, ...] = ()) -> Stage:
        return Stage(kind, tag, None, parent, None if parent else "os", needs=needs)  # type: ignore[arg-type]

    installer = stage("installer", "installer", None)
    base = stage("base", "base", None, (installer,))
    a2_install = stage("cann-install", "cann-install-a2", base)
    a2_cann = stage("cann", "cann-a2", a2_install)
    a2_torch = stage("torch", "torch-a2", a2_cann, (installer,))
    a3_install = stage("cann-install", "cann-install-a3", base)
    a3_cann = stage("cann", "cann-a3", a3_install)
    a3_torch = stage("torch", "torch-a3", a3_cann, (installer,))
    sglang = stage("sglang", "sglang-a3", a3_torch, (installer,))
    return [installer, base, a2_install, a2_cann, a2_torch, a3_install, a3_cann, a3_torch, sglang]


def tags(stages: list[Stage]) -> list[str]:
    return [s.tag for s in stages]


def test_the_locked_stages_below_the_one_that_builds():
    stages = plan()
    by_tag = {s.tag: s for s in stages}
    assert tags(later_locked_stages(stages, by_tag["installer"])) == ["base", "torch-a2", "torch-a3", "sglang-a3"]
    assert tags(later_locked_stages(stages, by_tag["base"])) == ["torch-a2", "torch-a3", "sglang-a3"]
    assert tags(later_locked_stages(stages, by_tag["cann-install-a3"])) == ["torch-a3", "sglang-a3"]
    assert tags(later_locked_stages(stages, by_tag["cann-a2"])) == ["torch-a2"]
    assert tags(later_locked_stages(stages, by_tag["torch-a3"])) == ["sglang-a3"]
    assert later_locked_stages(stages, by_tag["sglang-a3"]) == []
