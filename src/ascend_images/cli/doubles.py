"""Building from the test doubles, in a checkout: `invoke build --demo` (README's first command) and `invoke test --ci`
(its second, what CI runs). Each makes the doubles first with tests/fixtures/make_demo_inputs.py (fake CANN packages,
kernel zips, wheels and archives made from upstream facts); every image built from them carries the test-double label,
and `invoke publish` refuses it. Both need the checkout: an installed copy has no tests/."""

from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import dataclass, replace
from pathlib import Path

from ascend_images import DEFAULT_NAMESPACE
from ascend_images.checkout import ROOT
from ascend_images.cli.options import InputFlags, SourceFlags, refuse_moot
from ascend_images.errors import AscendImagesError, SelectionError

MAKER = Path("tests/fixtures/make_demo_inputs.py")
DEMO_INPUTS = Path("build/demo-inputs")
DEMO_NAMESPACE = f"{DEFAULT_NAMESPACE}-demo"
# what the test suite reads: its inputs (with the leak-marked secrets), the CI images' namespace and build report
CI_INPUTS = Path("build/test/inputs")
CI_NAMESPACE = f"{DEFAULT_NAMESPACE}-test"
CI_WORK_DIR = Path("build/test/ci")
CI_WORKERS = "3"
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


def run_test_suite(root: Path = ROOT, *, full: bool = False) -> int:
    """The tests against the images just built, with nothing skipped but tests/npu (CI=true): every change's tier, or
    with `full` also the proofs marked `full` (whole emulated chains); pytest's exit code."""
    tier = [] if full else ["-m", "not full"]
    argv = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-n", CI_WORKERS, *tier]
    print(f"running the tests: {' '.join(argv[1:])} (CI=true)", flush=True)
    return subprocess.run(argv, cwd=root, env={**os.environ, "CI": "true"}, check=False).returncode
