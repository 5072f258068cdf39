"""`run --print` prints only lines Docker, Compose and Kubernetes read as meant (issue 54, item 4), for generated flag
values: spaces, quotes, `$`, unicode, edge sizes in --env, -v, -w, --name, -p, --shm-size and the command after
`--`. Each value goes through the command line (ascend-images' Program, in this process), and what each output
means is read back here by rules written from the tools' own documentation, never by the code that printed it:

- the docker line, split as a shell splits it (line continuations removed, then shlex), read as `docker run` reads
  its flags (docs.docker.com/reference/cli/docker/container/run), must mean what the SDK call for the same spec means
  (docker-py's containers.create arguments, read as docker-py reads them);
- the compose service (yaml.safe_load, then Compose's interpolation: `$$` is `$`) and the Kubernetes manifest (the
  kubelet's `$(VAR)` expansion) must mean the same env, mounts, ports, command and working directory.

The one difference by design: the docker line's `-it` gives a user who types it a terminal; the SDK path streams the
container's output instead (both remove the container after: `--rm`, and run_container's own removal)."""

from __future__ import annotations

import re
import shlex
import string
import sys
from dataclasses import dataclass, field

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ascend_images.runtime import run as run_module
from tests.unit.inprocess import run_ascend_images
from tests.unit.test_run_k8s import kubernetes_expand, validate

IMAGE = "registry.example:5000/team/sglang:0.5.10-a3"
# every device's passthrough (a5: no devmm_svm, its UB device directories and hccl_rootinfo.json when the host has
# them, here a prepared host tree that has them)
DEVICES = ["a2", "a3", "a5"]
SETTINGS = settings(max_examples=60, deadline=None, derandomize=True,
                    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])


# --- what each output means, by the tools' own rules -----------------------------------------------------------------
@dataclass
class Meaning:
    image: str = ""
    command: list[str] = field(default_factory=list)
    env: dict[str, str] = field(default_factory=dict)
    binds: set[tuple[str, str, bool]] = field(default_factory=set)  # host, container, read-only
    devices: set[tuple[str, str]] = field(default_factory=set)
    ports: set[tuple[int, str, str, int | None]] = field(default_factory=set)  # container, proto, host ip, host port
    name: str | None = None
    workdir: str | None = None
    shm_bytes: int | None = None


UNITS = {"": 1, "k": 1024, "m": 1024**2, "g": 1024**3, "t": 1024**4, "p": 1024**5}


def ram_in_bytes(text: str) -> int:
    """go-units RAMInBytes (Docker's and Compose's reading of a size): binary units, an optional space, i and b."""
    match = re.fullmatch(r"(\d+(?:\.\d+)*) ?([kKmMgGtTpP])?[iI]?[bB]?", text)
    assert match, text
    return int(float(match[1]) * UNITS[(match[2] or "").lower()])


def docker_ports(spec: str) -> set[tuple[int, str, str, int | None]]:
    """One -p value as Docker reads it (nat.ParsePortSpec): [[IP:][HOST]:]CONTAINER[/PROTO], ranges of equal length,
    an IPv6 address in brackets."""
    body, _, proto = spec.rpartition("/") if "/" in spec else (spec, "", "tcp")
    parts = body.split(":")
    container, host = parts[-1], parts[-2] if len(parts) > 1 else ""
    ip = ":".join(parts[:-2]).strip("[]")

    def span(text: str) -> list[int]:
        first, _, last = text.partition("-")
        return list(range(int(first), int(last or first) + 1))

    containers = span(container)
    hosts = span(host) if host else [None] * len(containers)
    return {(c, proto, ip, h) for c, h in zip(containers, hosts, strict=True)}


