"""`invoke run --print --format k8s`: the Pod (or Deployment) is valid for Kubernetes 1.30 (kubernetes-validate's
bundled schemas, offline, strict: unknown fields fail), asks the Ascend device plugin for the NPUs, and carries
the mounts, env and ports the docker line carries for the same flags."""

from __future__ import annotations

import kubernetes_validate
import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from ascend_images.cli.options import RunFlags, Selection
from ascend_images.cli.run import run_image
from ascend_images.runtime.k8s import k8s_manifest, k8s_yaml, shm_quantity, workload_name
from ascend_images.runtime.run import RunSpec, docker_kwargs, docker_run_line
from ascend_images.runtime.runflags import Port, RunError, Volume
from tests.conftest import ROOT

K8S_VERSION = "1.30.0"
RESOURCE = "huawei.com/Ascend910"  # Ascend/mind-cluster's docs, for A2 and A3 alike (matrix.yaml's comment)

SPEC = RunSpec("ascend-images/sglang:0.5.10-cann8.5.0-a3-debian12-py3.11-arm64",
               ("python", "-m", "sglang.launch_server", "--model-path", "/models/qwen", "--port", "30000"), (2, 3),
               volumes=(Volume("/data/models", "/models", True), Volume("/data/cache", "/root/.cache")),
               ports=(Port(30000, 30000, "tcp", "127.0.0.1"), Port(30001, 30001, "udp")),
               detach=True, restart="unless-stopped", workdir="/srv", shm_size="64g", ipc_host=True,
               env={"SGLANG_LOG_LEVEL": "info"}, name="sglang-serve")


def validate(manifest: dict) -> None:
    kubernetes_validate.validate(manifest, K8S_VERSION, strict=True)


def pod_of(manifest: dict) -> dict:
    return manifest["spec"]["template"]["spec"] if manifest["kind"] == "Deployment" else manifest["spec"]


def binds_of(pod: dict) -> set[tuple[str, str, bool]]:
    """(host path, container path, read-only) of every hostPath mount."""
    volumes = {v["name"]: v for v in pod["volumes"]}
    return {(volumes[m["name"]]["hostPath"]["path"], m["mountPath"], m.get("readOnly", False))
            for m in pod["containers"][0]["volumeMounts"] if "hostPath" in volumes[m["name"]]}


def docker_binds(spec: RunSpec) -> set[tuple[str, str, bool]]:
    out = set()
    for bind in docker_kwargs(spec)["volumes"]:
        host, container, *mode = bind.split(":")
        out.add((host, container, mode == ["ro"]))
    return out


@pytest.mark.parametrize("replicas", [0, 2])
def test_the_printed_manifest_is_valid_kubernetes(replicas):
    text = k8s_yaml(SPEC, RESOURCE, replicas)
    assert text.startswith("# ") and "ASCEND_VISIBLE_DEVICES" in text.split("apiVersion")[0]
    manifest = yaml.safe_load(text)
    assert manifest["kind"] == ("Deployment" if replicas else "Pod")
    validate(manifest)


def test_the_pod_carries_what_the_docker_line_carries():
    pod = pod_of(k8s_manifest(SPEC, RESOURCE))
    container = pod["containers"][0]
    line = docker_run_line(SPEC)
    # mounts: the driver and tools (read-only) and each --volume, the same (host, container, mode) as -v
    assert binds_of(pod) == docker_binds(SPEC)
    for host, target, read_only in binds_of(pod):
        assert f"-v {host}:{target}{':ro' if read_only else ''} \\\n" in line
    # env: the docker line's, word for word (manual mode)
    assert {e["name"]: e["value"] for e in container["env"]} == docker_kwargs(SPEC)["environment"]
    for env in container["env"]:
        assert f"-e {env['name']}={env['value']} \\\n" in line
    # ports: each --publish's container side; command, workdir, shm, ipc, restart
    assert {(p["containerPort"], p["protocol"]) for p in container["ports"]} == \
        {(p.container_port, p.protocol.upper()) for p in SPEC.ports}
    assert container["args"] == list(SPEC.command) and "command" not in container  # the entrypoint stays
    assert container["workingDir"] == SPEC.workdir
    assert {"name": "shm", "emptyDir": {"medium": "Memory", "sizeLimit": "64Gi"}} in pod["volumes"]
    assert {"name": "shm", "mountPath": "/dev/shm"} in container["volumeMounts"]
    assert pod["hostIPC"] is True and pod["restartPolicy"] == "Always"


