// Benchmarks of the canonical form (issue 23 §4; include/peal/canonical_form.hpp) on the shape
// of a learned LieRE generator: a random skew-symmetric X, d = 64 and 128 (frequencies graded
// from ~1 down to ~1e-3, as RoPE's are), f32 rows, 4 heads. Results and commands:
// bench/README.md, "Canonical form".
//
//   encode/<d>/<n>     encode_keys through canonical_form(X) (out of place) for n tokens at
//       positions 0..n-1, against the dense route a user writes without peal: G(s) = exp(−sX)
//       by Eigen's MatrixExponential (double) once per position, then one matrix-vector
//       product per token and head. GB/s of the rows read and written (peal's median); vs_dense
//       = t_dense / t_peal (target ≥ 20); max_diff: P (peal's keys, in the canonical basis)
//       against the dense keys.
//   attention/<d>/<n>  causal prefill attention (n queries and keys, 4 heads) with the canonical
//       encoding against the same call with its rotations alone (`encoding.inner()`: the
//       equivalent RoPE bank in the canonical basis, the basis change left out). GFLOPS: the
//       causal half of 2 H n² (2 d) / 2 useful FLOPs; vs_bank = t_bank / t_canonical (target
//       ≥ 1 / 1.2: the basis change adds at most 20 %).
#include <benchmark/benchmark.h>

#include <algorithm>
#include <cmath>
#include <peal/attention.hpp>
#include <peal/canonical_form.hpp>
#include <peal/encode.hpp>
#include <random>
#include <unsupported/Eigen/MatrixFunctions>
#include <vector>

#include "bench_common.hpp"

namespace {

using namespace peal_bench;
using peal::Positions;
using peal::TensorView;

constexpr Index kHeads = 4;

// X = (B − Bᵀ)/2, B_ij = g_i g_j N(0, 1) with g_i² log-spaced from 1 to 1e-3 (an ungraded
// Gaussian B puts every frequency within a factor ~10 of the others).
Eigen::MatrixXd skew_generator(int d) {
  std::mt19937 rng(17);
  std::normal_distribution<double> g;
  Eigen::MatrixXd B(d, d);
  for (int i = 0; i < d; ++i)
    for (int j = 0; j < d; ++j) B(i, j) = g(rng) * std::pow(10.0, -1.5 * (i + j) / (d - 1));
  return (B - B.transpose()) / 2;
}

const peal::CanonicalForm<double>& canonical(int d) {
  static peal::CanonicalForm<double> cf64 = peal::canonical_form(skew_generator(64));
  static peal::CanonicalForm<double> cf128 = peal::canonical_form(skew_generator(128));
  return d == 64 ? cf64 : cf128;
}

void BM_encode(benchmark::State& state) {
  const int d = int(state.range(0));
  const Index n = state.range(1), H = kHeads;
  const auto& cf = canonical(d);
  const Eigen::MatrixXd X = skew_generator(d);
  const auto x = random_floats(std::size_t(n * H * d), 1);
  std::vector<float> y(x.size()), z(x.size());
  const TensorView<const float> in(x.data(), n, H, d);
  auto ours = [&] {
    peal::encode_keys(cf.encoding, in, TensorView<float>(y.data(), n, H, d),
                      Positions::sequence(0.0));
  };
  auto dense = [&] {
    for (Index i = 0; i < n; ++i) {
      const Eigen::MatrixXf G = Eigen::MatrixXd((-double(i)) * X).exp().cast<float>();
      for (Index h = 0; h < H; ++h) {
        const std::size_t o = std::size_t((i * H + h) * d);
        Eigen::Map<Eigen::VectorXf>(z.data() + o, d).noalias() =
            G * Eigen::Map<const Eigen::VectorXf>(x.data() + o, d);
      }
    }
  };
  paired_run(state, {{"", 1, ours}, {"dense", 1, dense}},
             2.0 * double(x.size()) * sizeof(float) * 1e-9, "GB/s");
  // Encoded keys are in the canonical basis (G(s) = A_J(−s) P⁻¹, docs/design.md §1): P times
  // them is the dense route's exp(−sX) k.
  const Eigen::MatrixXf P = cf.encoding.P().cast<float>();
  double diff = 0;
  for (Index r = 0; r < n * H; ++r) {
    const Eigen::VectorXf back = P * Eigen::Map<const Eigen::VectorXf>(y.data() + r * d, d);
    diff = std::max(diff, double((back - Eigen::Map<const Eigen::VectorXf>(z.data() + r * d, d))
                                     .cwiseAbs()
                                     .maxCoeff()));
  }
  state.counters["max_diff"] = diff;
}

void BM_attention(benchmark::State& state) {
  const int d = int(state.range(0));
  const Index n = state.range(1), H = kHeads;
  const auto& cf = canonical(d);
  const auto q = random_floats(std::size_t(n * H * d), 2), k = random_floats(q.size(), 3),
             v = random_floats(q.size(), 4);
  std::vector<float> out(q.size()), out_bank(q.size());
  const TensorView<const float> qv(q.data(), n, H, d), kv(k.data(), n, H, d), vv(v.data(), n, H, d);
  const Positions pos = Positions::sequence(0.0);
  peal::AttentionOptions opt;
  opt.causal = true;
  opt.threads = 1;
  auto ours = [&] {
    peal::attention(cf.encoding, qv, pos, kv, pos, vv, TensorView<float>(out.data(), n, H, d), opt);
  };
  auto bank = [&] {
    peal::attention(cf.encoding.inner(), qv, pos, kv, pos, vv,
                    TensorView<float>(out_bank.data(), n, H, d), opt);
  };
  paired_run(state, {{"", 1, ours}, {"bank", 1, bank}},
             2.0 * double(H) * double(n) * double(n) * double(2 * d) / 2.0 * 1e-9, "GFLOPS");
}

[[maybe_unused]] const bool registered = [] {
  auto paired = [](const char* name, auto fn) {
    auto* b = benchmark::RegisterBenchmark(name, fn);
    b->UseManualTime()->Unit(benchmark::kMillisecond)->MinTime(0.5);
    return b;
  };
  // Three iterations: the dense route takes seconds per run, and the manual time (peal's,
  // milliseconds) would ask for hundreds of them to fill MinTime.
  auto* e = benchmark::RegisterBenchmark("encode", BM_encode);
  e->UseManualTime()->Unit(benchmark::kMillisecond)->Iterations(3);
  for (int d : {64, 128}) e->Args({d, 4096});
  auto* a = paired("attention", BM_attention);
  for (int d : {64, 128})
    for (Index n : {512, 2048}) a->Args({d, n});
  return true;
}();

}  // namespace

BENCHMARK_MAIN();
