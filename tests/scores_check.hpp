// The shared part of tests/test_scores.cpp and tests/test_scores_numerics.cpp: storage in
// caller memory with NaN padding (Stored), the per-pair reference (Reference), the comparison
// with the bound of test_scores.cpp's header (check_scores), one problem under a layout and
// options (Case), and the encodings both files build (RoPE and xPos-like banks). Internal
// linkage on purpose: each test TU holds its own copy, as when they were one file.
#pragma once

#include <Eigen/SVD>
#include <algorithm>
#include <catch2/catch.hpp>
#include <cfloat>
#include <cmath>
#include <limits>
#include <map>
#include <peal/peal.hpp>
#include <peal/scores.hpp>
#include <random>
#include <string>
#include <type_traits>
#include <tuple>
#include <vector>

#include "kernel_catalogue.hpp"
#include "tolerances.hpp"

namespace {

using peal::Index;
using peal::Positions;
using peal::ScoreOptions;
using peal::Strides;
using peal::TensorView;
using peal_test::Tol;

// Storage <-> double through the library's own conversions (detail/storage.hpp).
template <class T>
double to_double(T x) {
  return peal::detail::to_arith<double>(x);
}
template <class T>
T from_double(double x) {
  return peal::detail::from_arith<T>(x);
}

/// Caller memory of storage T laid out with arbitrary strides and a leading offset; padding
/// is filled with NaN so that any read outside the view poisons the result.
template <class T>
struct Stored {
  std::vector<T> buf;
  TensorView<T> view;
  Index n, H, d;
  std::vector<double> val;  // [n][H][d], the stored (rounded) values
  const double* vec(Index t, Index h) const { return val.data() + (t * H + h) * d; }
};

enum class Layout { dense, offset_padded, elem_stride2, heads_major };

inline Strides strides_for(Layout l, Index n, Index H, Index d) {
  switch (l) {
    case Layout::dense:
      return {H * d, d, 1};
    case Layout::offset_padded:
      return {H * (d + 3) + 5, d + 3, 1};
    case Layout::elem_stride2:
      return {2 * H * d + 1, 2 * d, 2};
    case Layout::heads_major:
      return {d, n * d + 7, 1};
  }
  return {H * d, d, 1};
}

template <class T>
Stored<T> make_stored(Index n, Index H, Index d, Layout l, std::mt19937& rng, double sigma = 1) {
  Stored<T> s;
  s.n = n, s.H = H, s.d = d;
  const Strides st = strides_for(l, n, H, d);
  const Index offset = l == Layout::dense ? 0 : 1;
  Index span = 1;
  if (n > 0 && H > 0 && d > 0)
    span = (n - 1) * st.token + (H - 1) * st.head + (d - 1) * st.elem + 1;
  s.buf.assign(std::size_t(span + offset + 8),
               from_double<T>(std::numeric_limits<double>::quiet_NaN()));
  s.view = TensorView<T>(s.buf.data() + offset, n, H, d, st);
  s.val.resize(std::size_t(n * H * d));
  std::normal_distribution<double> N(0.0, sigma);
  for (Index t = 0; t < n; ++t)
    for (Index h = 0; h < H; ++h)
      for (Index e = 0; e < d; ++e) {
        const T x = from_double<T>(N(rng));
        s.view(t, h, e) = x;
        s.val[std::size_t((t * H + h) * d + e)] = to_double(x);
      }
  return s;
}

/// The same values in another memory layout.
template <class T>
Stored<T> restride(const Stored<T>& src, Layout l) {
  std::mt19937 unused(0);
  Stored<T> s = make_stored<T>(src.n, src.H, src.d, l, unused);
  s.val = src.val;
  for (Index t = 0; t < src.n; ++t)
    for (Index h = 0; h < src.H; ++h)
      for (Index e = 0; e < src.d; ++e) s.view(t, h, e) = src.view(t, h, e);
  return s;
}

/// Upper bound of the 2-norm of A(τ): max(‖A‖_1, ‖A‖_inf).
template <class E>
double norm_bound(const E& enc, double tau) {
  const Eigen::MatrixXd A = peal::Matrix<typename E::Scalar>(enc.A(tau)).template cast<double>();
  if (A.size() == 0) return 0;
  return std::max(A.cwiseAbs().rowwise().sum().maxCoeff(), A.cwiseAbs().colwise().sum().maxCoeff());
}

/// Raw reference scores q_i^T A(t_i - s_j) k_j (double, via enc.score) and the magnitudes
/// |q_i| ‖A(τ)‖ |k_j|, for every query head h (key head h / G).
struct Reference {
  Index Hq, nq, nk;
  std::vector<double> raw, mag;
  double& at(std::vector<double>& v, Index h, Index i, Index j) {
    return v[std::size_t((h * nq + i) * nk + j)];
  }
  double get(const std::vector<double>& v, Index h, Index i, Index j) const {
    return v[std::size_t((h * nq + i) * nk + j)];
  }
};

template <class E>
Reference reference(const E& enc, const std::vector<double>& qv, const std::vector<double>& kv,
                    Index nq, Index nk, Index Hq, Index Hk, Index d, const std::vector<double>& tq,
                    const std::vector<double>& tk) {
  using S = typename E::Scalar;
  Reference r{Hq, nq, nk, {}, {}};
  r.raw.assign(std::size_t(Hq * nq * nk), 0.0);
  r.mag.assign(r.raw.size(), 0.0);
  const Index G = Hq / Hk;
  std::map<double, double> norms;
  peal::Vector<S> q(d), k(d);
  for (Index h = 0; h < Hq; ++h)
    for (Index i = 0; i < nq; ++i) {
      for (Index e = 0; e < d; ++e) q(e) = S(qv[std::size_t((i * Hq + h) * d + e)]);
      const double qn = double(q.norm());
      for (Index j = 0; j < nk; ++j) {
        for (Index e = 0; e < d; ++e) k(e) = S(kv[std::size_t((j * Hk + h / G) * d + e)]);
        const double tau = tq[std::size_t(i)] - tk[std::size_t(j)];
        auto it = norms.find(tau);
        if (it == norms.end()) it = norms.emplace(tau, norm_bound(enc, tau)).first;
        r.at(r.raw, h, i, j) = double(enc.score(q, tq[std::size_t(i)], k, tk[std::size_t(j)]));
        r.at(r.mag, h, i, j) = qn * it->second * double(k.norm());
      }
    }
  return r;
}

inline std::vector<double> positions_of(const Positions& p, Index n) {
  std::vector<double> v(static_cast<std::size_t>(n));
  for (Index i = 0; i < n; ++i) v[std::size_t(i)] = p[i];
  return v;
}

/// Compares out (any strides) with the options applied to the raw reference.
template <class Out>
void check_scores(const TensorView<Out>& out, const Reference& ref, const std::vector<double>& tq,
                  const std::vector<double>& tk, const ScoreOptions& opt, double eps_c, Index d,
                  double rho = 1, double width = 512, double floor = 0) {
  // Tol<C>::fused_score(d) for the eps_c passed (the bound is linear in the epsilon).
  const double per_score = double(Tol<float>::fused_score(long(d)) / Tol<float>::eps) * eps_c;
  double worst = 0;
  Index bad = 0;
  std::string first;
  for (Index h = 0; h < ref.Hq; ++h)
    for (Index i = 0; i < ref.nq; ++i)
      for (Index j = 0; j < ref.nk; ++j) {
        const double t = tq[std::size_t(i)], s = tk[std::size_t(j)], tau = t - s;
        const double got = double(out(h, i, j));
        if (opt.causal && s > t) {
          if (!(std::isinf(got) && got < 0)) {
            if (!bad++)
              first = "masked entry (" + std::to_string(h) + "," + std::to_string(i) + "," +
                      std::to_string(j) + ") = " + std::to_string(got);
          }
          continue;
        }
        const double g =
            opt.decay.empty() ? 1.0 : std::exp(std::log(opt.decay[std::size_t(h)]) * tau);
        const double m = opt.alibi_slopes.empty() ? 0.0 : opt.alibi_slopes[std::size_t(h)];
        const double want = opt.scale * g * ref.get(ref.raw, h, i, j) - m * tau;
        const double M = std::abs(opt.scale) * g * ref.get(ref.mag, h, i, j);
        const double tol = per_score * rho * M +
                           double(Tol<Out>::alibi_bias(std::abs(m) * (std::abs(tau) + width)) +
                                  Tol<Out>::stored() * std::abs(want)) +
                           floor;
        const double err = std::abs(got - want);
        if (!(err <= tol)) {
          if (!bad++)
            first = "(" + std::to_string(h) + "," + std::to_string(i) + "," + std::to_string(j) +
                    "): got " + std::to_string(got) + " want " + std::to_string(want) + " tol " +
                    std::to_string(tol);
        }
        if (M > 0) worst = std::max(worst, err / M);
      }
  INFO("first mismatch " << first << "; worst |err| / (|q| |A| |k|) = " << worst);
  CHECK(bad == 0);
}

std::vector<peal::RotationBlock<double>> rope_blocks(int pairs, double theta = 10000.0,
                                                     double a = 0.0) {
  std::vector<peal::RotationBlock<double>> b;
  for (int i = 0; i < pairs; ++i)
    b.emplace_back(std::pow(static_cast<long double>(theta), -2.0L * i / (2.0L * pairs)), a);
  return b;
}
using Rot = peal::RotationBlock<double>;
using RotBank = peal::Bank<Rot>;

inline RotBank rope_bank(int pairs, peal::Layout layout = peal::Layout::Interleaved,
                         double a = 0.0) {
  return RotBank(rope_blocks(pairs, 10000.0, a), layout);
}
/// xPos-like: per-pair decays a_i = ln(ζ_i) / 512 (docs/presets.md §9).
inline RotBank xpos_like(int pairs) {
  std::vector<Rot> b;
  const double d = 2.0 * pairs;
  for (int i = 0; i < pairs; ++i)
    b.emplace_back(std::pow(10000.0L, -2.0L * i / d),
                   std::log((2.0 * i + 0.4 * d) / (1.4 * d)) / 512);
  return RotBank(b);
}

/// One problem (q, k, positions), its reference, and the fused kernel under a given layout,
/// output type, tiles and options.
template <class T, class E>
struct Case {
  const E& enc;
  Index nq, nk, Hq, Hk, d;
  Positions tq, tk;
  std::vector<double> tqv, tkv;
  Stored<T> q, k;
  Reference ref;

