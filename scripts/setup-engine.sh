#!/usr/bin/env bash
# The Docker engine the builds need: dockerd >= 27 with the buildx plugin >= 0.17 and the containerd image store,
# without which the docker driver has no OCI image export (the builds' --output), no registry cache export and no
# multi-platform builds. scripts/setup-host.sh calls it; it runs on its own too:
#
#   bash scripts/setup-engine.sh                   packages when needed, daemon.json, dockerd started, the check
#   bash scripts/setup-engine.sh --packages-only   the packages only: no daemon.json, no dockerd (e.g. in a container)
#
# The packages:
#   - dockerd >= 27 with a buildx >= 0.17 already here (Docker CE, a CI runner's, ours): kept, nothing installed;
#   - Debian 12 and 13: Debian forky's docker.io, docker-cli, docker-buildx and containerd (the newest engine the
#     Debian archive has), pinned so that nothing else comes from forky unless a package needs it and the host's own
#     suite has none (tini-static on Debian 12); runc stays the host suite's, whose glibc it is built against;
#   - another distribution whose archive has docker.io >= 27 and docker-buildx >= 0.17: those;
#   - anything else: refused, naming what the archive offers.
# Why forky, and why this floor: docs/design.md, "The engine".
# An engine already running is never restarted silently: when it is older than the installed one or its containerd
# image store is off, the script says what to do and fails, unless ASCEND_IMAGES_ENGINE_RESTART=1 lets it write
# daemon.json and restart that dockerd itself. Safe to run again: on a ready host it changes nothing.
set -euo pipefail
cd "$(dirname "$0")/.."
log_dir=build/logs
mkdir -p "$log_dir"
step() { printf '[setup %s] %s\n' "$(date +%H:%M:%S)" "$*"; }
die() { printf 'setup-engine: %s\n' "$*" >&2; exit 1; }

# the floor: the oldest engine whose BuildKit has what the build relies on (docs/design.md, "The engine"); the
# Python side refuses anything older in one line too (src/ascend_images/builder/builders.py)
MIN_ENGINE=27
MIN_BUILDX=0.17
ENGINE_SUITE=forky
ENGINE_PACKAGES=(docker.io docker-cli docker-buildx containerd)
daemon_json=${ASCEND_IMAGES_DAEMON_JSON:-/etc/docker/daemon.json}
debian_mirror=${ASCEND_IMAGES_DEBIAN_MIRROR:-http://deb.debian.org/debian}
suite_sources=/etc/apt/sources.list.d/ascend-images-$ENGINE_SUITE.sources
suite_pin=/etc/apt/preferences.d/ascend-images-$ENGINE_SUITE
# what set-up wrote when it took the engine from trixie: replaced by forky's
old_sources=/etc/apt/sources.list.d/ascend-images-trixie.sources
old_pin=/etc/apt/preferences.d/ascend-images-trixie
apt_log=$log_dir/apt-engine.log
dockerd_log=$log_dir/dockerd.log

packages_only=0
for arg in "$@"; do
  case "$arg" in
    --packages-only) packages_only=1 ;;
    -h | --help) sed -n '2,/^set -euo/{/^set -euo/d; s/^# \{0,1\}//; p}' "$0"; exit 0 ;;
    *) die "unknown argument '$arg': the only option is --packages-only (install the packages, start nothing)" ;;
  esac
done
restart=${ASCEND_IMAGES_ENGINE_RESTART:-0}
case "$restart" in
  0 | 1) ;;
  *) die "ASCEND_IMAGES_ENGINE_RESTART is '$restart': give 1 to let this script restart dockerd, or leave it unset" ;;
esac

