#!/usr/bin/env bash
# Fuzz config parsing: builds the libFuzzer targets with clang++ and libFuzzer + ASan + UBSan
# (-O1 -g) into build-fuzz/ and runs them side by side (one core each; their logs are printed
# when both are done, in this order):
#   tests/fuzz/fuzz_rope_config.cpp  (JSON -> rope_config_from_hf) for ${PEAL_FUZZ_SECONDS:-60} s,
#   tests/fuzz/fuzz_gguf_config.cpp  (GGUF -> rope_config_from_gguf) for
#                                     ${PEAL_FUZZ_GGUF_SECONDS:-30} s.
#
#   scripts/fuzz.sh                      60 s and 30 s, at once
#   PEAL_FUZZ_SECONDS=600 PEAL_FUZZ_GGUF_SECONDS=600 scripts/fuzz.sh
#
# The seed corpora tests/fuzz/corpus_rope_config/ and tests/fuzz/corpus_gguf_config/ are
# copied into build-fuzz/corpus/ and build-fuzz/corpus_gguf/, which receive the new inputs
# (nothing is written into the source tree); a crashing input is saved as
# build-fuzz/artifacts/crash-* (JSON) or build-fuzz/artifacts/gguf-crash-* (GGUF). Add it to
# the seed corpus once fixed: it is then a regression test, replayed by the ctest
# fuzz_corpus_replay or fuzz_gguf_corpus_replay. Exits non-zero on a crash, a leak, a
# sanitizer report, a timeout (-timeout=10 s per input) or an allocation past
# -rss_limit_mb=2048 in either target (the GGUF target still runs when the JSON one failed).
# Exits 0 with a message when clang++ or libFuzzer is missing, and skips only the JSON target
# when nlohmann/json.hpp is missing (the GGUF target needs no JSON library, and still runs);
# with CI=true each of these is a failure (exit 1).
#
# Environment: PEAL_FUZZ_SECONDS, PEAL_FUZZ_GGUF_SECONDS, PEAL_FUZZ_CXX (default clang++),
# PEAL_FUZZ_BUILD_DIR (default build-fuzz), EIGEN3_INCLUDE_DIR (default /usr/include/eigen3),
# NLOHMANN_INCLUDE_DIR (default /usr/include).
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"

cxx="${PEAL_FUZZ_CXX:-clang++}"
out="${PEAL_FUZZ_BUILD_DIR:-build-fuzz}"
seconds="${PEAL_FUZZ_SECONDS:-60}"
gguf_seconds="${PEAL_FUZZ_GGUF_SECONDS:-30}"
eigen="${EIGEN3_INCLUDE_DIR:-/usr/include/eigen3}"
nlohmann="${NLOHMANN_INCLUDE_DIR:-/usr/include}"

skip() {  # in CI (CI=true, where .ci/run has installed clang) a missing tool is a failure
  echo "fuzz.sh: $1; skipping the fuzz run"
  [[ "${CI:-}" == true ]] && exit 1
  exit 0
}
command -v "$cxx" > /dev/null 2>&1 || skip "$cxx not found"
[[ -f "$eigen/Eigen/Core" ]] || skip "Eigen not found in $eigen (set EIGEN3_INCLUDE_DIR)"

mkdir -p "$out/corpus" "$out/corpus_gguf" "$out/artifacts"
# libFuzzer present? (GCC has no -fsanitize=fuzzer; Debian clang needs libclang-rt-*-dev.)
probe="$out/probe.cpp"
printf '%s\n' '#include <cstddef>' '#include <cstdint>' \
  'extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t*, std::size_t) { return 0; }' \
  > "$probe"
if ! "$cxx" -fsanitize=fuzzer,address,undefined "$probe" -o "$out/probe" > /dev/null 2>&1; then
  skip "$cxx cannot link -fsanitize=fuzzer,address,undefined (libFuzzer missing?)"
fi

# (-isystem /usr/include would break libstdc++'s #include_next <math.h>: add only others.)
includes=(-I include -isystem "$eigen")
[[ "$nlohmann" == /usr/include ]] || includes+=(-isystem "$nlohmann")

export ASAN_OPTIONS="${ASAN_OPTIONS:-detect_leaks=1:allocator_may_return_null=0}"
export UBSAN_OPTIONS="${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}"

# fuzz NAME SECONDS CORPUS_SRC CORPUS_DIR ARTIFACT_PREFIX [libFuzzer flags...]: builds
# tests/fuzz/<NAME>.cpp into $out/<NAME> and runs it; returns the fuzzer's exit status.
fuzz() {
  local name="$1" secs="$2" seed="$3" corpus="$4" prefix="$5"
  shift 5
  local bin="$out/$name"
  echo "fuzz.sh: building $bin"
  # (Run in the background: every step checks its own status, so set -e never ends it early.)
  # -fno-sanitize-recover=all: a UBSan report stops the run (it only prints by default).
  "$cxx" -std=c++17 -O1 -g -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=all \
    -fno-omit-frame-pointer "${includes[@]}" \
    "tests/fuzz/$name.cpp" -o "$bin" || { echo "fuzz.sh: cannot build $bin" >&2; return 1; }
  cp -f "$seed"/* "$corpus/" || return 1
  echo "fuzz.sh: running $name for $secs s over a copy of $seed in $corpus"
  local rc=0
  "$bin" -max_total_time="$secs" -rss_limit_mb=2048 -timeout=10 -max_len=65536 \
    -print_final_stats=1 -artifact_prefix="$out/artifacts/$prefix" "$@" "$corpus" || rc=$?
  if [[ $rc -ne 0 ]]; then
    echo "fuzz.sh: $name failed (exit $rc); inputs in $out/artifacts/ (prefix '$prefix'):" >&2
    ls -l "$out/artifacts/" >&2 || true
  else
    echo "fuzz.sh: $name: no failure in $secs s"
  fi
  return "$rc"
}

# Both targets run at once, each on its own core and for its own time (the budgets are per
# target, as before); each one's output goes to $out/NAME.log, printed when both are done.
status=0
rope_pid=
if [[ -f "$nlohmann/nlohmann/json.hpp" ]]; then
  fuzz fuzz_rope_config "$seconds" tests/fuzz/corpus_rope_config "$out/corpus" "" \
    -dict=tests/fuzz/rope_config.dict > "$out/fuzz_rope_config.log" 2>&1 &
  rope_pid=$!
else
  echo "fuzz.sh: nlohmann/json.hpp not found in $nlohmann; skipping fuzz_rope_config" \
    "(set NLOHMANN_INCLUDE_DIR)"
  if [[ "${CI:-}" == true ]]; then status=1; fi  # a failure in CI, after the GGUF run
fi
fuzz fuzz_gguf_config "$gguf_seconds" tests/fuzz/corpus_gguf_config "$out/corpus_gguf" gguf- \
  > "$out/fuzz_gguf_config.log" 2>&1 &
gguf_pid=$!
gguf_status=0
wait "$gguf_pid" || gguf_status=$?
if [[ -n "$rope_pid" ]]; then
  wait "$rope_pid" || status=$?
  cat "$out/fuzz_rope_config.log"
fi
cat "$out/fuzz_gguf_config.log"
[[ $status -ne 0 ]] || status=$gguf_status
exit "$status"
