#!/usr/bin/env bash
# Install the Debian packages peal's build, tests, benchmarks and examples use, if missing.
# (The library itself needs only libeigen3-dev.) clang and its runtime libraries serve the
# sanitizer, ThreadSanitizer and fuzzing checks (scripts/sanitize.sh, tsan.sh, fuzz.sh);
# gnuplot-nox (optional) draws docs/pictures (cmake --build build --target peal_pictures);
# time (GNU time) serves scripts/compile_cost.sh and scripts/time_compile.sh; lld links the
# test and example executables (CMakeLists.txt, PEAL_USE_LLD); python3-torch, python3-pytest,
# python3-dev and pybind11-dev serve the PyTorch op (python/: built and tested for Debian's
# /usr/bin/python3); libopenmpi-dev and openmpi-bin build and run
# examples/context_parallel_mpi.cpp (its ctests run it with 2 and 4 ranks; examples/CMakeLists.txt
# skips it when MPI is missing).
# Set PEAL_SETUP_EXTRA for more packages.
set -euo pipefail

packages=(g++ cmake make libeigen3-dev catch2 nlohmann-json3-dev libbenchmark-dev
          libopenblas-dev libomp-dev clang libclang-rt-dev lld gnuplot-nox time
          python3-torch python3-pytest python3-dev pybind11-dev libopenmpi-dev openmpi-bin
          ${PEAL_SETUP_EXTRA:-})

missing=()
for pkg in "${packages[@]}"; do
  dpkg -s "$pkg" >/dev/null 2>&1 || missing+=("$pkg")
done

if ((${#missing[@]} > 0)); then
  echo "setup: installing missing packages: ${missing[*]}"
  sudo=()
  [[ "$(id -u)" != "0" ]] && sudo=(sudo)
  "${sudo[@]}" apt-get update
  "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive \
    apt-get install -y --no-install-recommends "${missing[@]}"
fi
