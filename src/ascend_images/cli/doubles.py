"""Building from the test doubles, in a checkout: `invoke build --demo` (README's first command) and `invoke test --ci`
(its second, what CI runs). Each makes the doubles first with tests/fixtures/make_demo_inputs.py (fake CANN packages,
kernel zips, wheels and archives made from upstream facts); every image built from them carries the test-double label,
and `invoke publish` refuses it. Both need the checkout: an installed copy has no tests/."""

from __future__ import annotations

import datetime as dt
import json
import os
import subprocess
import sys
import xml.etree.ElementTree as ET
from dataclasses import asdict, dataclass, replace
from pathlib import Path

from ascend_images import DEFAULT_NAMESPACE
from ascend_images.checkout import ROOT
from ascend_images.cli.options import InputFlags, SourceFlags, refuse_moot
from ascend_images.errors import AscendImagesError, SelectionError
from ascend_images.matrix.model import Matrix, Variant
from ascend_images.matrix.selection import ci_variants

MAKER = Path("tests/fixtures/make_demo_inputs.py")
DEMO_INPUTS = Path("build/demo-inputs")
DEMO_NAMESPACE = f"{DEFAULT_NAMESPACE}-demo"
# what the test suite reads: its inputs (with the leak-marked secrets), the CI images' namespace and build report
CI_INPUTS = Path("build/test/inputs")
CI_NAMESPACE = f"{DEFAULT_NAMESPACE}-test"
CI_WORK_DIR = Path("build/test/ci")
CI_WORKERS = "3"
# the full tier's last passing run, by revision: the every-change tier checks, after its session, each committed image
# whose definition changed since that revision (cli/changedcheck.py)
FULL_TIER_RECORD = Path("tests/full-tier.json")
# the builds reach PyPI through whatever the host trusts (a TLS proxy's CA included); never in a layer (a secret)
HOST_CA = Path("/etc/ssl/certs/ca-certificates.crt")


@dataclass(frozen=True)
class DoubleBuild:
    """What a build from the doubles is given: its sources, its inputs and its namespace."""

    sources: SourceFlags
    inputs: InputFlags
    namespace: str


def make_doubles(out: Path, *, secrets: bool, root: Path = ROOT) -> Path:
    """The doubles in root/out (kept from run to run: the maker rewrites what changed)."""
    maker = root / MAKER
    if not maker.is_file():
        raise SelectionError(f"the test doubles come from {MAKER}, and {root} holds none (an installed copy, not "
                             "the project's checkout): run this from a clone of the repository")
    argv = [sys.executable, str(maker), "--out", str(root / out), *(["--secrets"] if secrets else [])]
    done = subprocess.run(argv, cwd=root, check=False)
    if done.returncode != 0:
        raise AscendImagesError(f"{MAKER} failed (exit {done.returncode}): its output is above")
    return root / out


def demo_build(sources: SourceFlags, inputs: InputFlags, namespace: str, fetch: bool, ci: str | None = None,
               root: Path = ROOT) -> DoubleBuild:
    """`invoke build --demo`: the doubles in build/demo-inputs as the CANN and artifacts directories, the host's CA
    bundle unless --ca-bundle names one, and the demo's namespace unless --namespace names another."""
    refuse_moot({"--ci": ci, "--fetch": fetch, "--cann-source": sources.cann_source, "--cann-dir": sources.cann_dir,
                 "--cann-image": sources.cann_image, "--artifacts-dir": sources.artifacts_dir},
                f"--demo builds from the test doubles it makes in {DEMO_INPUTS}; leave it out, or leave --demo out "
                "to build from real inputs")
    if namespace == DEFAULT_NAMESPACE:
        namespace = DEMO_NAMESPACE
    out = str(make_doubles(DEMO_INPUTS, secrets=False, root=root))
    ca = inputs.ca_bundle or (str(HOST_CA) if HOST_CA.is_file() else None)
    return DoubleBuild(replace(sources, cann_dir=out, artifacts_dir=out), replace(inputs, ca_bundle=ca), namespace)


def ci_build(root: Path = ROOT) -> DoubleBuild:
    """`invoke test --ci`'s build: matrix.yaml's ci.test from the doubles in build/test/inputs, with its CA bundle
    and netrc, each holding the leak marker the tests look for in every layer, log and label."""
    out = make_doubles(CI_INPUTS, secrets=True, root=root)
    return DoubleBuild(SourceFlags(cann_dir=str(out), artifacts_dir=str(out)),
                       InputFlags(ca_bundle=str(out / "ca-bundle.pem"), netrc=str(out / "netrc")), CI_NAMESPACE)


