// Bring your own generator (README "Bring your own generator", docs/canonical-form.md):
//   1. a generator X from a file (text or .npy: examples/matrix_file.hpp), or without one a
//      stand-in for a learned LieRE generator (a random skew-symmetric X, d = 32);
//   2. peal::canonical_form(X): its blocks, κ(P), the residual;
//   3. causal softmax attention with cf.encoding (peal::attention, fused) at irregular
//      timestamps near 10^5;
//   4. the same attention the dense way, exp(τX) by Eigen's MatrixExponential in long double
//      once per distinct τ = t − s, and the difference against the bound derived below.
// Usage: example_own_generator [X.txt | X.npy]. Exits non-zero if the bound is exceeded. The
// dense check costs O(d³) in long double per distinct τ: slow for d in the hundreds.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <exception>
#include <iostream>
#include <limits>
#include <map>
#include <peal/attention.hpp>
#include <peal/canonical_form.hpp>
#include <random>
#include <stdexcept>
#include <unsupported/Eigen/MatrixFunctions>
#include <vector>

#include "matrix_file.hpp"

namespace {

using LD = long double;
using MatL = Eigen::Matrix<LD, Eigen::Dynamic, Eigen::Dynamic>;
using RowL = Eigen::Matrix<LD, 1, Eigen::Dynamic>;
constexpr int H = 2, dv = 8, events = 8, per_event = 32, query_events = 2;
constexpr int nk = events * per_event, nq = query_events * per_event;
constexpr LD eps = std::numeric_limits<double>::epsilon();

// A stand-in for a learned LieRE generator: X = (B − Bᵀ)/2 with B_ij = g_i g_j N(0, 1) and
// g_i² log-spaced from 1 to 10^-3. The grading spreads the rotation frequencies over about
// 10^-3..1, as RoPE's θ^(-2i/d) are spread; an ungraded Gaussian B would put them all
// within a factor ~10 of each other.
Eigen::MatrixXd stand_in(int d, std::mt19937& rng) {
  std::normal_distribution<double> g;
  Eigen::MatrixXd B(d, d);
  for (int i = 0; i < d; ++i)
    for (int j = 0; j < d; ++j) B(i, j) = g(rng) * std::pow(10.0, -1.5 * (i + j) / (d - 1));
  return (B - B.transpose()) / 2;
}

// Tokens come in events (a message, a sensor reading) that share one timestamp. Event times
// are irregular reals about 10^5 s after the clock's origin, gaps of a few seconds and one of
// an hour. Keys: all tokens; queries: the tokens of the last events (a new chunk attending to
// its cache, causally). Shared timestamps make each τ recur, so the dense route needs one
// matrix exponential per distinct τ (14 here), not one per pair.
struct Batch {
  std::vector<double> q, k, v, tq, tk;  // [tokens, H, d or dv] and the timestamps
};

Batch make_batch(int d, std::mt19937& rng) {
  std::exponential_distribution<double> gap(0.2);
  Batch b;
  double t = 1e5 + 0.3;
  for (int e = 0; e < events; ++e) {
    t += e == events / 3 ? 3600 : gap(rng);
    b.tk.insert(b.tk.end(), per_event, t);
  }
  b.tq.assign(b.tk.end() - nq, b.tk.end());
  auto random = [&](int n, int w, auto dist) {
    std::vector<double> x(std::size_t(n * H * w));
    for (auto& y : x) y = dist(rng);
    return x;
  };
  const std::normal_distribution<double> N;  // logits q^T A k / sqrt(d) of size ~1
  b.q = random(nq, d, N), b.k = random(nk, d, N);
  b.v = random(nk, dv, std::uniform_real_distribution<double>(-1, 1));
  return b;
}

// The dense route: out[i,h,:] = Σ_j softmax_j(x_ij) v_j over s_j ≤ t_i, with
// x_ij = q_iᵀ exp((t_i − s_j) X) k_j / √d, everything in long double. Also returns δ, a bound
// on |fused logit − x_ij| over all visible pairs:
//   peal's score is qᵀ P̂ A_Ĵ(τ) P̂⁻¹ k in double: two d-term products with P̂ and P̂⁻¹
//   (Higham, Thm 3.5: d u Σ each, Σ(τ) = ‖|P̂| |A_Ĵ(τ)| |P̂⁻¹|‖_F the size of the terms), block
//   parameters θ rounded to double (A_Ĵ(τ) moves by ≤ u |τ| |θ| ≤ u |τ| ‖X‖_F, first order)
//   and the fused dot product (2 (d + 16) u); with a factor 8 of slack (P̂⁻¹ from LU),
//     |score error| ≤ 8 u (2d + 16 + |τ| ‖X‖_F) Σ(τ) ‖q‖ ‖k‖
//   (tests/test_canonical_form.cpp checks it). For a skew-symmetric X, P̂ is orthogonal and
//   Σ ≤ √2 d. Softmax's max-subtraction and exp add (3L + 4) ε, L the largest |logit|. A worst
//   case: rotations keep ω in two doubles (no |τ| term in practice) and errors average out.
struct Dense {
  std::vector<LD> out;
  LD delta = 0;
  int exponentials = 0;
};

Dense dense_attention(const Eigen::MatrixXd& X, const peal::CanonicalEncoding<double>& enc,
                      const Batch& b) {
  const int d = int(X.rows());
  const MatL Xl = X.cast<LD>();
  const LD nu = Xl.norm(), u = eps / 2, scale = 1 / std::sqrt(LD(d));
  const Eigen::MatrixXd absP = enc.P().cwiseAbs(), absPinv = enc.P_inverse().cwiseAbs();
  struct AtTau {
    MatL A;    // exp(τX)
    LD sigma;  // Σ(τ) of the bound above
  };
  std::map<LD, AtTau> cache;
  auto at = [&](LD tau) -> const AtTau& {
    auto it = cache.find(tau);
    if (it != cache.end()) return it->second;
    const double sigma = (absP * enc.inner().A(double(tau)).cwiseAbs() * absPinv).norm();
    return cache.emplace(tau, AtTau{MatL(tau * Xl).exp(), sigma}).first->second;
  };
  // Head h of a [tokens, H, w] array as a tokens x w long double matrix.
  auto head = [](const std::vector<double>& x, int tokens, int h, int w) {
    using Rows = Eigen::Matrix<double, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
    const Eigen::OuterStride<> stride(H * w);
    return MatL(Eigen::Map<const Rows, 0, Eigen::OuterStride<>>(x.data() + h * w, tokens, w, stride)
                    .cast<LD>());
  };
  Dense r;
  r.out.assign(std::size_t(nq * H * dv), 0);
  for (int h = 0; h < H; ++h) {
    const MatL Q = head(b.q, nq, h, d), K = head(b.k, nk, h, d), V = head(b.v, nk, h, dv);
    for (int i = 0; i < nq; ++i) {
      RowL qA, logit(nk);  // qA = q_iᵀ exp(τX), once per run of equal τ
      const AtTau* a = nullptr;
      LD tau_prev = 0, L = 0, delta = 0;
      int n = 0;  // visible keys: s_j ≤ t_i (the keys are sorted)
      for (; n < nk && b.tk[std::size_t(n)] <= b.tq[std::size_t(i)]; ++n) {
        const LD tau = LD(b.tq[std::size_t(i)]) - b.tk[std::size_t(n)];
        if (!a || tau != tau_prev) a = &at(tau), qA = Q.row(i) * a->A, tau_prev = tau;
        logit(n) = scale * qA.dot(K.row(n));
        L = std::max(L, std::abs(logit(n)));
        delta = std::max(delta, scale * 8 * u * (2 * d + 16 + std::abs(tau) * nu) * a->sigma *
                                    Q.row(i).norm() * K.row(n).norm());
      }
      r.delta = std::max(r.delta, delta + (3 * L + 4) * eps);
      const RowL p = (logit.head(n).array() - logit.head(n).maxCoeff()).exp().matrix();
      const RowL o = p * V.topRows(n) / p.sum();
      for (int e = 0; e < dv; ++e) r.out[std::size_t((i * H + h) * dv + e)] = o(e);
    }
  }
  r.exponentials = int(cache.size());
  return r;
}

// 1. The generator: the file's, or the stand-in.
Eigen::MatrixXd load(int argc, char** argv, std::mt19937& rng) {
  if (argc == 1) {
    std::cout << "X: no file given; a stand-in for a learned LieRE generator: a seeded random "
                 "skew-symmetric 32 x 32 matrix\n";
    return stand_in(32, rng);
  }
  try {
    const matrix_file::MatrixFile f = matrix_file::read_matrix_file(argv[1]);
    std::cout << "X: " << argv[1] << " (" << f.format << ", " << f.values.rows() << " x "
              << f.values.cols() << "; decomposed as double)\n";
    return f.values;  // float32 data converted exactly
  } catch (const std::exception& e) {
    throw std::runtime_error(std::string(argv[1]) + ": " + e.what());
  }
}

}  // namespace

