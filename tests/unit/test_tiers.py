"""The test suite's two tiers: every change runs what is not marked `full`; `invoke test --ci --full` runs it all."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from ascend_images.cli.doubles import FULL_TIER_RECORD, read_full_tier, run_test_suite

ROOT = Path(__file__).resolve().parents[2]
# written out by hand: the proof on a whole emulated chain that smaller tests show on every change, the two broken
# images of their own whose checks change rarely, the set-up's migrations from engines installed before, and the
# two-arch build of the x86_64 wheelhouse (no x86_64 image is published yet)
FULL_ONLY = {
    "tests/integration/test_reproducible.py::test_every_stage_of_a_chain_is_the_same_on_a_second_empty_engine",
    "tests/integration/test_image_suite_can_fail.py::test_no_toolkit_lib64_on_the_library_path_is_caught",
    "tests/integration/test_image_suite_can_fail.py::test_torch_npu_built_for_another_torch_is_caught",
    "tests/integration/test_setup_host.py::test_engine_packages_on_debian12_upgrade_its_own_old_engine",
    "tests/integration/test_setup_host.py::test_engine_packages_replace_the_trixie_engine_an_earlier_setup_installed",
    "tests/integration/test_wheelhouse_x86.py::test_each_arch_has_its_torch_and_x86_64_took_it_from_the_wheelhouse",
    "tests/integration/test_wheelhouse_x86.py::test_two_arch_variant_publishes_one_list_with_both_platforms",
}


def collected(*extra: str) -> set[str]:
    out = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "--collect-only", "-q", *extra,
                          *sorted({name.split("::")[0] for name in FULL_ONLY}), "tests/integration/test_bake.py"],
                         cwd=ROOT, capture_output=True, text=True, check=True).stdout
    return {line for line in out.splitlines() if "::" in line}


def test_the_every_change_tier_leaves_out_exactly_the_full_proofs():
    everything = collected()
    every_change = collected("-m", "not full")
    assert everything >= FULL_ONLY
    assert everything - every_change == FULL_ONLY
    # the small reproducibility tests and the bake tests, the docs' CI recipe among them, stay in every change's tier
    assert "tests/integration/test_bake.py::test_the_documented_ci_recipe_runs_as_written_against_a_registry" in \
        every_change
    assert len(every_change) >= 5


@pytest.fixture
def one_process(monkeypatch):
    """The suites here are two tests: xdist's workers would only add their start-up."""
    import ascend_images.cli.doubles as doubles

    monkeypatch.setattr(doubles, "CI_WORKERS", "0")


def test_the_suite_runs_the_full_tier_only_when_asked(tmp_path, one_process):
    (tmp_path / "pytest.ini").write_text("[pytest]\naddopts = --strict-markers\nmarkers =\n    full: heavy\n")
    (tmp_path / "test_two.py").write_text(
        "import pathlib, pytest\n"
        "def test_small():\n    (pathlib.Path(__file__).parent / 'small.ran').write_text('')\n"
        "@pytest.mark.full\n"
        "def test_heavy():\n    (pathlib.Path(__file__).parent / 'heavy.ran').write_text('')\n")
    assert run_test_suite(tmp_path) == 0
    assert sorted(p.name for p in tmp_path.glob("*.ran")) == ["small.ran"]
    assert run_test_suite(tmp_path, full=True) == 0
    assert sorted(p.name for p in tmp_path.glob("*.ran")) == ["heavy.ran", "small.ran"]
    assert not (tmp_path / FULL_TIER_RECORD).exists()  # no git checkout: no revision to record


def git(root, *args: str) -> str:
    return subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@t", *args], cwd=root, check=True,
                          capture_output=True, text=True).stdout.strip()