def test_hand_written_expectations():
    manifest = k8s_manifest(SPEC, RESOURCE)
    pod = manifest["spec"]
    container = pod["containers"][0]
    assert manifest["metadata"]["name"] == "sglang-serve" and container["name"] == "sglang-serve"
    assert container["resources"] == {"limits": {"huawei.com/Ascend910": 2}, "requests": {"huawei.com/Ascend910": 2}}
    # two NPUs: the whole driver tree, read-only, from the same host path
    assert {"name": "usr-local-ascend-driver", "mountPath": "/usr/local/Ascend/driver", "readOnly": True} \
        in container["volumeMounts"]
    assert {"name": "usr-local-ascend-driver", "hostPath": {"path": "/usr/local/Ascend/driver", "type": "Directory"}} \
        in pod["volumes"]
    assert {"name": "volume-models", "mountPath": "/models", "readOnly": True} in container["volumeMounts"]
    assert {"name": "volume-models", "hostPath": {"path": "/data/models"}} in pod["volumes"]
    assert {"name": "volume-root-cache", "mountPath": "/root/.cache"} in container["volumeMounts"]  # rw
    assert container["env"] == [{"name": "ASCEND_RT_VISIBLE_DEVICES", "value": "0,1"},
                                {"name": "SGLANG_LOG_LEVEL", "value": "info"}]
    assert container["ports"] == [{"containerPort": 30000, "protocol": "TCP"},
                                  {"containerPort": 30001, "protocol": "UDP"}]
    assert "ASCEND_VISIBLE_DEVICES" in manifest["metadata"]["annotations"]["ascend-images/npu-devices"]


def test_runtime_mode_leaves_the_device_list_and_the_driver_to_the_node():
    spec = RunSpec("img/x:1", devices=(0, 1, 3), mode="runtime", volumes=(Volume("/m", "/models", True),))
    pod = pod_of(k8s_manifest(spec, RESOURCE))
    env = {e["name"]: e["value"] for e in pod["containers"][0]["env"]}
    assert docker_kwargs(spec)["environment"]["ASCEND_VISIBLE_DEVICES"] == "0,1,3"
    assert "ASCEND_VISIBLE_DEVICES" not in env and env["ASCEND_RT_VISIBLE_DEVICES"] == "0,1,2"
    assert binds_of(pod) == docker_binds(spec) == {("/m", "/models", True)}
    validate(k8s_manifest(spec, RESOURCE))


def test_deployment():
    manifest = k8s_manifest(SPEC, RESOURCE, replicas=3)
    assert manifest["apiVersion"] == "apps/v1" and manifest["spec"]["replicas"] == 3
    assert manifest["spec"]["selector"]["matchLabels"] == manifest["spec"]["template"]["metadata"]["labels"]
    assert pod_of(manifest)["restartPolicy"] == "Always"
    assert "&id" not in k8s_yaml(SPEC, RESOURCE, 3)  # no YAML aliases: each label map is its own
    with pytest.raises(RunError, match="--restart on-failure:2 with --replicas: a Deployment's pods always restart"):
        k8s_manifest(RunSpec("img", devices=(0,), detach=True, restart="on-failure:2"), RESOURCE, replicas=1)


@pytest.mark.parametrize(("restart", "policy"), [(None, "Never"), ("no", "Never"), ("on-failure:3", "OnFailure"),
                                                 ("always", "Always"), ("unless-stopped", "Always")])
def test_restart_policy_of_a_pod(restart, policy):
    spec = RunSpec("img", devices=(0,), detach=restart is not None, restart=restart)
    assert pod_of(k8s_manifest(spec, RESOURCE))["restartPolicy"] == policy