def read_docker_line(line: str) -> tuple[Meaning, list[str]]:
    """A printed `docker run` line as the shell and Docker read it; also the attach flags (--rm, -it, -d)."""
    argv = shlex.split(line.replace("\\\n", ""))  # POSIX sh: a backslash-newline is removed, then words split
    assert argv[:2] == ["docker", "run"], argv
    meaning, attach, i = Meaning(), [], 2
    with_value = {"--name", "--restart", "--shm-size", "--device", "-v", "-p", "--workdir", "-e"}
    while i < len(argv) and argv[i].startswith("-"):
        flag, value = argv[i], argv[i + 1] if i + 1 < len(argv) else None
        if flag in with_value:
            i += 2
        else:
            i += 1
        if flag in ("--rm", "-it", "-d"):
            attach.append(flag)
        elif flag == "--name":
            meaning.name = value
        elif flag == "--shm-size":
            meaning.shm_bytes = ram_in_bytes(value)
        elif flag == "--device":  # HOST[:CONTAINER[:PERMS]], the container path the host's when left out
            host, _, rest = value.partition(":")
            meaning.devices.add((host, rest.partition(":")[0] or host))
        elif flag == "-v":
            host, container, *mode = value.split(":")
            meaning.binds.add((host, container, mode == ["ro"]))
        elif flag == "-p":
            meaning.ports |= docker_ports(value)
        elif flag == "--workdir":
            meaning.workdir = value
        elif flag == "-e":
            key, _, env_value = value.partition("=")
            meaning.env[key] = env_value
    meaning.image, meaning.command = argv[i], argv[i + 1:]
    return meaning, attach


def read_sdk_call(kwargs: dict) -> Meaning:
    """docker-py's containers.create arguments as docker-py hands them to the engine (models/containers.py,
    utils/ports.py): devices HOST:CONTAINER:PERMS, volumes as bind strings, ports {CONTAINER/PROTO: host bindings}
    where a binding is a port, None (Docker picks), or (IP, port or None)."""
    meaning = Meaning(image=kwargs["image"], command=list(kwargs.get("command") or []),
                      env=dict(kwargs["environment"]), name=kwargs.get("name"), workdir=kwargs.get("working_dir"),
                      shm_bytes=kwargs["shm_size"] if isinstance(kwargs["shm_size"], int) else None)
    for device in kwargs.get("devices", []):
        host, container, _ = device.split(":")
        meaning.devices.add((host, container))
    for bind in kwargs.get("volumes", []):
        host, container, *mode = bind.split(":")
        meaning.binds.add((host, container, mode == ["ro"]))
    for key, bindings in kwargs.get("ports", {}).items():
        port, proto = key.split("/")
        for binding in bindings if isinstance(bindings, list) else [bindings]:
            ip, host = binding if isinstance(binding, tuple) else ("", binding)
            meaning.ports.add((int(port), proto, ip, host))
    return meaning


def compose_unescape(text: str) -> str:
    """Compose's interpolation of a string with no variable left in it: `$$` is a literal `$`."""
    assert re.search(r"(?<!\$)\$(?!\$)", text.replace("$$", "")) is None, f"an unescaped $ in {text!r}"
    return text.replace("$$", "$")


def read_compose(text: str) -> Meaning:
    service = yaml.safe_load(text)["services"]["ascend"]

    def unescaped(value):
        if isinstance(value, str):
            return compose_unescape(value)
        if isinstance(value, list):
            return [unescaped(v) for v in value]
        if isinstance(value, dict):
            return {k: unescaped(v) for k, v in value.items()}
        return value

    service = unescaped(service)
    meaning = Meaning(image=service["image"], command=service.get("command", []),
                      env={k: str(v) for k, v in service["environment"].items()}, name=service.get("container_name"),
                      workdir=service.get("working_dir"), shm_bytes=ram_in_bytes(str(service["shm_size"])))
    for device in service.get("devices", []):
        host, container = device.split(":")
        meaning.devices.add((host, container))
    for bind in service.get("volumes", []):
        host, container, *mode = bind.split(":")
        meaning.binds.add((host, container, mode == ["ro"]))
    for port in service.get("ports", []):
        meaning.ports |= docker_ports(port)
    return meaning


