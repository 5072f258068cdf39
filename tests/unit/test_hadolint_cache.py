"""hadolint run once per distinct Dockerfile text and its findings kept (cli/hadolint.py), with the real hadolint: the
findings are hadolint's own, each under the file it was found in, the same from what is kept as from a fresh run."""

from __future__ import annotations

import pytest

from ascend_images.cli.hadolint import hadolint_findings
from ascend_images.tools import which

WARNS = "FROM debian:12\nRUN apt-get update && apt-get install -y curl\n"  # DL3008 (warning), DL3009, DL3015 (info)
FAILS = "FROM debian:12\nWORKDIR app\n"  # DL3000: an error


@pytest.fixture
def hadolint() -> str:
    binary = which("hadolint")
    if binary is None:
        pytest.fail("hadolint is not installed: pip install -e '.[lint]'")
    return binary


def dockerfiles(tmp_path, texts: dict[str, str]):
    out = []
    for name, text in texts.items():
        (tmp_path / name).mkdir()
        (tmp_path / name / "Dockerfile").write_text(text)
        out.append(tmp_path / name / "Dockerfile")
    return out


def test_each_text_is_read_once_and_each_file_keeps_its_own_findings(tmp_path, hadolint):
    files = dockerfiles(tmp_path, {"one": WARNS, "two": WARNS, "fine": "FROM debian:12\n"})
    cache = tmp_path / "cache"
    first = hadolint_findings(hadolint, files, cache)
    assert first.returncode == 0 and first.linted == 2  # two distinct texts
    for path in files[:2]:
        mine = [f for f in first.findings if f.startswith(f"{path}:")]
        assert {f.split()[1] for f in mine} == {"DL3008", "DL3009", "DL3015"}, first.findings
    assert not [f for f in first.findings if f.startswith(f"{files[2]}:")]
    again = hadolint_findings(hadolint, files, cache)
    assert again.linted == 0 and again.findings == first.findings


def test_an_error_fails_the_run_fresh_and_from_what_is_kept(tmp_path, hadolint):
    files = dockerfiles(tmp_path, {"bad": FAILS})
    cache = tmp_path / "cache"
    first = hadolint_findings(hadolint, files, cache)
    assert first.returncode != 0 and any(" DL3000 error:" in f for f in first.findings), first.findings
    again = hadolint_findings(hadolint, files, cache)
    assert again.linted == 0 and again.returncode != 0 and again.findings == first.findings


def test_a_changed_text_is_read_again(tmp_path, hadolint):
    (path,) = dockerfiles(tmp_path, {"one": "FROM debian:12\n"})
    cache = tmp_path / "cache"
    assert hadolint_findings(hadolint, [path], cache).findings == []
    path.write_text(FAILS)
    changed = hadolint_findings(hadolint, [path], cache)
    assert changed.linted == 1 and changed.returncode != 0