def test_names_and_sizes():
    assert workload_name(RunSpec("ascend-images/vllm-ascend:0.18.0-cann8.5.1", devices=(0,))) == "ascend-vllm-ascend"
    with pytest.raises(RunError, match="--name 'My_Server' is not a Kubernetes name: .*e.g. my-server"):
        workload_name(RunSpec("img", devices=(0,), name="My_Server"))
    assert [shm_quantity(s) for s in ("16g", "64m", "512k", "2GiB", "1024")] == ["16Gi", "64Mi", "512Ki", "2Gi", "1024"]
    assert shm_quantity("1.5g") == str(3 * 1024**3 // 2)
    with pytest.raises(RunError, match="--shm-size 'lots'"):
        shm_quantity("lots")


# --- the validator bites: purpose-broken manifests fail ------------------------------------------------------
def broken(change) -> dict:
    manifest = k8s_manifest(SPEC, RESOURCE)
    change(manifest["spec"])
    return manifest


@pytest.mark.parametrize("change", [
    lambda pod: pod["containers"][0].update(volumeMount=[]),  # a misspelt field (strict)
    lambda pod: pod["containers"][0]["ports"][0].update(containerPort="thirty thousand"),  # a wrong type
    lambda pod: pod["volumes"][0]["hostPath"].pop("path"),  # a required field gone
    lambda pod: pod.update(hostIPC="yes"),
], ids=["unknown-field", "wrong-type", "missing-required", "string-for-bool"])
def test_the_validator_rejects_a_broken_manifest(change):
    with pytest.raises(kubernetes_validate.ValidationError):
        validate(broken(change))


# --- through run_image, as `invoke run --print --format k8s` calls it: the matrix's resource name -------------
def printed(sel: Selection, flags: RunFlags, image: str | None = None) -> str:
    lines: list[str] = []
    assert run_image(sel, flags, lines.append, image=image, command=["python", "-m", "http.server", "8000"],
                     print_only=True) == 0
    return "\n".join(lines)


@pytest.mark.parametrize("device", ["a2", "a3"])
def test_run_image_prints_the_matrix_resource(device, tmp_path):
    assert RunFlags.format == "docker,compose"  # --print alone prints what it printed before --format
    sel = Selection(matrix=str(ROOT / "matrix.yaml"), device=device, backend="sglang")
    flags = RunFlags(devices="0-1", volumes=[f"{tmp_path}:/models:ro"], publish=["127.0.0.1:18000:8000"],
                     detach=True, restart="unless-stopped", workdir="/srv", format="k8s", replicas=1)
    manifest = yaml.safe_load(printed(sel, flags))
    validate(manifest)
    container = pod_of(manifest)["containers"][0]
    assert container["resources"]["limits"] == {"huawei.com/Ascend910": 2}
    assert {"name": "volume-models", "mountPath": "/models", "readOnly": True} in container["volumeMounts"]
    assert container["ports"] == [{"containerPort": 8000, "protocol": "TCP"}]
    assert container["args"] == ["python", "-m", "http.server", "8000"]


def test_run_image_needs_a_device_for_an_image_ref(capsys):
    sel = Selection(matrix=str(ROOT / "matrix.yaml"))
    with pytest.raises(RunError, match="--format k8s needs the device plugin's resource name"):
        printed(sel, RunFlags(format="k8s"), image="some/image:tag")
    manifest = yaml.safe_load(printed(Selection(matrix=str(ROOT / "matrix.yaml"), device="a3"),
                                      RunFlags(format="k8s"), image="some/image:tag"))
    assert pod_of(manifest)["containers"][0]["resources"]["limits"] == {"huawei.com/Ascend910": 1}
    capsys.readouterr()
    # the warning (an A3 run on one NPU) goes to stderr: the output stays one YAML document
    manifest_text = printed(Selection(matrix=str(ROOT / "matrix.yaml"), device="a3"), RunFlags(format="k8s"),
                            image="some/image:tag")
    assert "warning" not in manifest_text
    assert "warning: an a3 run with fewer than 2 devices" in capsys.readouterr().err


@pytest.mark.parametrize(("flags", "message"), [
    (RunFlags(format="helm"), "--format 'helm': valid: docker, compose, k8s"),
    (RunFlags(replicas=2), "--replicas 2: a Deployment of N >= 1 pods, for --print --format k8s"),
    (RunFlags(format="k8s", replicas=-1), "--replicas -1"),
])
def test_format_flags_are_checked(flags, message):
    with pytest.raises(RunError, match=message.replace("[", "\\[")):
        printed(Selection(matrix=str(ROOT / "matrix.yaml"), device="a3", backend="sglang"), flags)


def kubernetes_expand(text: str, defined: dict[str, str]) -> str:
    """What the kubelet makes of an env value or arg, written from Kubernetes' own rules
    (third_party/forked/golang/expansion/expand.go): `$$` is `$`; `$(NAME)` is NAME's value when NAME is defined
    (left as written otherwise); an unclosed `$(` and a `$` before anything else stay as they are."""
    out, i = [], 0
    while i < len(text):
        if text[i] != "$" or i + 1 == len(text):
            out.append(text[i])
            i += 1
        elif text[i + 1] == "$":
            out.append("$")
            i += 2
        elif text[i + 1] == "(" and ")" in text[i + 2:]:
            end = text.index(")", i + 2)
            name = text[i + 2:end]
            out.append(defined.get(name, f"$({name})"))
            i = end + 1
        else:
            out.append(text[i])
            i += 1
    return "".join(out)


def test_the_expander_matches_kubernetes_documented_cases():
    # the cases Kubernetes' documentation gives (Define dependent environment variables), by hand
    assert kubernetes_expand("$(HOME)/x", {"HOME": "/root"}) == "/root/x"
    assert kubernetes_expand("$$(HOME)/x", {"HOME": "/root"}) == "$(HOME)/x"
    assert kubernetes_expand("$(UNSET)", {}) == "$(UNSET)"
    assert kubernetes_expand("a$$b", {}) == "a$b"
    assert kubernetes_expand("cost 5$", {}) == "cost 5$"


@settings(max_examples=300, deadline=None)
@given(typed=st.text(alphabet="$()ABC x", max_size=20))
def test_what_the_user_typed_reaches_the_container(typed):
    """Whatever the user typed with --env and after `--`, the kubelet hands the container exactly that."""
    spec = RunSpec("repo/img:tag", ("echo", typed), (0,), env={"X": typed})
    container = yaml.safe_load(k8s_yaml(spec, "huawei.com/Ascend910"))["spec"]["containers"][0]
    defined = {e["name"]: e["value"] for e in container["env"]}
    env = {e["name"]: kubernetes_expand(e["value"], defined) for e in container["env"]}
    assert env["X"] == typed
    assert [kubernetes_expand(a, defined) for a in container["args"]] == ["echo", typed]
