"""A build that failed on a full disk is told apart from one that failed otherwise, from its output alone (BuildKit
says only that the step "did not complete successfully"). The texts are what the tools printed, copied by hand."""

import pytest

from ascend_images.builder.engine import disk_full


@pytest.mark.parametrize("output", [
    "#13 OSError: [Errno 28] No space left on device: '/usr/local/python/lib'",
    "#9 E: You don't have enough free space in /var/cache/apt/archives/.",
    # apt-get update on an engine with ~250 MB free (this project's CI, test_disk_full_during_a_build)
    "#13 W: GPG error: http://deb.debian.org/debian bookworm InRelease: At least one invalid signature was "
    "encountered.\n#13 E: The repository 'http://deb.debian.org/debian bookworm InRelease' is not signed.",
])
def test_a_full_disk_is_recognised(output):
    assert disk_full(output)


@pytest.mark.parametrize("output", [
    "#7 ERROR: process \"/bin/sh -c false\" did not complete successfully: exit code: 1",
    "#9 E: Unable to locate package python3-nosuch",
    "#13 W: GPG error: http://deb.debian.org/debian bookworm InRelease: The following signatures couldn't be "
    "verified because the public key is not available: NO_PUBKEY 6ED0E7B82643E131",
])
def test_other_failures_are_not_taken_for_one(output):
    assert not disk_full(output)
