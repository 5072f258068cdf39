#!/usr/bin/env bash
# The Python part of set-up: this project, with its test and lint tools, in a virtual environment of its own
# (.venv in the checkout, or $ASCEND_IMAGES_VENV). The distribution's python3 is never changed: Debian 12's and
# Ubuntu 24.04's have no pip and refuse installs into the system (PEP 668, externally-managed-environment), so nothing
# here runs pip outside the venv, and nothing uses --break-system-packages. Safe to run again. --force: re-point
# /usr/local/bin/ascend-images at this checkout without asking (as ASCEND_IMAGES_FORCE_LINK=1 does).
set -euo pipefail
for arg in "$@"; do
  [ "$arg" = --force ] || { echo "setup: unknown argument $arg (only --force)" >&2; exit 2; }
done
cd "$(dirname "$0")/.."
venv=${ASCEND_IMAGES_VENV:-.venv}
log_dir=build/logs
mkdir -p "$log_dir"
step() { printf '[setup %s] %s\n' "$(date +%H:%M:%S)" "$*"; }

apt_install() {
  if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null 2>&1; then
    echo "setup: $* is needed; install it with your package manager (as root: apt-get install $*), then run again" >&2
    exit 1
  fi
  step "apt-get install $*"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq >"$log_dir/apt-python.log" 2>&1
  apt-get install -y -qq "$@" >>"$log_dir/apt-python.log" 2>&1 || { tail -20 "$log_dir/apt-python.log"; exit 1; }
}

command -v python3 >/dev/null 2>&1 || apt_install python3
if ! python3 -c 'import sys; sys.exit(sys.version_info < (3, 11))'; then
  echo "setup: this project needs Python 3.11 or newer; python3 is $(python3 --version 2>&1)" >&2
  exit 1
fi
# `python3 -m venv` needs ensurepip, which Debian and Ubuntu ship apart (python3-venv, python3.X-venv)
if ! python3 -c 'import ensurepip, venv' >/dev/null 2>&1; then
  apt_install python3-venv "python3.$(python3 -c 'import sys; print(sys.version_info[1])')-venv"
fi
if [ ! -x "$venv/bin/python" ] || ! "$venv/bin/python" -c 'import sys' >/dev/null 2>&1; then
  step "python3 -m venv $venv ($(python3 --version))"
  rm -rf "$venv"
  python3 -m venv "$venv"
fi
# uv installs the project in a fraction of pip's time (about 8 s against 30 s from nothing here); it is the pinned
# wheel the images' builds use (scripts/uv-requirements.txt). A host with no wheel of it (another arch) uses pip.
: >"$log_dir/pip.log"
if "$venv/bin/python" -m pip install -q --disable-pip-version-check --require-hashes -r scripts/uv-requirements.txt \
    >>"$log_dir/pip.log" 2>&1; then
  step "uv pip install -e .[test,lint] into $venv (log $log_dir/pip.log)"
  # the certificates pip would trust: the OS's store, and a bundle given to pip (PIP_CERT), as for a TLS proxy
  export UV_SYSTEM_CERTS="${UV_SYSTEM_CERTS:-1}"
  if [ -n "${PIP_CERT:-}" ] && [ -z "${SSL_CERT_FILE:-}" ]; then export SSL_CERT_FILE="$PIP_CERT"; fi
  # --compile-bytecode: uv writes no .pyc by default, and where PYTHONDONTWRITEBYTECODE is set (this build machine
  # has it) no process ever writes one: each command then compiled its imports again (0.67 s for `ascend-images
  # --help` against 0.33 s with them), hundreds of times in a test run
  "$venv/bin/python" -m uv pip install --compile-bytecode --python "$venv/bin/python" -e ".[test,lint]" \
    >>"$log_dir/pip.log" 2>&1 \
    || { tail -20 "$log_dir/pip.log"; exit 1; }
else
  step "$venv/bin/pip install -e .[test,lint] (no uv wheel for this host; log $log_dir/pip.log)"
  "$venv/bin/python" -m pip install -q --disable-pip-version-check -e ".[test,lint]" >>"$log_dir/pip.log" 2>&1 \
    || { tail -20 "$log_dir/pip.log"; exit 1; }
fi

# the project's own modules, editable, so not compiled by the installer (the same reason; a module edited later is
# compiled again as it is imported: its .pyc names the source's time and size)
"$venv/bin/python" -m compileall -q -j 0 src tests tasks.py >/dev/null 2>&1 || true

# The project's own command on PATH (scripts/link-command.sh: asks before taking it from another checkout; --force
# does not). invoke stays the venv's: .venv/bin/invoke.
bash scripts/link-command.sh "$PWD/$venv/bin/ascend-images" "$@"
step "python ready: $("$venv/bin/python" --version) in $venv; $("$venv/bin/ascend-images" --version)"
