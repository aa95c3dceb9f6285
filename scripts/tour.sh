#!/usr/bin/env bash
# The main job on a fresh Debian machine: install what is needed, build, run the tour.
set -euo pipefail
cd "$(dirname "$0")/.."

./scripts/setup.sh
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release
cmake --build build -j2 --target example_tour
./build/examples/example_tour
