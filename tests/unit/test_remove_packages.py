"""remove-packages, run for real on a site-packages laid out as an installer leaves it (a package, its compiled
bytecode, a script, its dist-info with RECORD): what RECORD lists goes, the bytecode and the metadata directory with it,
and nothing is left that importlib.metadata would read as a distribution without a name."""

from __future__ import annotations

import os
import subprocess
import sys

from tests.unit.helpers import ROOT

SCRIPT = ROOT / "images" / "common" / "rootfs" / "usr" / "local" / "libexec" / "ascend-images" / "remove-packages"


def installed(site):
    """alpha 1.0 as uv installs it: RECORD lists the module, the script and the metadata, not the .pyc compileall
    wrote afterwards."""
    (site / "alpha" / "__pycache__").mkdir(parents=True)
    (site / "alpha" / "__init__.py").write_text("X = 1\n")
    (site / "alpha" / "__pycache__" / f"__init__.cpython-{sys.version_info[0]}{sys.version_info[1]}.pyc").write_bytes(
        b"\0" * 16)
    info = site / "alpha-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: alpha\nVersion: 1.0\n")
    (info / "INSTALLER").write_text("uv\n")
    (site / "bin").mkdir()
    (site / "bin" / "alpha").write_text("#!/bin/sh\n")
    (info / "RECORD").write_text("alpha/__init__.py,,\nalpha-1.0.dist-info/METADATA,,\n"
                                 "alpha-1.0.dist-info/INSTALLER,,\nalpha-1.0.dist-info/RECORD,,\nbin/alpha,,\n")
    (site / "beta-2.0.dist-info").mkdir()
    (site / "beta-2.0.dist-info" / "METADATA").write_text("Metadata-Version: 2.1\nName: beta\nVersion: 2.0\n")
    (site / "beta-2.0.dist-info" / "RECORD").write_text("beta-2.0.dist-info/METADATA,,\n")


def names_left(site) -> list:
    code = ("import importlib.metadata as m, sys; "
            "print(sorted(str(d.metadata['Name']) for d in m.distributions(path=[sys.argv[1]])))")
    return subprocess.run([sys.executable, "-c", code, str(site)], capture_output=True, text=True,
                          check=True).stdout.strip()


def test_a_removed_package_leaves_no_file_no_bytecode_and_no_nameless_metadata(tmp_path):
    site = tmp_path / "site"
    installed(site)
    result = subprocess.run([sys.executable, str(SCRIPT), "alpha", "gamma"], capture_output=True, text=True,
                            env={**os.environ, "PYTHONPATH": str(site)})
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "removed: alpha 1.0"  # gamma is not installed: skipped
    assert not (site / "alpha").exists() and not (site / "alpha-1.0.dist-info").exists()
    assert not (site / "bin" / "alpha").exists()
    assert names_left(site) == "['beta']"  # not ['None', 'beta']: the metadata directory went too
