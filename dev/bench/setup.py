"""What one bench run works with: the engine, the build settings, the selection and where progress goes."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import docker

from ascend_images.builder.build import BuildSettings
from ascend_images.console import Steps

Out = Callable[[str], None]
STEPS = 11  # the bench's measurements (its phases), each a step on stderr


@dataclass
class BenchSetup:
    client: docker.DockerClient
    settings: BuildSettings
    matrix_path: Path
    selection: dict[str, Any]
    base_images: dict[tuple[str, str], str]
    namespace: str
    out: Out
    stage_cache: str | None = None  # REGISTRY/NAMESPACE: the cold build pushes there, the fleet build pulls
    stage_cache_read_only: bool = False  # the cold build pushes nothing: the fleet build uses what is there
    fleet_engine: str | None = None  # DOCKER_HOST of an empty engine for the fleet build; default: a scratch dockerd
    # which of the measurements runs, on stderr; the figures stay on `out`
    steps: Steps = field(default_factory=lambda: Steps("bench", STEPS))
