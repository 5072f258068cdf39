#!/usr/bin/env bash
# The project's command on PATH, from any directory: a link to the venv's script (which runs the venv's Python), where
# root may put one (/usr/local/bin, or $ASCEND_IMAGES_LINK) and no file of that name that is not a link is there.
# A link to another checkout's script is never re-pointed without a word: asked on a terminal, said on stderr
# elsewhere; --force (or ASCEND_IMAGES_FORCE_LINK=1) re-points it quietly. Usage: link-command.sh TARGET [--force]
set -euo pipefail
target=$1
shift
force=${ASCEND_IMAGES_FORCE_LINK:-0}
for arg in "$@"; do
  case $arg in
    --force) force=1 ;;
    *) echo "setup: unknown argument $arg (only --force: re-point the command's link without asking)" >&2; exit 2 ;;
  esac
done
link=${ASCEND_IMAGES_LINK:-/usr/local/bin/ascend-images}
if [ ! -w "$(dirname "$link")" ] || { [ -e "$link" ] && [ ! -L "$link" ]; }; then
  exit 0
fi
current=$(readlink "$link" || true)
if [ -n "$current" ] && [ "$current" != "$target" ] && [ "$force" != 1 ]; then
  if [ -t 0 ] && [ -t 2 ]; then
    printf 'setup: %s runs %s (another checkout); run %s instead? [y/N] ' "$link" "$current" "$target" >&2
    read -r answer || answer=
    case $answer in
      [yY]*) ;;
      *) echo "setup: kept $link -> $current" >&2; exit 0 ;;
    esac
  else
    echo "setup: $link ran $current; it runs $target now (--force or ASCEND_IMAGES_FORCE_LINK=1: without a word)" >&2
  fi
fi
ln -sfn "$target" "$link"
