// N-D positions (docs/positions-nd.md): M-RoPE encode and attention, paired contenders in one
// run (bench/bench_common.hpp; bench/README.md "N-D positions" has the results and commands).
//
//   encode/<n>/<H>   encode_queries in place, f32, head_dim 128, Qwen2-VL's M-RoPE
//                    (sections [16, 24, 24]) at image-like (t, h, w) points:
//                      peal      the fused N-D rotation kernel (one sincos per pair)
//                      rope      1-D RoPE of the same shape (the floor: same memory traffic,
//                                the same sincos count)
//                      axes      the axes one after the other (MultiAxis of 1-D RoPE
//                                encodings: what the generic N-D kernel does; 3 sincos and
//                                3 rotations per pair)
//                      copy      memcpy of the same bytes (the bandwidth bound)
//                    counter GB/s = 2 n H 128 4 bytes / time (read + write).
//   attention/<n>/<H>  causal prefill, H heads (1: nothing is store-bound), head_dim 128, f32:
//                      peal      attention over (t, h, w) points (encodes q and k once, then
//                                the fused kernel with the identity encoding)
//                      rope1d    the fused 1-D attention with RoPE (rebasing inside the tiles)
//                      id        the identity encoding on the same q, k (the floor)
//                      unfused   scores over the points (n x n stored), softmax, P V (Eigen)
//                      gemms     the plain Eigen GEMMs Q K^T and P V alone (full n x n)
//                    counter GFLOPS = 2 * 2 * (n^2/2) * 128 * H / time (causal work).
#include <benchmark/benchmark.h>

#include <cmath>
#include <cstring>
#include <peal/peal.hpp>
#include <vector>

#include "bench_common.hpp"

namespace {

using namespace peal_bench;

peal::RopeConfig qwen2_vl() {
  peal::RopeConfig c;
  c.head_dim = int(kDim);
  c.rope_theta = 1e6;
  c.scaling.mrope_section = {16, 24, 24};
  return c;
}

using Axis = peal::MRopeEncoding<double>::Axis;
struct PerAxis : Axis {
  using encoding_type = Axis;  // its 1-D kernel is the composition's
  explicit PerAxis(const Axis& a) : Axis(a) {}
};

// Image-like points: a text prefix of 16 tokens, then 32-wide image rows.
std::vector<double> points(Index n) {
  std::vector<double> p;
  for (Index i = 0; i < n; ++i) {
    const double t = i < 16 ? double(i) : 16.0;
    const double h = i < 16 ? double(i) : 16.0 + double((i - 16) / 32);
    const double w = i < 16 ? double(i) : 16.0 + double((i - 16) % 32);
    p.insert(p.end(), {t, h, w});
  }
  return p;
}

void BM_encode(benchmark::State& state) {
  const Index n = state.range(0), H = state.range(1);
  const auto m = peal::mrope<double>(qwen2_vl());
  auto plain = qwen2_vl();
  plain.scaling.mrope_section.clear();
  const auto r = peal::rope<double>(plain);
  // The generic per-axis form: the same three axes under a type the N-D dispatch does not
  // know (so MultiAxisKernel runs each axis's 1-D kernel in turn).
  std::vector<PerAxis> each;
  for (const auto& e : m.axis_encodings()) each.emplace_back(e);
  const peal::MultiAxis<PerAxis> generic(each);

  const auto pos = points(n);
  std::vector<double> t(static_cast<std::size_t>(n));
  for (Index i = 0; i < n; ++i) t[std::size_t(i)] = double(i);
  auto x = random_floats(std::size_t(n * H * kDim), 1);
  std::vector<float> y(x.size());
  const peal::TensorView<float> v(x.data(), n, H, kDim);
  const peal::PositionsND P(pos, 3);
  const double bytes = 2.0 * double(x.size()) * sizeof(float);
  paired_run(state,
             {{"", 1, [&] { peal::encode_queries(m, v, P); }},
              {"rope", 1, [&] { peal::encode_queries(r, v, peal::Positions(t)); }},
              {"axes", 1, [&] { peal::encode_queries(generic, v, P); }},
              {"copy", 1, [&] { std::memcpy(y.data(), x.data(), x.size() * sizeof(float)); }}},
             bytes * 1e-9, "GBps");
}

void BM_attention(benchmark::State& state) {
  const Index n = state.range(0), H = state.range(1);
  const auto m = peal::mrope<double>(qwen2_vl());
  auto plain = qwen2_vl();
  plain.scaling.mrope_section.clear();
  const auto r = peal::rope<double>(plain);
  const peal::PassThrough<double> id{int(kDim)};
  const auto q = random_floats(std::size_t(n * H * kDim), 2), k = random_floats(q.size(), 3),
             vv = random_floats(q.size(), 4);
  std::vector<float> o(q.size()), o2(q.size()), p(std::size_t(H * n * n));
  const peal::TensorView<const float> Q(q.data(), n, H, kDim), K(k.data(), n, H, kDim),
      V(vv.data(), n, H, kDim);
  const peal::TensorView<float> O(o.data(), n, H, kDim);
  const auto pos = points(n);
  const peal::PositionsND P(pos, 3);
  const auto T = peal::Positions::sequence(0);
  peal::AttentionOptions opt;
  opt.causal = true;
  opt.threads = 1;
  peal::ScoreOptions so;
  so.causal = true;
  so.scale = 1.0 / std::sqrt(double(kDim));
  so.threads = 1;
  // The unfused pipeline over the same points: scores (n x n stored), softmax, P V.
  auto unfused = [&] {
    peal::scores(m, Q, P, K, P, peal::TensorView<float>(p.data(), H, n, n), so);
    softmax_rows(p.data(), H * n, n);
    pv_heads(p.data(), vv.data(), o2.data(), n, H, kDim);
  };
  auto gemms = [&] {
    qk_heads(q.data(), k.data(), p.data(), n, n, H, kDim);
    pv_heads(p.data(), vv.data(), o2.data(), n, H, kDim);
  };
  peal::attention(m, Q, P, K, P, V, O, opt);
  unfused();
  state.counters["max_diff"] = max_abs_diff(o, o2);
  const double flops = 4.0 * (double(n) * double(n) / 2) * double(kDim) * double(H);
  paired_run(state,
             {{"", 1, [&] { peal::attention(m, Q, P, K, P, V, O, opt); }},
              {"rope1d", 1, [&] { peal::attention(r, Q, T, K, T, V, O, opt); }},
              {"id", 1, [&] { peal::attention(id, Q, T, K, T, V, O, opt); }},
              {"unfused", 1, unfused},
              {"gemms", 1, gemms}},
             flops * 1e-9, "GFLOPS");
}

}  // namespace

BENCHMARK(BM_encode)
    ->Name("encode")
    ->ArgsProduct({{512, 2048, 4096}, {1, 28}})
    ->UseManualTime()
    ->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_attention)
    ->Name("attention")
    ->ArgsProduct({{512, 2048}, {1, 4}})
    ->UseManualTime()
    ->Unit(benchmark::kMillisecond);
BENCHMARK_MAIN();
