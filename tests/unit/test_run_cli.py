"""The task layer's flags as `invoke` shows and parses them: no option takes help's `-h` or renders as
`--=STRING` (invoke's short flag when every letter of a name is taken), and `invoke run`'s serving flags, in
Docker's spelling, reach the printed docker line, compose service and Kubernetes manifest."""

from __future__ import annotations

import importlib.util
import json
import re
import subprocess
import sys

import kubernetes_validate
import pytest
import yaml

from tests.conftest import ROOT


def invoke(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "invoke", *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=120)


def task_names() -> list[str]:
    from invoke import Collection

    spec = importlib.util.spec_from_file_location("ascend_images_tasks", ROOT / "tasks.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return sorted(Collection.from_module(module).task_names)


TASKS = task_names()
OPTION = re.compile(r"^  (-\S.*?)(?:\s{2,}|$)")  # an option line of `invoke --help TASK`: its flags column


def options(help_text: str) -> list[str]:
    return [m[1] for line in help_text.splitlines() if (m := OPTION.match(line))]


def test_every_task_is_checked():
    listed = json.loads(invoke("--list", "--list-format=json").stdout)
    assert sorted(t["name"] for t in listed["tasks"]) == TASKS
    assert {"run", "build", "bench", "fetch", "render", "test"} <= set(TASKS)


@pytest.mark.parametrize("task", TASKS)
def test_no_option_takes_h_or_renders_as_a_bare_dash(task):
    result = invoke("--help", task)
    assert result.returncode == 0, result.stderr
    flags = options(result.stdout)
    assert flags, result.stdout
    assert not [f for f in flags if re.match(r"-h[ ,]|-h$", f)], f"-h is help's:\n{result.stdout}"
    assert not [f for f in flags if f.startswith("--=")], f"an option rendered as --=:\n{result.stdout}"


def test_run_speaks_dockers_short_flags():
    flags = options(invoke("--help", "run").stdout)
    for want in ("-v, --volume", "-p, --publish", "-w STRING, --workdir=STRING", "-e, --env", "--detach",
                 "--restart=STRING", "--devices=STRING", "--host-root=STRING", "--python=STRING",
                 "--format=STRING", "--replicas=STRING", "--driver-mounts=STRING"):
        assert want in flags, (want, flags)
    # the selection's letters stay (-d device); --print and --shm-size have none (flags.SHORT_FLAGS)
    assert "-d STRING, --device=STRING" in flags and "--print" in flags and "--shm-size=STRING" in flags


SERVE = ["python", "-m", "http.server", "8000", "--directory", "/models"]


def test_invoke_run_print_carries_the_serving_flags(tmp_path):
    result = invoke("run", "-d", "a3", "-b", "sglang", "--devices", "0-1", "-v", f"{tmp_path}:/models:ro",
                    "--volume", f"{tmp_path}:/cache", "-p", "127.0.0.1:18000:8000", "--publish", "9000:9000/udp",
                    "--detach", "--restart", "unless-stopped", "-w", "/srv", "--print", "--", *SERVE)
    assert result.returncode == 0, result.stderr
    line, compose = result.stdout.split("\n\n", 1)
    assert line.startswith("docker run -d \\\n")
    for part in (f"-v {tmp_path}:/models:ro", f"-v {tmp_path}:/cache", "-p 127.0.0.1:18000:8000", "-p 9000:9000/udp",
                 "--restart unless-stopped", "--workdir /srv", "--device /dev/davinci1"):
        assert f"  {part} \\\n" in line, (part, line)
    assert line.rstrip().endswith("python -m http.server 8000 --directory /models")
    service = yaml.safe_load(compose)["services"]["ascend"]
    assert service["ports"] == ["127.0.0.1:18000:8000", "9000:9000/udp"]
    assert service["volumes"][-2:] == [f"{tmp_path}:/models:ro", f"{tmp_path}:/cache"]
    assert service["restart"] == "unless-stopped" and service["working_dir"] == "/srv"
    assert service["command"] == SERVE


def test_invoke_run_print_format_k8s(tmp_path):
    result = invoke("run", "-d", "a3", "-b", "vllm", "--devices", "0-1", "-v", f"{tmp_path}:/models:ro",
                    "-p", "8000:8000", "--detach", "--restart", "always", "--print", "--format", "k8s",
                    "--replicas", "1", "--", "vllm", "serve", "/models/qwen")
    assert result.returncode == 0, result.stderr
    manifest = yaml.safe_load(result.stdout)
    kubernetes_validate.validate(manifest, "1.30.0", strict=True)
    assert manifest["kind"] == "Deployment" and manifest["spec"]["replicas"] == 1
    container = manifest["spec"]["template"]["spec"]["containers"][0]
    assert container["resources"]["requests"] == {"huawei.com/Ascend910": 2}
    assert container["args"] == ["vllm", "serve", "/models/qwen"]


@pytest.mark.parametrize(("args", "message"), [
    (["-v", "/nonexistent-ascend-images-test:/models:ro"],
     "error: --volume /nonexistent-ascend-images-test:/models:ro: the host path /nonexistent-ascend-images-test "
     "does not exist"),
    (["-v", "/tmp:models"], "error: --volume '/tmp:models': the container path 'models' must be absolute"),
    (["-v", "/tmp:/m:rx"], "error: --volume '/tmp:/m:rx': mode 'rx': only ro (read-only) or rw"),
    (["-p", "70000:80"], "error: --publish '70000:80': port 70000 is outside 1-65535"),
    (["--restart", "always"], "error: --restart always needs --detach"),
    (["--detach", "--restart", "maybe"], "error: --restart 'maybe': valid: no, on-failure[:N], always"),
    (["--workdir", "srv"], "error: --workdir 'srv' must be an absolute path"),
    (["--format", "k8s"], "error: --format k8s has no effect here: it says what --print prints; add --print"),
])
def test_invoke_run_refuses_bad_serving_flags_before_starting(args, message):
    """No engine is asked: each is the flag's own mistake (the missing host path too, checked before starting)."""
    result = invoke("run", "--image", "ascend-images-test/none:never", *args, "--", "true")
    assert result.returncode == 2, result.stdout + result.stderr
    assert message in result.stderr, result.stderr
