"""README's set-up on the host it names (issue 41): a stock Debian 12 root (debootstrap minbase plus Debian's python3,
nothing else) runs scripts/setup-venv.sh, the Python part of scripts/setup-host.sh, and then the commands README
gives work, from any directory. Debian's python3 has no pip and refuses installs into the system (PEP 668): the
script must make a venv of its own and never touch the system's Python.

The root is the native-arch debootstrap image the other tests use, run with the host's network; the checkout is
copied in (this tree, as a fresh clone holds it). pip inside trusts the host's CA bundle: this machine reaches PyPI
through a TLS proxy (the same bundle builds get).

The same on a stock Debian 13 root (trixie's python3 is 3.13), and scripts/setup-engine.sh --packages-only, the
engine part of set-up, in both roots, in a Debian 12 root holding bookworm's own docker.io 20.10, and in one holding
trixie's 26.1.5 as an earlier set-up installed it: dockerd >= 28 and buildx >= 0.20 afterwards, nothing started, and
only forky's four engine packages from forky (libc6, runc and everything else the host suite's; on Debian 12 also
tini-static, which docker.io needs and bookworm does not have). What the script does to a running engine (daemon.json,
a restart only when allowed) is tested against a fake engine: no dockerd runs in these containers."""

from __future__ import annotations

import io
import re
import subprocess
import tarfile

import pytest

from tests.conftest import HOST_CA, ROOT

pytestmark = [pytest.mark.docker, pytest.mark.network, pytest.mark.slow]


