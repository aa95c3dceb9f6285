#!/usr/bin/env bash
# Compiler launcher (CMAKE_CXX_COMPILER_LAUNCHER) that logs each compile's wall time and peak
# RSS: one line "<seconds> <peak KB> <object>" appended to $PEAL_COMPILE_LOG (default
# compile_times.log in the working directory). Used by scripts/compile_cost.sh; see
# docs/build-cost.md. Needs GNU time (/usr/bin/time, Debian package "time").
set -euo pipefail
log="${PEAL_COMPILE_LOG:-$PWD/compile_times.log}"
obj="?"
args=("$@")
for ((i = 0; i < ${#args[@]}; ++i)); do
  [[ "${args[i]}" == "-o" ]] && ((i + 1 < ${#args[@]})) && obj="${args[i + 1]}"
done
tmp="$(mktemp)"
trap 'rm -f "$tmp"' EXIT
rc=0
/usr/bin/time -f "%e %M" -o "$tmp" "$@" || rc=$?
if [[ -s "$tmp" ]]; then
  echo "$(tail -n 1 "$tmp") $obj" >>"$log"
fi
exit "$rc"
