// Batch encode kernels (include/peal/encode.hpp) against the memory bandwidth they can
// reach: [n tokens, 32 heads, d] float queries, positions held as doubles (a span).
//
//   BM_Copy           memcpy of the same bytes, source -> destination (read + write):
//                     the bandwidth bound of an out-of-place encode.
//   BM_PealRope       peal RoPE (theta = 10000), Interleaved / HalfSplit, in place and out
//                     of place. Positions 0, 1, 2, ... held as a span of doubles.
//   BM_PealRope_irregular  the same (Interleaved, in place) at irregular real timestamps
//                     (random gaps in [0.5, 1.5)).
//   BM_NaiveRope      the textbook loop of many engines: per element, angle = pos * inv_freq
//                     in float, std::cos/std::sin in float, rotate (interleaved, in place).
//   BM_PealXPos       xPos-style decaying rotation bank (a_i = ln(zeta_i) / 512), out of
//                     place; BM_PealRetNet: one RetNet decay a = ln(1 - 2^-9) on every
//                     pair, out of place (out of place so that repeated iterations do not
//                     decay the data into subnormals).
//   BM_PealRealBank   Bank<RealBlock> (per-coordinate exponential decay), out of place.
//   BM_PealPartial    partial rotary: compose(Bank<RotationBlock> on d/4, PassThrough).
//   BM_PealRopeBackward  encode_queries_backward (include/peal/encode_backward.hpp) of the
//                     HalfSplit RoPE bank, out of place: dq alone (reads G, writes dq: 2
//                     arrays, as the forward) or with the parameter gradient (reads q and G,
//                     writes dq: 3 arrays counted). BM_PealRope_1head and the <·, 1>
//                     instances: the same on one head, where per-token work dominates.
//
// bytes_per_second counts read + write bytes (2 * n * 32 * d * 4). Everything runs on one
// thread (omp_set_num_threads(1) when built with OpenMP) except BM_PealRope_2threads.
// The peal / copy ratio is computed afterwards from the medians (bench/README.md).
#include <benchmark/benchmark.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <peal/encode.hpp>
#include <peal/encode_backward.hpp>
#include <peal/peal.hpp>
#include <random>
#include <vector>

#ifdef _OPENMP
#include <omp.h>
#endif

