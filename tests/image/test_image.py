"""What every image promises, checked in a running container of it (pytest-testinfra, docker:// backend:
`docker exec ... /bin/sh -c`, so only what is in ENV is seen, exactly like Ray workers and probes)."""

from __future__ import annotations

import json
import re
import shlex
from types import SimpleNamespace

import pytest

from ascend_images.inputs.lockfile import installed_below
from ascend_images.inputs.lockspec import LAYERS
from ascend_images.inputs.pypi import normalize
from ascend_images.matrix.cannenv import PATH_LIKE, clean_path_list
from tests.conftest import image_history
from tests.image.facts import image_fact
from tests.image.paths import path_facts

pytestmark = [pytest.mark.docker, pytest.mark.slow]
SHELLS = {
    "exec": "{cmd}",  # what testinfra runs: /bin/sh -c through docker exec, no profile
    "sh -c": "sh -c {q}",
    "bash -lc": "bash -lc {q}",
    "bash -ic": "bash -ic {q} 2>/dev/null",
}


@image_fact
def shell_env(host, shell: str) -> dict[str, str]:
    """What a process started by `shell` sees; asked once per image and shell in a session: nothing here
    changes it."""
    cmd = "env -0"
    out = host.check_output(SHELLS[shell].format(cmd=cmd, q=shlex.quote(cmd)) + " | base64 -w0")
    import base64

    pairs = base64.b64decode(out).decode().split("\0")
    return dict(p.split("=", 1) for p in pairs if "=" in p)


def sourced_env(host, variant) -> dict[str, str]:
    """What sourcing the variant's env scripts yields, from a clean environment, in the container."""
    return _sourced_env(host, tuple(variant.env_scripts))


@image_fact
def _sourced_env(host, scripts: tuple[str, ...]) -> dict[str, str]:
    """Asked once per image and session: CANN's scripts, sourced by an emulated bash, take seconds; four checks ask."""
    sources = " && ".join(f"source {s}" for s in scripts)
    script = shlex.quote(sources + " && env")
    cmd = f"env -i PATH=/usr/local/python/bin:/usr/bin:/bin bash --noprofile --norc -c {script}"
    out = host.check_output(cmd)
    return dict(line.split("=", 1) for line in out.splitlines() if "=" in line)


# --- Python -------------------------------------------------------------------------------------
def test_python_is_the_variants(host, variant):
    version = host.check_output("python --version")
    assert re.fullmatch(rf"Python {re.escape(variant.python_version)}\.\d+", version), version
    assert host.check_output("python -c 'import sys; print(sys.prefix)'") == "/usr/local/python"


def test_python_headers_where_builds_look_for_them(host):
    """triton(-ascend) compiles its kernel launchers against Python.h when a kernel first runs, and torch's C++
    extensions build against it: both ask sysconfig for the include directory."""
    code = "import os, sysconfig; print(os.path.isfile(os.path.join(sysconfig.get_paths()['include'], 'Python.h')))"
    assert host.check_output(f'python -c "{code}"') == "True"


@image_fact
def _pip_check(host) -> dict:
    result = host.run("pip check")
    return {"rc": result.rc, "stdout": result.stdout, "stderr": result.stderr}


def pip_check(host) -> SimpleNamespace:
    """`pip check` in a container of the image, run once per image (an emulated pip takes seconds): two checks read
    it."""
    return SimpleNamespace(**_pip_check(host))


