// Benchmarks of peal::scores (include/peal/scores.hpp), the fused, rebased scores kernel,
// against the baselines that matter (results and the commands: bench/README.md):
//   plain     Eigen GEMM Q_h K_h^T per head, no positional encoding (the speed of light);
//   unfused   encode every query and key (peal::encode_queries/encode_keys into scratch
//             copies, global F(t), G(s)), then the same GEMM per head, then the epilogue;
//   naive     the per-pair form q^T A(t - s) k (peal::scores_reference), n = 512 only;
//   fused     peal::scores;
//   paired    the plain GEMM and peal::scores timed back to back, median of the ratios
//             (the figure bench/README.md reports; see paired()).
// Encodings: RoPE (both layouts), ALiBi (no rotation + slope epilogue), RetNet (RoPE + scalar
// decay per head, rebasing on), xPos (per-pair decays, rebasing on), a mixed composition with
// RotationJordanBlock<2> and JordanBlock<2> (rebasing on), and JordanBlock<3> (its Jordan
// part evaluated per pair, detail/coders/poly_parts.hpp). Arguments: n (queries = keys), d
// (head dim), threads. 4 heads, float storage and output, positions 0..n-1, no mask.
// Counter GFLOPS = 2 n^2 d heads / s (wall time: UseRealTime, OpenMP threads included).
#include <benchmark/benchmark.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <map>
#include <memory>
#include <peal/presets/alibi.hpp>
#include <peal/encode.hpp>
#include <peal/peal.hpp>
#include <peal/presets/retnet.hpp>
#include <peal/scores.hpp>
#include <peal/scores_backward.hpp>
#include <peal/presets/xpos.hpp>
#include <random>
#include <string>
#include <utility>
#include <vector>

#ifdef _OPENMP
#include <omp.h>
#endif