namespace {

constexpr int kHeads = 32;

void set_threads(int n) {
#ifdef _OPENMP
  omp_set_num_threads(n);
#else
  (void)n;
#endif
}

struct Data {
  Data(benchmark::State& state, bool out_of_place, int heads = kHeads)
      : n(state.range(0)), d(state.range(1)), elems(std::size_t(n) * std::size_t(heads) * std::size_t(d)) {
    std::mt19937 rng(1);
    std::uniform_real_distribution<float> u(-1, 1);
    src.resize(elems);
    for (auto& x : src) x = u(rng);
    if (out_of_place) dst.assign(elems, 0.0f);
    pos.resize(std::size_t(n));
    for (std::int64_t i = 0; i < n; ++i) pos[std::size_t(i)] = double(i);
  }
  void account(benchmark::State& state) const {
    state.SetBytesProcessed(std::int64_t(state.iterations()) * 2 * std::int64_t(elems) *
                            std::int64_t(sizeof(float)));
  }
  std::int64_t n, d;
  std::size_t elems;
  std::vector<float> src, dst;
  std::vector<double> pos;
};

peal::Bank<peal::RotationBlock<float>> rope(int d, peal::Layout layout) {
  std::vector<peal::RotationBlock<float>> b;
  for (int i = 0; i < d / 2; ++i) b.emplace_back(std::pow(10000.0L, -2.0L * i / d));
  return peal::Bank<peal::RotationBlock<float>>(b, layout);
}
peal::Bank<peal::RotationBlock<float>> xpos(int d) {
  std::vector<peal::RotationBlock<float>> b;
  for (int i = 0; i < d / 2; ++i) {
    const double zeta = (2.0 * i / d + 0.4) / 1.4;
    b.emplace_back(std::pow(10000.0L, -2.0L * i / d), std::log(zeta) / 512.0);
  }
  return peal::Bank<peal::RotationBlock<float>>(b, peal::Layout::Interleaved);
}
peal::Bank<peal::RotationBlock<float>> retnet(int d) {
  std::vector<peal::RotationBlock<float>> b;
  for (int i = 0; i < d / 2; ++i)
    b.emplace_back(std::pow(10000.0L, -2.0L * i / d), std::log1p(-std::ldexp(1.0, -9)));
  return peal::Bank<peal::RotationBlock<float>>(b, peal::Layout::HalfSplit);
}
peal::Bank<peal::RealBlock<float>> real_bank(int d) {
  std::vector<peal::RealBlock<float>> b;
  for (int i = 0; i < d; ++i) b.emplace_back(-0.001 * (1 + i % 7));
  return peal::Bank<peal::RealBlock<float>>(b);
}

void BM_Copy(benchmark::State& state) {
  Data x(state, true);
  for (auto _ : state) {
    std::memcpy(x.dst.data(), x.src.data(), x.elems * sizeof(float));
    benchmark::DoNotOptimize(x.dst.data());
    benchmark::ClobberMemory();
  }
  x.account(state);
}

template <class E>
void run_peal(benchmark::State& state, const E& enc, bool out_of_place, int threads = 1,
              bool irregular = false) {
  set_threads(threads);
  Data x(state, out_of_place);
  if (irregular) {
    std::mt19937 rng(2);
    std::uniform_real_distribution<double> gap(0.5, 1.5);
    double t = 0;
    for (auto& p : x.pos) p = (t += gap(rng));
  }
  const peal::Positions pos(x.pos);
  peal::TensorView<float> vs(x.src.data(), x.n, kHeads, x.d);
  for (auto _ : state) {
    if (out_of_place)
      peal::encode_queries(enc, peal::TensorView<const float>(vs),
                           peal::TensorView<float>(x.dst.data(), x.n, kHeads, x.d), pos);
    else
      peal::encode_queries(enc, vs, pos);
    benchmark::ClobberMemory();
  }
  x.account(state);
  set_threads(1);
}

template <peal::Layout L, bool OutOfPlace>
void BM_PealRope(benchmark::State& state) {
  run_peal(state, rope(int(state.range(1)), L), OutOfPlace);
}
void BM_PealRope_irregular(benchmark::State& state) {
  run_peal(state, rope(int(state.range(1)), peal::Layout::Interleaved), false, 1, true);
}
void BM_PealRope_2threads(benchmark::State& state) {
  run_peal(state, rope(int(state.range(1)), peal::Layout::Interleaved), false, 2);
}
void BM_PealXPos(benchmark::State& state) { run_peal(state, xpos(int(state.range(1))), true); }
void BM_PealRetNet(benchmark::State& state) { run_peal(state, retnet(int(state.range(1))), true); }
void BM_PealRealBank(benchmark::State& state) {
  run_peal(state, real_bank(int(state.range(1))), true);
}
void BM_PealPartial(benchmark::State& state) {
  const int d = int(state.range(1)), r = d / 4;
  run_peal(state, peal::compose(rope(r, peal::Layout::HalfSplit), peal::PassThrough<float>(d - r)),
           false);
}

template <bool WithParameters, int Heads = kHeads>
void BM_PealRopeBackward(benchmark::State& state) {
  set_threads(1);
  Data x(state, true, Heads);
  const auto enc = rope(int(x.d), peal::Layout::HalfSplit);
  std::vector<float> g = x.src;
  std::reverse(g.begin(), g.end());
  std::vector<double> grad(std::size_t(peal::parameter_count(enc)), 0.0);
  const peal::Positions pos(x.pos);
  const peal::TensorView<const float> q(x.src.data(), x.n, Heads, x.d), gv(g.data(), x.n, Heads, x.d);
  const peal::TensorView<float> dq(x.dst.data(), x.n, Heads, x.d);
  for (auto _ : state) {
    if (WithParameters)
      peal::encode_queries_backward(enc, q, pos, gv, dq, {&grad});
    else
      peal::encode_queries_backward(enc, q, pos, gv, dq);
    benchmark::DoNotOptimize(grad.data());
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(std::int64_t(state.iterations()) * (WithParameters ? 3 : 2) *
                          std::int64_t(x.elems) * std::int64_t(sizeof(float)));
}

// The forward it is compared with, on one head (the per-token work, not the bytes, dominates).
void BM_PealRope_1head(benchmark::State& state) {
  set_threads(1);
  Data x(state, true, 1);
  const auto enc = rope(int(x.d), peal::Layout::HalfSplit);
  const peal::Positions pos(x.pos);
  for (auto _ : state) {
    peal::encode_queries(enc, peal::TensorView<const float>(x.src.data(), x.n, 1, x.d),
                         peal::TensorView<float>(x.dst.data(), x.n, 1, x.d), pos);
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(std::int64_t(state.iterations()) * 2 * std::int64_t(x.elems) *
                          std::int64_t(sizeof(float)));
}

// The textbook RoPE: angles in float, one std::cos and std::sin per pair and token and head.
void BM_NaiveRope(benchmark::State& state) {
  set_threads(1);
  Data x(state, false);
  const int d = int(x.d);
  std::vector<float> inv_freq(std::size_t(d / 2));
  for (int i = 0; i < d / 2; ++i) inv_freq[std::size_t(i)] = std::pow(10000.0f, -2.0f * i / d);
  for (auto _ : state) {
    for (std::int64_t t = 0; t < x.n; ++t) {
      const float p = float(x.pos[std::size_t(t)]);
      for (int h = 0; h < kHeads; ++h) {
        float* v = x.src.data() + (std::size_t(t) * kHeads + std::size_t(h)) * std::size_t(d);
        for (int i = 0; i < d / 2; ++i) {
          const float theta = p * inv_freq[std::size_t(i)];
          const float c = std::cos(theta), s = std::sin(theta);
          const float x0 = v[2 * i], x1 = v[2 * i + 1];
          v[2 * i] = x0 * c - x1 * s;
          v[2 * i + 1] = x0 * s + x1 * c;
        }
      }
    }
    benchmark::ClobberMemory();
  }
  x.account(state);
}

void Sizes(benchmark::internal::Benchmark* b) {
  for (int d : {64, 128})
    for (int n : {512, 2048, 4096, 8192}) b->Args({n, d});
  b->ArgNames({"n", "d"})->Unit(benchmark::kMicrosecond)->UseRealTime();
}

}  // namespace

BENCHMARK(BM_Copy)->Apply(Sizes);
BENCHMARK_TEMPLATE(BM_PealRope, peal::Layout::Interleaved, false)->Apply(Sizes);
BENCHMARK_TEMPLATE(BM_PealRope, peal::Layout::HalfSplit, false)->Apply(Sizes);
BENCHMARK_TEMPLATE(BM_PealRope, peal::Layout::Interleaved, true)->Apply(Sizes);
BENCHMARK_TEMPLATE(BM_PealRope, peal::Layout::HalfSplit, true)->Apply(Sizes);
BENCHMARK(BM_PealRope_irregular)->Apply(Sizes);
BENCHMARK(BM_PealRope_2threads)->Apply(Sizes);
BENCHMARK(BM_NaiveRope)->Apply(Sizes);
BENCHMARK(BM_PealXPos)->Apply(Sizes);
BENCHMARK(BM_PealRetNet)->Apply(Sizes);
BENCHMARK(BM_PealRealBank)->Apply(Sizes);
BENCHMARK(BM_PealPartial)->Apply(Sizes);
BENCHMARK_TEMPLATE(BM_PealRopeBackward, false)->Apply(Sizes);
BENCHMARK_TEMPLATE(BM_PealRopeBackward, true)->Apply(Sizes);
void OneHeadSizes(benchmark::internal::Benchmark* b) {
  for (int n : {512, 2048}) b->Args({n, 128});
  b->ArgNames({"n", "d"})->Unit(benchmark::kMicrosecond)->UseRealTime();
}
BENCHMARK(BM_PealRope_1head)->Apply(OneHeadSizes);
BENCHMARK_TEMPLATE(BM_PealRopeBackward, false, 1)->Apply(OneHeadSizes);
BENCHMARK_TEMPLATE(BM_PealRopeBackward, true, 1)->Apply(OneHeadSizes);

BENCHMARK_MAIN();