def test_pip_check(host, image_locks):
    """Consistent, but for exactly what the locks explain: a conflict where the installed package is an overridden one
    at the overridden version (matrix.yaml says why), and what a package a lock installs --no-deps (its `off-pypi` or
    `no-deps` header: upstream installs it so) itself requires."""
    result = pip_check(host)
    overrides = [o for lock in image_locks.values() for o in lock.overrides]
    no_deps = {f.name: f.version for lock in image_locks.values() for f in lock.off_pypi}
    for lock in image_locks.values():
        no_deps |= lock.no_deps
    if result.rc == 0 or (not overrides and not no_deps):
        assert result.rc == 0, result.stdout + result.stderr
        return
    pinned = {normalize(name): version for name, _, version in (o.partition("==") for o in overrides)}

    def explained(line: str) -> bool:
        conflict = re.fullmatch(r"(\S+) (\S+) has requirement .+, but you have (\S+) (\S+)\.", line)
        missing = re.fullmatch(r"(\S+) (\S+) requires \S+, which is not installed\.", line)
        if conflict and pinned.get(normalize(conflict.group(3))) == conflict.group(4):
            return True
        requirer = conflict or missing
        return bool(requirer) and no_deps.get(normalize(requirer.group(1))) == requirer.group(2)

    unexplained = [line for line in result.stdout.splitlines() if line.strip() and not explained(line)]
    assert not unexplained, result.stdout + result.stderr


# --- CANN layout: checked against upstream facts in test_cann_golden.py ---------------------------
def test_env_scripts_present(host, variant):
    seen = path_facts(host, [script.split()[0] for script in variant.env_scripts])
    for script in variant.env_scripts:
        assert seen[script.split()[0]].is_file, script


# --- environment ----------------------------------------------------------------------------------
@pytest.mark.parametrize("shell", list(SHELLS))
def test_env_scripts_values_visible(host, variant, shell):
    expected = sourced_env(host, variant)
    seen = shell_env(host, shell)
    for name, value in expected.items():
        if name in {"PWD", "SHLVL", "_", "OLDPWD"}:
            continue
        if name in PATH_LIKE:
            # everything the script puts on the list is there (the image adds its own entries too)
            for entry in clean_path_list(value).split(":"):
                assert entry in seen.get(name, "").split(":"), f"{name} lacks {entry} under {shell}"
        else:
            assert seen.get(name) == value, f"{name} under {shell}: {seen.get(name)!r} != {value!r}"


def written_out(image: str) -> dict | None:
    """The hand-written expectation of a CI image (test_expected.py), or None for an image given with --image."""
    from tests.conftest import TEST_NAMESPACE
    from tests.image.test_expected import ci_names, expected

    name = image.removeprefix(f"{TEST_NAMESPACE}/")
    return expected(name) if name in ci_names() else None


@pytest.mark.parametrize("shell", list(SHELLS))
def test_tuned_defaults_exact(host, image, variant, shell):
    """Every process sees the tuned defaults, whatever shell starts it. The values are test_expected.py's, written
    out by hand from the references; an image given with --image (not CI's) is held to what `invoke env` says it
    carries: the matrix's layers, each variable where the image ships its reader."""
    from ascend_images.stages.envreaders import image_env
    from ascend_images.stages.kinds import image_env_of

    seen = shell_env(host, shell)
    expected = written_out(image)
    want = expected["env"] if expected else {n: e.value for n, e in image_env(variant, image_env_of(variant)).items()}
    wrong = {name: (seen.get(name), value) for name, value in want.items() if seen.get(name) != value}
    assert wrong == {}, f"under {shell}, (have, want): {wrong}"


@pytest.mark.parametrize("shell", list(SHELLS))
def test_no_duplicate_path_entries(host, shell):
    seen = shell_env(host, shell)
    for name in set(PATH_LIKE) & set(seen):
        entries = seen[name].split(":")
        assert "" not in entries, f"empty entry (= working directory) in {name} under {shell}"
        assert len(entries) == len(set(entries)), f"duplicates in {name} under {shell}: {seen[name]}"


def test_sourcing_again_changes_nothing(host):
    cmd = ("source /usr/local/lib/ascend-images/profile.bash; a=$(env | sort); "
           "source /usr/local/lib/ascend-images/profile.bash; b=$(env | sort); [ \"$a\" = \"$b\" ] && echo same")
    assert host.check_output(f"bash -lc {shlex.quote(cmd)}") == "same"


def test_env_json_tells_the_truth(host):
    """/etc/ascend-images/env.json (what `invoke env` and users read to learn why a value is set) agrees with what
    a process really gets, and cites a source for every value."""
    doc = json.loads(host.file("/etc/ascend-images/env.json").content_string)
    seen = shell_env(host, "exec")
    for name, item in doc["variables"].items():
        if name in PATH_LIKE:
            continue  # the image appends its own entries to the captured lists
        assert seen.get(name) == item["value"], f"{name}: env.json says {item['value']!r}, a process has " \
                                                f"{seen.get(name)!r}"
        assert item["source"], name


