import pytest

from ascend_images.matrix.versions import ascend, python_version_in, release_of


@pytest.mark.parametrize(
    "lower,higher",
    [
        ("8.3.RC1", "8.3.RC2"),
        ("8.3.RC2", "8.3.0"),
        ("8.3.0", "8.3.1"),
        ("8.3.1", "8.5.0"),
        ("8.5.0", "9.1.0"),
        ("25.3.RC1", "25.5.0"),
        ("25.3.rc1", "25.3.0"),
        ("24.1.rc2", "25.3.RC1"),
    ],
)
def test_ascend_ordering(lower, higher):
    assert ascend(lower) < ascend(higher)
    assert not ascend(higher) < ascend(lower)


def test_rc_case_insensitive_equal_and_tag():
    assert ascend("8.3.rc1") == ascend("8.3.RC1")
    assert ascend("8.3.RC1").tag == "8.3.rc1"


@pytest.mark.parametrize("bad", ["8", "eight.three", "8.3.RCx", ""])
def test_bad_version_says_what_is_expected(bad):
    with pytest.raises(ValueError, match="MAJOR.MINOR"):
        ascend(bad)


def test_python_ranges_and_release_of():
    assert python_version_in("3.11", ">=3.9,<3.12")
    assert not python_version_in("3.12", ">=3.9,<3.12")
    assert release_of("2.7.1.post2") == "2.7.1"
    assert release_of("0.10.0rc1") == "0.10.0"