def test_a_passing_full_tier_of_a_clean_checkout_is_recorded_by_revision(tmp_path, one_process):
    """The record names the revision the full tier proved and its counts (2 tests, both passing, written out here);
    a failing run or a tree with changes records nothing."""
    (tmp_path / "pytest.ini").write_text("[pytest]\naddopts = --strict-markers\nmarkers =\n    full: heavy\n")
    (tmp_path / "test_two.py").write_text("import pytest\ndef test_small():\n    pass\n"
                                          "@pytest.mark.full\ndef test_heavy():\n    pass\n")
    (tmp_path / ".gitignore").write_text("build/\n__pycache__/\n")
    git(tmp_path, "init", "-q")
    git(tmp_path, "add", ".")
    git(tmp_path, "commit", "-qm", "proved")
    assert run_test_suite(tmp_path) == 0
    assert not (tmp_path / FULL_TIER_RECORD).exists()  # the every-change tier proves no revision
    (tmp_path / "test_two.py").write_text((tmp_path / "test_two.py").read_text() + "# changed\n")
    assert run_test_suite(tmp_path, full=True) == 0
    assert not (tmp_path / FULL_TIER_RECORD).exists()  # a tree with changes is no revision's proof
    git(tmp_path, "commit", "-qam", "changed")
    assert run_test_suite(tmp_path, full=True) == 0
    record = json.loads((tmp_path / FULL_TIER_RECORD).read_text())
    assert record["revision"] == git(tmp_path, "rev-parse", "HEAD") and len(record["revision"]) == 40
    assert (record["passed"], record["skipped"]) == (2, 0)
    assert record["engine"].startswith("dockerd ") and read_full_tier(tmp_path).revision == record["revision"]
    # a failing full tier leaves the last passing record as it was
    (tmp_path / "test_two.py").write_text("def test_small():\n    assert False\n")
    git(tmp_path, "commit", "-qam", "broken")
    assert run_test_suite(tmp_path, full=True) == 1
    assert json.loads((tmp_path / FULL_TIER_RECORD).read_text()) == record


@pytest.mark.parametrize(("suite_code", "argv"), [(0, ["test", "--ci"]), (1, ["test", "--ci"]),
                                                  (0, ["test", "--ci", "--full"])])
def test_test_ci_ends_with_the_suites_code_and_runs_nothing_else(monkeypatch, suite_code, argv):
    """`invoke test --ci` is the suite's run and nothing more: a passing suite must not go on to build and test the
    default selection (it did, and failed CI for a CANN file the doubles do not name)."""
    import ascend_images.cli.imagetest as imagetest
    from ascend_images.cli.collection import tasks
    from ascend_images.cli.program import AscendImagesProgram

    tiers = []
    monkeypatch.setattr(imagetest, "test_ci", lambda out, full=False: tiers.append(full) or suite_code)
    monkeypatch.setattr(imagetest, "run_image_tests", lambda *a, **k: pytest.fail("the selection was tested too"))
    program = AscendImagesProgram(name="ascend-images", binary="ascend-images", namespace=tasks(), version="test")
    try:
        program.run(["ascend-images", *argv])
        code = 0
    except SystemExit as stop:
        code = stop.code
    assert (code, tiers) == (suite_code, ["--full" in argv])


@pytest.mark.parametrize("full", [False, True])
def test_the_full_tier_builds_the_ci_images_from_nothing(monkeypatch, full):
    """Every change's run takes CI's images from BuildKit's cache where it can; the full tier builds them with every
    step run again (`--no-cache`), then runs both tiers."""
    import ascend_images.cli.doubles as doubles
    import ascend_images.cli.imagetest as imagetest

    seen = []
    monkeypatch.setattr(imagetest, "build_ci_images", lambda out, **kw: seen.append(("build", kw)))
    monkeypatch.setattr(imagetest, "check_changed", lambda out, began, **kw: seen.append(("changed", kw)) or [])
    monkeypatch.setattr(doubles, "run_test_suite", lambda **kw: seen.append(("suite", kw)) or 0)
    assert imagetest.test_ci(print, full=full) == 0
    # the changed images after the session: a prune before them would cost the session's bakes their cache
    assert seen == [("build", {"no_cache": full}), ("suite", {"full": full}), ("changed", {"no_cache": full})]


@pytest.mark.parametrize(("suite_code", "changed_ok", "code"), [(0, True, 0), (0, False, 1), (2, False, 2),
                                                                (2, True, 2)])
def test_a_failed_changed_image_fails_a_passing_run(monkeypatch, suite_code, changed_ok, code):
    """The suite still runs after a changed image failed (every failure is seen in one run), and the run's code is
    the suite's, or 1 when only a changed image failed."""
    import ascend_images.cli.doubles as doubles
    import ascend_images.cli.imagetest as imagetest
    from ascend_images.cli.changedcheck import ChangedCheck

    failed = () if changed_ok else ("test_env",)
    ran = []
    monkeypatch.setattr(imagetest, "build_ci_images", lambda out, **kw: None)
    monkeypatch.setattr(imagetest, "check_changed",
                        lambda out, began, **kw: [ChangedCheck("one/a2", "x:1", 3, failed, 1.0)])
    monkeypatch.setattr(doubles, "run_test_suite", lambda **kw: ran.append(kw) or suite_code)
    lines: list[str] = []
    assert imagetest.test_ci(lines.append, full=False) == code
    assert ran == [{"full": False}]
    assert any(line.startswith("one/a2") for line in lines)
    assert ("    FAILED test_env" in lines) is not changed_ok