@dataclass(frozen=True)
class FullTierRecord:
    """A passing run of the full tier: the revision it proved (a clean tree), when it ended, and its counts."""

    revision: str
    finished: str
    passed: int
    skipped: int
    seconds: int
    engine: str


def read_full_tier(root: Path = ROOT) -> FullTierRecord | None:
    path = root / FULL_TIER_RECORD
    if not path.is_file():
        return None
    data = json.loads(path.read_text(encoding="utf-8"))
    try:
        return FullTierRecord(**data)
    except TypeError as exc:
        raise SelectionError(f"{FULL_TIER_RECORD}: {exc}; it holds {', '.join(FullTierRecord.__dataclass_fields__)}: "
                             "run `invoke test --ci --full` to write it again") from None


def changed_images(matrix: Matrix, arch: str | None = None, root: Path = ROOT) -> list[Variant]:
    """The committed images (rendered/) beside ci.test whose definition changed since the full tier last proved it
    (none without a record)."""
    from ascend_images.stages.changed import changed_since

    record = read_full_tier(root)
    if record is None:
        return []
    tested = ci_variants(matrix, "test", arch)
    return [v for v in changed_since(matrix, record.revision, arch) if v not in tested]


def run_test_suite(root: Path = ROOT, *, full: bool = False) -> int:
    """The tests against the images just built, with nothing skipped but tests/npu (CI=true): every change's tier, or
    with `full` also the proofs marked `full` (whole emulated chains), whose pass is then recorded (record_full_tier);
    pytest's exit code."""
    tier = [] if full else ["-m", "not full"]
    junit = root / "build" / "test" / "junit.xml"
    argv = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-n", CI_WORKERS, *tier, "--junitxml",
            str(junit)]
    print(f"running the tests: {' '.join(argv[1:])} (CI=true)", flush=True)
    started = dt.datetime.now(dt.UTC)
    # the full tier asks every image again what the every-change tier keeps between runs (tests/image/facts.py)
    fresh = {"ASCEND_IMAGES_FRESH_FACTS": "1"} if full else {}
    code = subprocess.run(argv, cwd=root, env={**os.environ, "CI": "true", **fresh}, check=False).returncode
    if full and code == 0:
        record_full_tier(root, junit, started)
    return code


def record_full_tier(root: Path, junit: Path, started: dt.datetime) -> FullTierRecord | None:
    """Write FULL_TIER_RECORD for a passing full tier of a clean checkout (commit it: the every-change tier reads
    it); a tree with changes is no revision's proof, so it is said and not written."""
    def run(*argv: str) -> str:
        return subprocess.run(argv, cwd=root, capture_output=True, text=True, check=True).stdout.strip()

    def engine() -> str:
        try:
            return (f"dockerd {run('docker', 'version', '--format', '{{.Server.Version}}')}, "
                    f"buildx {run('docker', 'buildx', 'version').split(' ')[1]}")
        except (OSError, subprocess.CalledProcessError, IndexError):
            return "unknown (no engine answered)"

    def git(*args: str) -> str:
        return run("git", *args)

    try:
        status = git("status", "--porcelain", "--untracked-files=no")
    except subprocess.CalledProcessError as exc:
        print(f"the full tier passed in {root}, which is no git checkout ({exc.stderr.strip()}): no "
              f"{FULL_TIER_RECORD} written", flush=True)
        return None
    changes = [line for line in status.splitlines() if not line[3:].startswith(str(FULL_TIER_RECORD))]
    if changes:
        print(f"the full tier passed on a tree with changes ({len(changes)} file(s)): {FULL_TIER_RECORD} is written "
              "only for a clean checkout", flush=True)
        return None
    suites = ET.parse(junit).getroot()
    totals = {key: sum(int(s.get(key, 0)) for s in suites.iter("testsuite")) for key in ("tests", "skipped")}
    ended = dt.datetime.now(dt.UTC)
    record = FullTierRecord(git("rev-parse", "HEAD"), ended.strftime("%Y-%m-%dT%H:%M:%SZ"),
                            totals["tests"] - totals["skipped"], totals["skipped"],
                            round((ended - started).total_seconds()), engine())
    (root / FULL_TIER_RECORD).parent.mkdir(parents=True, exist_ok=True)
    (root / FULL_TIER_RECORD).write_text(json.dumps(asdict(record), indent=2) + "\n", encoding="utf-8")
    print(f"the full tier passed on {record.revision}: {FULL_TIER_RECORD} written (commit it)", flush=True)
    return record
