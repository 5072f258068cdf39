#!/usr/bin/env bash
# Sets up a Debian/Ubuntu build host from nothing: debootstrap, arm64 emulation, the project and its test tools in a
# venv of its own (scripts/setup-venv.sh), a Docker engine >= 27 with buildx and the containerd image store
# (scripts/setup-engine.sh), and the local OS base images. Safe to run again: it skips what is done.
set -euo pipefail
cd "$(dirname "$0")/.."
log_dir=build/logs
mkdir -p "$log_dir"
step() { printf '[setup %s] %s\n' "$(date +%H:%M:%S)" "$*"; }

need=()
# (shellcheck is what actionlint runs on the workflow's run: scripts)
# (gcc and binutils: the tests compile the CANN stub libraries and read wheels' symbols with readelf)
# (the engine is scripts/setup-engine.sh's, below: which packages it takes depends on the host)
for pkg in debootstrap qemu-user-static binfmt-support docker-registry shellcheck gcc libc6-dev binutils; do
  dpkg -s "$pkg" >/dev/null 2>&1 || need+=("$pkg")
done
if [ "${#need[@]}" -gt 0 ]; then
  step "apt-get install ${need[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq >"$log_dir/apt.log" 2>&1
  apt-get install -y -qq "${need[@]}" >>"$log_dir/apt.log" 2>&1 || { tail -20 "$log_dir/apt.log"; exit 1; }
fi

bash scripts/setup-venv.sh

# arm64 images build under emulation: binfmt_misc must be mounted and qemu-aarch64 registered
if [ ! -e /proc/sys/fs/binfmt_misc/register ]; then
  mount -t binfmt_misc binfmt_misc /proc/sys/fs/binfmt_misc
fi
if [ ! -e /proc/sys/fs/binfmt_misc/qemu-aarch64 ] && [ "$(uname -m)" != aarch64 ]; then
  update-binfmts --enable qemu-aarch64
fi

# the engine: dockerd >= 27 with buildx and the containerd image store, installed, configured and started when it is
# not (a running engine is restarted only with ASCEND_IMAGES_ENGINE_RESTART=1: the script says so and stops)
bash scripts/setup-engine.sh

# The `ascend` runtime test double (tests/fixtures/ascend_runtime) is registered only on the test's own engine:
# on this host's engine a fake would let `invoke run --mode runtime` pass its check. Earlier versions of this script
# registered it here; take that back.
if [ -f /etc/docker/daemon.json ] && grep -q 'ascend-images-test/ascend-runtime' /etc/docker/daemon.json; then
  step "unregistering the test-double 'ascend' runtime an earlier setup registered"
  .venv/bin/python - <<'PY'
import json, pathlib
path = pathlib.Path("/etc/docker/daemon.json")
config = json.loads(path.read_text())
runtimes = config.get("runtimes", {})
if "ascend-images-test/ascend-runtime" in runtimes.get("ascend", {}).get("path", ""):
    del runtimes["ascend"]
config["runtimes"] = runtimes  # kept even when empty: a reload replaces the runtimes only when the key is there
path.write_text(json.dumps(config, indent=2) + "\n")
PY
  kill -HUP "$(pidof dockerd)"  # dockerd reloads its runtimes on SIGHUP
  for _ in $(seq 20); do docker info --format '{{json .Runtimes}}' | grep -q '"ascend"' || break; sleep 0.5; done
  if docker info --format '{{json .Runtimes}}' | grep -q '"ascend"'; then
    echo "dockerd still has the test-double 'ascend' runtime after a reload: restart dockerd" >&2
    exit 1
  fi
  rm -f /usr/local/libexec/ascend-images-test/ascend-runtime
fi


# aarch64 is what we publish; the host's own arch is what the installer stage runs on (it installs natively)
native=$(uname -m)
read -r -a os_arches <<<"${ASCEND_IMAGES_OS_ARCHES:-aarch64 $native}"
# Both at once: the foreign arch's debootstrap second stage keeps one core busy under emulation, the native one
# mostly waits on the mirror. Each names its debootstrap log when it fails.
os_jobs=()
for arch in $(printf '%s\n' "${os_arches[@]}" | sort -u); do
  docker_arch=$([ "$arch" = aarch64 ] && echo arm64 || echo amd64)
  if ! docker image inspect "ascend-images/os:debian12-$docker_arch" >/dev/null 2>&1; then
    step "invoke os-image --os debian12 --arch $arch"
    (set -o pipefail; .venv/bin/invoke os-image --os debian12 --arch "$arch" 2>&1 | sed -u "s/^/[os-image $arch] /") &
    os_jobs+=("$!:$arch")
  fi
done
failed=""
for job in "${os_jobs[@]}"; do
  wait "${job%%:*}" || failed="$failed ${job#*:}"
done
if [ -n "$failed" ]; then
  echo "setup: invoke os-image failed for:$failed (its lines above name the log)" >&2
  exit 1
fi
step "ready: $(docker version --format '{{.Server.Version}}') engine, $(.venv/bin/python --version) in .venv"
