"""The Kubernetes form of a run (`invoke run --print --format k8s`): a Pod, or a Deployment with --replicas,
that asks the Ascend device plugin for the NPUs and carries what the docker line carries: the driver and tool
mounts (hostPath, read-only), each --volume, /dev/shm, the environment, the ports, the command, the working
directory and the restart policy.

The device plugin (Ascend/mind-cluster, component/ascend-device-plugin) hands the NPUs out by count under one
resource name per chip (huawei.com/Ascend910 for Atlas A2 and A3; matrix.yaml devices.<d>.k8s_resource), and
under the default scheduler its Allocate answer sets ASCEND_VISIBLE_DEVICES for the Ascend Docker Runtime on
the node (pkg/server/plugin.go setNPUDeviceMount, pkg/common/common.go SetAscendRuntimeEnv). So the manifest
passes no device nodes and no host-side device list; which NPUs a pod gets is the plugin's choice."""

from __future__ import annotations

import re
from typing import Any

import yaml

from ascend_images.runtime.run import DRIVER, RunSpec
from ascend_images.runtime.runflags import RunError, shm_bytes

ANNOTATION = "ascend-images/npu-devices"
# hostPath types of the paths the docker line mounts, so a node without them fails at mount time, not later
HOST_PATH_TYPES = {
    DRIVER: "Directory", f"{DRIVER}/lib64": "Directory", f"{DRIVER}/version.info": "File",
    "/usr/local/dcmi": "Directory", "/usr/local/bin/npu-smi": "File", "/etc/ascend_install.info": "File",
    "/etc/hccn.conf": "File",
}
# docker run --restart -> the pod's restartPolicy; a Deployment's pods always restart
RESTART = {"no": "Never", "on-failure": "OnFailure", "always": "Always", "unless-stopped": "Always"}
DNS_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")


def _label(text: str) -> str:
    """A DNS-1123 label made of `text`: lowercase letters, digits and '-', at most 63."""
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")[:63].strip("-") or "x"


def workload_name(spec: RunSpec) -> str:
    """--name, or the image's repository name (ascend-images/sglang:0.5.10-... -> sglang)."""
    if spec.name:
        if len(spec.name) > 63 or not DNS_LABEL.fullmatch(spec.name):
            raise RunError(f"--name {spec.name!r} is not a Kubernetes name: lowercase letters, digits and '-', "
                           f"at most 63 (e.g. {_label(spec.name)})")
        return spec.name
    repository = spec.image.split("@")[0].rsplit("/", 1)[-1].split(":")[0]
    return _label(f"ascend-{repository}")


def shm_quantity(size: str) -> str:
    """Docker's --shm-size as a Kubernetes quantity: 16g -> 16Gi (both binary), else bytes."""
    match = re.fullmatch(r"(\d+) ?([kKmMgGtTpP])[iI]?[bB]?", size)
    return f"{match[1]}{match[2].upper()}i" if match else str(shm_bytes(size))


def _unique(name: str, taken: set[str]) -> str:
    base, n = name[:58].strip("-"), 2
    while name in taken:
        name, n = f"{base}-{n}", n + 1
    taken.add(name)
    return name


def k8s_escape(text: str) -> str:
    """Kubernetes expands $(VAR) in env values, command and args, and reads `$$` as `$` (a `$` before anything else
    stays). Every `$` doubled is exactly what was typed after that expansion: `$(X)`, `$$` and a lone `$` alike."""
    return text.replace("$", "$$")