def k8s_quantity(text: str) -> int:
    """A Kubernetes quantity in binary suffixes or plain bytes (resource.Quantity)."""
    match = re.fullmatch(r"(\d+)(Ki|Mi|Gi|Ti|Pi)?", text)
    assert match, text
    return int(match[1]) * {None: 1, "Ki": 1024, "Mi": 1024**2, "Gi": 1024**3, "Ti": 1024**4, "Pi": 1024**5}[match[2]]


def read_k8s(text: str) -> Meaning:
    pod = yaml.safe_load(text)["spec"]
    (container,) = pod["containers"]
    defined: dict[str, str] = {}
    for item in container["env"]:  # the kubelet expands each value over those defined before it
        defined[item["name"]] = kubernetes_expand(item["value"], defined)
    meaning = Meaning(image=container["image"], command=[kubernetes_expand(a, defined) for a in container.get("args",
                                                                                                             [])],
                      env=defined, workdir=container.get("workingDir"))
    volumes = {v["name"]: v for v in pod["volumes"]}
    for mount in container["volumeMounts"]:
        volume = volumes[mount["name"]]
        if "emptyDir" in volume:
            assert mount["mountPath"] == "/dev/shm"
            meaning.shm_bytes = k8s_quantity(volume["emptyDir"]["sizeLimit"])
        else:
            meaning.binds.add((volume["hostPath"]["path"], mount["mountPath"], mount.get("readOnly", False)))
    for port in container.get("ports", []):  # the container's side only: a Service exposes it
        meaning.ports.add((port["containerPort"], port["protocol"].lower(), "", None))
    return meaning


# --- generated flag values -----------------------------------------------------------------------------------------
NASTY = [" ", "'", '"', "$", "$HOME", "$(id)", "${X}", "$$", "\\", "`", ";", "&&", "#", "é", "名字", "\u00a0", "*", "~",
         "!", "-", "--", "a=b", "%", "{}", "\t"]
# any text but control characters and line or paragraph separators (an --env value is one line: refused otherwise)
word = st.one_of(st.sampled_from(NASTY),
                 st.text(st.characters(blacklist_categories=("Cs", "Cc", "Zl", "Zp")), max_size=12))
path_part = word.map(lambda w: w.replace("/", "").replace(":", "").replace("\t", "")).filter(
    lambda w: w not in ("", ".", ".."))
path = st.lists(path_part, min_size=1, max_size=3).map(lambda parts: "/" + "/".join(parts))
env_key = st.from_regex(r"[A-Za-z_][A-Za-z0-9_]{0,15}", fullmatch=True).filter(
    lambda k: k not in ("ASCEND_RT_VISIBLE_DEVICES", *run_module.RAY_VARS))
env_value = word.map(lambda w: w.replace("\t", " "))
port_number = st.integers(1, 65535)
docker_name = st.from_regex(r"[a-zA-Z0-9][a-zA-Z0-9_.-]{0,40}", fullmatch=True)


@st.composite
def publish(draw) -> str:
    container = draw(port_number)
    count = draw(st.integers(1, 3)) if container <= 65533 else 1

    def span(first: int) -> str:
        return f"{first}-{first + count - 1}" if count > 1 else str(first)

    proto = draw(st.sampled_from(["", "/tcp", "/udp", "/sctp"]))
    form = draw(st.sampled_from(["container", "host", "ip-host", "ip-any", "ipv6"]))
    host = draw(st.integers(1, 65535 - count + 1))
    return {"container": f"{span(container)}{proto}", "host": f"{span(host)}:{span(container)}{proto}",
            "ip-host": f"127.0.0.1:{span(host)}:{span(container)}{proto}",
            "ip-any": f"127.0.0.1::{span(container)}{proto}",
            "ipv6": f"[::1]:{span(host)}:{span(container)}{proto}"}[form]


