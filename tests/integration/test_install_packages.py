"""install-packages, the native stages' install (DESIGN 19), run for real in the native tool of CI's SGLang stage on a
wheel store of one file, mounted where a stage's build mounts it: it installs from the store, checked by sha256, into
the image's prefix, compiles hash-based bytecode that the target checks against its source (PEP 552), gives every new
file SOURCE_DATE_EPOCH as its time, and prints the line `invoke bench` times the two steps by."""

import base64
import hashlib
import re
import zipfile

import pytest

from ascend_images.stages.contexts import PYTHON_PREFIX
from dev.bench.install import _NATIVE_LINE

pytestmark = [pytest.mark.docker, pytest.mark.slow]
SITE = f"/out{PYTHON_PREFIX}/lib/python3.11/site-packages"
# PEP 552: the pyc header's second word; bit 0 = hash-based, bit 1 = check the source
READ_FLAGS = (f"import sys; d = open('{SITE}/probe_pkg/__pycache__/__init__.cpython-311.pyc', 'rb').read(); "
              "print('pyc-flags=%d' % int.from_bytes(d[4:8], 'little'))")
DIST_INFO = f"{SITE}/probe_pkg-1.0.dist-info"
EPOCH = 1795824000  # written out by hand: 2026-11-28T00:00:00Z
NEWER = (f"echo newer=$(find /out -newermt @{EPOCH} | wc -l) "
         f"at-epoch=$(find /out ! -newermt @{EPOCH} -newermt @{EPOCH - 1} | wc -l)")


def probe_wheel(directory):
    """A pure wheel written out by hand: one module, its METADATA, WHEEL and RECORD."""
    files = {"probe_pkg/__init__.py": b"ANSWER = 42\n",
             "probe_pkg-1.0.dist-info/METADATA": b"Metadata-Version: 2.1\nName: probe-pkg\nVersion: 1.0\n",
             "probe_pkg-1.0.dist-info/WHEEL": b"Wheel-Version: 1.0\nGenerator: hand\nRoot-Is-Purelib: true\n"
                                              b"Tag: py3-none-any\n"}
    record = "".join(f"{name},sha256={base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b'=').decode()}"
                     f",{len(data)}\n" for name, data in files.items())
    files["probe_pkg-1.0.dist-info/RECORD"] = (record + "probe_pkg-1.0.dist-info/RECORD,,\n").encode()
    path = directory / "probe_pkg-1.0-py3-none-any.whl"
    with zipfile.ZipFile(path, "w") as archive:
        for name, data in files.items():
            archive.writestr(name, data)
    return path


def run_install(docker_client, native_tool, tmp_path, tampered: bool = False):
    """install-packages on the probe wheel, stored under its sha256 (with one byte of it changed if `tampered`)."""
    store, bench = tmp_path / "store", tmp_path / "bench"
    bench.mkdir()
    wheel = probe_wheel(tmp_path)
    sha256 = hashlib.sha256(wheel.read_bytes()).hexdigest()
    data = wheel.read_bytes()
    if tampered:  # a file the store holds under the lock's sha256 without hashing to it
        data = data.replace(b"ANSWER = 42", b"ANSWER = 43")
        assert hashlib.sha256(data).hexdigest() != sha256
    (store / sha256).mkdir(parents=True)
    (store / sha256 / wheel.name).write_bytes(data)
    (bench / "install.txt").write_text(f"probe-pkg==1.0 --hash=sha256:{sha256}\n")
    script = (f"/usr/local/libexec/ascend-images/install-packages {PYTHON_PREFIX} aarch64-manylinux_2_35 /bench "
              f"&& python3 -c \"{READ_FLAGS}\" && {NEWER} && echo dist-info=$(ls {DIST_INFO} | tr '\\n' ,) "
              f"&& sed 's/^/record: /' {DIST_INFO}/RECORD")
    return docker_client.containers.run(
        native_tool, ["sh", "-c", script], remove=True, network_mode="host", stderr=True,
        environment={"SOURCE_DATE_EPOCH": str(EPOCH)},
        volumes={str(bench): {"bind": "/bench", "mode": "ro"},
                 str(store): {"bind": "/run/ascend-images/wheels", "mode": "ro"}}).decode()


def test_it_installs_from_the_store_compiles_checked_hash_pyc_and_times_both_steps(docker_client, native_tool,
                                                                                    tmp_path):
    text = run_install(docker_client, native_tool, tmp_path)
    found = _NATIVE_LINE.search(text)
    assert found, text
    # milliseconds: the native install of a small delta takes a few seconds, whole seconds would hide it
    assert all(len(found.group(i).partition(".")[2]) == 3 for i in (1, 2)), found.group(0)
    assert "pyc-flags=3" in text, text  # hash-based and checked: the image's .pyc follow the sources in it
    # nothing the image gets is newer than SOURCE_DATE_EPOCH, and its files (a dozen) have exactly that time
    times = re.search(r"newer=(\d+) at-epoch=(\d+)", text)
    assert times and times.group(1) == "0" and int(times.group(2)) >= 10, text[-1500:]
    # what uv adds to a dist-info but its note of when it installed it (uv_cache.json, a clock time), and RECORD
    # lists just what is there
    assert "dist-info=INSTALLER,METADATA,RECORD,REQUESTED,WHEEL,\n" in text, text[-1500:]
    record = sorted(line.removeprefix("record: ").split(",")[0] for line in text.splitlines()
                    if line.startswith("record: probe_pkg-1.0.dist-info/"))
    assert record == [f"probe_pkg-1.0.dist-info/{name}" for name in ("INSTALLER", "METADATA", "RECORD", "REQUESTED",
                                                                      "WHEEL")], text[-1500:]


def test_a_store_file_that_does_not_hash_to_its_pin_is_not_installed(docker_client, native_tool, tmp_path):
    """The store holds the wheel under the lock's sha256, but its bytes were changed: uv, which checks every file
    against the lock's sha256, refuses it, and the stage fails rather than install an unpinned file."""
    import docker.errors

    with pytest.raises(docker.errors.ContainerError) as caught:
        run_install(docker_client, native_tool, tmp_path, tampered=True)
    assert "probe-pkg" in (caught.value.stderr or b"").decode(errors="replace")