# --- versions -------------------------------------------------------------------------------------
@image_fact
def installed(host) -> dict[str, str]:
    """The installed distributions and their versions, read once per image and session (an emulated Python
    walking a few hundred distributions' metadata takes seconds, and half a dozen checks ask)."""
    code = ("import importlib.metadata as m, json, re; print(json.dumps({re.sub(r'[-_.]+', '-', "
            "d.metadata['Name']).lower(): d.version for d in m.distributions()}))")
    return json.loads(host.check_output(f"python -c {shlex.quote(code)}"))


def test_torch_and_torch_npu_pins(host, variant):
    have = installed(host)
    assert have["torch"] == f"{variant.torch}{variant.arch_spec.torch_local_version}"
    assert have["torch-npu"] == variant.torch_npu
    constraints = host.file("/etc/ascend-images/constraints.txt").content_string.split()
    assert f"torch-npu=={variant.torch_npu}" in constraints


@pytest.mark.backend_image
def test_backend_pins(host, variant):
    pins = variant.backend_pins
    have = installed(host)
    for dist, version in pins.model_dump().items():
        # not packages: how it is built
        if isinstance(version, str) and dist not in ("project_file", "tree", "npu_requirements"):
            got = have.get(dist.replace("_", "-"))
            if dist in ("vllm", "sglang"):
                # built from its sdist; vLLM marks a no-CUDA build with the local version "+empty"
                got = (got or "").split("+")[0]
            assert got == version, dist


def test_the_image_installs_exactly_its_locks(host, variant, image_locks):
    """Every locked package of every layer the image's stages installed, at its locked version (a layer over another
    may move a pin: the upper one wins, as its stage replaced it): the image is what `invoke lock` resolved."""
    assert set(image_locks) == {"base", "torch", *(["backend"] if variant.backend != "none" else []),
                                *(["framework"] if variant.framework != "none" else [])}
    locked, have = installed_below([image_locks[layer] for layer in LAYERS if layer in image_locks]), installed(host)
    assert len(locked) > 20
    assert {n: (v, have.get(n)) for n, v in locked.items() if have.get(n) != v} == {}


@pytest.mark.backend_image
def test_backend_installs_exactly_its_lock(host, variant, image_locks):
    """Every package of the backend's lock at its locked version, but what a framework lock over it moves."""
    lock, have = image_locks["backend"].pins, installed(host)
    assert len(lock) > 50
    moved = image_locks["framework"].pins if "framework" in image_locks else {}
    assert {n: (v, have.get(n)) for n, v in lock.items() if have.get(n) != v and n not in moved} == {}


@pytest.mark.backend_image
def test_backend_has_no_cuda(host, variant):
    have = installed(host)
    # CUDA flavours: nvidia-* and cuda-* runtimes, flashinfer, xformers, and SGLang's CUDA kernels `sgl-kernel`
    # (its NPU kernels are `sgl-kernel-npu`, which an SGLang image must have)
    # (nvidia-ml-py is no CUDA: pure-Python NVML bindings through ctypes, which ROLL's swanlab imports via pynvml)
    cuda = sorted(n for n in have if (n.startswith(("nvidia-", "cuda-", "flashinfer", "xformers", "cupy"))
                  and n != "nvidia-ml-py") or n == "sgl-kernel")
    assert cuda == [], cuda
    if variant.backend == "sglang":
        assert "sgl-kernel-npu" in have
    if variant.backend == "vllm":
        assert have["vllm"].endswith("+empty"), have["vllm"]  # VLLM_TARGET_DEVICE=empty: no CUDA kernels
        assert "triton" not in have  # triton-ascend provides the `triton` module; CUDA's triton must not


