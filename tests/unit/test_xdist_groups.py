"""The unit an xdist worker takes (tests/conftest.py scope_of, through xdist's own loadscope scheduler): a module
whole, so its module fixtures (a stock Debian root, a registry) are made once; in tests/image, one image across every
module there, whatever else a check is parametrized by, so its container is started once per worker. Node ids
written out by hand."""

from __future__ import annotations

from tests.conftest import scope_of

IDS = ["2.10.0.post4-cann9.1.0-a3-debian12-py3.11-arm64",
       "2.10.0.post4-cann9.1.0-a3-debian12-py3.11-arm64-debug-tcmalloc-env455b65e5",
       "0.5.17-cann9.0.0-a3-debian12-py3.11-arm64"]


def test_a_module_is_one_unit():
    assert scope_of("tests/integration/test_setup_host.py::test_x", IDS) == "tests/integration/test_setup_host.py"
    assert scope_of("tests/unit/test_run.py::test_y[a-b]", IDS) == "tests/unit/test_run.py"


def test_an_image_check_is_its_images_unit_whatever_its_other_parameters():
    plain, overlay, sglang = IDS
    assert scope_of(f"tests/image/test_image.py::test_labels[{plain}]", IDS) == f"image:{plain}"
    assert scope_of(f"tests/image/test_cann_golden.py::test_env[{plain}]", IDS) == f"image:{plain}"
    assert scope_of(f"tests/image/test_image.py::test_env[{overlay}-bash -lc]", IDS) == f"image:{overlay}"
    assert scope_of(f"tests/image/test_image.py::test_env[exec-{sglang}]", IDS) == f"image:{sglang}"
    # a check of no image (written out per name) is its module's
    assert scope_of("tests/image/test_expected.py::test_env_and_labels_written_out_by_hand[x]", IDS) == \
        "tests/image/test_expected.py"