  Case(const E& e, Index nq_, Index nk_, Index Hq_, Index Hk_, Positions tq_, Positions tk_,
       Layout lq, Layout lk, std::mt19937& rng)
      : Case(e, e, nq_, nk_, Hq_, Hk_, tq_, tk_, lq, lk, rng) {}
  // The reference from another encoding of the same A(τ) (e.g. its long double twin).
  template <class R>
  Case(const E& e, const R& ref_enc, Index nq_, Index nk_, Index Hq_, Index Hk_, Positions tq_,
       Positions tk_, Layout lq, Layout lk, std::mt19937& rng)
      : enc(e),
        nq(nq_),
        nk(nk_),
        Hq(Hq_),
        Hk(Hk_),
        d(Index(e.dim())),
        tq(tq_),
        tk(tk_),
        tqv(positions_of(tq_, nq_)),
        tkv(positions_of(tk_, nk_)),
        q(make_stored<T>(nq_, Hq_, d, lq, rng)),
        k(make_stored<T>(nk_, Hk_, d, lk, rng)),
        ref(reference(ref_enc, q.val, k.val, nq, nk, Hq, Hk, d, tqv, tkv)) {}

  // width: bound of |t - anchor| + |anchor - t'| within a tile (< 0: from the tile size).
  template <class Out>
  void run_and_check(const ScoreOptions& opt, int out_layout, double eps_c, double rho = 1,
                     double width = -1, double floor = 0) {
    run_and_check_views<Out>(q.view, k.view, opt, out_layout, eps_c, rho, width, floor);
  }
  template <class Out>
  void run_and_check_views(TensorView<const T> qv, TensorView<const T> kv, const ScoreOptions& opt,
                           int out_layout, double eps_c, double rho = 1, double width = -1,
                           double floor = 0) {
    // out_layout: 0 dense, 1 offset + padded rows, 2 column-major per head, 3 heads innermost
    Strides st{nq * nk, nk, 1};
    Index off = 0;
    if (out_layout == 1) st = {nq * (nk + 3) + 2, nk + 3, 1}, off = 1;
    if (out_layout == 2) st = {nq * nk, 1, nq};
    if (out_layout == 3) st = {1, Hq * nk, Hq};
    Index span = 1 + (Hq - 1) * st.token + (nq - 1) * st.head + (nk - 1) * st.elem;
    const Out sentinel = Out(12345.0);
    std::vector<Out> buf(std::size_t(span + off + 4), sentinel);
    TensorView<Out> out(buf.data() + off, Hq, nq, nk, st);
    peal::scores(enc, qv, tq, kv, tk, out, opt);
    if (width < 0)
      width = double(std::max(opt.query_tile, Index(256))) *
              (nq > 1 ? std::abs(tqv[1] - tqv[0]) + 1 : 1.0);
    check_scores(out, ref, tqv, tkv, opt, eps_c, d, rho, width, floor);
    // Nothing outside the view was written.
    std::vector<char> inside(buf.size(), 0);
    for (Index h = 0; h < Hq; ++h)
      for (Index i = 0; i < nq; ++i)
        for (Index j = 0; j < nk; ++j)
          inside[std::size_t(off + h * st.token + i * st.head + j * st.elem)] = 1;
    Index touched = 0;
    for (std::size_t x = 0; x < buf.size(); ++x) touched += !inside[x] && buf[x] != sentinel;
    CHECK(touched == 0);
  }
};

constexpr double eps_f = Tol<float>::eps;   // eps_c of float arithmetic
constexpr double eps_d = Tol<double>::eps;  // eps_c of double arithmetic

}  // namespace
