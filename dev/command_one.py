"""README's first command timed as a fresh machine runs it, on this host: a fresh clone of HEAD, a second, empty
engine (dev/scratch_engine.py: no image, no BuildKit cache), and empty caches of ours and uv's. It times the set-up's
parts that depend on nothing installed (the venv, the two OS images side by side, as scripts/setup-host.sh makes them)
and then the demo build, and prints each stage's time from the build's report. Debian's packages and the engine's
binaries are this host's: their install is not part of the figure.

    python -m dev.command_one [--keep DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from dev.scratch_engine import ScratchEngine

ROOT = Path(__file__).resolve().parents[1]
SET_UP = "bash scripts/setup-host.sh && "


def readme_first_command(readme: Path) -> str:
    """README's first command as .ci/run reads it, past the set-up it starts with (timed here in its parts)."""
    block = readme.read_text(encoding="utf-8").split("```bash\n", 1)[1].split("```", 1)[0]
    first = next(line for line in block.splitlines() if line and not line.startswith("#"))
    return first.removeprefix(SET_UP)


def timed(label: str, argv: list[str], cwd: Path, env: dict[str, str], log: Path) -> float:
    started = time.monotonic()
    with log.open("w") as out:
        done = subprocess.run(argv, cwd=cwd, env=env, stdout=out, stderr=subprocess.STDOUT)
    seconds = time.monotonic() - started
    print(f"{label}: {seconds:.0f} s (exit {done.returncode}, log {log})", flush=True)
    if done.returncode != 0:
        print(log.read_text()[-3000:], file=sys.stderr)
        raise SystemExit(1)
    return seconds


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--keep", type=Path, help="work here and keep it (default: a temporary directory, removed)")
    args = parser.parse_args(argv)
    work = (args.keep or Path(tempfile.mkdtemp(prefix="ai-c1-"))).absolute()
    work.mkdir(parents=True, exist_ok=True)
    clone = work / "main"
    subprocess.run(["git", "clone", "-q", str(ROOT), str(clone)], check=True)
    if (ROOT.parent / "shared").is_dir():
        shutil.copytree(ROOT.parent / "shared", work / "shared", dirs_exist_ok=True)
    engine = ScratchEngine(Path(tempfile.mkdtemp(prefix="ai-c1e-")))
    engine.start()
    try:
        env = {**os.environ, "DOCKER_HOST": engine.host, "XDG_CACHE_HOME": str(work / "cache"),
               "UV_CACHE_DIR": str(work / "cache" / "uv"), "CI": "true"}
        logs = work / "logs"
        logs.mkdir(exist_ok=True)
        venv = timed("set-up: the venv", ["bash", "scripts/setup-venv.sh"], clone, env, logs / "venv.log")
        images = timed("set-up: the two OS images, side by side",
                       ["bash", "-c", ".venv/bin/invoke os-image --os debian12 --arch aarch64 & one=$!; "
                        ".venv/bin/invoke os-image --os debian12 --arch x86_64 & two=$!; wait $one && wait $two"],
                       clone, env, logs / "os-images.log")
        build = timed("command 1", ["bash", "-c", readme_first_command(clone / "README.md")], clone, env,
                      logs / "command-1.log")
        print(f"in all: {venv + images + build:.0f} s (with the host's packages and engine already installed)")
        for report in sorted((clone / "build").rglob("build-report.json")):
            stages = json.loads(report.read_text()).get("stages", [])
            for stage in stages:
                print(f"  {stage['kind']:<14} {stage['status']:<8} {stage['seconds']:6.0f} s  {stage['tag']}")
    finally:
        engine.stop()
        if args.keep is None:
            shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
