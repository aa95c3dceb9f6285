#!/usr/bin/env bash
# What peal costs to compile, on this machine (docs/build-cost.md):
#   1. each public header alone in a TU, beside Eigen/Dense alone;
#   2. the example TUs tour, decoder_step, vision_language, and a minimal user TU (a RoPE
#      preset, encode, causal attention), header-only and in compiled mode, beside a TU doing
#      an Eigen GEMM and a solve;
#   3. with a build directory argument whose build used scripts/time_compile.sh as
#      CMAKE_CXX_COMPILER_LAUNCHER: the slowest 15 TUs of that build (wall s, peak MB) and
#      the sum.
# Usage: scripts/compile_cost.sh [build-dir]     (CXX, CXXFLAGS override g++ -O2 -std=c++17)
# Wall times depend on what else runs: compare rows of one run, not runs of different days.
set -euo pipefail
cd "$(dirname "$0")/.."
root="$PWD"
CXX="${CXX:-g++}"
read -r -a flags <<<"${CXXFLAGS:--O2 -std=c++17}"
eigen="$(pkg-config --cflags eigen3 2>/dev/null || echo -I/usr/include/eigen3)"
read -r -a eigen <<<"$eigen"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
command -v /usr/bin/time >/dev/null || { echo "compile_cost: needs /usr/bin/time (apt-get install time)"; exit 1; }

measure() {  # name source-file [extra flags...]
  local name=$1 src=$2
  shift 2
  /usr/bin/time -f "%e %M" -o "$work/t" "$CXX" "${flags[@]}" "${eigen[@]}" -I"$root/include" \
    "$@" -c "$src" -o "$work/o.o" 2>"$work/err" || { echo "$name: compile failed"; cat "$work/err"; return 1; }
  read -r s kb <"$work/t"
  printf '%-34s %7.2f s %7d MB\n' "$name" "$s" $((kb / 1024))
}

echo "== compiler: $("$CXX" --version | head -n 1); flags: ${flags[*]}"
echo "== headers alone (#include <...>; int main() {})"
printf '#include <Eigen/Dense>\nint main() {}\n' >"$work/eigen.cpp"
measure "Eigen/Dense" "$work/eigen.cpp"
for h in include/peal/*.hpp include/peal/presets/*.hpp include/peal/models/*.hpp; do
  name="${h#include/}"
  grep -q "^// Moved to <peal/" "$h" && continue  # a forwarding header (docs/architecture.md §1)
  extra=()
  case "$name" in
    peal/models/hf_config.hpp) pkg-config --exists nlohmann_json 2>/dev/null || [[ -d /usr/include/nlohmann ]] || continue ;;
  esac
  printf '#include <%s>\nint main() {}\n' "$name" >"$work/h.cpp"
  measure "$name" "$work/h.cpp" "${extra[@]}"
done

echo "== user TUs"
cat >"$work/gemm.cpp" <<'CPP'
#include <Eigen/Dense>
int main() {
  Eigen::MatrixXf a = Eigen::MatrixXf::Random(64, 64), b = Eigen::MatrixXf::Random(64, 64);
  Eigen::MatrixXf c = a * b;
  Eigen::VectorXf x = c.partialPivLu().solve(Eigen::VectorXf::Ones(64));
  return x(0) > 1e30f;
}
CPP
measure "Eigen GEMM + solve" "$work/gemm.cpp"
cat >"$work/user.cpp" <<'CPP'
#include <peal/peal.hpp>
#include <vector>
int main() {
  peal::RopeConfig rc;  // a Llama-style RoPE preset, head size 128
  rc.head_dim = 128;
  const auto rope = peal::rope<double>(rc);
  const peal::Index T = 16, H = 4, d = 128;
  std::vector<float> q(std::size_t(T * H * d), 0.5f), k = q, v = q, out(q.size());
  std::vector<double> t(static_cast<std::size_t>(T));
  for (peal::Index i = 0; i < T; ++i) t[std::size_t(i)] = double(i);
  peal::encode_keys(rope, peal::make_view(k.data(), T, H, d), peal::Positions(t));
  peal::AttentionOptions opt;
  opt.causal = true;
  opt.keys_encoded = true;
  peal::attention(rope, peal::make_view<const float>(q.data(), T, H, d), peal::Positions(t),
                  peal::make_view<const float>(k.data(), T, H, d), peal::Positions(t),
                  peal::make_view<const float>(v.data(), T, H, d),
                  peal::make_view(out.data(), T, H, d), opt);
  return out[0] > 1e30f;
}
CPP
measure "user: preset + encode + attention" "$work/user.cpp" || true
# The same TU in compiled mode: the kernels declared extern (include/peal/compiled.hpp), as in
# a TU that links peal::compiled (compiled here only, not linked).
measure "user, compiled mode (PEAL_COMPILED)" "$work/user.cpp" -DPEAL_COMPILED || true
for e in tour decoder_step vision_language; do
  measure "examples/$e.cpp" "examples/$e.cpp" -I"$root/tests" || true
done

if [[ $# -ge 1 ]]; then
  log="$1/compile_times.log"
  [[ -f "$log" ]] || { echo "compile_cost: $log missing (configure with -DCMAKE_CXX_COMPILER_LAUNCHER=$root/scripts/time_compile.sh and PEAL_COMPILE_LOG=$log)"; exit 1; }
  echo "== slowest 15 TUs of $1 (wall s, peak MB)"
  sort -k1,1 -g -r "$log" | head -n 15 | awk '{printf "%7.1f s %6d MB  %s\n", $1, $2 / 1024, $3}'
  awk '{s += $1; if ($2 > m) m = $2} END {printf "== %d TUs, %.0f s of compile in all, largest peak %d MB\n", NR, s, m / 1024}' "$log"
fi
