# Sourced by ~/.bashrc and /etc/profile.d/ascend-images.sh in bash: re-applies the CANN env scripts
# (as Ascend users expect) and removes duplicated path entries. The image ENV already holds what
# the scripts set, so sourcing any number of times changes nothing.
# The NNAL script reads its --cxx_abi argument, which POSIX `.` does not pass: bash only.
# Debian's /etc/profile resets root's PATH: put the image's Python back first, where the image ENV has it
case ":$PATH:" in
  *:/usr/local/python/bin:*) ;;
  *) export PATH="/usr/local/python/bin:$PATH" ;;
esac
if [ -r /etc/ascend-images/env-scripts ]; then
  while read -r __ascend_script __ascend_args; do
    [ -r "$__ascend_script" ] || continue
    # shellcheck disable=SC1090,SC2086
    source "$__ascend_script" $__ascend_args >/dev/null 2>&1
  done < /etc/ascend-images/env-scripts
  for __ascend_var in PATH LD_LIBRARY_PATH PYTHONPATH ASCEND_CUSTOM_OPP_PATH; do
    __ascend_out=
    IFS=: read -r -a __ascend_parts <<< "${!__ascend_var:-}"
    for __ascend_part in "${__ascend_parts[@]}"; do
      [ -n "$__ascend_part" ] || continue
      case ":$__ascend_out:" in
        *":$__ascend_part:"*) ;;
        *) __ascend_out="${__ascend_out:+$__ascend_out:}$__ascend_part" ;;
      esac
    done
    [ -n "${!__ascend_var+x}" ] && export "$__ascend_var=$__ascend_out"
  done
  unset __ascend_script __ascend_args __ascend_var __ascend_out __ascend_parts __ascend_part
fi
