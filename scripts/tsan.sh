#!/usr/bin/env bash
# ThreadSanitizer run of tests/tsan/concurrent_scores.cpp (peal::scores from two std::threads
# on shared inputs). Builds only that file with clang++ -fsanitize=thread -O1 -g into
# build-tsan/ and runs it with TSAN_OPTIONS=halt_on_error=1 (a race exits 66, a mismatch 1):
#   1. without OpenMP (always);
#   2. with OpenMP (clang's libomp) when LLVM's libarcher is installed: Archer tells TSan
#      about OpenMP's barriers and locks, and ignore_noninstrumented_modules=1 silences the
#      uninstrumented runtime itself (without both, libomp's internals report false races).
# Skips with a message (exit 0; 1 when CI=true) when clang++ is absent. CXX_TSAN overrides the compiler,
# EIGEN3_INCLUDE_DIR the Eigen headers.
set -euo pipefail
cd "$(dirname "$0")/.."

CXX="${CXX_TSAN:-clang++}"
if ! command -v "$CXX" >/dev/null 2>&1; then
  echo "tsan.sh: $CXX not found; skipping the ThreadSanitizer test"
  [[ "${CI:-}" == true ]] && exit 1  # in CI, .ci/run has installed clang: missing is a failure
  exit 0
fi
EIGEN="${EIGEN3_INCLUDE_DIR:-$(pkg-config --variable=includedir eigen3 2>/dev/null || true)}"
if [ -n "$EIGEN" ] && [ -d "$EIGEN/eigen3" ]; then EIGEN="$EIGEN/eigen3"; fi
EIGEN="${EIGEN:-/usr/include/eigen3}"

mkdir -p build-tsan
FLAGS=(-std=c++17 -O1 -g -fno-omit-frame-pointer -fsanitize=thread -Wall -Wextra -Wpedantic
       -Iinclude -isystem "$EIGEN" -pthread)
SRC=tests/tsan/concurrent_scores.cpp

echo "tsan.sh: $CXX, no OpenMP"
"$CXX" "${FLAGS[@]}" "$SRC" -o build-tsan/concurrent_scores
TSAN_OPTIONS="halt_on_error=1 ${TSAN_OPTIONS:-}" build-tsan/concurrent_scores

ARCHER="$("$CXX" -print-resource-dir 2>/dev/null)/../../libarcher.so"
if [ -f "$ARCHER" ] && echo 'int main(){}' | "$CXX" -fopenmp -x c++ - -o build-tsan/omp_probe 2>/dev/null; then
  echo "tsan.sh: $CXX, OpenMP (libomp) with Archer ($ARCHER)"
  "$CXX" "${FLAGS[@]}" -fopenmp "$SRC" -o build-tsan/concurrent_scores_omp
  OMP_TOOL_LIBRARIES="$ARCHER" \
    TSAN_OPTIONS="halt_on_error=1 ignore_noninstrumented_modules=1 ${TSAN_OPTIONS:-}" \
    build-tsan/concurrent_scores_omp
else
  echo "tsan.sh: no libarcher or -fopenmp for $CXX; the OpenMP variant is skipped"
fi
echo "tsan.sh: no data race, results bitwise equal"
