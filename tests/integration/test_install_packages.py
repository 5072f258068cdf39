"""install-packages, the installer image's native install (DESIGN 19), run for real on a wheel store of one file:
it installs from the build server's store, checked by sha256, into the image's prefix, compiles hash-based bytecode
that the target checks against its source (PEP 552), and prints the line `invoke bench` times the two steps by."""

import base64
import hashlib
import zipfile

import pytest
from ascend_images.builder.buildserver import BuildServer

from ascend_images.bench.install import _NATIVE_LINE
from ascend_images.inputs.sources import BuildInputs
from ascend_images.stages.contexts import PYTHON_PREFIX

SITE = f"/out{PYTHON_PREFIX}/lib/python3.11/site-packages"
# PEP 552: the pyc header's second word; bit 0 = hash-based, bit 1 = check the source
READ_FLAGS = (f"import sys; d = open('{SITE}/probe_pkg/__pycache__/__init__.cpython-311.pyc', 'rb').read(); "
              "print('pyc-flags=%d' % int.from_bytes(d[4:8], 'little'))")


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


@pytest.fixture
def installer(ci_builds) -> str:
    return next(s.tag for plan, _ in ci_builds for s in plan.stages if s.kind == "installer")


def run_install(docker_client, installer, tmp_path, stored_under: str | None = None):
    """install-packages on the probe wheel, stored under its sha256 (or under `stored_under`)."""
    store, bench = tmp_path / "store", tmp_path / "bench"
    bench.mkdir()
    wheel = probe_wheel(tmp_path)
    sha256 = hashlib.sha256(wheel.read_bytes()).hexdigest()
    stored_sha256 = stored_under or sha256
    (store / stored_sha256).mkdir(parents=True)
    (store / stored_sha256 / wheel.name).write_bytes(wheel.read_bytes())
    (bench / "install.txt").write_text(f"probe-pkg==1.0 --hash=sha256:{sha256}\n")
    script = f'install-packages {PYTHON_PREFIX} aarch64-manylinux_2_35 /bench && python3 -c "{READ_FLAGS}"'
    with BuildServer(BuildInputs(), wheel_store=store) as server:
        return docker_client.containers.run(
            installer, ["sh", "-c", script], remove=True, network_mode="host", stderr=True,
            environment={"ASCEND_BUILD_SERVER": server.url},
            volumes={str(bench): {"bind": "/bench", "mode": "ro"}}).decode()


def test_it_installs_from_the_store_compiles_checked_hash_pyc_and_times_both_steps(docker_client, installer,
                                                                                    tmp_path):
    text = run_install(docker_client, installer, tmp_path)
    found = _NATIVE_LINE.search(text)
    assert found, text
    # milliseconds: the native install of a small delta takes a few seconds, whole seconds would hide it
    assert all(len(found.group(i).partition(".")[2]) == 3 for i in (1, 2)), found.group(0)
    assert "pyc-flags=3" in text, text  # hash-based and checked: the image's .pyc follow the sources in it


def test_a_store_file_under_another_sha256_is_not_installed(docker_client, installer, tmp_path):
    """The build server hashes what it serves: the file is stored under a key it does not hash to, so it is not
    listed, and uv finds nothing to install (the stage fails rather than install an unpinned file)."""
    import docker.errors

    with pytest.raises(docker.errors.ContainerError) as caught:
        run_install(docker_client, installer, tmp_path, stored_under="0" * 64)
    assert "probe-pkg" in (caught.value.stderr or b"").decode(errors="replace")
