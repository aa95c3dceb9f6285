#!/usr/bin/env bash
# Fuzz config parsing: builds tests/fuzz/fuzz_rope_config.cpp with clang++ and libFuzzer +
# ASan + UBSan (-O1 -g) into build-fuzz/ and runs it for ${PEAL_FUZZ_SECONDS:-60} seconds.
#
#   scripts/fuzz.sh                      60 s
#   PEAL_FUZZ_SECONDS=600 scripts/fuzz.sh
#
# The seed corpus tests/fuzz/corpus_rope_config/ is copied into build-fuzz/corpus/, which
# receives the new inputs (nothing is written into the source tree); a crashing input is
# saved as build-fuzz/artifacts/crash-* (add it to the seed corpus once fixed: it is then a
# regression test, replayed by the ctest fuzz_corpus_replay). Exits non-zero on a crash,
# a leak, a sanitizer report, a timeout (-timeout=10 s per input) or an allocation past
# -rss_limit_mb=2048. Exits 0 with a message when clang++ or libFuzzer is missing (1 when
# CI=true).
#
# Environment: PEAL_FUZZ_SECONDS, PEAL_FUZZ_CXX (default clang++), PEAL_FUZZ_BUILD_DIR
# (default build-fuzz), EIGEN3_INCLUDE_DIR (default /usr/include/eigen3),
# NLOHMANN_INCLUDE_DIR (default /usr/include).
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"

cxx="${PEAL_FUZZ_CXX:-clang++}"
out="${PEAL_FUZZ_BUILD_DIR:-build-fuzz}"
seconds="${PEAL_FUZZ_SECONDS:-60}"
eigen="${EIGEN3_INCLUDE_DIR:-/usr/include/eigen3}"
nlohmann="${NLOHMANN_INCLUDE_DIR:-/usr/include}"

skip() {  # in CI (CI=true, where .ci/run has installed clang) a missing tool is a failure
  echo "fuzz.sh: $1; skipping the fuzz run"
  [[ "${CI:-}" == true ]] && exit 1
  exit 0
}
command -v "$cxx" > /dev/null 2>&1 || skip "$cxx not found"
[[ -f "$eigen/Eigen/Core" ]] || skip "Eigen not found in $eigen (set EIGEN3_INCLUDE_DIR)"
[[ -f "$nlohmann/nlohmann/json.hpp" ]] || skip "nlohmann/json.hpp not found in $nlohmann"

mkdir -p "$out/corpus" "$out/artifacts"
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

bin="$out/fuzz_rope_config"
echo "fuzz.sh: building $bin"
# -fno-sanitize-recover=all: a UBSan report stops the run (it only prints by default).
"$cxx" -std=c++17 -O1 -g -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=all \
  -fno-omit-frame-pointer "${includes[@]}" \
  tests/fuzz/fuzz_rope_config.cpp -o "$bin"

cp -f tests/fuzz/corpus_rope_config/* "$out/corpus/"
echo "fuzz.sh: running for $seconds s over a copy of tests/fuzz/corpus_rope_config in $out/corpus"
export ASAN_OPTIONS="${ASAN_OPTIONS:-detect_leaks=1:allocator_may_return_null=0}"
export UBSAN_OPTIONS="${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}"
status=0
"$bin" -max_total_time="$seconds" -rss_limit_mb=2048 -timeout=10 -max_len=65536 \
  -dict=tests/fuzz/rope_config.dict -print_final_stats=1 -artifact_prefix="$out/artifacts/" \
  "$out/corpus" || status=$?
if [[ $status -ne 0 ]]; then
  echo "fuzz.sh: the fuzzer failed (exit $status); inputs in $out/artifacts/:" >&2
  ls -l "$out/artifacts/" >&2 || true
  exit "$status"
fi
echo "fuzz.sh: no failure in $seconds s"
