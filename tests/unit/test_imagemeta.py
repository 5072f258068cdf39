from ascend_images.imagemeta import diff_facts


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