int main(int argc, char** argv) try {
  if (argc > 2) {
    std::cerr << "usage: " << argv[0] << " [X.txt | X.npy]   (a d x d generator)\n";
    return 2;
  }
  std::mt19937 rng(23);
  const Eigen::MatrixXd X = load(argc, argv, rng);
  const int d = int(X.rows());

  // 2. The canonical form: X = P J P⁻¹ with peal's blocks, as an encoding every kernel runs.
  const auto cf = peal::canonical_form(X);
  std::cout << cf.summary();
  const LD two_pi = 2 * std::acos(LD(-1));
  LD lo = INFINITY, hi = 0;
  for (const auto& blk : cf.report.blocks)
    if (blk.omega > 0) lo = std::min(lo, two_pi / blk.omega), hi = std::max(hi, two_pi / blk.omega);
  if (hi > 0)
    std::printf("wavelengths 2 pi / omega: %.3g .. %.3g (time units)\n", double(lo), double(hi));

  // 3. Fused causal attention at the batch's timestamps (q, k and v random). The offset of
  // 10^5 costs no precision: rotations keep ω in two doubles and form ωt exactly, reduced mod
  // 2π (docs/numerics.md, "Angles"), and other blocks are rebased per tile so that only t − s
  // enters (docs/kernels-scores.md §3). exp(tX) at t ≈ 10^5 in double would lose ~u ‖X‖ 10^5.
  const Batch b = make_batch(d, rng);
  std::vector<double> out(std::size_t(nq * H * dv));
  peal::AttentionOptions opt;
  opt.causal = true;
  using Clock = std::chrono::steady_clock;
  auto ms_since = [](Clock::time_point t0) {
    return std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
  };
  auto t0 = Clock::now();
  peal::attention(cf.encoding, peal::TensorView<const double>(b.q.data(), nq, H, d),
                  peal::Positions(b.tq), peal::TensorView<const double>(b.k.data(), nk, H, d),
                  peal::Positions(b.tk), peal::TensorView<const double>(b.v.data(), nk, H, dv),
                  peal::make_view(out.data(), nq, H, dv), opt);
  const double fused_ms = ms_since(t0);

  // 4. Against the dense route. Softmax moves each weight p_j by at most p_j (e^{2δ} − 1) when
  // every logit moves by at most δ, so an output moves by at most (e^{2δ} − 1) max|v|; the
  // kernel's sums of ≤ nk terms in double (weights, P·V, tiles merged, the final division) add
  // at most 2 (4 nk + 1) ε max|v| (tests/tolerances.hpp), its output's rounding ε max|v|.
  t0 = Clock::now();
  const Dense ref = dense_attention(X, cf.encoding, b);
  const double dense_ms = ms_since(t0);
  LD err = 0, vmax = 0;
  for (double x : b.v) vmax = std::max(vmax, LD(std::abs(x)));
  for (std::size_t i = 0; i < out.size(); ++i) err = std::max(err, std::abs(out[i] - ref.out[i]));
  const LD bound = std::expm1(2 * ref.delta) + (8 * nk + 3) * eps;
  std::printf(
      "attention, %d queries x %d keys x %d heads, causal, times %.1f .. %.1f:\n"
      "  max |fused - dense| / max|v| = %.2e (bound %.2e)\n"
      "  time: peal::attention %.2f ms, dense route (%d exponentials) %.1f ms\n",
      nq, nk, H, b.tk.front(), b.tk.back(), double(err / vmax), double(bound), fused_ms,
      ref.exponentials, dense_ms);
  if (!std::isfinite(bound))  // e.g. a growing X (see its warning) over the hour's gap
    std::cout << "  the bound is not finite: exp(tau X) is too large at these tau to check\n";
  const bool ok = err <= bound * vmax;
  std::cout << (ok ? "check passed\n" : "CHECK FAILED: error above the bound\n");
  return ok ? 0 : 1;
} catch (const std::exception& e) {  // an unreadable file, or a generator peal refuses
  std::cerr << "error: " << e.what() << "\n";
  return 1;
}