namespace {

using peal::Index;
using peal::Positions;
using peal::ScoreOptions;
using peal::TensorView;
using RowMat = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
using Rot = peal::RotationBlock<double>;
using RotBank = peal::Bank<Rot>;

constexpr Index kHeads = 4;

struct Data {
  Index n, d;
  std::vector<float> q, k, qe, ke;  // [n, H, d]; qe/ke: scratch for the unfused pipeline
};

Data& data(Index n, Index d) {
  static std::map<std::pair<Index, Index>, std::unique_ptr<Data>> cache;
  auto& p = cache[{n, d}];
  if (!p) {
    p.reset(new Data{n, d, {}, {}, {}, {}});
    std::mt19937 rng(std::uint32_t(n * 131 + d));
    std::normal_distribution<float> N;
    p->q.resize(std::size_t(n * kHeads * d));
    p->k.resize(p->q.size());
    for (auto& x : p->q) x = N(rng);
    for (auto& x : p->k) x = N(rng);
    p->qe.resize(p->q.size());
    p->ke.resize(p->q.size());
  }
  return *p;
}

/// One output buffer shared by every benchmark ([H, n, n] floats, 1 GiB at n = 8192).
std::vector<float>& out_buffer(Index n) {
  static std::vector<float> out;
  const std::size_t need = std::size_t(kHeads * n * n);
  if (out.size() < need) out.resize(need);
  return out;
}

#if defined(EIGEN_USE_BLAS) && (defined(__GNUC__) || defined(__clang__))
// OpenBLAS runs its own thread pool; when present, size it like the OpenMP team (baselines)
// or to 1 (inside peal::scores, whose OpenMP threads each call the BLAS on one tile).
extern "C" void openblas_set_num_threads(int) __attribute__((weak));
void set_blas_threads(int t) {
  if (openblas_set_num_threads) openblas_set_num_threads(t);
}
#else
void set_blas_threads(int) {}
#endif

void set_threads(int t, int blas_threads) {
#ifdef _OPENMP
  omp_set_num_threads(t);
#endif
  Eigen::setNbThreads(t);
  set_blas_threads(blas_threads);
}
void set_threads(int t) { set_threads(t, t); }

RotBank rope(Index d, peal::Layout layout) {
  std::vector<Rot> b;
  for (Index i = 0; i < d / 2; ++i) b.emplace_back(std::pow(10000.0L, -2.0L * i / d), 0.0);
  return RotBank(b, layout);
}

auto mixed(Index d) {
  std::vector<Rot> b;
  const Index pairs = (d - 8) / 2;
  for (Index i = 0; i < pairs; ++i) b.emplace_back(std::pow(10000.0L, -2.0L * i / d), -1e-4);
  return peal::compose(RotBank(b), peal::RotationJordanBlock<2, double>(0.25, -1e-3),
                       peal::JordanBlock<2, double>(0.0), peal::PassThrough<double>(2));
}

auto jordan3(Index d) {
  std::vector<Rot> b;
  const Index pairs = (d - 4) / 2;
  for (Index i = 0; i < pairs; ++i) b.emplace_back(std::pow(10000.0L, -2.0L * i / d), 0.0);
  return peal::compose(RotBank(b), peal::JordanBlock<3, double>(0.0), peal::PassThrough<double>(1));
}

std::vector<double> slopes() { return peal::alibi_slopes(int(kHeads)); }
std::vector<double> decays() { return peal::retnet_decays(int(kHeads)); }

void set_counters(benchmark::State& state, Index n, Index d) {
  state.counters["GFLOPS"] =
      benchmark::Counter(2.0 * double(n) * double(n) * double(d) * kHeads * 1e-9,
                         benchmark::Counter::kIsIterationInvariantRate);
}

/// out_h = Q_h K_h^T for every head (Eigen, its own OpenMP threads).
void gemm_heads(const float* q, const float* k, float* out, Index n, Index d) {
  for (Index h = 0; h < kHeads; ++h) {
    Eigen::Map<const RowMat, 0, Eigen::OuterStride<>> Q(q + h * d, n, d,
                                                        Eigen::OuterStride<>(kHeads * d));
    Eigen::Map<const RowMat, 0, Eigen::OuterStride<>> K(k + h * d, n, d,
                                                        Eigen::OuterStride<>(kHeads * d));
    Eigen::Map<RowMat> O(out + h * n * n, n, n);
    O.noalias() = Q * K.transpose();
  }
}

// ---- Baselines --------------------------------------------------------------------------

void BM_plain_gemm(benchmark::State& state) {
  const Index n = state.range(0), d = state.range(1);
  set_threads(int(state.range(2)));
  Data& D = data(n, d);
  float* out = out_buffer(n).data();
  for (auto _ : state) {
    gemm_heads(D.q.data(), D.k.data(), out, n, d);
    benchmark::DoNotOptimize(out);
    benchmark::ClobberMemory();
  }
  set_counters(state, n, d);
}

enum class Epilogue { none, alibi, decay };

/// Encode everything (global F(t), G(s)), GEMM per head, then the epilogue.
template <class E>
void unfused(benchmark::State& state, const E& enc, Epilogue ep) {
  const Index n = state.range(0), d = state.range(1);
  set_threads(int(state.range(2)));
  Data& D = data(n, d);
  float* out = out_buffer(n).data();
  const auto pos = Positions::sequence(0.0);
  const auto m = slopes();
  const auto g = decays();
  // γ^(i - j) for i - j in [-(n-1), n-1] (one table per head, as an engine would cache it).
  std::vector<std::vector<float>> pw(static_cast<std::size_t>(kHeads));
  for (Index h = 0; h < kHeads; ++h) {
    pw[std::size_t(h)].resize(std::size_t(2 * n));
    for (Index x = 0; x < 2 * n; ++x)
      pw[std::size_t(h)][std::size_t(x)] = float(std::pow(g[std::size_t(h)], double(x - n)));
  }
  for (auto _ : state) {
    peal::encode_queries(enc, TensorView<const float>(D.q.data(), n, kHeads, d),
                         TensorView<float>(D.qe.data(), n, kHeads, d), pos);
    peal::encode_keys(enc, TensorView<const float>(D.k.data(), n, kHeads, d),
                      TensorView<float>(D.ke.data(), n, kHeads, d), pos);
    gemm_heads(D.qe.data(), D.ke.data(), out, n, d);
    if (ep != Epilogue::none) {
#pragma omp parallel for schedule(static)
      for (Index r = 0; r < kHeads * n; ++r) {
        const Index h = r / n, i = r % n;
        float* o = out + r * n;
        if (ep == Epilogue::alibi) {
          const float mh = float(m[std::size_t(h)]);
          for (Index j = 0; j < n; ++j) o[j] -= mh * float(i - j);
        } else {
          const float* p = pw[std::size_t(h)].data() + n + i;
          for (Index j = 0; j < n; ++j) o[j] *= p[-j];
        }
      }
    }
    benchmark::DoNotOptimize(out);
    benchmark::ClobberMemory();
  }
  set_counters(state, n, d);
}

template <class E>
void naive(benchmark::State& state, const E& enc, const ScoreOptions& opt) {
  const Index n = state.range(0), d = state.range(1);
  set_threads(1);
  Data& D = data(n, d);
  float* out = out_buffer(n).data();
  for (auto _ : state) {
    peal::scores_reference(enc, TensorView<const float>(D.q.data(), n, kHeads, d),
                           Positions::sequence(0.0),
                           TensorView<const float>(D.k.data(), n, kHeads, d),
                           Positions::sequence(0.0), TensorView<float>(out, kHeads, n, n), opt);
    benchmark::DoNotOptimize(out);
  }
  set_counters(state, n, d);
}

// ---- Fused --------------------------------------------------------------------------------

template <class E>
void fused(benchmark::State& state, const E& enc, ScoreOptions opt) {
  const Index n = state.range(0), d = state.range(1);
  set_threads(int(state.range(2)), 1);
  opt.threads = int(state.range(2));
  Data& D = data(n, d);
  float* out = out_buffer(n).data();
  const TensorView<const float> q(D.q.data(), n, kHeads, d), k(D.k.data(), n, kHeads, d);
  const TensorView<float> o(out, kHeads, n, n);
  for (auto _ : state) {
    peal::scores(enc, q, Positions::sequence(0.0), k, Positions::sequence(0.0), o, opt);
    benchmark::DoNotOptimize(out);
    benchmark::ClobberMemory();
  }
  set_counters(state, n, d);
}

// Paired: each iteration times the plain GEMM and the fused kernel back to back (in
// alternating order, so that neither always runs on a warm cache) and records the ratio
// GEMM time / fused time. On a shared, noisy machine the median of these paired ratios is
// far steadier than a ratio of two separately measured medians. Counters: vs_gemm (median
// ratio; >= 1 means the fused kernel is at least as fast as the GEMM without encoding),
// GFLOPS (from the median fused time). Reported time: the fused kernel's (manual time).
template <class E>
void paired(benchmark::State& state, const E& enc, ScoreOptions opt) {
  using clock = std::chrono::steady_clock;
  const Index n = state.range(0), d = state.range(1);
  const int threads = int(state.range(2));
  opt.threads = threads;
  Data& D = data(n, d);
  float* out = out_buffer(n).data();
  const TensorView<const float> q(D.q.data(), n, kHeads, d), k(D.k.data(), n, kHeads, d);
  const TensorView<float> o(out, kHeads, n, n);
  auto run_gemm = [&] {
    set_threads(threads);
    const auto t0 = clock::now();
    gemm_heads(D.q.data(), D.k.data(), out, n, d);
    benchmark::DoNotOptimize(out);
    benchmark::ClobberMemory();
    return std::chrono::duration<double>(clock::now() - t0).count();
  };
  auto run_fused = [&] {
    set_threads(threads, 1);
    const auto t0 = clock::now();
    peal::scores(enc, q, Positions::sequence(0.0), k, Positions::sequence(0.0), o, opt);
    benchmark::DoNotOptimize(out);
    benchmark::ClobberMemory();
    return std::chrono::duration<double>(clock::now() - t0).count();
  };
  std::vector<double> ratios, times;
  bool gemm_first = true;
  for (auto _ : state) {
    double g, f;
    if (gemm_first) {
      g = run_gemm();
      f = run_fused();
    } else {
      f = run_fused();
      g = run_gemm();
    }
    gemm_first = !gemm_first;
    ratios.push_back(g / f);
    times.push_back(f);
    state.SetIterationTime(f);
  }
  auto median = [](std::vector<double> v) {
    std::sort(v.begin(), v.end());
    const std::size_t m = v.size() / 2;
    return v.size() % 2 ? v[m] : 0.5 * (v[m - 1] + v[m]);
  };
  const double tf = median(times);
  state.counters["vs_gemm"] = median(ratios);
  state.counters["GFLOPS"] = 2.0 * double(n) * double(n) * double(d) * kHeads * 1e-9 / tf;
}

// scores_backward (include/peal/scores_backward.hpp) against the forward scores of the same
// problem, paired as above: the backward with every gradient of the encoding (dq, dk and the
// parameters; d_out = the forward's output, float, causal mask), the forward in float.
// Counters: bwd_over_fwd (median time ratio; the backward does two GEMMs of the forward's size,
// in double: ~4 at best), GFLOPS of the backward (4 n² d heads / s).
template <class E>
void paired_backward(benchmark::State& state, const E& enc) {
  using clock = std::chrono::steady_clock;
  const Index n = state.range(0), d = state.range(1);
  ScoreOptions opt;
  opt.threads = 1;
  set_threads(1, 1);
  Data& D = data(n, d);
  std::vector<float> out(std::size_t(kHeads * n * n)), dq(D.q.size()), dk(D.k.size());
  std::vector<double> gp(std::size_t(peal::parameter_count(enc)));
  const TensorView<const float> q(D.q.data(), n, kHeads, d), k(D.k.data(), n, kHeads, d);
  const TensorView<float> o(out.data(), kHeads, n, n);
  peal::scores(enc, q, Positions::sequence(0.0), k, Positions::sequence(0.0), o, opt);
  for (float& x : out) x = std::tanh(x);  // a bounded upstream gradient
  auto run_forward = [&] {
    const auto t0 = clock::now();
    peal::scores(enc, q, Positions::sequence(0.0), k, Positions::sequence(0.0), o, opt);
    benchmark::ClobberMemory();
    return std::chrono::duration<double>(clock::now() - t0).count();
  };
  std::vector<float> ds = out;
  auto run_backward = [&] {
    const auto t0 = clock::now();
    peal::scores_backward(enc, q, Positions::sequence(0.0), k, Positions::sequence(0.0),
                          TensorView<const float>(ds.data(), kHeads, n, n),
                          TensorView<float>(dq.data(), n, kHeads, d),
                          TensorView<float>(dk.data(), n, kHeads, d), opt, {&gp});
    benchmark::ClobberMemory();
    return std::chrono::duration<double>(clock::now() - t0).count();
  };
  std::vector<double> ratios, times;
  bool forward_first = true;
  for (auto _ : state) {
    double f, b;
    if (forward_first) {
      f = run_forward();
      b = run_backward();
    } else {
      b = run_backward();
      f = run_forward();
    }
    forward_first = !forward_first;
    ratios.push_back(b / f);
    times.push_back(b);
    state.SetIterationTime(b);
  }
  std::sort(ratios.begin(), ratios.end());
  std::sort(times.begin(), times.end());
  state.counters["bwd_over_fwd"] = ratios[ratios.size() / 2];
  state.counters["GFLOPS"] = 4.0 * double(n) * double(n) * double(d) * kHeads * 1e-9 /
                             times[times.size() / 2];
}

ScoreOptions with_alibi() {
  ScoreOptions o;
  o.alibi_slopes = slopes();
  return o;
}
ScoreOptions with_decay() {
  ScoreOptions o;
  o.decay = decays();
  return o;
}
// γ = 1e-300 on every head: rebased through tiles this made one-token tiles (80x slower);
// scores() applies such a decay per pair instead (docs/kernels-scores.md §4).
ScoreOptions with_steep_decay() {
  ScoreOptions o;
  o.decay.assign(std::size_t(kHeads), 1e-300);
  return o;
}
ScoreOptions causal() {
  ScoreOptions o;
  o.causal = true;
  return o;
}

// Registration: n in {512, 2048} with automatic iteration counts; n = 8192 with 2 iterations
// per repetition (~0.3-1 s each).
template <class Fn>
void reg(const std::string& name, Fn fn, bool naive_only = false) {
  auto add = [&](const std::vector<Index>& ns) {
    auto* b = benchmark::RegisterBenchmark(name.c_str(), fn);
    b->UseRealTime()->Unit(benchmark::kMillisecond);
    for (Index n : ns)
      for (Index d : {64, 128})
        for (Index t : {1, 2}) {
          if (naive_only && t > 1) continue;
          b->Args({n, d, t});
        }
    return b;
  };
  if (naive_only) {
    add({512})->Iterations(1);
    return;
  }
  add({512, 2048});
  add({8192})->Iterations(2);
}

[[maybe_unused]] const bool registered = [] {
  using peal::Layout;
  reg("plain_gemm", BM_plain_gemm);
  reg("rope_interleaved/fused",
      [](benchmark::State& s) { fused(s, rope(s.range(1), Layout::Interleaved), {}); });
  reg("rope_halfsplit/fused",
      [](benchmark::State& s) { fused(s, rope(s.range(1), Layout::HalfSplit), {}); });
  reg("rope_interleaved/unfused", [](benchmark::State& s) {
    unfused(s, rope(s.range(1), Layout::Interleaved), Epilogue::none);
  });
  reg(
      "rope_interleaved/naive",
      [](benchmark::State& s) { naive(s, rope(s.range(1), Layout::Interleaved), ScoreOptions{}); },
      true);
  reg("rope_causal/fused",
      [](benchmark::State& s) { fused(s, rope(s.range(1), Layout::Interleaved), causal()); });
  reg("alibi/fused", [](benchmark::State& s) {
    fused(s, peal::PassThrough<double>(int(s.range(1))), with_alibi());
  });
  reg("alibi/unfused", [](benchmark::State& s) {
    unfused(s, peal::PassThrough<double>(int(s.range(1))), Epilogue::alibi);
  });
  reg("retnet_decay/fused",
      [](benchmark::State& s) { fused(s, rope(s.range(1), Layout::Interleaved), with_decay()); });
  reg("retnet_decay/unfused", [](benchmark::State& s) {
    unfused(s, rope(s.range(1), Layout::Interleaved), Epilogue::decay);
  });
  reg("xpos/fused", [](benchmark::State& s) { fused(s, peal::xpos<double>(int(s.range(1))), {}); });
  reg("xpos/unfused",
      [](benchmark::State& s) { unfused(s, peal::xpos<double>(int(s.range(1))), Epilogue::none); });
  reg(
      "xpos/naive",
      [](benchmark::State& s) { naive(s, peal::xpos<double>(int(s.range(1))), ScoreOptions{}); },
      true);
  reg("mixed_jordan2/fused", [](benchmark::State& s) { fused(s, mixed(s.range(1)), {}); });
  reg("mixed_jordan2/unfused",
      [](benchmark::State& s) { unfused(s, mixed(s.range(1)), Epilogue::none); });
  // Paired ratios (see paired()): n = 512 and 2048 for at least 1 s of fused time each.
  auto reg_pair = [](const std::string& name, auto fn) {
    auto* b = benchmark::RegisterBenchmark(("paired/" + name).c_str(), fn);
    b->UseManualTime()->Unit(benchmark::kMillisecond)->MinTime(1.0);
    for (Index n : {512, 2048})
      for (Index d : {64, 128})
        for (Index t : {1, 2}) b->Args({n, d, t});
    // n = 8192 (a 1 GiB output): 5 pairs, ~1-3 s each.
    auto* big = benchmark::RegisterBenchmark(("paired/" + name).c_str(), fn);
    big->UseManualTime()->Unit(benchmark::kMillisecond)->Iterations(5);
    for (Index d : {64, 128})
      for (Index t : {1, 2}) big->Args({8192, d, t});
  };
  reg_pair("rope_interleaved",
           [](benchmark::State& s) { paired(s, rope(s.range(1), Layout::Interleaved), {}); });
  reg_pair("rope_halfsplit",
           [](benchmark::State& s) { paired(s, rope(s.range(1), Layout::HalfSplit), {}); });
  reg_pair("alibi", [](benchmark::State& s) {
    paired(s, peal::PassThrough<double>(int(s.range(1))), with_alibi());
  });
  reg_pair("retnet_decay", [](benchmark::State& s) {
    paired(s, rope(s.range(1), Layout::Interleaved), with_decay());
  });
  reg_pair("steep_decay", [](benchmark::State& s) {
    paired(s, rope(s.range(1), Layout::Interleaved), with_steep_decay());
  });
  reg_pair("xpos", [](benchmark::State& s) { paired(s, peal::xpos<double>(int(s.range(1))), {}); });
  reg_pair("mixed_jordan2", [](benchmark::State& s) { paired(s, mixed(s.range(1)), {}); });
  reg_pair("jordan3", [](benchmark::State& s) { paired(s, jordan3(s.range(1)), {}); });
  reg("jordan3/fused", [](benchmark::State& s) { fused(s, jordan3(s.range(1)), {}); });
  auto reg_backward = [](const std::string& name, auto fn) {
    auto* b = benchmark::RegisterBenchmark(("backward/" + name).c_str(), fn);
    b->UseManualTime()->Unit(benchmark::kMillisecond)->MinTime(1.0);
    for (Index n : {512, 2048}) b->Args({n, 128});
  };
  reg_backward("rope_interleaved", [](benchmark::State& s) {
    paired_backward(s, rope(s.range(1), Layout::Interleaved));
  });
  reg_backward("mixed_jordan2", [](benchmark::State& s) { paired_backward(s, mixed(s.range(1))); });
  return true;
}();

}  // namespace

BENCHMARK_MAIN();
