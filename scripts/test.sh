#!/usr/bin/env bash
# The project's test command (README and .ci/run both call this script).
set -euo pipefail
cd "$(dirname "$0")/.."

cmake -S . -B build -DCMAKE_BUILD_TYPE=Release && cmake --build build -j2 &&
  ctest --test-dir build --output-on-failure -j2