@st.composite
def run_flags(draw) -> tuple[list[str], list[str]]:
    flags: list[str] = []
    for key, value in draw(st.dictionaries(env_key, env_value, max_size=3)).items():
        flags += ["--env", f"{key}={value}"]
    targets = draw(st.lists(path, max_size=3, unique=True).filter(
        lambda ts: not any(t.startswith(("/dev", "/usr/local", "/etc")) for t in ts)))
    for target in targets:
        flags += ["-v", f"{draw(path)}:{target}{draw(st.sampled_from(['', ':ro', ':rw']))}"]
    taken: set[tuple[str, int, str]] = set()
    for port in draw(st.lists(publish(), max_size=3)):
        bindings = {(ip, host, proto) for _, proto, ip, host in docker_ports(port) if host is not None}
        if not bindings & taken:  # a host port given twice is refused: tested apart
            taken |= bindings
            flags += ["-p", port]
    if draw(st.booleans()):
        flags += ["-w", draw(path)]
    if draw(st.booleans()):
        flags += ["--name", draw(docker_name)]
    size = draw(st.one_of(st.sampled_from(["1", "64m", "16g", "1.5g", "16GiB", "2 g", "1t", "512k"]),
                          st.integers(1, 2**40).map(str)))
    flags += ["--shm-size", size]
    command = draw(st.lists(word, max_size=4))
    flags += ["--device", draw(st.sampled_from(DEVICES))]
    return flags, command


@pytest.fixture(scope="module")
def host_root(tmp_path_factory):
    root = tmp_path_factory.mktemp("host")
    for directory in ("dev/ummu", "dev/uburma", "etc"):
        (root / directory).mkdir(parents=True)
    (root / "etc/hccl_rootinfo.json").write_text("{}\n")
    return root


def printed(flags: list[str], command: list[str], fmt: str, monkeypatch, host_root) -> tuple[int, str, str, object]:
    """`ascend-images run --print` in this process, with the spec it printed (what the SDK path would be given)."""
    argv = ["run", "--print", "--format", fmt, "--image", IMAGE, "--devices", "0-1", "--host-root", str(host_root),
            *flags, "--", *command]
    seen = {}
    original = run_module.docker_run_line
    monkeypatch.setattr(run_module, "docker_run_line", lambda spec: seen.setdefault("spec", spec) and original(spec))
    monkeypatch.setattr(sys, "argv", ["ascend-images", *argv])  # the command after -- is read from the argv
    code, out, err = run_ascend_images(argv)
    return code, out, err, seen.get("spec")


@SETTINGS
@given(case=run_flags())
def test_the_docker_line_means_what_the_sdk_call_means(case, monkeypatch, host_root):
    flags, command = case
    code, out, err, spec = printed(flags, command, "docker", monkeypatch, host_root)
    assert code == 0, (flags, command, err)
    line, attach = read_docker_line(out)
    sdk = read_sdk_call(run_module.docker_kwargs(spec))
    assert line == sdk
    assert line.image == IMAGE and line.command == command
    assert attach == ["--rm", "-it"]  # a foreground run; both remove the container after