# --- the Python stack loads, with torch's device-backend autoload on (as users run it): probe.py -------------
def test_torch_npu_loads_and_sees_no_npu(python_stack):
    """`import torch` autoloads torch_npu, which loads CANN's libraries: a wrong library path, a missing
    soname or a torch_npu built for another torch fails here. Without a device, no NPU is available."""
    assert "torch_error" not in python_stack, python_stack.get("torch_error")
    assert python_stack["torch"][2:] == [False, 0], python_stack


@pytest.mark.backend_image
def test_backend_loads(host, variant, python_stack):
    """As far as an image can go without an NPU: the backend's NPU code imports and its entry points run."""
    assert "backend_error" not in python_stack, python_stack.get("backend_error")
    entry_point, loaded, third = python_stack["backend"]
    if variant.backend == "vllm":
        assert entry_point.startswith("vllm_ascend") and loaded == "vllm_ascend.platform.NPUPlatform"
        assert third == "npu"
    else:
        # Without a device SGLang's server cannot even print --help: importing it reaches code that needs an NPU.
        # SGLang 0.5.10 stops at its own NPU check (distributed/parallel_state.py calls is_npu(): torch_npu found, so
        # SGLang chose its NPU path, and no device); 0.5.17's server_args imports its triton kernels first, whose
        # @triton.autotune asks triton-ascend for the active driver, and the Ascend driver is active only with an NPU
        # ("0 active drivers"). The closest that runs here: the CLI entry point loads, the kernels import, is_npu()
        # says it found torch_npu and no device, and the server gets as far as one of those two, with nothing missing.
        no_npu = "torch_npu detected, but NPU device is not available"
        no_driver = "0 active drivers ([]). There should only be one."
        assert entry_point.startswith("sglang.") and loaded == "sgl_kernel_npu"
        assert no_npu in third, third
        server = python_stack["server"]
        raised = re.findall(r"^(\w+(?:Error|Exception)): (.*)$", server, flags=re.MULTILINE)
        assert raised, server
        assert raised[-1][0] == "RuntimeError" and (no_npu in raised[-1][1] or raised[-1][1] == no_driver), server
        assert not [name for name, _ in raised if name in ("ModuleNotFoundError", "ImportError")], raised


def test_manifest_equals_installed(host, variant):
    manifest = json.loads(host.file("/etc/ascend-images/manifest.json").content_string)
    assert manifest["python"] == installed(host)
    assert manifest["cann"].get("Ascend-cann-toolkit") == variant.release.cann



# --- memory allocator -----------------------------------------------------------------------------------------
# Written out from ref004 (2.1: serving hosts preload jemalloc from /usr/lib/"$(uname -i)"-linux-gnu/
# libjemalloc.so.2; 2.2: tcmalloc) and Debian's file lists (libjemalloc2, libgoogle-perftools4), not from
# matrix.yaml: a wrong path or default there fails here.
DEBIAN_ALLOCATOR_LIBRARY = {
    "jemalloc": "/usr/lib/{machine}-linux-gnu/libjemalloc.so.2",
    "tcmalloc": "/usr/lib/{machine}-linux-gnu/libtcmalloc.so.4",
}
SERVING_ALLOCATOR = {"vllm": "jemalloc", "sglang": "jemalloc", "none": None}
PRELOAD_FAILED = "cannot be preloaded"  # ld.so's words for an LD_PRELOAD entry it could not load


def expected_allocator(labels: dict[str, str], backend: str) -> str | None:
    """The backend's serving default, unless the image is an overlay built with another --allocator."""
    if labels.get("io.ascend-images.stage") == "overlay" and "io.ascend-images.allocator" in labels:
        chosen = labels["io.ascend-images.allocator"]
        return None if chosen == "none" else chosen
    return SERVING_ALLOCATOR[backend]


def test_allocator_is_preloaded(docker_client, host, image, variant):
    """Every process maps the allocator's library: what ref004's `LD_PRELOAD` tuning is for."""
    want = expected_allocator(docker_client.images.get(image).labels, variant.backend)
    maps = host.check_output("python -c 'print(open(\"/proc/self/maps\").read())'")
    if want is None:
        assert not re.search(r"lib(je|tc)malloc", maps), maps
        return
    library = DEBIAN_ALLOCATOR_LIBRARY[want].format(machine=host.check_output("uname -m"))
    real = host.check_output(f"readlink -f {library}")
    assert real in maps, f"{want}: {real} is not mapped in a Python process"
    assert shell_env(host, "exec").get("LD_PRELOAD") == library


