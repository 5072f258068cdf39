"""`invoke run --format compose`: the run spec as a Compose service, every string escaped as Compose reads it."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import yaml

from ascend_images.runtime.run import RunSpec


def compose_escape(text: str) -> str:
    """Compose substitutes ${VAR} and $VAR in every string of the file; `$$` is its literal `$`."""
    return text.replace("$", "$$")


def compose_data(spec: RunSpec, service: str = "ascend") -> dict[str, Any]:
    svc: dict[str, Any] = {"image": spec.image, "shm_size": spec.shm_size}
    if spec.name:
        svc["container_name"] = spec.name
    if spec.restart:
        svc["restart"] = spec.restart
    if spec.workdir:
        svc["working_dir"] = spec.workdir
    if spec.ipc_host:
        svc["ipc"] = "host"
    if spec.network_host:
        svc["network_mode"] = "host"
    if spec.mode == "runtime":
        svc["runtime"] = "ascend"
    else:
        svc["devices"] = [f"{h}:{c}" for h, c in spec.device_nodes()]
    if spec.binds():
        svc["volumes"] = list(spec.binds())
    if spec.ports:
        svc["ports"] = [p.publish() for p in spec.ports]
    svc["environment"] = dict(spec.environment())
    if spec.command:
        svc["command"] = list(spec.command)
    return {"services": {service: _escaped(svc, compose_escape)}}


def _escaped(value: Any, escape: Callable[[str], str]) -> Any:
    if isinstance(value, str):
        return escape(value)
    if isinstance(value, dict):
        return {k: _escaped(v, escape) for k, v in value.items()}
    if isinstance(value, list):
        return [_escaped(v, escape) for v in value]
    return value


def compose_service(spec: RunSpec, service: str = "ascend") -> str:
    # from data through a YAML library: any value (quotes, ': ', '#', unicode, YAML 1.1 booleans) round-trips
    return yaml.safe_dump(compose_data(spec, service), sort_keys=False, default_flow_style=False, width=120,
                          allow_unicode=True)