@SETTINGS
@given(case=run_flags())
def test_compose_and_kubernetes_mean_what_the_docker_line_means(case, monkeypatch, host_root):
    flags, command = case
    code, out, err, _ = printed(flags, command, "docker", monkeypatch, host_root)
    assert code == 0, err
    docker, _ = read_docker_line(out)
    code, out, err, _ = printed(flags, command, "compose", monkeypatch, host_root)
    assert code == 0, err
    assert read_compose(out) == docker
    name = next((flags[i + 1] for i, f in enumerate(flags) if f == "--name"), None)
    code, out, err, _ = printed(flags, command, "k8s", monkeypatch, host_root)
    if name is not None and not re.fullmatch(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?", name):
        # a container name Docker takes and Kubernetes does not: refused, never changed into another
        assert code == 2 and err.startswith(f"error: --name {name!r} is not a Kubernetes name"), err
        return
    assert code == 0, err
    validate(yaml.safe_load(out))  # Kubernetes' own schema, strict
    k8s = read_k8s(out)
    assert k8s.env == {k: v for k, v in docker.env.items() if k != "ASCEND_VISIBLE_DEVICES"}
    assert k8s.command == docker.command and k8s.workdir == docker.workdir and k8s.shm_bytes == docker.shm_bytes
    driver = {b for b in docker.binds if b[1].startswith(("/usr/local", "/etc"))}
    assert k8s.binds == docker.binds and driver  # the driver and tool mounts travel too
    assert k8s.ports == {(c, proto, "", None) for c, proto, _, _ in docker.ports}


# --- what Docker refuses is refused, in one line naming the flag ----------------------------------------------------
@pytest.mark.parametrize(("flags", "start"), [
    (["--image", "Team/SGLang:1"], "error: --image 'Team/SGLang:1': not an image reference Docker accepts: 'SGLang'"),
    (["--image", "sglang:-bad"], "error: --image 'sglang:-bad': not an image reference Docker accepts: a tag"),
    (["--image", "sglang:" + "t" * 129], "error: --image 'sglang:ttt"),
    (["--image", "repo@sha256:abc"], "error: --image 'repo@sha256:abc': not an image reference Docker accepts: a "
                                     "sha256 digest is 64 lowercase hex digits"),
    (["--image", "repo@md5:" + "a" * 32], "error: --image 'repo@md5:"),
    (["--image", "a//b"], "error: --image 'a//b': not an image reference Docker accepts: '' is not"),
    (["--image", "host:port/x"], "error: --image 'host:port/x': not an image reference Docker accepts: the port of"),
    (["--image", "x y"], "error: --image 'x y': not an image reference"),
    (["--image=-rm"], "error: --image '-rm': not an image reference"),
    (["-v", "/data:/"], "error: --volume '/data:/': the container path cannot be /"),
    (["-v", "/data:///"], "error: --volume '/data:///': the container path cannot be /"),
    (["-v", "/data:models"], "error: --volume '/data:models': the container path 'models' must be absolute"),
    (["-v", "/data:/a/../etc"], "error: --volume '/data:/a/../etc': the container path '/a/../etc' holds '..'"),
    (["-p", "8000-8010:80"], "error: --publish '8000-8010:80': a host port range for one container port"),
    (["-p", "80:80/icmp"], "error: --publish '80:80/icmp': protocol 'icmp'"),
    (["-p", "[::1:80:80"], "error: --publish '[::1:80:80': '[::1' opens a bracket"),
    (["--shm-size", "0"], "error: --shm-size '0': give a size above 0"),
    (["--shm-size", "99999999999p"], "error: --shm-size '99999999999p': give a size above 0 and below 8 EiB"),
], ids=["uppercase", "tag-dash", "tag-long", "digest-short", "digest-md5", "empty-component", "port-word", "space",
        "dash", "root", "root-slashes", "relative", "dotdot", "host-range", "icmp", "ipv6-open", "shm-0", "shm-huge"])
def test_what_docker_refuses_is_refused(flags, start):
    argv = ["run", "--print", "--device", "a3", "--devices", "0-1", *flags]
    if not any(f.startswith("--image") for f in flags):
        argv += ["--image", IMAGE]
    code, out, err = run_ascend_images(argv)
    assert code == 2 and out == "" and err.startswith(start) and err.count("\n") == 1, err


@pytest.mark.parametrize("image", ["sglang", "ascend-images/sglang:0.5.10", "localhost/x", "localhost:5000/a/b:c",
                                   "127.0.0.1:5000/x", "[::1]:5000/x:1", "Registry.Example/x", "a__b/c-d.e",
                                   "x@sha256:" + "0" * 64, "x:" + "t" * 128, "a.b.c/d/e/f:v1.0_rc-2"])
def test_what_docker_takes_is_taken(image):
    code, out, err = run_ascend_images(["run", "--print", "--format", "docker", "--device", "a3", "--devices", "0-1",
                                        "--image", image, "-q"])
    assert code == 0 and out.rstrip().endswith(shlex.quote(image)), err


def test_the_strategies_reach_the_nasty_values():
    """The generated values do hold what the test is about (not only letters)."""
    assert set(string.punctuation) & set("".join(NASTY)) >= {"'", '"', "$", "\\", "`"}
