// What the paired benchmarks share (bench_attention.cpp, bench_linear_attention.cpp): thread
// settings for OpenMP, Eigen and BLAS, random data, and the paired harness: every iteration
// runs each contender once, rotating which goes first, so that the ratios of one run are
// measured under the same machine load (bench/README.md, "Method").
#pragma once

#include <benchmark/benchmark.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <functional>
#include <peal/presets/rope.hpp>
#include <random>
#include <string>
#include <vector>

#ifdef _OPENMP
#include <omp.h>
#endif

namespace peal_bench {

using peal::Index;
using RowMat = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
using StridedMap = Eigen::Map<RowMat, 0, Eigen::OuterStride<>>;
using ConstStridedMap = Eigen::Map<const RowMat, 0, Eigen::OuterStride<>>;
using clock_type = std::chrono::steady_clock;

constexpr Index kDim = 128;

#if defined(EIGEN_USE_BLAS) && (defined(__GNUC__) || defined(__clang__))
extern "C" void openblas_set_num_threads(int) __attribute__((weak));
inline void set_blas_threads(int t) {
  if (openblas_set_num_threads) openblas_set_num_threads(t);
}
#else
inline void set_blas_threads(int) {}
#endif

inline void set_threads(int t) {
#ifdef _OPENMP
  omp_set_num_threads(t);
#endif
  Eigen::setNbThreads(t);
  set_blas_threads(t);
}

inline double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const std::size_t m = v.size() / 2;
  return v.empty() ? 0.0 : v.size() % 2 ? v[m] : 0.5 * (v[m - 1] + v[m]);
}

inline std::vector<float> random_floats(std::size_t n, std::uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> N;
  std::vector<float> x(n);
  for (auto& e : x) e = N(rng);
  return x;
}

inline double max_abs_diff(const std::vector<float>& a, const std::vector<float>& b) {
  double m = 0;
  for (std::size_t i = 0; i < a.size(); ++i) m = std::max(m, std::abs(double(a[i]) - b[i]));
  return m;
}

/// The RoPE preset of a Llama-style config (theta 10^4, half-split, head_dim 128).
inline peal::RopeEncoding<double> rope_preset() {
  peal::RopeConfig c;
  c.head_dim = int(kDim);
  c.rope_theta = 10000.0;
  c.layout = peal::Layout::HalfSplit;
  return peal::rope<double>(c);
}

// ---- The unfused attention pipeline's pieces (bench_attention, bench_positions_nd) ------

/// Row softmax of rows x n values in place (−inf entries give 0), OpenMP over rows.
inline void softmax_rows(float* p, Index rows, Index n) {
#pragma omp parallel for schedule(static)
  for (Index r = 0; r < rows; ++r) {
    Eigen::Map<Eigen::ArrayXf> x(p + r * n, n);
    const float m = x.maxCoeff();
    x = (x - m).exp();
    x *= 1.0f / x.sum();
  }
}

/// O_h = P_h V_h for every head: P [H, n, n], V and O [n, H, dv] (Eigen, its own threads).
inline void pv_heads(const float* p, const float* v, float* o, Index n, Index H, Index dv) {
  for (Index h = 0; h < H; ++h) {
    Eigen::Map<const RowMat> P(p + h * n * n, n, n);
    ConstStridedMap V(v + h * dv, n, dv, Eigen::OuterStride<>(H * dv));
    StridedMap O(o + h * dv, n, dv, Eigen::OuterStride<>(H * dv));
    O.noalias() = P * V;
  }
}

/// S_h = Q_h K_h^T for every head into p [H, nq, nk].
inline void qk_heads(const float* q, const float* k, float* p, Index nq, Index nk, Index H, Index d) {
  for (Index h = 0; h < H; ++h) {
    ConstStridedMap Q(q + h * d, nq, d, Eigen::OuterStride<>(H * d));
    ConstStridedMap K(k + h * d, nk, d, Eigen::OuterStride<>(H * d));
    Eigen::Map<RowMat> S(p + h * nq * nk, nq, nk);
    S.noalias() = Q * K.transpose();
  }
}

// ---- The paired harness -------------------------------------------------------------------

struct Contender {
  std::string name;  // counter prefix ("" for peal, the first contender)
  int threads;       // set before its clock starts (OpenMP, Eigen)
  std::function<void()> run;
};

/// Every iteration runs each contender once (rotating the first), the clock around each run.
/// Counters: <unit> (peal's rate from its median time, `work` units per run), <name>_<unit>
/// for the others, best_<unit> and <name>_best_<unit> from the fastest run, vs_<name> =
/// median of t_name / t_peal. Manual time: peal's.
inline void paired_run(benchmark::State& state, const std::vector<Contender>& cs, double work,
                const std::string& unit) {
  const std::size_t C = cs.size();
  std::vector<std::vector<double>> times(C), ratios(C);
  std::vector<double> t(C);
  std::size_t first = 0;
  for (auto _ : state) {
    for (std::size_t r = 0; r < C; ++r) {
      const std::size_t c = (first + r) % C;
      set_threads(cs[c].threads);
      const auto t0 = clock_type::now();
      cs[c].run();
      benchmark::ClobberMemory();
      t[c] = std::chrono::duration<double>(clock_type::now() - t0).count();
    }
    first = (first + 1) % C;
    for (std::size_t c = 0; c < C; ++c) {
      times[c].push_back(t[c]);
      ratios[c].push_back(t[c] / t[0]);
    }
    state.SetIterationTime(t[0]);
  }
  for (std::size_t c = 0; c < C; ++c) {
    const std::string pre = c == 0 ? "" : cs[c].name + "_";
    state.counters[pre + unit] = work / median(times[c]);
    // The fastest run: on a machine shared with other jobs, the closest to an idle core.
    state.counters[pre + "best_" + unit] =
        work / *std::min_element(times[c].begin(), times[c].end());
    if (c > 0) state.counters["vs_" + cs[c].name] = median(ratios[c]);
  }
}

}  // namespace peal_bench