def test_tools_work_with_the_allocator_preloaded(host, variant):
    """pip, the OS's package manager and CANN's env scripts run cleanly with the allocator preloaded (pip: the run of
    `pip check` test_pip_check judges; its exit code is that check's business, a loader complaint is this one's)."""
    manager = "apt-get check" if variant.os_spec.family == "apt" else "dnf --version"
    sources = " && ".join(f"source {s}" for s in variant.env_scripts)
    assert PRELOAD_FAILED not in pip_check(host).stderr, f"pip check: {pip_check(host).stderr[-2000:]}"
    for command in (manager, f"bash -c {shlex.quote(sources + ' && echo sourced')}"):
        result = host.run(command)
        assert result.rc == 0, f"{command}: exit {result.rc}\n{result.stderr[-2000:]}"
        assert PRELOAD_FAILED not in result.stderr, f"{command}: {result.stderr[-2000:]}"

# --- labels ---------------------------------------------------------------------------------------
def test_labels(docker_client, image, variant):
    """The io.ascend-images labels of a CI image equal test_expected.py's, written out by hand (an --image run is
    held to its own variant's); the OCI labels are present, and none names a namespace (DESIGN 27)."""
    labels = docker_client.images.get(image).labels
    expected = written_out(image)
    want = expected["labels"] if expected else {
        "io.ascend-images.device": variant.device, "io.ascend-images.cann": variant.release.cann,
        "io.ascend-images.hdk-floor": str(variant.hdk_floor), "io.ascend-images.torch": variant.torch,
        "io.ascend-images.torch-npu": variant.torch_npu, "io.ascend-images.release": variant.release_name,
        "io.ascend-images.soc-version": variant.device_spec.soc_version,
        "io.ascend-images.os": variant.os, "io.ascend-images.arch": variant.arch,
    }
    wrong = {key: (labels.get(key), value) for key, value in want.items() if labels.get(key) != value}
    assert wrong == {}, f"(have, want): {wrong}"
    for key in ("title", "description", "version", "created", "licenses", "source"):
        assert labels.get(f"org.opencontainers.image.{key}"), key
    namespace = image.rsplit("/", 1)[0]
    assert not [k for k, v in labels.items() if namespace in v], labels
    assert "org.opencontainers.image.base.name" not in labels  # set where the name is known: at publish time


# --- hygiene --------------------------------------------------------------------------------------
@image_fact
def leftovers(host) -> list[str]:
    """What no image may keep, found in one walk of its filesystem per container (an emulated `find /` takes
    seconds): pip's HTTP cache directories, installers (`*.run`), the build's secrets and pip or netrc files."""
    found = host.check_output("find / -xdev \\( \\( -type d -name http-v2 -path '*pip*' \\) -o -name '*.run' "
                              "-o -name '.ascend-build.*' -o -name '.cann.*' -o -name netrc -o -name pip.conf "
                              "\\) -print 2>/dev/null || true")
    return found.splitlines()  # one path a line: a path may hold a space


def test_no_pip_cache(host):
    assert not host.file("/root/.cache/pip").exists
    assert [path for path in leftovers(host) if path.endswith("/http-v2")] == []


def test_no_apt_lists(host):
    assert host.check_output("find /var/lib/apt/lists -type f ! -name lock 2>/dev/null | head -1") == ""


def test_no_installers_or_build_secrets_left(host):
    assert [path for path in leftovers(host) if not path.endswith("/http-v2")] == []


def test_no_credential_in_history(docker_client, image):
    from tests.conftest import LEAK_MARKER_PREFIX

    for entry in image_history(docker_client, image):
        created_by = entry.get("CreatedBy", "")
        assert LEAK_MARKER_PREFIX not in created_by
        assert "password" not in created_by.lower()
