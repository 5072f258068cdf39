# Login shells: bash re-applies the CANN env scripts idempotently; other shells rely on the image ENV.
if [ -n "${BASH_VERSION:-}" ]; then
  . /usr/local/lib/ascend-images/profile.bash
fi
