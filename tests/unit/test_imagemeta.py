from ascend_images.release.imagemeta import diff_facts


def test_diff_facts_names_every_difference_and_ignores_build_noise():
    a = {"labels": {"io.ascend-images.torch-npu": "2.8.0.post2", "org.opencontainers.image.created": "t1"},
         "cann": {"Ascend-cann-toolkit": "8.5.0"}, "python": {"torch": "2.8.0", "numpy": "1.26.4"},
         "env": {"TASK_QUEUE_ENABLE": "2"}}
    b = {"labels": {"io.ascend-images.torch-npu": "2.7.1.post2", "org.opencontainers.image.created": "t2"},
         "cann": {"Ascend-cann-toolkit": "8.3.RC1"}, "python": {"torch": "2.7.1"},
         "env": {"TASK_QUEUE_ENABLE": "2", "X": "1"}}
    assert diff_facts(a, b) == [
        ("labels", "io.ascend-images.torch-npu", "2.8.0.post2", "2.7.1.post2"),
        ("cann", "Ascend-cann-toolkit", "8.5.0", "8.3.RC1"),
        ("python", "numpy", "1.26.4", None),
        ("python", "torch", "2.8.0", "2.7.1"),
        ("env", "X", None, "1"),
    ]
    assert diff_facts(a, a) == []


def test_an_env_overlay_names_its_values_and_comes_back_as_its_variant():
    """An image built with --env carries the values in its labels, so its tests know what to expect."""
    from ascend_images.inputs.sources import CannSource
    from ascend_images.matrix.model import load_matrix
    from ascend_images.matrix.selection import select
    from ascend_images.release.imagemeta import variant_from_labels
    from ascend_images.stages.kinds import stage_labels
    from ascend_images.stages.plan import PlanOptions, make_plan
    from tests.conftest import ROOT

    matrix = load_matrix(ROOT / "matrix.yaml")
    (variant,) = select(matrix, device="a3", backend="none", arch="aarch64", profile="debug",
                        env={"OMP_NUM_THREADS": "8"})
    plan = make_plan([variant], PlanOptions(CannSource("url", strict=False)))
    labels: dict[str, str] = {}
    for stage in plan.stages:  # a child inherits its parents' labels and overrides them
        labels |= stage_labels(stage)
    assert plan.stages[-1].kind == "overlay"
    assert labels["io.ascend-images.user-env"] == '{"OMP_NUM_THREADS": "8"}'
    assert labels["io.ascend-images.profile"] == "debug"
    back = variant_from_labels(matrix, labels)
    assert back.user_env == (("OMP_NUM_THREADS", "8"),) and back.profile == "debug"
