// Tests of include/peal/scores.hpp: the fused, rebased scores kernel against the per-pair
// form q_i^T A(t_i - s_j) k_j (the encoding's own score(), evaluated in double through the
// lag t - s, never through F(t) and G(s)), over awkward sizes, misaligned and strided views,
// every option, all storage types, and the numerics that motivate rebasing.
//
// Tolerance (per element; M_ij = |scale| γ^τ |q_i| ‖A(τ)‖ |k_j|, τ = t_i - s_j; each term
// derived in tests/tolerances.hpp, "Batch kernels"):
//   |out - ref| <= Tol<C>::fused_score(d) ρ M_ij + Tol<Out>::alibi_bias(|m| (|τ| + w))
//                  + Tol<Out>::stored() |ref| + floor
// C: the arithmetic type (float for float/half/bfloat16 storage, double when q or k stores
//   double), passed as its epsilon eps_c = Tol<C>::eps (eps_f, eps_d below); fused_score is
//   2 (d + 16) eps_C. ‖A(τ)‖ is bounded above by max(‖A‖_1, ‖A‖_inf) (which bounds the
//   2-norm).
// ρ: 1 for diagonalisable encodings; (1 + 2 h_q + 2 h_k)^p for Jordan chains of length p + 1,
//   h the half-spread of the tiles (docs/kernels-scores.md, "Rebasing").
// The ALiBi term -m τ is formed as -m (t_i - T) - m (T - s_j) around the tile anchor T, w the
//   tile width. stored(): the final rounding to the output type (float out with double
//   arithmetic). floor: absolute slack (Tol<float>::flushed()) for scores that underflow.
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

#include "tolerances.hpp"

