"""hadolint over many Dockerfiles, each distinct text linted once and its findings kept on this host
(~/.cache/ascend-images/lint/hadolint, by the sha256 of hadolint's version, the project's .hadolint.yaml and the
text): the matrix renders 874 Dockerfiles, 697 of them distinct, and a lint run changes few. A run hadolint itself
fails (a Dockerfile it cannot parse) is reported as it is and kept nowhere."""

from __future__ import annotations

import hashlib
import subprocess
from dataclasses import dataclass
from pathlib import Path

from ascend_images.checkout import ROOT as PROJECT_ROOT
from ascend_images.inputs.download import host_cache

FILE = "{file}"  # where the linted file's path stood in a kept finding


@dataclass(frozen=True)
class HadolintRun:
    findings: list[str]  # hadolint's lines, each naming its file
    returncode: int
    linted: int  # Dockerfiles hadolint read this run (the rest were known)


def hadolint_findings(hadolint: str, dockerfiles: list[Path], cache: Path | None = None) -> HadolintRun:
    cache = cache or host_cache("lint") / "hadolint"
    version = subprocess.run([hadolint, "--version"], capture_output=True, text=True).stdout.strip()
    config = PROJECT_ROOT / ".hadolint.yaml"
    salt = f"{version}\0{config.read_text() if config.is_file() else ''}\0".encode()
    keys = {path: hashlib.sha256(salt + path.read_bytes()).hexdigest() for path in dockerfiles}
    kept = {key: cache / f"{key}.txt" for key in set(keys.values())}
    first = {}  # one file per distinct text hadolint has not seen
    for path, key in keys.items():
        if not kept[key].is_file():
            first.setdefault(key, path)
    if first:
        result = subprocess.run([hadolint, "--failure-threshold", "error", "--no-color", *map(str, first.values())],
                                capture_output=True, text=True)
        lines = [line for line in result.stdout.splitlines() if line.strip()]
        if result.returncode != 0 and not any(" error:" in line for line in lines):
            # not a finding hadolint reports but a failure of its own: as it said it, nothing kept
            return HadolintRun(lines + result.stderr.strip().splitlines(), result.returncode, len(first))
        cache.mkdir(parents=True, exist_ok=True)
        for key, path in first.items():
            own = [FILE + line[len(str(path)):] for line in lines if line.startswith(f"{path}:")]
            partial = kept[key].with_suffix(".part")
            partial.write_text("".join(f"{line}\n" for line in own))
            partial.replace(kept[key])
    known = {key: file.read_text().splitlines() for key, file in kept.items()}
    findings = [line.replace(FILE, str(path), 1) for path, key in keys.items() for line in known[key]]
    # hadolint's own verdict at --failure-threshold error, the same from a fresh run as from what is kept
    return HadolintRun(findings, int(any(" error:" in line for line in findings)), len(first))