def checkout_tar() -> bytes:
    """The tracked files of this tree as they are now (a fresh clone's content, uncommitted edits included)."""
    listed = subprocess.run(["git", "-C", str(ROOT), "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
                            capture_output=True, check=True).stdout.split(b"\0")
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as tar:
        for name in filter(None, (n.decode() for n in listed)):
            path = ROOT / name
            if path.is_file():
                tar.add(path, arcname=f"ascend-images/{name}", recursive=False)
    return buffer.getvalue()


def host_apt_acquire() -> str:
    """This host's apt settings for reaching its package mirror (whether a Release file's dates are checked: a mirror
    frozen at a date serves testing suites past their Valid-Until), for a stock root to reach it as the host does."""
    dumped = subprocess.run(["apt-config", "dump"], capture_output=True, text=True).stdout
    return "".join(f"{line}\n" for line in dumped.splitlines()
                   if line.startswith(("Acquire::Check-Valid-Until ", "Acquire::Check-Date ")))


def stock_root(docker_client, image: str, packages: str = "python3"):
    """A container of the stock root `image` with Debian's `packages` added (no service started: there is no init
    here), the checkout in /src/ascend-images, reaching the package mirror as this host does."""
    container = docker_client.containers.run(
        image, ["sleep", "infinity"], detach=True, network_mode="host", remove=True,
        volumes={str(HOST_CA): {"bind": "/host-ca.pem", "mode": "ro"}},
        environment={"PIP_CERT": "/host-ca.pem", "DEBIAN_FRONTEND": "noninteractive"})
    try:
        acquire = host_apt_acquire().replace("'", "")
        installed = container.exec_run(["sh", "-c", f"""
            set -e
            printf '%s' '{acquire}' >/etc/apt/apt.conf.d/99host-mirror
            printf '#!/bin/sh\\nexit 101\\n' >/usr/sbin/policy-rc.d && chmod +x /usr/sbin/policy-rc.d
            apt-get update -qq && apt-get install -y -qq {packages} >/dev/null
            rm /usr/sbin/policy-rc.d"""])
        assert installed.exit_code == 0, installed.output.decode()[-2000:]
        container.exec_run(["mkdir", "-p", "/src"])
        assert container.put_archive("/src", checkout_tar())
        yield container
    finally:
        container.kill()


@pytest.fixture(scope="module")
def debian_root(docker_client, os_image_amd64):
    """A container of the stock Debian 12 root with Debian's python3 added, the checkout in /src/ascend-images."""
    yield from stock_root(docker_client, os_image_amd64)


@pytest.fixture(scope="module")
def trixie_root(docker_client, os_image_debian13_amd64):
    """The same of a stock Debian 13 root (debootstrap trixie minbase)."""
    yield from stock_root(docker_client, os_image_debian13_amd64)


@pytest.fixture(scope="module")
def old_engine_root(docker_client, os_image_amd64):
    """A stock Debian 12 root with bookworm's own docker.io 20.10."""
    yield from stock_root(docker_client, os_image_amd64, "--no-install-recommends docker.io")


# what scripts/setup-engine.sh wrote on Debian 12 when it took the engine from trixie (docker.io 26.1.5)
TRIXIE_ENGINE = r"""
set -e
printf 'Types: deb\nURIs: http://deb.debian.org/debian\nSuites: trixie\nComponents: main\n%s\n' \
  'Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg' >/etc/apt/sources.list.d/ascend-images-trixie.sources
printf 'Package: *\nPin: release n=trixie\nPin-Priority: 100\n' >/etc/apt/preferences.d/ascend-images-trixie
printf '#!/bin/sh\nexit 101\n' >/usr/sbin/policy-rc.d && chmod +x /usr/sbin/policy-rc.d
apt-get update -qq
apt-get install -y -qq --no-install-recommends docker.io/trixie docker-cli/trixie docker-buildx/trixie \
  containerd/trixie >/dev/null
rm /usr/sbin/policy-rc.d
"""


@pytest.fixture(scope="module")
def trixie_engine_root(docker_client, os_image_amd64):
    """A stock Debian 12 root with trixie's docker.io 26.1.5, buildx 0.13 and containerd 1.7, as this project's
    set-up installed them before its floor moved to Docker 27 (the engine CI machines of that time kept)."""
    for container in stock_root(docker_client, os_image_amd64):
        code, said = sh(container, TRIXIE_ENGINE)
        assert code == 0, said[-3000:]
        yield container


def sh(container, script: str, workdir: str = "/src/ascend-images") -> tuple[int, str]:
    result = container.exec_run(["bash", "-c", script], workdir=workdir)
    return result.exit_code, result.output.decode(errors="replace")


def test_the_stock_root_is_what_the_issue_describes(debian_root):
    """Debian's python3, with neither pip nor a way to install into the system: what the old set-up stopped on."""
    assert sh(debian_root, "python3 --version")[1].startswith("Python 3.11.")
    code, said = sh(debian_root, "python3 -m pip --version")
    assert code != 0 and "No module named pip" in said
    code, said = sh(debian_root, "python3 -c 'import ensurepip'")
    assert code != 0, said  # no python3-venv yet: the script must install it


def test_setup_makes_its_own_venv_and_the_commands_work_from_anywhere(debian_root):
    code, said = sh(debian_root, "bash scripts/setup-venv.sh 2>&1")
    assert code == 0, said[-3000:]
    assert "python ready: Python 3.11." in said
    # the system's Python is untouched: still no pip, nothing of ours in it
    code, _ = sh(debian_root, "python3 -m pip --version")
    assert code != 0
    code, _ = sh(debian_root, "python3 -c 'import ascend_images'")
    assert code != 0
    # README's commands: invoke from the venv, ascend-images from PATH, both from a directory that is not the checkout
    code, said = sh(debian_root, ".venv/bin/invoke --list")
    assert code == 0 and "build" in said, said
    code, said = sh(debian_root, "ascend-images env --device a3 --json", workdir="/tmp")
    assert code == 0, said
    assert '"variant": "cann9.1.0-pt2.10.0/a3/none/debian12/aarch64/system"' in said
    code, said = sh(debian_root, "ascend-images --version", workdir="/")
    assert code == 0 and said.startswith("ascend-images 0.1.0 ("), said
    # and it is the command the venv's pytest finds too (README's second command)
    code, said = sh(debian_root, ".venv/bin/python -m pytest --version")
    assert code == 0, said


def test_setup_on_debian13_makes_its_venv_and_the_commands_work(trixie_root):
    """Trixie's python3 is 3.13: the project installs and runs on it, as on Debian 12's 3.11."""
    assert sh(trixie_root, "python3 --version")[1].startswith("Python 3.13.")
    code, said = sh(trixie_root, "python3 -m pip --version")
    assert code != 0 and "No module named pip" in said
    code, said = sh(trixie_root, "bash scripts/setup-venv.sh 2>&1")
    assert code == 0, said[-3000:]
    assert "apt-get install python3-venv" in said and "python ready: Python 3.13." in said
    code, said = sh(trixie_root, "ascend-images env --device a3 --json", workdir="/tmp")
    assert code == 0, said
    assert '"variant": "cann9.1.0-pt2.10.0/a3/none/debian12/aarch64/system"' in said
    code, _ = sh(trixie_root, "python3 -c 'import ascend_images'")
    assert code != 0  # the system's Python untouched
    # README's two commands' tools, as on Debian 12
    code, said = sh(trixie_root, ".venv/bin/invoke --list")
    assert code == 0 and "build" in said, said
    code, said = sh(trixie_root, ".venv/bin/python -m pytest --version")
    assert code == 0, said


@pytest.mark.parametrize("root", ["debian_root", "trixie_root"])
def test_setup_runs_again_without_redoing_anything(root, request):
    """After each root's first set-up above."""
    container = request.getfixturevalue(root)
    code, said = sh(container, "bash scripts/setup-venv.sh 2>&1")
    assert code == 0, said[-3000:]
    assert "apt-get install" not in said and "-m venv" not in said


# --- the engine: scripts/setup-engine.sh --packages-only ------------------------------------------------------------
FORKY_FOUR = {"docker.io", "docker-cli", "docker-buildx", "containerd"}


def installed_packages(container) -> dict[str, str]:
    code, said = sh(container, "dpkg-query -W -f '${db:Status-Abbrev} ${Package} ${Version}\\n'")
    assert code == 0, said
    return {name: version for status, name, version in (line.split() for line in said.splitlines())
            if status == "ii"}


def suites_of(container, versions: dict[str, str]) -> dict[str, set[str]]:
    """For each package, the suites (bookworm, forky...) whose archive offers its installed version."""
    code, said = sh(container, "apt-cache madison " + " ".join(sorted(versions)))
    assert code == 0, said
    suites: dict[str, set[str]] = {name: set() for name in versions}
    for line in said.splitlines():
        name, version, where = (part.strip() for part in line.split("|"))
        if versions.get(name) == version and where.endswith(" Packages"):
            suites[name].add(where.split()[1].split("/")[0])
    return suites


def engine_versions(container) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """dockerd's and buildx's (major, minor), as the packages installed them (no engine runs)."""
    code, said = sh(container, "dockerd --version")
    assert code == 0, said
    engine = re.match(r"Docker version (\d+)\.(\d+)", said)
    assert engine, said
    code, said = sh(container, "docker buildx version")
    assert code == 0 and said.startswith("github.com/docker/buildx "), said
    buildx = re.match(r"v?(\d+)\.(\d+)", said.split()[1])
    assert buildx, said
    return tuple(map(int, engine.groups())), tuple(map(int, buildx.groups()))


def assert_the_current_engine(container) -> None:
    """What users run now: Docker >= 28 with buildx >= 0.20 (the issue's measure; the floor itself is 27 and 0.17)."""
    engine, buildx = engine_versions(container)
    assert engine >= (28, 0) and buildx >= (0, 20), (engine, buildx)


def assert_nothing_started(container) -> None:
    """--packages-only: no dockerd started (by the script or by the packages' scripts), no daemon.json written, and
    the temporary policy-rc.d that kept the packages from starting services is gone."""
    assert sh(container, "pidof dockerd containerd")[0] != 0
    assert sh(container, "test -e /etc/docker/daemon.json || test -e /usr/sbin/policy-rc.d")[0] != 0


def changed(before: dict[str, str], after: dict[str, str]) -> dict[str, str]:
    return {name: version for name, version in after.items() if before.get(name) != version}


def packages_only(container, *, installs: bool = True) -> tuple[str, dict[str, str]]:
    """scripts/setup-engine.sh --packages-only in `container`, which must succeed: what it said, and the packages
    installed before it. Where it `installs`, the current engine is there afterwards and nothing was started."""
    before = installed_packages(container)
    code, said = sh(container, "bash scripts/setup-engine.sh --packages-only 2>&1")
    assert code == 0, said[-3000:]
    if installs:
        assert_the_current_engine(container)
        assert_nothing_started(container)
    return said, before


def assert_from_forky_only_the_engine(container, new: dict[str, str], host_suite: str) -> None:
    """Of what the install added or moved, forky gave the four engine packages and, beyond them, only what the
    host's suite does not have at all; libc6 and runc stay the host suite's (forky's runc needs glibc 2.38)."""
    suites = suites_of(container, new)
    assert all(suites.values()), f"installed versions no suite offers: {suites}"
    from_forky = {name for name, where in suites.items() if host_suite not in where}
    assert from_forky >= FORKY_FOUR, f"from forky: {sorted(from_forky)}; all new: {new}"
    for name in from_forky - FORKY_FOUR:
        said = sh(container, f"apt-cache madison {name}")[1]
        assert f" {host_suite}/" not in said, f"{name} came from forky, though {host_suite} has it: {said}"
    installed = installed_packages(container)
    for name in ("libc6", "runc"):
        assert host_suite in suites_of(container, {name: installed[name]})[name], (name, installed[name])


def test_engine_packages_on_debian12_come_from_forky_and_nothing_else(debian_root):
    said, before = packages_only(debian_root)
    assert "Debian GNU/Linux 12 (bookworm) has docker.io 20.10" in said and "adding forky" in said, said
    assert "engine packages ready: dockerd 28." in said, said
    after = installed_packages(debian_root)
    new = changed(before, after)
    assert not {name for name in new if name in before}, f"upgraded: {new}"  # a stock root: nothing upgraded
    assert_from_forky_only_the_engine(debian_root, new, "bookworm")
    # libc stays bookworm's (forky's engine needs >= 2.34; bookworm has 2.36)
    said = sh(debian_root, "apt-cache policy libc6")[1]
    assert re.search(r"Installed: 2\.36-", said) and after["libc6"] == before["libc6"], said


def test_engine_packages_on_debian12_again_install_nothing(debian_root):
    said, before = packages_only(debian_root, installs=False)
    assert "engine kept: dockerd 28." in said and "apt-get" not in said, said
    assert installed_packages(debian_root) == before


@pytest.mark.full  # a host that set up an old engine before: a migration, proven nightly
def test_engine_packages_on_debian12_upgrade_its_own_old_engine(old_engine_root):
    """Bookworm's docker.io 20.10 is upgraded to forky's, saying so; its containerd with it, and the CLI and buildx
    added."""
    said = sh(old_engine_root, "dockerd --version")[1]
    assert said.startswith("Docker version 20.10."), said
    said, before = packages_only(old_engine_root)
    assert "upgrading this host's dockerd 20.10." in said, said
    after = installed_packages(old_engine_root)
    new = changed(before, after)
    assert {name for name in new if name in before} == {"docker.io", "containerd"}, new
    assert_from_forky_only_the_engine(old_engine_root, new, "bookworm")
    assert after["libc6"] == before["libc6"]


@pytest.mark.full  # a host set up by an earlier version: a migration, proven nightly
def test_engine_packages_replace_the_trixie_engine_an_earlier_setup_installed(trixie_engine_root):
    """Below the floor now (26.1.5, BuildKit 0.13): upgraded to forky's, and the trixie source and pin the earlier
    set-up wrote are gone, so nothing more comes from trixie."""
    assert sh(trixie_engine_root, "dockerd --version")[1].startswith("Docker version 26.1."), "not trixie's engine"
    said, before = packages_only(trixie_engine_root)
    assert "upgrading this host's dockerd 26.1.5" in said and "removed trixie" in said, said
    assert sh(trixie_engine_root, "ls /etc/apt/sources.list.d/ascend-images-trixie.sources "
                                  "/etc/apt/preferences.d/ascend-images-trixie")[0] != 0
    new = changed(before, installed_packages(trixie_engine_root))
    assert set(new) >= FORKY_FOUR, new
    assert_from_forky_only_the_engine(trixie_engine_root, new, "bookworm")


def test_engine_packages_on_debian13_come_from_forky_too(trixie_root):
    """Trixie's own docker.io is 26.1.5, below the floor: forky's, pinned, as on Debian 12."""
    said, before = packages_only(trixie_root)
    assert "Debian GNU/Linux 13 (trixie) has docker.io 26." in said and "adding forky" in said, said
    new = changed(before, installed_packages(trixie_root))
    assert not {name for name in new if name in before}, f"upgraded: {new}"
    assert_from_forky_only_the_engine(trixie_root, new, "trixie")


# --- a running engine, faked: what the script writes, starts and restarts ------------------------------------------
FAKE_ENGINE = r"""
set -e
mkdir -p /fake/bin /fake/proc
cp "$(command -v sleep)" /fake/proc/dockerd  # the fake daemon's process: `pidof dockerd` finds it
cat >/fake/bin/dockerd <<'SH'
#!/bin/bash
# a fake dockerd: --version answers; otherwise it "starts" with the image store daemon.json asks for
if [ "$1" = --version ]; then echo "Docker version 28.5.2+fake, build fake"; exit 0; fi
store=off
grep -q '"containerd-snapshotter": true' "$ASCEND_IMAGES_DAEMON_JSON" 2>/dev/null && store=on
echo "28.5.2 $store" >/fake/state
echo "$store" >>/fake/starts
exec /fake/proc/dockerd infinity
SH
cat >/fake/bin/docker <<'SH'
#!/bin/bash
# a fake docker CLI that answers as the fake engine is: no state or no process, no engine
case "$1" in
  buildx) echo "github.com/docker/buildx 0.29.1 fake"; exit 0 ;;
  info | version)
    [ -f /fake/state ] && pidof dockerd >/dev/null || exit 1
    read -r version store </fake/state
    if [ "$1" = version ]; then echo "$version"; exit 0; fi
    case "$*" in
      *DriverStatus*)
        if [ "$store" = on ]; then echo '[["driver-type","io.containerd.snapshotter.v1"]]'
        else echo '[["Backing Filesystem","extfs"],["Supports d_type","true"]]'; fi ;;
    esac
    exit 0 ;;
esac
exit 1
SH
chmod +x /fake/bin/*
"""
FAKE_ENV = "export PATH=/fake/bin:$PATH ASCEND_IMAGES_DAEMON_JSON=/fake/daemon.json; "
STOP_FAKE = "for pid in $(pidof dockerd); do kill $pid; done; while pidof dockerd >/dev/null; do sleep 0.1; done; "


@pytest.fixture(scope="module")
def fake_engine(debian_root):
    """The Debian 12 root with the fake engine's commands in /fake/bin (used through FAKE_ENV only)."""
    code, said = sh(debian_root, FAKE_ENGINE)
    assert code == 0, said
    return debian_root


def fake_engine_running(container, store: str) -> str:
    """A fake dockerd running with the image store `store`; returns its pid."""
    code, said = sh(container, STOP_FAKE + "rm -f /fake/state /fake/starts; "
                               f"echo '28.5.2 {store}' >/fake/state; (setsid /fake/proc/dockerd infinity &); "
                               "sleep 0.2; pidof dockerd")
    assert code == 0, said
    return said.strip()


def test_engine_refuses_to_restart_a_running_engine_unless_allowed(fake_engine):
    debian_root = fake_engine
    sh(debian_root, """printf '{"log-level": "warn"}\n' >/fake/daemon.json""")
    pid = fake_engine_running(debian_root, "off")
    code, said = sh(debian_root, FAKE_ENV + "bash scripts/setup-engine.sh 2>&1")
    assert code == 1, said
    (line,) = [text for text in said.splitlines() if text.startswith("setup-engine:")]
    for words in ("containerd image store is off", "the builds' OCI image export", "/fake/daemon.json",
                  "ASCEND_IMAGES_ENGINE_RESTART=1", "graphdriver", "not visible after the switch"):
        assert words in line, line
    assert sh(debian_root, "cat /fake/daemon.json")[1] == '{"log-level": "warn"}\n'  # untouched
    assert sh(debian_root, "pidof dockerd")[1].strip() == pid  # not restarted

    code, said = sh(debian_root, FAKE_ENV + "ASCEND_IMAGES_ENGINE_RESTART=1 bash scripts/setup-engine.sh 2>&1")
    assert code == 0, said
    assert f"stopping dockerd (pid {pid};" in said and "starting dockerd" in said, said
    assert said.splitlines()[-1].endswith("engine: dockerd 28.5.2, buildx 0.29.1, containerd image store on"), said
    assert sh(debian_root, "pidof dockerd")[1].strip() not in ("", pid)
    code, said = sh(debian_root, "python3 -c 'import json; print(json.load(open(\"/fake/daemon.json\")))'")
    assert said.strip() == ("{'log-level': 'warn', 'features': {'containerd-snapshotter': True}, "
                            "'builder': {'gc': {'enabled': True, 'defaultKeepStorage': '20GB'}}}"), said

    # ready: nothing written, nothing restarted
    code, said = sh(debian_root, FAKE_ENV + "bash scripts/setup-engine.sh 2>&1")
    assert code == 0 and "starting" not in said and "stopping" not in said and "features" not in said, said


def test_engine_started_by_the_script_gets_the_containerd_store(fake_engine):
    debian_root = fake_engine
    sh(debian_root, STOP_FAKE + "rm -f /fake/state /fake/starts")
    sh(debian_root, """printf '{"features": {"buildkit": true}, "debug": false}' >/fake/daemon.json""")
    code, said = sh(debian_root, FAKE_ENV + "bash scripts/setup-engine.sh 2>&1")
    assert code == 0, said
    assert ("features.containerd-snapshotter: true (was not set); builder.gc: BuildKit's cache kept under 20GB "
            "(other keys kept: debug)") in said, said
    assert sh(debian_root, "cat /fake/starts")[1] == "on\n"  # started once, with the store on
    code, said = sh(debian_root, "python3 -c 'import json; print(json.load(open(\"/fake/daemon.json\")))'")
    assert said.strip() == ("{'features': {'buildkit': True, 'containerd-snapshotter': True}, 'debug': False, "
                            "'builder': {'gc': {'enabled': True, 'defaultKeepStorage': '20GB'}}}"), said


def test_engine_bad_input_is_one_line(fake_engine):
    debian_root = fake_engine
    sh(debian_root, STOP_FAKE + "rm -f /fake/state; printf '{\"features\": ' >/fake/daemon.json")
    for command, words in (
            ("bash scripts/setup-engine.sh", "/fake/daemon.json is not JSON"),
            ("ASCEND_IMAGES_ENGINE_RESTART=yes bash scripts/setup-engine.sh", "ASCEND_IMAGES_ENGINE_RESTART is 'yes'"),
            ("bash scripts/setup-engine.sh --start", "unknown argument '--start'")):
        code, said = sh(debian_root, FAKE_ENV + command + " 2>&1")
        errors = [line for line in said.splitlines() if line.startswith("setup-engine:")]
        assert code == 1 and len(errors) == 1 and words in errors[0], said
        assert "Traceback" not in said
    assert sh(debian_root, "pidof dockerd")[0] != 0  # nothing started on bad input