namespace {

using peal::Index;
using peal::Positions;
using peal::ScoreOptions;
using peal::Strides;
using peal::TensorView;
using peal_test::Tol;
namespace sk = peal::detail::scores_kernels;

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

std::vector<double> positions_of(const Positions& p, Index n) {
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

RotBank rope_bank(int pairs, peal::Layout layout = peal::Layout::Interleaved, double a = 0.0) {
  return RotBank(rope_blocks(pairs, 10000.0, a), layout);
}
/// xPos-like: per-pair decays a_i = ln(ζ_i) / 512 (docs/presets.md §9).
RotBank xpos_like(int pairs) {
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

// ---- Awkward sizes, dims, layouts ---------------------------------------------------------

TEST_CASE("scores: RoPE banks (both layouts) and partial rotary over awkward sizes", "[scores]") {
  std::mt19937 rng(20240601);
  const std::vector<std::pair<Index, Index>> sizes = {
      {1, 1}, {3, 7}, {7, 3}, {17, 63}, {63, 65}, {65, 17}, {257, 17}, {17, 257}, {257, 257}};
  for (int d : {2, 6, 64, 128}) {
    for (auto layout : {peal::Layout::Interleaved, peal::Layout::HalfSplit}) {
      const RotBank enc = rope_bank(d / 2, layout);
      for (auto [nq, nk] : sizes) {
        // Keep the per-pair reference cheap (also in unoptimised builds): 257 x 257 for d = 2,
        // 257 x 17 for d = 6, up to 65 x 63 for d = 64 and 128.
        if ((nq * nk > 257 * 17 && d > 2) || (nq * nk > 65 * 63 && d > 6)) continue;
        const Index H = nq * nk > 4096 ? 1 : 2;
        CAPTURE(d, int(layout), nq, nk);
        Case<float, RotBank> c(enc, nq, nk, H, H, Positions::sequence(double(nk - nq)),
                               Positions::sequence(0.0), Layout::dense, Layout::dense, rng);
        ScoreOptions opt;
        c.run_and_check<float>(opt, 0, eps_f);
        ScoreOptions small;  // many partial tiles even at these sizes
        small.query_tile = 16;
        small.key_tile = 32;
        small.causal = true;
        c.run_and_check<float>(small, 0, eps_f);
      }
    }
  }
  // Partial rotary: rotate the first 4 of 6 (or 48 of 64) coordinates, pass the rest.
  for (int d : {6, 64}) {
    const int rot = d == 6 ? 4 : 48;
    for (auto layout : {peal::Layout::Interleaved, peal::Layout::HalfSplit}) {
      const auto enc =
          peal::compose(rope_bank(rot / 2, layout), peal::PassThrough<double>(d - rot));
      for (auto [nq, nk] : std::vector<std::pair<Index, Index>>{{7, 3}, {63, 65}, {257, 17}}) {
        if (d == 64 && nq == 257) continue;
        CAPTURE(d, int(layout), nq, nk);
        Case<float, decltype(enc)> c(enc, nq, nk, 2, 1, Positions::sequence(5.0),
                                     Positions::sequence(0.0), Layout::dense, Layout::dense, rng);
        ScoreOptions opt;
        opt.causal = true;
        c.run_and_check<float>(opt, 0, eps_f);
        opt.query_tile = 7;
        opt.key_tile = 9;
        c.run_and_check<float>(opt, 1, eps_f);
      }
    }
  }
}

TEST_CASE("scores: misaligned, padded and strided views, every output layout", "[scores]") {
  std::mt19937 rng(7);
  const RotBank enc = xpos_like(16);  // d = 32, decaying: the rebasing path
  Case<float, RotBank> c0(enc, 65, 63, 4, 2, Positions::sequence(100.0, 2.0),
                          Positions::sequence(1.0, 2.0), Layout::dense, Layout::dense, rng);
  for (Layout lq :
       {Layout::dense, Layout::offset_padded, Layout::elem_stride2, Layout::heads_major})
    for (Layout lk : {Layout::dense, Layout::offset_padded, Layout::elem_stride2}) {
      CAPTURE(int(lq), int(lk));
      const Stored<float> q = restride(c0.q, lq), k = restride(c0.k, lk);
      for (int ol = 0; ol < 4; ++ol) {
        CAPTURE(ol);
        ScoreOptions opt;
        opt.scale = 0.125;
        opt.query_tile = 16;
        opt.key_tile = 24;
        c0.run_and_check_views<float>(q.view, k.view, opt, ol, eps_f);
        if (lq == lk) c0.run_and_check_views<double>(q.view, k.view, opt, ol, eps_f);  // double out
      }
    }
  // A pure rotation read in place (dense float q/k, identity-free) and the identity encoding
  // read straight from caller memory (ALiBi-only), on misaligned views.
  const RotBank rope = rope_bank(16);
  Case<float, RotBank> c(rope, 40, 50, 2, 2, Positions::sequence(10.0), Positions::sequence(0.0),
                         Layout::offset_padded, Layout::offset_padded, rng);
  c.run_and_check<float>(ScoreOptions{}, 1, eps_f);
  const peal::PassThrough<double> id(32);
  Case<float, peal::PassThrough<double>> ci(id, 40, 50, 2, 2, Positions::sequence(10.0),
                                            Positions::sequence(0.0), Layout::offset_padded,
                                            Layout::dense, rng);
  ScoreOptions al;
  al.alibi_slopes = {0.5, 0.0625};
  al.causal = true;
  for (int ol = 0; ol < 4; ++ol) ci.run_and_check<float>(al, ol, eps_f);
}

// ---- Options ------------------------------------------------------------------------------

TEST_CASE("scores: causal, scale, ALiBi, decay and grouped-query heads", "[scores]") {
  std::mt19937 rng(99);
  const RotBank rope = rope_bank(8);  // d = 16
  for (Index G : {1, 2, 4}) {
    const Index Hk = 2, Hq = Hk * G;
    // Chunked prefill: 37 queries at the end of 101 keys.
    Case<float, RotBank> c(rope, 37, 101, Hq, Hk, Positions::sequence(64.0),
                           Positions::sequence(0.0), Layout::dense, Layout::dense, rng);
    std::vector<double> slopes, same, diff;
    for (Index h = 0; h < Hq; ++h) {
      slopes.push_back(std::pow(2.0, -double(h + 1)));
      same.push_back(0.9 + 0.02 * double(h / G));  // equal within a group: folded into keys
      diff.push_back(1.0 - std::pow(2.0, -double(h + 3)));  // differ within a group
    }
    for (int variant = 0; variant < 6; ++variant) {
      ScoreOptions opt;
      opt.query_tile = 16;
      opt.key_tile = 32;
      opt.causal = variant % 2 == 0;
      opt.scale = variant >= 2 ? 0.25 : 1.0;
      if (variant >= 2) opt.alibi_slopes = slopes;
      if (variant == 4) opt.decay = same;
      if (variant == 5) opt.decay = diff;
      CAPTURE(G, variant);
      c.run_and_check<float>(opt, 0, eps_f);
      c.run_and_check<double>(opt, 2, eps_f);
    }
  }
  // Scalar decay on a pure rotation equals the same rotation with a = ln γ on every pair.
  {
    const double gamma = 1.0 - std::pow(2.0, -5.0);
    const RotBank decaying = rope_bank(8, peal::Layout::Interleaved, std::log(gamma));
    Case<float, RotBank> a(decaying, 50, 50, 1, 1, Positions::sequence(0.0),
                           Positions::sequence(0.0), Layout::dense, Layout::dense, rng);
    std::vector<float> o1(2500), o2(2500);
    ScoreOptions causal;
    causal.causal = true;
    peal::scores(decaying, TensorView<const float>(a.q.view), a.tq,
                 TensorView<const float>(a.k.view), a.tk, peal::make_view(o1.data(), 1, 50, 50),
                 causal);
    ScoreOptions dec = causal;
    dec.decay = {gamma};
    peal::scores(rope, TensorView<const float>(a.q.view), a.tq, TensorView<const float>(a.k.view),
                 a.tk, peal::make_view(o2.data(), 1, 50, 50), dec);
    // Each within fused_score(16) M of the truth (M from the reference of `decaying`), but
    // kept as tight as the old absolute 1e-4 (1 + |o|), which that doubled bound exceeds by
    // up to 4x: roundings(16) M, an eighth of it (measured differences ~1/16 of that).
    for (std::size_t x = 0; x < o1.size(); ++x) {
      if (std::isinf(o1[x])) {
        CHECK(o1[x] == o2[x]);
        continue;
      }
      const double tol = double(Tol<float>::roundings(16)) * a.ref.mag[x];
      CHECK(std::abs(o1[x] - o2[x]) <= tol);
    }
  }
}

TEST_CASE("scores: storage types and arithmetic", "[scores]") {
  std::mt19937 rng(5);
  const RotBank enc = xpos_like(12);  // d = 24
  const auto tq = Positions::sequence(3.0), tk = Positions::sequence(0.0);
  ScoreOptions opt;
  opt.causal = true;
  opt.alibi_slopes = {0.25, 0.5};
  opt.query_tile = 16;
  opt.key_tile = 16;
  Case<Eigen::half, RotBank> h(enc, 40, 43, 2, 2, tq, tk, Layout::offset_padded, Layout::dense,
                               rng);
  h.run_and_check<float>(opt, 0, eps_f);
  Case<Eigen::bfloat16, RotBank> b(enc, 40, 43, 2, 2, tq, tk, Layout::dense, Layout::elem_stride2,
                                   rng);
  b.run_and_check<double>(opt, 1, eps_f);
  Case<double, RotBank> dd(enc, 40, 43, 2, 2, tq, tk, Layout::offset_padded, Layout::dense, rng);
  dd.run_and_check<double>(opt, 0, eps_d);
  dd.run_and_check<float>(opt, 3, eps_d);  // double arithmetic, float out
  // Mixed: float queries with double keys compute in double.
  Stored<float> qf = make_stored<float>(9, 2, 24, Layout::dense, rng);
  Stored<double> kd = make_stored<double>(11, 2, 24, Layout::dense, rng);
  std::vector<double> out(2 * 9 * 11), want(out.size());
  peal::scores(enc, qf.view, tq, kd.view, tk, peal::make_view(out.data(), 2, 9, 11));
  peal::scores_reference(enc, qf.view, tq, kd.view, tk, peal::make_view(want.data(), 2, 9, 11));
  // Double arithmetic: fused_score(24) in double of |q| ‖A‖ |k| (the reference's magnitudes).
  const Reference mix =
      reference(enc, qf.val, kd.val, 9, 11, 2, 2, 24, positions_of(tq, 9), positions_of(tk, 11));
  for (std::size_t x = 0; x < out.size(); ++x) {
    const double tol = double(Tol<double>::fused_score(24) * mix.mag[x] +
                              Tol<double>::stored() * std::abs(want[x]));
    CHECK(std::abs(out[x] - want[x]) <= tol);
  }
}

TEST_CASE("scores: compositions, Jordan blocks, basis change and a user encoding", "[scores]") {
  std::mt19937 rng(11);
  // Mixed composition; deg 1 Jordan chains (tile spread unrestricted in float: (1 + 4h) <= 2^12).
  const auto mix = peal::compose(rope_bank(4, peal::Layout::HalfSplit, -0.002),
                                 peal::RotationJordanBlock<2, double>(0.3, -0.001),
                                 peal::JordanBlock<2, double>(0.0), peal::RealBlock<double>(-0.01),
                                 peal::PassThrough<double>(3));
  Case<float, decltype(mix)> c(mix, 70, 90, 2, 2, Positions::sequence(20.0),
                               Positions::sequence(0.0), Layout::dense, Layout::dense, rng);
  for (Index tile : {8, 0}) {
    ScoreOptions opt;
    opt.query_tile = tile;
    opt.key_tile = tile;
    const double w = tile ? double(tile) : 256.0;
    c.run_and_check<float>(opt, 0, eps_f, 1 + 2 * w);  // ρ = (1 + 2h_q + 2h_k)^1, h <= w / 2
  }
  // Banks of real and Jordan blocks.
  const peal::Bank<peal::RealBlock<double>> reals(std::vector<peal::RealBlock<double>>{
      peal::RealBlock<double>(-0.05), peal::RealBlock<double>(0.01), peal::RealBlock<double>(0.0)});
  Case<double, decltype(reals)> r(reals, 30, 30, 1, 1, Positions::sequence(0.0),
                                  Positions::sequence(0.0), Layout::dense, Layout::dense, rng);
  r.run_and_check<double>(ScoreOptions{}, 0, eps_d);
  // Basis change: X = P J P^{-1}.
  Eigen::MatrixXd P = Eigen::MatrixXd::Identity(8, 8) + 0.3 * Eigen::MatrixXd::Random(8, 8);
  const auto bc = peal::change_basis(rope_bank(4, peal::Layout::Interleaved, -0.01), P);
  Case<double, decltype(bc)> b(bc, 25, 31, 2, 1, Positions::sequence(7.0), Positions::sequence(0.0),
                               Layout::dense, Layout::offset_padded, rng);
  ScoreOptions bo;
  bo.query_tile = 6;
  bo.key_tile = 10;
  // |q||A||k| is measured in the original basis; P^T and P^{-1} add cond(P) to the error.
  const Eigen::JacobiSVD<Eigen::MatrixXd> svd(P);
  const double cond = svd.singularValues()(0) / svd.singularValues()(7);
  b.run_and_check<double>(bo, 0, eps_d, cond * cond);
  // A single RotationJordanBlock<3>: a chain of length 3 (p = 2), half-step positions.
  const auto lone = peal::RotationJordanBlock<3, double>(0.2, -0.003);
  Case<float, decltype(lone)> l(lone, 21, 22, 1, 1, Positions::sequence(0.5, 0.5),
                                Positions::sequence(0.0, 0.5), Layout::dense, Layout::dense, rng);
  ScoreOptions lo;
  lo.query_tile = 4;
  lo.key_tile = 4;
  l.run_and_check<float>(lo, 0, eps_f, std::pow(1 + 2 * 2.0, 2));
}

// ---- Polynomial parts per pair (detail/scores_poly.hpp) -------------------------------------
//
// In a BlockDiagonal, real JordanBlock<M ≥ 2> parts are evaluated per pair,
// e^{λτ} Σ_m τ^m/m! Σ_a q_a k_{a+m}, and added to the tile before its GEMM. Tolerance: the
// bound of check_scores with ρ = 1, i.e. 2 (d + 16) eps_C |q| ‖A(τ)‖ |k| (+ ALiBi and output
// rounding terms), the same as for rotations, at any tile size and absolute time. Why it
// holds: the GEMM share is the rotation bound (d + ~8) eps_C; the polynomial share, per pair,
// has one rounding of each coefficient f q_a/m! and w k_c (formed in double), one of τ (formed
// exactly as α + β, or as t − s in double; m of them in τ^m, m < M), 2b in the Horner sum of
// the b-th row (b < M) and M in the dot over rows: ≤ (4M − 1) eps_C |q_J|ᵀ|A_J(τ)||k_J|
// ≤ 15 eps_C |q| ‖A(τ)‖ |k| for M ≤ 4 (|A_J(τ)| has the 1- and ∞-norms of A_J(τ), which
// bound its 2-norm); adding it to the GEMM result is one more rounding, and
// (d + 8) + 15 + 1 ≤ 2 (d + 16) for every d. The reference is the encoding's own score() in
// long double, whose error (~d 2^-64) is negligible at eps_C = 2^-23 (float) and 2^-52 (double).

namespace {

template <class S>
peal::Bank<peal::RotationBlock<S>> rot_bank(int pairs, peal::Layout layout, double a = 0.0) {
  std::vector<peal::RotationBlock<S>> b;
  for (int i = 0; i < pairs; ++i) b.emplace_back(std::pow(10000.0L, -2.0L * i / (2.0L * pairs)), a);
  return peal::Bank<peal::RotationBlock<S>>(b, layout);
}
/// RoPE + JordanBlock<3>{λ} + a slowly decaying half-split bank + pass-through (d = 17).
template <class S>
auto jordan3_mix(double lambda) {
  return peal::compose(rot_bank<S>(4, peal::Layout::Interleaved), peal::JordanBlock<3, S>(lambda),
                       rot_bank<S>(2, peal::Layout::HalfSplit, -0.003), peal::PassThrough<S>(2));
}
/// Two polynomial parts, the first at offset 0: JordanBlock<4>{λ}, RoPE, JordanBlock<2>{λ/2},
/// one pass-through coordinate (d = 13).
template <class S>
auto jordan4_mix(double lambda) {
  return peal::compose(peal::JordanBlock<4, S>(lambda), rot_bank<S>(3, peal::Layout::HalfSplit),
                       peal::JordanBlock<2, S>(0.5 * lambda), peal::PassThrough<S>(1));
}

/// One problem (storage T, grouped heads Hq = 2 Hk) under every option and output layout:
/// row-major out (direct, and padded), column-major out (direct), heads-innermost out and
/// double out (through the tile buffer), with default and small tiles.
template <class T, class E, class R>
void jordan_variants(const E& enc, const R& ref_enc, Index nq, Index nk, Positions tq, Positions tk,
                     double eps_c, double width, std::mt19937& rng) {
  Case<T, E> c(enc, ref_enc, nq, nk, 4, 2, tq, tk, Layout::dense, Layout::offset_padded, rng);
  const std::vector<double> slopes = {0.5, 0.25, 0.125, 0.0625};
  const std::vector<double> same = {0.97, 0.97, 0.99, 0.99};  // equal within each group of 2
  const std::vector<double> diff = {0.97, 0.995, 0.99, 1.0};
  for (int variant = 0; variant < 5; ++variant) {
    ScoreOptions opt;
    opt.causal = variant % 2 == 1;
    if (variant >= 1) opt.scale = variant == 4 ? -0.5 : 0.125;
    if (variant == 1 || variant == 3) opt.query_tile = 16, opt.key_tile = 24;
    if (variant >= 2) opt.alibi_slopes = slopes;
    if (variant == 2) opt.decay = same;
    if (variant == 3) opt.decay = diff;
    CAPTURE(variant);
    for (int ol = 0; ol < 4; ++ol) {
      CAPTURE(ol);
      c.template run_and_check<float>(opt, ol, eps_c, 1.0, width);
    }
    c.template run_and_check<double>(opt, variant % 4, eps_c, 1.0, width);
  }
}

template <class T>
void jordan_suite(double eps_c) {
  std::mt19937 rng(std::is_same<T, float>::value ? 303 : 304);
  // Irregular timestamps near 1e6 (not representable offsets, gaps in [0.2, 2.2) and one of
  // ~150): τ is formed in double there; evenly spaced ones take the exact α + β path.
  std::vector<double> irr(50);
  std::uniform_real_distribution<double> gap(0.2, 2.2);
  double t = 1e6 - 0.3;
  for (std::size_t i = 0; i < irr.size(); ++i) {
    irr[i] = t;
    t += i == 31 ? 150.0 + gap(rng) : gap(rng);
  }
  for (double lambda : {0.0, -0.02, 0.01}) {
    CAPTURE(lambda);
    const auto e3 = jordan3_mix<double>(lambda);
    const auto r3 = jordan3_mix<long double>(lambda);
    const auto e4 = jordan4_mix<double>(lambda);
    const auto r4 = jordan4_mix<long double>(lambda);
    static_assert(sk::scores_split<float, std::remove_cv_t<decltype(e3)>>::value, "per pair");
    static_assert(sk::scores_split<double, std::remove_cv_t<decltype(e4)>>::value, "per pair");
    // Near 0: 40 queries at the end of 61 keys (chunked prefill).
    jordan_variants<T>(e3, r3, 40, 61, Positions::sequence(21.0), Positions::sequence(0.0), eps_c,
                       -1, rng);
    jordan_variants<T>(e4, r4, 40, 61, Positions::sequence(21.0), Positions::sequence(0.0), eps_c,
                       -1, rng);
    // Near 1e6, half steps.
    jordan_variants<T>(e3, r3, 33, 70, Positions::sequence(1e6 + 18.5, 0.5),
                       Positions::sequence(1e6, 0.5), eps_c, -1, rng);
    jordan_variants<T>(e4, r4, 33, 70, Positions::sequence(1e6 + 18.5, 0.5),
                       Positions::sequence(1e6, 0.5), eps_c, -1, rng);
    // Irregular.
    const Positions p(irr);
    jordan_variants<T>(e3, r3, 50, 50, p, p, eps_c, 1e3, rng);
    jordan_variants<T>(e4, r4, 50, 50, p, p, eps_c, 1e3, rng);
  }
}

}  // namespace

TEST_CASE("scores: JordanBlock<3>/<4> parts per pair in float, every option and layout",
          "[scores][jordan]") {
  jordan_suite<float>(eps_f);
}

TEST_CASE("scores: JordanBlock<3>/<4> parts per pair in double, every option and layout",
          "[scores][jordan]") {
  jordan_suite<double>(eps_d);
}

TEST_CASE("scores: which encodings take the per-pair path; the others stay correct",
          "[scores][jordan]") {
  using J3 = decltype(jordan3_mix<double>(0.0));
  STATIC_REQUIRE(sk::scores_split<float, J3>::value);
  STATIC_REQUIRE(
      sk::scores_split<float, decltype(peal::compose(peal::JordanBlock<2, double>(0.0),
                                                     peal::PassThrough<double>(2)))>::value);
  // A bare (or banked) Jordan block, a basis change around the composition, a composition
  // nested in another, complex Jordan blocks and JordanBlock<1>: through the GEMM.
  STATIC_REQUIRE_FALSE(sk::scores_split<float, peal::JordanBlock<3, double>>::value);
  STATIC_REQUIRE_FALSE(sk::scores_split<float, peal::Bank<peal::JordanBlock<3, double>>>::value);
  STATIC_REQUIRE_FALSE(sk::scores_split<float, peal::BasisChange<J3>>::value);
  STATIC_REQUIRE_FALSE(
      sk::scores_split<float, peal::BlockDiagonal<J3, peal::PassThrough<double>>>::value);
  STATIC_REQUIRE_FALSE(
      sk::scores_split<
          float, peal::BlockDiagonal<peal::RotationJordanBlock<2>, peal::JordanBlock<1>>>::value);

  std::mt19937 rng(305);
  // Half and bfloat16 storage (float arithmetic) on the per-pair path, ρ = 1.
  const auto e3 = jordan3_mix<double>(-0.02);
  const auto r3 = jordan3_mix<long double>(-0.02);
  ScoreOptions ho;
  ho.causal = true;
  ho.alibi_slopes = {0.25, 0.5};
  ho.query_tile = 16;
  Case<Eigen::half, J3> ch(e3, r3, 40, 43, 2, 1, Positions::sequence(1e6 + 3.0),
                           Positions::sequence(1e6), Layout::offset_padded, Layout::dense, rng);
  ch.run_and_check<float>(ho, 0, eps_f);
  Case<Eigen::bfloat16, J3> cb(e3, r3, 40, 43, 2, 1, Positions::sequence(3.0),
                               Positions::sequence(0.0), Layout::dense, Layout::elem_stride2, rng);
  cb.run_and_check<double>(ho, 2, eps_f);
  // A bare JordanBlock<3> at t ~ 1e6 in float: tiles capped at (1 + 4h)^2 <= 2^12 (h <= 15.75),
  // ρ = (1 + 2 h_q + 2 h_k)^2 <= 64².
  const peal::JordanBlock<3, double> bare(-0.01);
  Case<float, decltype(bare)> b(bare, 70, 90, 2, 1, Positions::sequence(1e6 + 20.0),
                                Positions::sequence(1e6), Layout::dense, Layout::dense, rng);
  ScoreOptions opt;
  opt.causal = true;
  b.run_and_check<float>(opt, 0, eps_f, 64.0 * 64.0);
  // A basis change around the composition, in double with 8-token tiles: ρ = (1 + 4·3.5)^2
  // for the chain, cond(P)^2 for P^T and P^{-1}.
  const auto inner = jordan3_mix<double>(-0.01);
  Eigen::MatrixXd P = Eigen::MatrixXd::Identity(17, 17) + 0.2 * Eigen::MatrixXd::Random(17, 17);
  const auto bc = peal::change_basis(inner, P);
  Case<double, decltype(bc)> c(bc, 30, 41, 2, 2, Positions::sequence(1e6 + 11.0),
                               Positions::sequence(1e6), Layout::dense, Layout::dense, rng);
  ScoreOptions bo;
  bo.query_tile = 8;
  bo.key_tile = 8;
  bo.alibi_slopes = {0.5, 0.25};
  const Eigen::JacobiSVD<Eigen::MatrixXd> svd(P);
  const double cond = svd.singularValues()(0) / svd.singularValues()(16);
  c.run_and_check<double>(bo, 0, eps_d, 15.0 * 15.0 * cond * cond);
}

namespace {
// A user-defined encoding peal has no coder for: RoPE written by hand (fallback path).
struct MyRope : peal::Encoding<MyRope, double> {
  using MatrixType = peal::Matrix<double>;
  RotBank bank = rope_bank(3);
  int dim() const { return 6; }
  MatrixType generator() const { return bank.generator(); }
  MatrixType A(double tau) const { return bank.A(tau); }
  template <class V>
  void apply(V&& v, double tau, bool transpose) const {
    bank.apply(v, tau, transpose);
  }
};
}  // namespace

TEST_CASE("scores: a user-defined encoding goes through the generic fallback", "[scores]") {
  std::mt19937 rng(3);
  const MyRope enc;
  Case<float, MyRope> c(enc, 33, 29, 2, 2, Positions::sequence(0.0), Positions::sequence(0.0),
                        Layout::dense, Layout::dense, rng);
  ScoreOptions opt;
  opt.causal = true;
  opt.query_tile = 8;
  c.run_and_check<float>(opt, 0, eps_f);
}

TEST_CASE("scores: thread count does not change the result; empty problems", "[scores]") {
  std::mt19937 rng(17);
  const RotBank enc = xpos_like(16);
  // 2 x 4 x 400 x 380 x 32 flops: enough work for the kernel to start two threads.
  Stored<float> q = make_stored<float>(400, 4, 32, Layout::dense, rng);
  Stored<float> k = make_stored<float>(380, 2, 32, Layout::dense, rng);
  std::vector<float> a(4 * 400 * 380), b(a.size());
  ScoreOptions opt;
  opt.causal = true;
  opt.decay = {0.99, 0.98, 0.97, 0.96};
  opt.query_tile = 32;
  opt.key_tile = 64;
  opt.threads = 1;
  peal::scores(enc, q.view, Positions::sequence(0.0), k.view, Positions::sequence(0.0),
               peal::make_view(a.data(), 4, 400, 380), opt);
  opt.threads = 2;
  peal::scores(enc, q.view, Positions::sequence(0.0), k.view, Positions::sequence(0.0),
               peal::make_view(b.data(), 4, 400, 380), opt);
  CHECK(a == b);

  std::vector<float> none;
  Stored<float> q0 = make_stored<float>(0, 4, 32, Layout::dense, rng);
  CHECK_NOTHROW(peal::scores(enc, q0.view, Positions::sequence(0.0), k.view,
                             Positions::sequence(0.0), peal::make_view(none.data(), 4, 0, 380)));
  // d = 0: the score is the ALiBi bias alone.
  const peal::PassThrough<double> empty(0);
  std::vector<float> e(2 * 3 * 4);
  ScoreOptions al;
  al.alibi_slopes = {1.0, 0.5};
  peal::scores(empty, TensorView<const float>(nullptr, 3, 2, 0), Positions::sequence(10.0),
               TensorView<const float>(nullptr, 4, 2, 0), Positions::sequence(0.0),
               peal::make_view(e.data(), 2, 3, 4), al);
  CHECK(e[0] == -10.0f);
  CHECK(e[std::size_t((1 * 3 + 2) * 4 + 3)] == -4.5f);  // -0.5 (12 - 3): exact in float
}

TEST_CASE("scores: shared tables are reused across calls only for the same encoding and tiles",
          "[scores]") {
  std::mt19937 rng(23);
  Stored<float> q = make_stored<float>(70, 2, 16, Layout::dense, rng);
  Stored<float> k = make_stored<float>(90, 2, 16, Layout::dense, rng);
  const RotBank a = rope_bank(8);
  std::vector<Rot> bb = rope_blocks(8);
  bb[3] = Rot(bb[3].omega() * 1.01L, 0.0);  // one frequency differs
  const RotBank b(bb);
  auto run = [&](const RotBank& e, double step) {
    std::vector<float> o(2 * 70 * 90);
    peal::scores(e, q.view, Positions::sequence(0.0, step), k.view, Positions::sequence(0.0, step),
                 peal::make_view(o.data(), 2, 70, 90));
    return o;
  };
  const auto b1 = run(b, 1.0), b_step2 = run(b, 2.0);
  const auto a1 = run(a, 1.0);
  const auto b2 = run(b, 1.0);
  const auto b_step2_again = run(b, 2.0);
  CHECK(b1 == b2);  // bitwise: same tables whether cached or recomputed
  CHECK(b_step2 == b_step2_again);
  CHECK(a1 != b1);
  CHECK(b1 != b_step2);
}

// ---- Validation ---------------------------------------------------------------------------

TEST_CASE("scores: invalid arguments are rejected with clear errors", "[scores]") {
  std::mt19937 rng(1);
  const RotBank enc = rope_bank(4);  // d = 8
  Stored<float> q = make_stored<float>(5, 4, 8, Layout::dense, rng);
  Stored<float> k = make_stored<float>(6, 2, 8, Layout::dense, rng);
  Stored<float> k3 = make_stored<float>(6, 3, 8, Layout::dense, rng);
  Stored<float> k7 = make_stored<float>(6, 2, 7, Layout::dense, rng);
  std::vector<float> o(4 * 5 * 6);
  auto out = peal::make_view(o.data(), 4, 5, 6);
  const auto p = Positions::sequence(0.0);
  using Catch::Matchers::Contains;
  auto call = [&](const ScoreOptions& opt) { peal::scores(enc, q.view, p, k.view, p, out, opt); };
  REQUIRE_NOTHROW(call(ScoreOptions{}));
  REQUIRE_THROWS_WITH(peal::scores(enc, q.view, p, k7.view, p, out), Contains("must have dim 8"));
  REQUIRE_THROWS_WITH(peal::scores(enc, q.view, p, k3.view, p, out),
                      Contains("multiple of the number of key heads"));
  REQUIRE_THROWS_WITH(peal::scores(enc, q.view, p, k.view, p, peal::make_view(o.data(), 4, 6, 5)),
                      Contains("expected [Hq, nq, nk] = [4, 5, 6]"));
  const std::vector<double> three = {0, 1, 2};
  REQUIRE_THROWS_WITH(peal::scores(enc, q.view, Positions(three), k.view, p, out),
                      Contains("3 positions for 5 tokens"));
  std::vector<double> nan5 = {0, 1, std::nan(""), 3, 4};
  REQUIRE_THROWS_AS(peal::scores(enc, q.view, Positions(nan5), k.view, p, out),
                    peal::invalid_argument);
  std::vector<double> far5 = {-1e308, 0, 0, 0, 0};
  std::vector<double> far6 = {1e308, 0, 0, 0, 0, 0};
  REQUIRE_THROWS_WITH(peal::scores(enc, q.view, Positions(far5), k.view, Positions(far6), out),
                      Contains("differences of positions overflow"));
  ScoreOptions o1;
  o1.alibi_slopes = {1, 2};
  REQUIRE_THROWS_WITH(call(o1), Contains("2 ALiBi slopes for 4 query heads"));
  ScoreOptions o2;
  o2.decay = {0.9, 0.9, 0.9};
  REQUIRE_THROWS_WITH(call(o2), Contains("3 decays for 4 query heads"));
  ScoreOptions o3;
  o3.decay = {0.9, 1.5, 0.9, 0.9};
  REQUIRE_THROWS_WITH(call(o3), Contains("decay gamma must be in (0, 1]"));
  o3.decay = {0.9, 0.0, 0.9, 0.9};
  REQUIRE_THROWS_WITH(call(o3), Contains("decay gamma must be in (0, 1]"));
  ScoreOptions o4;
  o4.scale = std::numeric_limits<double>::infinity();
  REQUIRE_THROWS_WITH(call(o4), Contains("scale must be finite"));
  ScoreOptions o5;
  o5.threads = -1;
  REQUIRE_THROWS_AS(call(o5), peal::invalid_argument);
  ScoreOptions o6;
  o6.alibi_slopes = {1, std::nan(""), 1, 1};
  REQUIRE_THROWS_AS(call(o6), peal::invalid_argument);
}

// ---- Rebasing: the tile plan ----------------------------------------------------------------

TEST_CASE("scores: tile plan obeys the rebasing thresholds", "[scores][rebase]") {
  // Evenly spaced positions: equal tiles, all regular (one shared relative table).
  std::vector<double> seq(1000);
  for (std::size_t i = 0; i < seq.size(); ++i) seq[i] = 1.7e9 + 3.0 * double(i);
  const auto p = sk::plan_tiles(seq.data(), 1000, 128, std::numeric_limits<double>::infinity());
  REQUIRE(p.size() == 8);
  for (Index I = 0; I < p.size(); ++I) CHECK(p.regular[std::size_t(I)]);
  // A steep decay caps the half-spread: rate * h <= 16 ln 2 in float.
  const double rate = 0.1, h = sk::max_half_spread(rate, 0, sk::rebase_limits<float>::exp_budget,
                                                   sk::rebase_limits<float>::poly_budget);
  CHECK(std::abs(h - 110.9035) <= Tol<double>::printed(4));  // 16 ln 2 / 0.1
  const auto q = sk::plan_tiles(seq.data(), 1000, 128, h);
  for (Index I = 0; I < q.size(); ++I) {
    CHECK(q.hi[std::size_t(I)] - q.lo[std::size_t(I)] <= 2 * h);
    CHECK(q.rows(I) <= 128);
    CHECK(q.regular[std::size_t(I)]);
  }
  CHECK(q.rows(0) == 74);  // 73 steps of 3 = 219 <= 2h = 221.8
  // Jordan chains: (1 + 4h)^p <= 2^12 in float, 2^20 in double.
  // (2^6 - 1) / 4 and (2^10 - 1) / 4, exact up to the few roundings of the root.
  CHECK(std::abs(sk::max_half_spread(0, 2, sk::rebase_limits<float>::exp_budget,
                                     sk::rebase_limits<float>::poly_budget) -
                 15.75) <= Tol<double>::roundings(4) * 15.75);
  CHECK(std::abs(sk::max_half_spread(0, 2, sk::rebase_limits<double>::exp_budget,
                                     sk::rebase_limits<double>::poly_budget) -
                 255.75) <= Tol<double>::roundings(4) * 255.75);
  // Irregular gaps: a gap wider than 2h ends a tile, down to single tokens.
  std::vector<double> gaps = {0, 1, 2, 1000, 2000, 2001, 5000};
  const auto g = sk::plan_tiles(gaps.data(), 7, 128, 10.0);
  REQUIRE(g.size() == 4);
  CHECK(g.rows(0) == 3);
  CHECK(g.rows(1) == 1);
  CHECK(g.rows(2) == 2);
  CHECK(g.rows(3) == 1);
}

// ---- Numerics -----------------------------------------------------------------------------

TEST_CASE("scores: RetNet decay at n = 65536 in float stays accurate; the global form overflows",
          "[scores][rebase]") {
  // RetNet-like bank: every pair decays with a = ln γ, γ = 1 - 2^-5 (docs/design.md §1).
  const double gamma = 1.0 - std::pow(2.0, -5.0), a = std::log(gamma);
  const int pairs = 16, d = 2 * pairs;
  std::vector<Rot> blocks;
  for (int i = 0; i < pairs; ++i)
    blocks.emplace_back(std::pow(10000.0L, -(long double)i / (pairs - 1)), a);
  const RotBank enc(blocks);
  const Index n = 65536, nq = 32;  // the last 32 queries against every key
  std::mt19937 rng(65536);
  Stored<float> q = make_stored<float>(nq, 1, d, Layout::dense, rng);
  Stored<float> k = make_stored<float>(n, 1, d, Layout::dense, rng);
  const auto tq = Positions::sequence(double(n - nq)), tk = Positions::sequence(0.0);
  std::vector<float> out(std::size_t(nq * n));
  ScoreOptions opt;
  opt.causal = true;
  peal::scores(enc, q.view, tq, k.view, tk, peal::make_view(out.data(), 1, nq, n), opt);

  // Every entry is finite (or -inf where masked): no overflow anywhere.
  Index nonfinite = 0;
  for (Index i = 0; i < nq; ++i)
    for (Index j = 0; j < n; ++j) {
      const float v = out[std::size_t(i * n + j)];
      if (tk[j] > tq[i])
        nonfinite += !(std::isinf(v) && v < 0);
      else
        nonfinite += !std::isfinite(v);
    }
  CHECK(nonfinite == 0);

  // Against the double reference on a band (the last 1024 keys, where scores are not
  // negligible: γ^1024 ≈ 8e-15) and a sample of 256 keys across the whole sequence.
  std::vector<Index> cols;
  for (Index j = n - 1024; j < n; ++j) cols.push_back(j);
  std::uniform_int_distribution<Index> U(0, n - 1025);
  for (int c = 0; c < 256; ++c) cols.push_back(U(rng));
  Eigen::VectorXd qv(d), kv(d);
  double worst = 0;
  Index bad = 0;
  for (Index i = 0; i < nq; ++i) {
    for (Index e = 0; e < d; ++e) qv(e) = q.vec(i, 0)[e];
    for (Index j : cols) {
      if (tk[j] > tq[i]) continue;
      for (Index e = 0; e < d; ++e) kv(e) = k.vec(j, 0)[e];
      const double tau = tq[i] - tk[j];
      const double want = enc.score(qv, tq[i], kv, tk[j]);
      const double M = qv.norm() * std::exp(a * tau) * std::sqrt(2.0) * kv.norm();
      const double err = std::abs(double(out[std::size_t(i * n + j)]) - want);
      const double tol =
          double(Tol<float>::fused_score(d) * M + Tol<float>::flushed() * qv.norm() * kv.norm());
      bad += !(err <= tol);
      if (M > 1e-30) worst = std::max(worst, err / M);
    }
  }
  INFO("worst |err| / (|q| |A| |k|) = " << worst);
  CHECK(bad == 0);

  // The same scores as RetNet is usually written: a pure rotation (a = 0) and the scalar
  // decay γ^(t - s) as an option (rebased through row scales and alpha).
  std::vector<Rot> pure_blocks;
  for (const auto& b : blocks) pure_blocks.emplace_back(b.omega(), 0.0);
  const RotBank pure(pure_blocks);
  std::vector<float> out2(out.size());
  ScoreOptions dec = opt;
  dec.decay = {gamma};
  peal::scores(pure, q.view, tq, k.view, tk, peal::make_view(out2.data(), 1, nq, n), dec);
  Index differ = 0;
  for (Index i = 0; i < nq; ++i) {
    for (Index e = 0; e < d; ++e) qv(e) = q.vec(i, 0)[e];
    for (Index j = 0; j < n; ++j) {
      const float a1 = out[std::size_t(i * n + j)], a2 = out2[std::size_t(i * n + j)];
      if (std::isinf(a1) || std::isinf(a2)) {
        differ += a1 != a2;
        continue;
      }
      for (Index e = 0; e < d; ++e) kv(e) = k.vec(j, 0)[e];
      const double M = qv.norm() * std::exp(a * (tq[i] - tk[j])) * kv.norm();
      // Both within fused_score(d) M of the truth; below FLT_MIN, flushes to 0 may differ.
      differ +=
          !(std::abs(double(a1) - a2) <= double(2 * Tol<float>::fused_score(d) * M +
                                                Tol<float>::flushed() * qv.norm() * kv.norm()));
    }
  }
  CHECK(differ == 0);

  // The global (unrebased) factorisation in float: F(t) q underflows to 0 and G(s) k
  // overflows to inf at these positions, so q̃^T k̃ is NaN even for adjacent tokens.
  std::vector<peal::RotationBlock<float>> fb;
  for (const auto& b : blocks) fb.push_back(peal::RotationBlock<float>::from_params(b.params()));
  const peal::Bank<peal::RotationBlock<float>> encf(fb);
  Eigen::VectorXf qg(d), kg(d);
  for (Index e = 0; e < d; ++e)
    qg(e) = float(q.vec(nq - 1, 0)[e]), kg(e) = float(k.vec(n - 2, 0)[e]);
  encf.encode_query(qg, tq[nq - 1]);  // F(65535): e^{a t} = e^{-2080}
  encf.encode_key(kg, tk[n - 2]);     // G(65534): e^{-a s} = e^{+2080}
  CHECK(qg.cwiseAbs().maxCoeff() == 0.0f);
  CHECK_FALSE(kg.allFinite());
  CHECK_FALSE(std::isfinite(qg.dot(kg)));
  // ... while the fused kernel returns the true score for that pair.
  for (Index e = 0; e < d; ++e) qv(e) = q.vec(nq - 1, 0)[e], kv(e) = k.vec(n - 2, 0)[e];
  // Kept as tight as before (1e-5 |q| |k|): the fused bound without its factor 2 of slack,
  // fused_score(d) / 2 of |q| e^{a τ} |k| (τ = 1; the full bound would be 1.6e-5 |q| |k|).
  const double truth = enc.score(qv, tq[nq - 1], kv, tk[n - 2]);
  const double tol1 = double(Tol<float>::fused_score(d) / 2) * qv.norm() * std::exp(a) * kv.norm();
  CHECK(std::abs(out[std::size_t((nq - 1) * n + (n - 2))] - truth) <= tol1);
}

TEST_CASE("scores: JordanBlock<3> at t ~ 1e6 in float is rebased; the global form cancels",
          "[scores][rebase]") {
  // Quadratic in the distance: A(τ) = [[1, τ, τ²/2], [0, 1, τ], [0, 0, 1]] (λ = -1e-7).
  const auto enc = peal::compose(peal::JordanBlock<3, double>(-1e-7), rope_bank(4));
  const Index d = enc.dim(), nq = 96, nk = 120;
  std::mt19937 rng(1000000);
  const auto tq = Positions::sequence(1e6 + 24.0), tk = Positions::sequence(1e6);
  Case<float, decltype(enc)> c(enc, nq, nk, 1, 1, tq, tk, Layout::dense, Layout::dense, rng);
  // The Jordan part of this composition is evaluated per pair (detail/scores_poly.hpp): no
  // polynomial amplification, ρ = 1, with default (256 x 512) tiles. (Through the GEMM, as a
  // bare JordanBlock<3> still is, float tiles are capped at (1 + 4h)^2 <= 2^12, h <= 15.75.)
  static_assert(sk::scores_split<float, std::remove_cv_t<decltype(enc)>>::value, "per pair");
  ScoreOptions opt;
  opt.causal = true;
  c.run_and_check<float>(opt, 0, eps_f, 1.0);

  // Global form: q̃ = F(t) q, k̃ = G(s) k in float. The entries are ~t²/2 = 5e11 and cancel
  // to the true ~τ²/2: the error is ~eps_f t² |q||k|, orders of magnitude above the score.
  std::vector<float> fused(std::size_t(nq * nk));
  peal::scores(enc, TensorView<const float>(c.q.view), tq, TensorView<const float>(c.k.view), tk,
               peal::make_view(fused.data(), 1, nq, nk));
  double worst_global = 0, worst_fused = 0;
  for (Index i = nq - 8; i < nq; ++i) {
    Eigen::VectorXf qi(d);
    for (Index e = 0; e < d; ++e) qi(e) = float(c.q.vec(i, 0)[e]);
    const Eigen::VectorXf qt = Eigen::MatrixXd(enc.F(tq[i])).cast<float>() * qi;
    for (Index j = nk - 8; j < nk; ++j) {
      Eigen::VectorXf kj(d);
      for (Index e = 0; e < d; ++e) kj(e) = float(c.k.vec(j, 0)[e]);
      const Eigen::VectorXf kt = Eigen::MatrixXd(enc.G(tk[j])).cast<float>() * kj;
      const double want = c.ref.get(c.ref.raw, 0, i, j), M = c.ref.get(c.ref.mag, 0, i, j);
      worst_global = std::max(worst_global, std::abs(double(qt.dot(kt)) - want) / M);
      worst_fused =
          std::max(worst_fused, std::abs(double(fused[std::size_t(i * nk + j)]) - want) / M);
    }
  }
  INFO("relative errors: global " << worst_global << ", fused " << worst_fused);
  CHECK(worst_global > 1.0);
  CHECK(worst_fused <= Tol<float>::fused_score(d));  // ρ = 1: the bound of check_scores
}

TEST_CASE("scores: timestamps near 1.7e9 with irregular gaps on a decaying rotation",
          "[scores][rebase]") {
  // Rotations from 1/30 s to 1/1e6 s, decaying with a time constant of one minute, plus a
  // scalar decay and ALiBi per head. Exponential inter-arrival times (mean 30 s) and a few
  // hour-long gaps: the tile plan splits wherever the spread exceeds 2 h = 2 θ / ρ.
  std::vector<Rot> blocks;
  for (int i = 0; i < 8; ++i)
    blocks.emplace_back(1.0L / (30.0L * std::pow(1e6L / 30.0L, i / 7.0L)), -1.0 / 60.0);
  const RotBank enc(blocks);
  std::mt19937 rng(1700000000);
  std::exponential_distribution<double> gap(1.0 / 30.0);
  const Index n = 200;
  std::vector<double> ts(static_cast<std::size_t>(n));
  double t = 1.7e9;
  for (Index i = 0; i < n; ++i) {
    ts[std::size_t(i)] = t;
    t += (i % 67 == 50) ? 3600.0 + gap(rng) : gap(rng);
  }
  const Positions p(ts);
  Case<float, RotBank> c(enc, n, n, 2, 1, p, p, Layout::dense, Layout::offset_padded, rng);
  ScoreOptions opt;
  opt.causal = true;
  opt.decay = {0.9999, 0.999};
  opt.alibi_slopes = {1e-4, 1e-3};
  c.run_and_check<float>(opt, 0, eps_f, 1, 1e4, double(Tol<float>::flushed()));
  c.run_and_check<double>(opt, 1, eps_f, 1, 1e4, double(Tol<float>::flushed()));
  // The plan really split: rate = 1/60 + |ln 0.999|, h = 16 ln 2 / rate ≈ 657 s.
  const double rate = 1.0 / 60.0 - std::log(0.999);
  const double h = sk::max_half_spread(rate, 0, sk::rebase_limits<float>::exp_budget,
                                       sk::rebase_limits<float>::poly_budget);
  const auto plan = sk::plan_tiles(ts.data(), n, 256, h);
  CHECK(plan.size() > 6);
  for (Index I = 0; I < plan.size(); ++I)
    CHECK(plan.hi[std::size_t(I)] - plan.lo[std::size_t(I)] <= 2 * h);
  // Double storage: double arithmetic, tight tolerance.
  Case<double, RotBank> cd(enc, n, n, 1, 1, p, p, Layout::dense, Layout::dense, rng);
  ScoreOptions od = opt;
  od.decay = {0.9999};
  od.alibi_slopes = {1e-4};
  cd.run_and_check<double>(od, 0, eps_d, 1, 1e4);
}

// A preset is dispatched as the encoding it is (detail::has_encoding_type, encoding.hpp).
namespace {
namespace skd = peal::detail::scores_kernels;
static_assert(std::is_same<skd::coder_t<float, peal::RopeEncoding<double>>,
                           skd::coder_t<float, peal::RopeEncoding<double>::encoding_type>>::value,
              "RopeEncoding must use its BlockDiagonal's coder");
}  // namespace

TEST_CASE("scores: RoPE at positions near DBL_MAX agrees with the per-pair reference",
          "[scores][angle]") {
  // Pure rotations use anchor 0, so the kernel forms R(ω t) and R(ω s) at absolute positions
  // up to 1e308; the reference forms R(ω (t − s)). Both reduce exactly (detail/angle_exact.hpp).
  // Pair 0 of the RoPE (coordinates 0 and 4, HalfSplit) has ω = 1: A(τ)_{0,0} = cos τ and
  // A(τ)_{0,4} = sin τ, here against mpmath. Before, without FMA the kernel gave NaN; with FMA
  // every huge angle came out near 0 rad, in the kernel and the reference alike.
  peal::RopeConfig cfg;
  cfg.head_dim = 8;
  const auto rope = peal::rope<double>(cfg, 0);
  struct Lag {
    double t, s, cos_tau, sin_tau;  // τ = fl(t − s)
  };
  const Lag lags[] = {
      {1e300, -1e300, -0.337861644332749667903, 0.941195786905556948272},
      {-DBL_MAX / 2, DBL_MAX / 2, -0.999987689426559937465, -0.0049619547891840617905},
      {1e100, 1e100 - 1e85, 0.214878485736553761895, -0.976640791881828813418},
      {1e308, 1e308, 1.0, 0.0}};
  auto run = [&](const std::vector<double>& q, const std::vector<double>& k, double t, double s) {
    std::vector<double> out(1, 0.0), want(1, 0.0);
    const std::vector<double> tq = {t}, tk = {s};
    peal::scores(rope, TensorView<const double>(q.data(), 1, 1, 8), Positions(tq),
                 TensorView<const double>(k.data(), 1, 1, 8), Positions(tk),
                 TensorView<double>(out.data(), 1, 1, 1));
    peal::scores_reference(rope, TensorView<const double>(q.data(), 1, 1, 8), Positions(tq),
                           TensorView<const double>(k.data(), 1, 1, 8), Positions(tk),
                           TensorView<double>(want.data(), 1, 1, 1));
    return std::make_pair(out[0], want[0]);
  };
  const std::vector<double> e0 = {1, 0, 0, 0, 0, 0, 0, 0}, e4 = {0, 0, 0, 0, 1, 0, 0, 0};
  const std::vector<double> q = {1, 0.5, -0.25, 2, 0, 1.5, 0.75, -1},
                            k = {0.5, -1, 2, 0.25, 1, 0, -0.5, 1.5};
  for (const Lag& l : lags) {
    CAPTURE(l.t, l.s);
    auto c = run(e0, e0, l.t, l.s), sn = run(e0, e4, l.t, l.s), g = run(q, k, l.t, l.s);
    CHECK(std::fabs(c.first - l.cos_tau) <= 8 * DBL_EPSILON);
    CHECK(std::fabs(c.second - l.cos_tau) <= 8 * DBL_EPSILON);
    CHECK(std::fabs(sn.first - l.sin_tau) <= 8 * DBL_EPSILON);
    CHECK(std::fabs(sn.second - l.sin_tau) <= 8 * DBL_EPSILON);
    CHECK(std::isfinite(g.first));
    CHECK(std::fabs(g.first - g.second) <= 64 * DBL_EPSILON * 16);  // |q| |k| ≤ 16
  }
}

TEST_CASE("scores: results past the range are ±inf or exact, never NaN", "[scores]") {
  // q^T A(t − s) k with e^{λ (t − s)} beyond the double range: +inf or −inf by the sign of the
  // exact score, 0 where the exact score is 0, finite where it is representable; the same
  // from scores_reference. Paths: the per-pair polynomial parts (JordanBlock<M ≥ 2> in a
  // composition), the GEMM with a growing cross factor (real and rotation banks), and a
  // scalar decay towards future keys (γ^(t − s) with t < s).
  const double inf = std::numeric_limits<double>::infinity();
  auto run = [](const auto& enc, std::vector<double> q, double t, std::vector<double> k, double s,
                const ScoreOptions& opt = {}) {
    const Index d = Index(q.size());
    std::vector<double> out(1, 7.0), want(1, 7.0);
    const std::vector<double> tq = {t}, tk = {s};
    peal::scores(enc, TensorView<const double>(q.data(), 1, 1, d), Positions(tq),
                 TensorView<const double>(k.data(), 1, 1, d), Positions(tk),
                 TensorView<double>(out.data(), 1, 1, 1), opt);
    peal::scores_reference(enc, TensorView<const double>(q.data(), 1, 1, d), Positions(tq),
                           TensorView<const double>(k.data(), 1, 1, d), Positions(tk),
                           TensorView<double>(want.data(), 1, 1, 1), opt);
    return std::make_pair(out[0], want[0]);
  };
  auto check = [](std::pair<double, double> got, double exact) {
    CAPTURE(got.first, got.second, exact);
    for (double v : {got.first, got.second}) {
      if (std::isinf(exact) || exact == 0)
        CHECK(v == exact);
      else
        CHECK(std::fabs(v - exact) <= 1e-12 * std::fabs(exact));
    }
  };
  // Polynomial part: A(10) = e^{1000} [[1, 10], [0, 1]] on the Jordan coordinates.
  const auto jp = peal::compose(peal::JordanBlock<2, double>(100), peal::PassThrough<double>(2));
  check(run(jp, {1, 0, 0, 0}, 10, {1, 0, 0, 0}, 0), inf);
  check(run(jp, {-1, 0, 0, 0}, 10, {1, 0, 0, 0}, 0), -inf);
  check(run(jp, {1, 0, 0, 0}, 10, {0, 1, 0, 0}, 0), inf);
  check(run(jp, {0, 1, 0, 0}, 10, {1, 0, 0, 0}, 0), 0);   // A(10)_{1,0} = 0
  check(run(jp, {0, 1, 1, 0}, 10, {1, 0, 2, 0}, 0), 2);   // only the pass-through share
  check(run(jp, {1, 0, 1, 0}, -10, {1, 0, 2, 0}, 0), 2);  // e^{-1000} underflows to 0
  const auto jf = peal::compose(peal::JordanBlock<2, double>(71), peal::PassThrough<double>(2));
  check(run(jf, {1e-300, 0, 0, 0}, 10, {1, 0, 0, 0}, 0), double(1e-300L * std::exp(710.0L)));
  // GEMM path with growth: real bank and growing rotation bank (ω = 0).
  const peal::Bank<peal::RealBlock<double>> real(
      {peal::RealBlock<double>(100), peal::RealBlock<double>(100)});
  check(run(real, {1, 0}, 10, {1, 1}, 0), inf);
  check(run(real, {0, 1}, 10, {1, 0}, 0), 0);
  using RB = peal::RotationBlock<double>;
  const peal::Bank<RB> grow({RB(0.0L, 100.0)});
  check(run(grow, {1, 0}, 10, {1, 0}, 0), inf);
  check(run(grow, {0, 1}, 10, {1, 0}, 0), 0);
  // Scalar decay γ = 1/2 towards a key 2000 positions in the future: γ^(−2000) = 2^2000.
  ScoreOptions opt;
  opt.decay = {0.5};
  const peal::Bank<RB> still({RB(0.0L)});
  check(run(still, {1, 0}, 0, {1, 0}, 2000, opt), inf);
  check(run(still, {1, 0}, 0, {0, 1}, 2000, opt), 0);
}

// ---- Overlap of the output with the inputs ------------------------------------------------
// The kernel reads q and k tile by tile while it writes out: an `out` overlapping `k` gave
// 39,598 wrong scores of 360,000 (errors up to 6.7) without an error. Any overlap of out with
// q or k is rejected, by scores() and scores_reference(), before anything is written; views
// in adjacent memory are accepted.
TEST_CASE("scores: an output overlapping q or k is rejected; adjacent memory is fine",
          "[scores][overlap]") {
  using Catch::Matchers::Contains;
  std::mt19937 rng(5);
  const RotBank enc = rope_bank(8);  // d = 16
  const Index nq = 7, nk = 9, Hq = 2, Hk = 1, d = 16;
  const Index nqv = nq * Hq * d, nkv = nk * Hk * d, nout = Hq * nq * nk;
  std::vector<float> buf(std::size_t(nqv + nout + nkv + 64));
  std::normal_distribution<float> N(0.0f, 1.0f);
  for (auto& x : buf) x = N(rng);
  const std::vector<float> saved = buf;
  // Layout [q | out | k]: out right after q, k right after out.
  float* q0 = buf.data();
  float* o0 = q0 + nqv;
  float* k0 = o0 + nout;
  const TensorView<const float> q(q0, nq, Hq, d), k(k0, nk, Hk, d);
  const auto p = Positions::sequence(3.0);
  auto out_at = [&](float* at) { return TensorView<float>(at, Hq, nq, nk); };
  for (const ScoreOptions& opt :
       {ScoreOptions{}, ScoreOptions{true, 0.25, {0.5, 0.25}, {0.9, 1.0}}}) {
    for (Index shift : {Index(1), Index(-1), Index(-nout + 1), Index(nout - 1)}) {
      INFO("out moved by " << shift);
      const auto out = out_at(o0 + shift);  // into k (shift > 0) or into q (shift < 0)
      const char* which = shift > 0 ? "overlaps k" : "overlaps q";
      CHECK_THROWS_WITH(peal::scores(enc, q, p, k, p, out, opt), Contains(which));
      CHECK_THROWS_WITH(peal::scores_reference(enc, q, p, k, p, out, opt), Contains(which));
    }
    // Exactly on top of q or k (same first element).
    CHECK_THROWS_WITH(peal::scores(enc, q, p, k, p, out_at(q0), opt), Contains("overlaps q"));
    CHECK_THROWS_WITH(peal::scores(enc, q, p, k, p, out_at(k0), opt), Contains("overlaps k"));
    // A strided out over part of k's memory.
    const TensorView<float> inter(k0 + 1, Hq, nq, nk, Strides{nq * nk * 2, 1, nq});
    CHECK_THROWS_WITH(peal::scores(enc, q, p, k, p, inter, opt), Contains("overlaps k"));
    CHECK(std::equal(buf.begin(), buf.end(), saved.begin()));
    // Adjacent: accepted, and the same bits as a separate output.
    std::vector<float> sep(static_cast<std::size_t>(nout));
    peal::scores(enc, q, p, k, p, TensorView<float>(sep.data(), Hq, nq, nk), opt);
    peal::scores(enc, q, p, k, p, out_at(o0), opt);
    CHECK(std::equal(sep.begin(), sep.end(), o0));
    std::vector<double> sepd(static_cast<std::size_t>(nout));
    peal::scores_reference(enc, q, p, k, p, TensorView<double>(sepd.data(), Hq, nq, nk), opt);
    peal::scores_reference(enc, q, p, k, p, out_at(o0), opt);
    for (Index x = 0; x < nout; ++x) CHECK(o0[x] == float(sepd[std::size_t(x)]));
    // q and k may overlap each other (both are read only): the same memory for both.
    std::vector<float> o2(static_cast<std::size_t>(Hq * nq * nq));
    REQUIRE_NOTHROW(peal::scores(enc, q, p, TensorView<const float>(q0, nq, Hq, d), p,
                                 TensorView<float>(o2.data(), Hq, nq, nq), opt));
    buf = saved;
  }
}

// ---- Tile sizes ------------------------------------------------------------------------------
TEST_CASE("scores: negative tile sizes are rejected; explicit tile sizes give the same scores",
          "[scores]") {
  using Catch::Matchers::Contains;
  std::mt19937 rng(9);
  const RotBank enc = rope_bank(4);  // d = 8
  Case<float, RotBank> c(enc, 37, 45, 2, 1, Positions::sequence(0.0), Positions::sequence(0.0),
                         Layout::dense, Layout::dense, rng);
  std::vector<float> o(std::size_t(2 * 37 * 45));
  const TensorView<float> out(o.data(), 2, 37, 45);
  for (Index bad : {Index(-1), Index(-512), std::numeric_limits<Index>::min()}) {
    ScoreOptions oq, ok;
    oq.query_tile = bad;
    ok.key_tile = bad;
    CHECK_THROWS_WITH(peal::scores(enc, c.q.view, c.tq, c.k.view, c.tk, out, oq),
                      Contains("tile sizes must be >= 0"));
    CHECK_THROWS_WITH(peal::scores(enc, c.q.view, c.tq, c.k.view, c.tk, out, ok),
                      Contains("tile sizes must be >= 0"));
    CHECK_THROWS_AS(peal::scores_reference(enc, c.q.view, c.tq, c.k.view, c.tk, out, oq),
                    peal::invalid_argument);
  }
  // 0 is automatic; 1 and sizes that do not divide the token counts are valid.
  for (Index tile : {Index(0), Index(1), Index(7), Index(1000)}) {
    ScoreOptions opt;
    opt.query_tile = tile;
    opt.key_tile = tile == 7 ? 5 : tile;
    c.run_and_check<float>(opt, 0, eps_f);
  }
}

// ---- Steep decays, per pair -----------------------------------------------------------------
// With γ = 1e-300 the rebasing half-spread |ln γ| h ≤ θ is h = 0.016 in float: tiles of one
// token, a 1 x 1 GEMM per pair, 92x slower than γ = 0.99 at n = 2048 (and the row scales and
// alpha, rounded to float, lost γ^1 = 1e-300 entirely: a double `out` got 0). A decay that
// would cut the tiles is applied per pair, exp(ln γ (t_i − s_j)) in double, as the reference.
// Same tolerance as every other test (relative to scale γ^τ |q| ‖A‖ |k|); floor: the final
// rounding of a float out in its subnormal range (absolute <= denorm_min / 2).
TEST_CASE("scores: steep decays are applied per pair, accurate relative to the true score",
          "[scores][decay]") {
  std::mt19937 rng(2024);
  const double tiny = std::numeric_limits<float>::denorm_min();
  const RotBank rope = rope_bank(8);           // d = 16, pure rotation
  const RotBank xpos = xpos_like(8);           // decaying rotations: two-step tiles
  const auto j3 = jordan3_mix<double>(-0.02);  // a JordanBlock<3> evaluated per pair
  // Causal: γ^τ for τ >= 0 only (no overflow), every head its own γ, grouped heads.
  const std::vector<double> steep = {1e-300, 1e-5, 0.3, 1e-300};
  const std::vector<double> slopes = {0.5, 0.0, 0.25, 1.0};
  auto variants = [&](auto& c, double eps_c) {
    for (int variant = 0; variant < 4; ++variant) {
      ScoreOptions opt;
      opt.causal = true;
      opt.decay = steep;
      opt.scale = variant % 2 ? -0.25 : 1.0;
      if (variant >= 2) opt.alibi_slopes = slopes;
      if (variant == 3) opt.query_tile = 8, opt.key_tile = 16;
      CAPTURE(variant);
      for (int ol = 0; ol < 4; ++ol) {
        CAPTURE(ol);
        c.template run_and_check<float>(opt, ol, eps_c, 1.0, -1, tiny);
        c.template run_and_check<double>(opt, ol, eps_c, 1.0, -1, 0.0);
      }
    }
  };
  {
    Case<float, RotBank> c(rope, 45, 70, 4, 2, Positions::sequence(25.0), Positions::sequence(0.0),
                           Layout::dense, Layout::offset_padded, rng);
    variants(c, eps_f);
  }
  {
    Case<double, RotBank> c(xpos, 33, 41, 4, 2, Positions::sequence(8.5, 0.5),
                            Positions::sequence(0.0, 0.5), Layout::heads_major, Layout::dense, rng);
    variants(c, eps_d);
  }
  {
    Case<float, decltype(j3)> c(j3, 30, 37, 4, 2, Positions::sequence(7.0),
                                Positions::sequence(0.0), Layout::dense, Layout::dense, rng);
    variants(c, eps_f);
  }
  // Irregular timestamps with wide gaps: whole tiles whose decays underflow are written
  // without their GEMM (±0 plus the bias).
  {
    std::vector<double> irr(60);
    double t = 1.7e9;
    for (std::size_t i = 0; i < irr.size(); ++i) irr[i] = (t += (i % 20 == 19) ? 2000.5 : 0.75);
    Case<float, RotBank> c(rope, 60, 60, 4, 2, Positions(irr), Positions(irr), Layout::dense,
                           Layout::dense, rng);
    variants(c, eps_f);
  }
  // Not causal: γ^τ grows for τ < 0; here within float's range (|ln γ τ| <= 4.6 * 9 < 88).
  {
    Case<float, RotBank> c(rope, 20, 20, 1, 1, Positions::sequence(0.0), Positions::sequence(-10.0),
                           Layout::dense, Layout::dense, rng);
    ScoreOptions opt;
    opt.decay = {0.01};  // |ln γ| = 4.6: h = 2.4 in float, tiles of 5 tokens if rebased
    for (int ol = 0; ol < 4; ++ol) {
      c.run_and_check<float>(opt, ol, eps_f, 1.0, -1, tiny);
      c.run_and_check<double>(opt, ol, eps_f);
    }
  }
}

TEST_CASE("scores: a steep decay does not cut the tiles down", "[scores][decay]") {
  // gamma = 1e-300 made |ln gamma| h <= theta give h = 0.016: one-token tiles, a 1 x 1 GEMM
  // per pair (80x slower at n = 2048). The plan must keep the tiles of the undecayed encoding
  // and apply the decay per pair; a mild decay keeps rebasing through the tiles.
  // (Speed itself is measured in bench/bench_scores.cpp, "steep_decay".)
  const Index n = 1024, d = 128;
  const RotBank enc = rope_bank(64);
  std::vector<float> q(std::size_t(n * d), 0.5f), k(q.size(), 0.25f), out(std::size_t(n * n));
  auto plan = [&](double gamma) {
    ScoreOptions opt;
    opt.decay = {gamma};
    opt.threads = 1;
    TensorView<const float> qv(q.data(), n, 1, d), kv(k.data(), n, 1, d);
    TensorView<float> ov(out.data(), 1, n, n);
    sk::ScoresRun<float, RotBank, const float, const float, float> run(
        enc, qv, Positions::sequence(0.0), kv, Positions::sequence(0.0), ov, opt);
    return std::make_tuple(run.query_tiles(), run.key_tiles(), run.decay_per_pair());
  };
  const auto [q0, k0, p0] = plan(1.0);
  const auto [q1, k1, p1] = plan(1e-300);
  const auto [q2, k2, p2] = plan(0.99);
  CHECK(!p0);
  CHECK(p1);
  CHECK(q1 == q0);
  CHECK(k1 == k0);
  CHECK(!p2);
  CHECK(q2 <= 2 * q0);
}
