#!/usr/bin/env bash
# Build peal's tests and examples with clang++ and ASan + UBSan (PEAL_SANITIZE=ON) in
# build-asan/ and run them; the benchmarks are built there too (compiled and linked without the
# sanitizers, not run: CI's check that they build; bench/CMakeLists.txt). -O0 without NDEBUG:
# Eigen's assertions stay on, and the build costs a quarter of -O1's; the test TUs whose checks
# take most of the run time compile at -O1 (tests/CMakeLists.txt names them).
# -gline-tables-only: the sanitizers' stack traces keep file and line, and the build costs ~18%
# less than with -g (docs/build-cost.md). The consumer projects (packaging, not memory) and
# peal::compiled with its bitwise check (the kernels the tests run already) are left to
# scripts/test.sh. Run by .ci/run on every submission.
set -euo pipefail
cd "$(dirname "$0")/.."

export ASAN_OPTIONS="${ASAN_OPTIONS:-detect_leaks=1:strict_string_checks=1:check_initialization_order=1}"
export UBSAN_OPTIONS="${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}"

cxx="${CXX_SANITIZE:-clang++}"
lines=-gline-tables-only
"$cxx" --version | grep -q clang || lines=-g1  # GCC's nearest: line tables, no variables
CXX="$cxx" cmake -S . -B build-asan \
  -DCMAKE_BUILD_TYPE=Debug \
  "-DCMAKE_CXX_FLAGS_DEBUG=-O0 $lines" \
  -DPEAL_SANITIZE=ON \
  -DPEAL_BUILD_BENCHMARKS=ON \
  -DPEAL_BUILD_COMPILED=OFF
cmake --build build-asan -j2
ctest --test-dir build-asan --output-on-failure -j2 -E '^consumer_'
