"""`os-install` (the helper every stage installs OS packages with) against a real container of the debootstrapped
OS image: an OS mirror and its credentials reach it only as the build's secret `os-mirror` (a file where BuildKit's
secret mount puts it, /run/secrets/os-mirror), apt uses them (a private mirror that wants them says so), and the
image keeps its stock sources and no credential.
The dnf branch runs in the same container with a stand-in `dnf` that records the repo files it is given: this host
has no openEuler image, and what matters is what os-install writes for dnf to read."""

from __future__ import annotations

import subprocess
import uuid

import pytest

from ascend_images.builder.stageinputs import secret_documents
from ascend_images.cli.options import InputFlags
from tests.conftest import ROOT
from tests.fixtures.private_mirror import PrivateMirror

pytestmark = [pytest.mark.docker]

OS_INSTALL = ROOT / "images/common/rootfs/usr/local/libexec/ascend-images/os-install"
# characters that mean something to sed's replacement (&, \), to our sed expression (#) and to a URL (%, @, :)
AWKWARD = "p&w#d\\x%y@z:"
# openEuler 24.03 LTS's /etc/yum.repos.d/openEuler.repo, its first section as the release ships it
# (https://repo.openeuler.org/openEuler-24.03-LTS/ : the repo file in the OS image; generic-release)
OPENEULER_REPO = """[OS]
name=OS
baseurl=http://repo.openeuler.org/openEuler-24.03-LTS/OS/$basearch/
metalink=https://mirrors.openeuler.org/metalink?repo=$releasever/OS&arch=$basearch
metadata_expire=1h
enabled=1
gpgcheck=1
gpgkey=http://repo.openeuler.org/openEuler-24.03-LTS/OS/$basearch/RPM-GPG-KEY-openEuler
"""
FAKE_DNF = """#!/bin/sh
# records the repo files as `dnf install` would read them (not `dnf clean`, which comes after the restore)
[ "$1" = install ] || exit 0
cat /etc/yum.repos.d/*.repo > /tmp/seen.repo
echo "$@" > /tmp/seen.args
"""


@pytest.fixture
def mirror():
    served = PrivateMirror("mirror-user", f"{AWKWARD}{uuid.uuid4().hex[:8]}").start()
    yield served
    served.stop()


def run_os_install(os_image_amd64: str, inputs, script: str, tmp_path) -> subprocess.CompletedProcess:
    """os-install in a container with the build's `os-mirror` secret (when the inputs have one) where BuildKit
    mounts it."""
    mounts = ["-v", f"{OS_INSTALL}:/usr/local/libexec/ascend-images/os-install:ro"]
    document = secret_documents(inputs).get("os-mirror")
    if document is not None:
        secret = tmp_path / "os-mirror"
        secret.write_bytes(document)
        mounts += ["-v", f"{secret}:/run/secrets/os-mirror:ro"]
    return subprocess.run(["docker", "run", "--rm", "--network", "host", *mounts, os_image_amd64, "bash", "-c", script],
                          capture_output=True, text=True, timeout=600)


def test_apt_installs_through_a_private_mirror_and_keeps_nothing(os_image_amd64, mirror, tmp_path):
    inputs = InputFlags(os_mirror=mirror.url("/debian")).inputs()
    assert mirror.password not in inputs.os_mirror  # what a Dockerfile or cache key could see
    script = ("cp /etc/apt/sources.list /tmp/before; /usr/local/libexec/ascend-images/os-install apt less "
              "&& command -v less && cmp /etc/apt/sources.list /tmp/before && echo sources:stock "
              "&& ! ls /etc/apt/auth.conf.d/* 2>/dev/null && echo auth:none "
              f"&& ! grep -rqF {mirror.password[-8:]!r} /etc /var /tmp/before && echo secret:none")
    result = run_os_install(os_image_amd64, inputs, script, tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    for line in ("/usr/bin/less", "sources:stock", "auth:none", "secret:none"):
        assert line in result.stdout, result.stdout
    # the archive's index and the package came through the mirror, with its credentials
    assert mirror.authorized("/debian/dists/bookworm/InRelease"), mirror.requests
    assert any("/pool/main/l/less/" in path for path in mirror.authorized("/debian/pool/")), mirror.requests
    assert mirror.password not in result.stdout + result.stderr


def test_without_a_mirror_the_stock_sources_are_used(os_image_amd64, tmp_path):
    result = run_os_install(os_image_amd64, InputFlags().inputs(),
                            "/usr/local/libexec/ascend-images/os-install apt less && command -v less "
                            "&& ! ls /var/cache/ldconfig/aux-cache /var/log/alternatives.log 2>/dev/null "
                            "&& echo no-build-times", tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    # what would hold this build's time or inodes is gone (a rebuild gives the same bytes, DESIGN 24)
    assert "no-build-times" in result.stdout


def test_dnf_gets_the_mirror_and_its_credentials_in_the_repo_files_then_the_stock_ones(os_image_amd64, mirror,
                                                                                        tmp_path):
    inputs = InputFlags(os_mirror=mirror.url("/repos&mirrors/openeuler")).inputs()
    script = (f"mkdir -p /etc/yum.repos.d && cat > /etc/yum.repos.d/openEuler.repo <<'EOF'\n{OPENEULER_REPO}EOF\n"
              f"cat > /usr/local/bin/dnf <<'EOF'\n{FAKE_DNF}EOF\n"
              "chmod +x /usr/local/bin/dnf && cp /etc/yum.repos.d/openEuler.repo /tmp/before "
              "&& /usr/local/libexec/ascend-images/os-install dnf tar "
              "&& cmp /etc/yum.repos.d/openEuler.repo /tmp/before && echo repo:stock && cat /tmp/seen.repo")
    result = run_os_install(os_image_amd64, inputs, script, tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "repo:stock" in result.stdout
    seen = result.stdout.split("repo:stock\n", 1)[1]
    base = f"http://127.0.0.1:{mirror.port}/repos&mirrors/openeuler"
    # written out by hand from OPENEULER_REPO: the two repo.openeuler.org URLs moved to the mirror, the metalink
    # (another host) kept, and the credentials as the section's own options
    assert seen.splitlines() == [
        "[OS]", "username=mirror-user", f"password={mirror.password}", "name=OS",
        f"baseurl={base}/openEuler-24.03-LTS/OS/$basearch/",
        "metalink=https://mirrors.openeuler.org/metalink?repo=$releasever/OS&arch=$basearch",
        "metadata_expire=1h", "enabled=1", "gpgcheck=1",
        f"gpgkey={base}/openEuler-24.03-LTS/OS/$basearch/RPM-GPG-KEY-openEuler",
    ], seen