def pod_spec(spec: RunSpec, resource: str, *, deployment: bool = False) -> dict[str, Any]:
    name = workload_name(spec)
    count = len(spec.devices)
    mounts: list[dict[str, Any]] = []
    volumes: list[dict[str, Any]] = []
    taken: set[str] = {"shm"}

    def mount(host: str, container: str, read_only: bool, host_type: str | None, prefix: str = "") -> None:
        volume_name = _unique(_label(prefix + container), taken)  # /usr/local/dcmi -> usr-local-dcmi
        mounts.append({"name": volume_name, "mountPath": container, **({"readOnly": True} if read_only else {})})
        host_path: dict[str, Any] = {"path": host}
        if host_type:
            host_path["type"] = host_type
        volumes.append({"name": volume_name, "hostPath": host_path})

    if spec.mode == "manual":  # the runtime mode's Ascend Docker Runtime mounts the driver itself
        for host, container in spec.mounts():
            mount(host, container, True, HOST_PATH_TYPES.get(container))
    for volume in spec.volumes:
        mount(volume.host, volume.container, volume.read_only, None, prefix="volume-")
    mounts.append({"name": "shm", "mountPath": "/dev/shm"})
    volumes.append({"name": "shm", "emptyDir": {"medium": "Memory", "sizeLimit": shm_quantity(spec.shm_size)}})

    # the docker line's environment; the host-side list (runtime mode) is the device plugin's to set
    env = [{"name": k, "value": k8s_escape(v)} for k, v in spec.environment().items()
           if k != "ASCEND_VISIBLE_DEVICES"]
    container: dict[str, Any] = {"name": name, "image": spec.image}
    if spec.command:
        # args, not command: the image's entrypoint (tini, preflight) stays
        container["args"] = [k8s_escape(a) for a in spec.command]
    if spec.workdir:
        container["workingDir"] = spec.workdir
    container["env"] = env
    ports = list(dict.fromkeys((c, p.protocol) for p in spec.ports for c, _ in p.mappings()))
    if ports:
        container["ports"] = [{"containerPort": port, "protocol": proto.upper()} for port, proto in ports]
    container["resources"] = {"limits": {resource: count}, "requests": {resource: count}}
    container["volumeMounts"] = mounts

    pod: dict[str, Any] = {"containers": [container]}
    if deployment:
        if spec.restart and RESTART[spec.restart.partition(":")[0]] != "Always":
            raise RunError(f"--restart {spec.restart} with --replicas: a Deployment's pods always restart "
                           "(restartPolicy Always); use --restart always or unless-stopped, or no --replicas")
        pod["restartPolicy"] = "Always"
    else:
        pod["restartPolicy"] = RESTART[(spec.restart or "no").partition(":")[0]]
    if spec.ipc_host:
        pod["hostIPC"] = True
    if spec.network_host:
        pod["hostNetwork"] = True
        pod["dnsPolicy"] = "ClusterFirstWithHostNet"
    pod["volumes"] = volumes
    return pod


def k8s_manifest(spec: RunSpec, resource: str, replicas: int = 0) -> dict[str, Any]:
    """A Pod, or with replicas a Deployment, for the spec; `resource` is the device plugin's resource name."""
    name = workload_name(spec)

    def labels() -> dict[str, str]:  # a new dict each time: one object thrice would be a YAML alias (&id001)
        return {"app.kubernetes.io/name": name}

    annotations = {ANNOTATION: (
        f"{len(spec.devices)} NPU(s) of {resource}: the Ascend device plugin picks them and sets "
        "ASCEND_VISIBLE_DEVICES for the Ascend Docker Runtime (under Volcano, set it from "
        f"metadata.annotations['{resource}'] as MindCluster's examples do); inside, ASCEND_RT_VISIBLE_DEVICES "
        "numbers them from 0")}
    if not replicas:
        return {"apiVersion": "v1", "kind": "Pod",
                "metadata": {"name": name, "labels": labels(), "annotations": annotations},
                "spec": pod_spec(spec, resource)}
    return {"apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": name, "labels": labels()},
            "spec": {"replicas": replicas, "selector": {"matchLabels": labels()},
                     "template": {"metadata": {"labels": labels(), "annotations": annotations},
                                  "spec": pod_spec(spec, resource, deployment=True)}}}


def k8s_yaml(spec: RunSpec, resource: str, replicas: int = 0) -> str:
    manifest = k8s_manifest(spec, resource, replicas)
    notes = [
        f"# {manifest['kind']} for {spec.image}: {len(spec.devices)} NPU(s) through the Ascend device plugin "
        f"({resource}).",
        "# The plugin chooses the NPUs and sets ASCEND_VISIBLE_DEVICES (see the annotation); no device nodes here.",
    ]
    if spec.ports:
        notes.append("# Ports are the container's; expose them with a Service (docker's host side: "
                     + ", ".join(p.publish() for p in spec.ports) + ").")
    if spec.restart and ":" in spec.restart:
        notes.append(f"# --restart {spec.restart}: Kubernetes has no retry count; OnFailure retries with back-off.")
    return "\n".join(notes) + "\n" + yaml.safe_dump(manifest, sort_keys=False, default_flow_style=False, width=120,
                                                          allow_unicode=True)