# version_ge VERSION MIN: VERSION's major.minor (a leading "v", an epoch and any suffix ignored) is at least MIN's
version_ge() {
  local v=${1#v}
  v=${v#*:}
  [[ $v =~ ^([0-9]+)(\.([0-9]+))? ]] || return 1
  local major=${BASH_REMATCH[1]} minor=${BASH_REMATCH[3]:-0}
  [[ $2 =~ ^([0-9]+)(\.([0-9]+))? ]] || return 1
  local want_major=${BASH_REMATCH[1]} want_minor=${BASH_REMATCH[3]:-0}
  ((10#$major > 10#$want_major || (10#$major == 10#$want_major && 10#$minor >= 10#$want_minor)))
}
# "Docker version 26.1.5+dfsg1, build 411e817" -> 26.1.5+dfsg1; nothing when there is no dockerd
dockerd_version() {
  command -v dockerd >/dev/null 2>&1 || return 0
  { dockerd --version 2>/dev/null || true; } | sed -n 's/^Docker version \([^ ,]*\).*/\1/p'
}
# "github.com/docker/buildx 0.13.1+ds1 0.13.1+ds1-3" (Debian) or "... v0.24.0 d0e5e86" (Docker's) -> 0.13.1+ds1
buildx_version() {
  command -v docker >/dev/null 2>&1 || return 0
  { docker buildx version 2>/dev/null || true; } | sed -n 's|^github.com/docker/buildx v\{0,1\}\([^ ]*\).*|\1|p'
}
# the archive's candidate version of a package, empty when it has none
candidate() {
  { apt-cache policy "$1" 2>/dev/null || true; } | sed -n 's/^ *Candidate: //p' | grep -v '^(none)$' || true
}
# the newest version of a package a suite offers (from apt-cache madison), empty when it has none
suite_version() {
  { apt-cache madison "$1" 2>/dev/null || true; } | awk -F' *[|] *' -v suite="$2" '$3 ~ (" " suite "/") {print $2; exit}'
}

apt_update() {
  apt-get update -qq >>"$apt_log" 2>&1 || {
    tail -20 "$apt_log" >&2
    if grep -q 'Release file for .* is expired' "$apt_log"; then
      die "apt-get update failed: the mirror's Release file is past its Valid-Until (log $apt_log): a mirror frozen at a date serves an expired testing suite; point ASCEND_IMAGES_DEBIAN_MIRROR at a current mirror, or, if the frozen one is what this site trusts, set Acquire::Check-Valid-Until \"false\" for it in /etc/apt/apt.conf.d, then run again"
    fi
    if grep -q 'NO_PUBKEY\|is not signed' "$apt_log"; then
      die "apt-get update failed: the archive keys do not verify it (log $apt_log): apt-get install debian-archive-keyring, then run again"
    fi
    die "apt-get update failed (log $apt_log): check that this host reaches its package mirror, then run again"
  }
}
# apt-get install with no service started or stopped by the packages' scripts (a temporary policy-rc.d, unless the
# host has one): a running dockerd is not restarted behind the script's back, and --packages-only starts nothing
apt_install() {
  local policy=/usr/sbin/policy-rc.d made=0
  if [ ! -e "$policy" ]; then
    printf '#!/bin/sh\n# scripts/setup-engine.sh: no service is started or stopped while it installs\nexit 101\n' >"$policy"
    chmod 755 "$policy"
    made=1
    trap 'rm -f /usr/sbin/policy-rc.d' EXIT
  fi
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "$@" >>"$apt_log" 2>&1 || {
    tail -20 "$apt_log" >&2
    die "apt-get install $* failed (log $apt_log): fix what apt says above, then run again"
  }
  if [ "$made" = 1 ]; then
    rm -f "$policy"
    trap - EXIT
  fi
}
# write $1 with the content $2 unless it has it already; says whether it wrote
write_if_changed() {
  if [ -f "$1" ] && [ "$(cat "$1")" = "$2" ]; then return 1; fi
  mkdir -p "$(dirname "$1")"
  printf '%s\n' "$2" >"$1"
}

# Debian 12 and 13 take the engine from forky: the suite, and a pin below the host's 500, so that nothing is installed
# or upgraded from forky unless asked for by name (docker.io/forky ...) or needed by one of those and missing from the
# host's suite; what is installed from it keeps its updates
suite_source_text="Types: deb
URIs: $debian_mirror
Suites: $ENGINE_SUITE
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg"
suite_pin_text="Package: *
Pin: release n=$ENGINE_SUITE
Pin-Priority: 100"

# --- the packages ------------------------------------------------------------------------------------------------
engine=$(dockerd_version)
buildx=$(buildx_version)
if [ -f "$suite_sources" ] && write_if_changed "$suite_pin" "$suite_pin_text"; then
  step "restored the $ENGINE_SUITE pin $suite_pin (without it $ENGINE_SUITE would upgrade the whole host)"
fi
if [ -n "$engine" ] && version_ge "$engine" "$MIN_ENGINE" && [ -n "$buildx" ] && version_ge "$buildx" "$MIN_BUILDX"; then
  step "engine kept: dockerd $engine and buildx $buildx are here (>= $MIN_ENGINE and >= $MIN_BUILDX): nothing installed"
else
  found="dockerd ${engine:-none}, buildx ${buildx:-none}"
  owner=""
  if [ -n "$engine" ]; then
    owner=$(dpkg -S "$(readlink -f "$(command -v dockerd)")" 2>/dev/null | cut -d: -f1 || true)
    # not Debian's docker.io (Docker CE, a static binary): installing docker.io would conflict with it or shadow it
    if [ "$owner" != docker.io ]; then
      if version_ge "$engine" "$MIN_ENGINE"; then
        die "dockerd $engine (${owner:-from no package}) has no buildx >= $MIN_BUILDX (found: ${buildx:-none}): install the buildx plugin that goes with it (Docker CE: apt-get install docker-buildx-plugin), then run again"
      fi
      die "dockerd $engine (${owner:-from no package}) is older than $MIN_ENGINE: upgrade it where it came from (Docker CE: apt-get install docker-ce docker-ce-cli docker-buildx-plugin), or remove it to get the distribution's docker.io, then run again"
    fi
  fi
  [ "$(id -u)" = 0 ] || die "the engine needs installing ($found) and that needs root: run this script as root"
  command -v apt-get >/dev/null 2>&1 \
    || die "the engine needs installing ($found) and this host has no apt-get: install Docker Engine >= $MIN_ENGINE with buildx >= $MIN_BUILDX yourself (docs.docker.com/engine/install), then run again"
  # shellcheck disable=SC1091
  . /etc/os-release
  : >"$apt_log"
  step "apt-get update ($found; log $apt_log)"
  apt_update
  stock_engine=$(candidate docker.io)
  stock_buildx=$(candidate docker-buildx)
  upgrade=""
  [ -z "$engine" ] || upgrade=" (upgrading this host's dockerd $engine, older than $MIN_ENGINE or without buildx)"
  if [ "${ID:-}" = debian ] && { [ "${VERSION_CODENAME:-}" = bookworm ] || [ "${VERSION_CODENAME:-}" = trixie ]; }; then
    if [ -f "$old_sources" ] || [ -f "$old_pin" ]; then
      rm -f "$old_sources" "$old_pin"
      step "removed trixie ($old_sources), which an earlier set-up added for its engine: forky's replaces it"
    fi
    write_if_changed "$suite_sources" "$suite_source_text" || true
    write_if_changed "$suite_pin" "$suite_pin_text" || true
    step "${PRETTY_NAME:-this host} has docker.io ${stock_engine:-none}: adding $ENGINE_SUITE ($suite_sources), pinned below the host's suite ($suite_pin)"
    apt_update
    suite_engine=$(suite_version docker.io "$ENGINE_SUITE")
    [ -n "$suite_engine" ] || die "$ENGINE_SUITE offers no docker.io at $debian_mirror (log $apt_log): check ASCEND_IMAGES_DEBIAN_MIRROR, then run again"
    step "apt-get install ${ENGINE_PACKAGES[*]/%//$ENGINE_SUITE}: $ENGINE_SUITE's docker.io $suite_engine, docker-buildx $(suite_version docker-buildx "$ENGINE_SUITE"), containerd $(suite_version containerd "$ENGINE_SUITE"); runc, libc6 and the rest $VERSION_CODENAME's$upgrade"
    apt_install "${ENGINE_PACKAGES[@]/%//$ENGINE_SUITE}"
  elif [ -n "$stock_engine" ] && version_ge "$stock_engine" "$MIN_ENGINE" && [ -n "$stock_buildx" ] \
      && version_ge "$stock_buildx" "$MIN_BUILDX"; then
    packages=(docker.io docker-buildx)
    [ -z "$(candidate docker-cli)" ] || packages+=(docker-cli)  # the CLI's own package where the archive splits it
    step "apt-get install ${packages[*]}: ${PRETTY_NAME:-this host}'s docker.io $stock_engine, docker-buildx $stock_buildx$upgrade"
    apt_install "${packages[@]}"
  else
    die "${PRETTY_NAME:-this host}'s archive offers docker.io ${stock_engine:-none} and docker-buildx ${stock_buildx:-none}, and the builds need dockerd >= $MIN_ENGINE with buildx >= $MIN_BUILDX: install Docker Engine yourself (docs.docker.com/engine/install: docker-ce, docker-buildx-plugin), then run again"
  fi
  engine=$(dockerd_version)
  buildx=$(buildx_version)
  if [ -z "$engine" ] || ! version_ge "$engine" "$MIN_ENGINE" || [ -z "$buildx" ] || ! version_ge "$buildx" "$MIN_BUILDX"; then
    die "after the install this host has dockerd ${engine:-none} and buildx ${buildx:-none}, not >= $MIN_ENGINE and >= $MIN_BUILDX (log $apt_log; 'command -v docker dockerd' names the ones found first on PATH)"
  fi
  step "installed: dockerd $engine, buildx $buildx"
fi
if [ "$packages_only" = 1 ]; then
  step "engine packages ready: dockerd $engine, buildx $buildx (--packages-only: daemon.json and dockerd left alone)"
  exit 0
fi

# --- the engine: the containerd image store on, dockerd running ---------------------------------------------------
containerd_store() {
  if docker info --format '{{json .DriverStatus}}' 2>/dev/null | grep -q 'io.containerd.snapshotter.v1'; then
    echo on
  else
    echo off
  fi
}
# merges features.containerd-snapshotter: true into daemon.json, and a cap on BuildKit's cache where daemon.json sets
# none (builder.gc: without it the cache of a day's builds filled a 100 GB disk here), every other key kept; says
# what it did
write_config() {
  command -v python3 >/dev/null 2>&1 || die "python3 is needed to edit $daemon_json: apt-get install python3, then run again"
  python3 - "$daemon_json" <<'PY'
import json
import os
import sys
from pathlib import Path

path = Path(sys.argv[1])
text = path.read_text() if path.exists() else ""
try:
    config = json.loads(text) if text.strip() else {}
except json.JSONDecodeError as exc:
    sys.exit(f"setup-engine: {path} is not JSON ({exc}): fix it (dockerd refuses it too), then run again")
if not isinstance(config, dict) or not isinstance(config.get("features", {}), dict):
    sys.exit(f"setup-engine: {path} is not a JSON object with an object 'features': fix it, then run again")
features = config.setdefault("features", {})
said = []
if features.get("containerd-snapshotter") is not True:
    was = features.get("containerd-snapshotter", "not set")
    features["containerd-snapshotter"] = True
    said.append(f"features.containerd-snapshotter: true (was {json.dumps(was) if was != 'not set' else was})")
added_builder = "builder" not in config
if added_builder:
    config["builder"] = {"gc": {"enabled": True, "defaultKeepStorage": "20GB"}}
    said.append("builder.gc: BuildKit's cache kept under 20GB")
if not said:
    print(f"{path} has features.containerd-snapshotter: true and a builder section already")
    sys.exit(0)
path.parent.mkdir(parents=True, exist_ok=True)
temporary = path.with_name(path.name + ".ascend-images.tmp")
temporary.write_text(json.dumps(config, indent=2) + "\n")
os.replace(temporary, path)
kept = ", ".join(k for k in config if k != "features" and not (k == "builder" and added_builder))
print(f"{path}: {'; '.join(said)} (other keys kept: {kept or 'none'})")
PY
}
systemd_unit() { [ -d /run/systemd/system ] && systemctl cat docker.service >/dev/null 2>&1; }
wait_engine() {
  for _ in $(seq 60); do docker info >/dev/null 2>&1 && return 0; sleep 1; done
  if systemd_unit; then
    die "dockerd did not answer within 60 s of starting: journalctl -u docker says why"
  fi
  tail -20 "$dockerd_log" >&2
  die "dockerd did not answer within 60 s of starting (log $dockerd_log): fix what it says above, then run again"
}
start_engine() {
  if systemd_unit; then
    step "systemctl start docker"
    systemctl start docker || die "systemctl start docker failed: journalctl -u docker says why"
  else
    step "starting dockerd (log $dockerd_log)"
    nohup dockerd >"$dockerd_log" 2>&1 &
  fi
  wait_engine
}
alive() { [ -e "/proc/$1" ] && ! grep -q '^[0-9]* (.*) Z ' "/proc/$1/stat" 2>/dev/null; }
restart_engine() {
  if systemd_unit && systemctl is-active --quiet docker; then
    step "systemctl restart docker (ASCEND_IMAGES_ENGINE_RESTART=1)"
    systemctl restart docker || die "systemctl restart docker failed: journalctl -u docker says why"
    wait_engine
    return
  fi
  local pids
  pids=$(pidof dockerd || true)
  [[ $pids =~ ^[0-9]+$ ]] || die "ASCEND_IMAGES_ENGINE_RESTART=1, but dockerd is not one process here (pids: '${pids:-none}'): restart it yourself, then run again"
  step "stopping dockerd (pid $pids; ASCEND_IMAGES_ENGINE_RESTART=1): its running containers stop with it"
  kill -TERM "$pids"
  # gone, or a zombie nobody reaps yet (where PID 1 is no init, as in a container)
  for _ in $(seq 120); do alive "$pids" || break; sleep 1; done
  ! alive "$pids" || die "dockerd (pid $pids) did not stop within 120 s of SIGTERM: stop it yourself, then run again"
  start_engine
}

if ! docker info >/dev/null 2>&1; then
  [ "$(id -u)" = 0 ] || die "no Docker engine answers and starting one needs root: run this script as root"
  written=$(write_config)
  step "$written"
  start_engine
else
  running=$(docker version --format '{{.Server.Version}}' 2>/dev/null || true)
  store=$(containerd_store)
  why=()
  version_ge "$running" "$MIN_ENGINE" || why+=("it is dockerd ${running:-of unknown version}, older than $MIN_ENGINE (the installed one is $engine)")
  [ "$store" = on ] || why+=("its containerd image store is off (the builds' OCI image export, registry cache export and multi-platform builds need it)")
  if [ "${#why[@]}" -gt 0 ]; then
    reason=$(IFS=';'; printf '%s' "${why[*]}" | sed 's/;/; /g')
    if [ "$restart" != 1 ]; then
      store_note=""
      [ "$store" = on ] || store_note=" Images of its current (graphdriver) store are not visible after the switch (they stay on disk: pull or rebuild them, or switch back to see them)."
      printf 'setup-engine: the running engine is not the one the builds need: %s. To fix it: put {"features": {"containerd-snapshotter": true}} into %s (other keys kept) and restart dockerd, or run again with ASCEND_IMAGES_ENGINE_RESTART=1 to let this script do both (its running containers stop).%s\n' "$reason" "$daemon_json" "$store_note" >&2
      exit 1
    fi
    step "the running engine needs a restart: $reason"
    [ "$store" = on ] || step "images of the old (graphdriver) store are not visible in the containerd store after this"
    written=$(write_config)
    step "$written"
    restart_engine
  fi
fi

# --- the check ---------------------------------------------------------------------------------------------------
running=$(docker version --format '{{.Server.Version}}' 2>/dev/null || true)
buildx=$(buildx_version)
store=$(containerd_store)
step "engine: dockerd ${running:-?}, buildx ${buildx:-none}, containerd image store $store"
version_ge "$running" "$MIN_ENGINE" || die "the running dockerd is ${running:-of unknown version}, not >= $MIN_ENGINE: restart it from the installed $engine (or ASCEND_IMAGES_ENGINE_RESTART=1), then run again"
if [ -z "$buildx" ] || ! version_ge "$buildx" "$MIN_BUILDX"; then
  die "docker buildx is ${buildx:-missing}, not >= $MIN_BUILDX: 'docker buildx version' says why"
fi
[ "$store" = on ] || die "the containerd image store is still off after the engine (re)started with $daemon_json: check that dockerd reads that file (its --config-file), then run again"
