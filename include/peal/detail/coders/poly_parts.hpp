// Per-pair evaluation of the polynomial (Jordan) parts of a composition inside peal::scores
// (docs/kernels-scores.md §3, "Polynomial parts per pair").
//
// A part whose block_traits set per_pair_polynomial (block_traits.hpp: a real Jordan
// chain, e.g. JordanBlock<M>{λ}, M >= 2) on coordinates [o, o + M) has X = λI + N, N with
// ones on the superdiagonal, so A(τ)_{a,c} = e^{λτ} τ^{c−a}/(c−a)! for c ≥ a and its share
// of a score is
//     q_Jᵀ A(τ) k_J = e^{λτ} Σ_{c<M} k_c Σ_{m≤c} q_{c−m} τ^m/m!,        τ = t_i − s_j.
// Through the two-step tiled product (scores.hpp) these polynomial terms cancel against each
// other and lose (1 + 4h)^(M−1) of the result, h the tiles' half-spread, which caps float
// tiles at 32 positions for M = 3. Evaluated per pair every term is bounded entrywise by
// |q_J|ᵀ|A(τ)||k_J|, so the error is a few ε of |q| ‖A(τ)‖ |k| at any τ and any tile size.
// Such parts are therefore zeroed in the GEMM operands (ZeroCoder) and added to each tile,
// before its GEMM accumulates into it, as
//     o_x += Σ_{b<M} V_b[x] Σ_{m≤b} R_{b,m} τ_x^m          (Horner in τ; x innermost, unit stride)
// with one side of the tile pair structure-of-arrays (V, the "vector side") and the other
// broadcast one row or column at a time (R):
//     row-major tile,    x = key j:    V_b = w_j k_{j,b},       R_{b,m} = f_i q_{i,b−m}/m!
//     column-major tile, x = query i:  V_b = w_i q_{i,M−1−b},   R_{b,m} = f_j k_{j,M−1−b+m}/m!
// (both are the double sum above, indexed from the key or from the query). The exponential
// e^{λ'τ}, λ' = λ + ln γ_h (the head's scalar decay included), is rebased like every other
// growth: w_x = e^{λ'β_x} with β_x the vector row's offset from its own tile anchor (≤ e^θ by
// the tile plan), f = scale · e^{λ'α} with α = τ − β_x (the score's own magnitude within e^θ).
// τ is formed as α + β_x in the arithmetic type when both are exact there (evenly spaced
// positions), else as t_i − s_j in double rounded once: never from rounded large terms.
//
// Past the range: when a bound on a line's terms, |f| max|q| max|V| M Σ_m τmax^m/m!, is not
// below a quarter of the largest C (f = e^{λ'α} beyond the range, huge τ or data), the line
// is evaluated per pair in long double without f and multiplied by e^{λ'α} exactly
// (detail::mul_exp): ±inf, 0 for an exact zero, or the representable value, never inf·0.
#pragma once

#include <Eigen/Core>
#include <algorithm>
#include <array>
#include <cmath>
#include <cstddef>
#include <limits>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include "../../block_diagonal.hpp"
#include "../../block_traits.hpp"
#include "../../view.hpp"
#include "../compiler.hpp"
#include "../eigen_gemm.hpp"
#include "../math/exp_poly.hpp"

namespace peal {
namespace detail {
namespace coders {

/// Parts of a composition that scores() evaluates per pair: block_traits<P> with
/// per_pair_polynomial (real Jordan chains; block_traits.hpp), which also give dim and lambda.
template <class... Parts>
struct any_poly_part
    : std::integral_constant<bool, (false || ... || is_per_pair_polynomial<Parts>::value)> {};

/// Coder (the interface of detail/coders/coders.hpp) of a part evaluated per pair: its
/// coordinates of the GEMM operands are zero. Its growth rate enters the tile plan through
/// PolyEpilogue::rate().
template <class C>
class ZeroCoder {
 public:
  template <class P>
  explicit ZeroCoder(const P& p) : n_(int(p.dim())) {}
  int dim() const { return n_; }
  double rate() const { return 0; }
  int degree() const { return 0; }
  bool identity() const { return false; }
  int rel_size() const { return 0; }
  int coef_size() const { return 0; }
  bool signature(std::vector<double>& sig) const {
    sig.push_back(5);
    sig.push_back(n_);
    return true;
  }
  void relative(const double*, Index, double*, Index) const {}
  void compose(const double*, const double*, Index, Index, C*, Index, bool) const {}
  void apply(const C*, const C*, C* dst, bool, C*) const { std::fill_n(dst, n_, C(0)); }
  void apply_factor(const C* c, const C* src, C* dst, bool t, C* scratch) const {
    apply(c, src, dst, t, scratch);
  }

 private:
  int n_;
};

/// Per-thread state of the vector side of a tile pair (memory from the caller's arena).
template <class C>
struct PolyWork {
  C* soa = nullptr;       // per part, M rows of ld values: V_b[x]
  C* beta = nullptr;      // β_x in the arithmetic type (used when every β_x is exact in it)
  double* pos = nullptr;  // signed positions: τ = p + pos[x] in double (p: the broadcast row's)
  double* w = nullptr;    // scratch: e^{λ'β_x}
  C* tau = nullptr;       // scratch: τ_x of one line when not formed as α + β_x
  Index ld = 0, n = 0;
  double vmax = 0;    // max |V_b[x]| over the parts (bounds the terms of a line)
  double posmax = 0;  // max |pos[x]|: |τ| ≤ |p| + posmax
  double anchor = 0;  // β_x = pos[x] + anchor
  double lng = 0;     // ln γ_h the vector side was scaled with
  bool exact = false;
  Index tag = -1;  // key tile held (row-major tiles), −1: none
};

/// x + y is exact in double (TwoSum error zero).
inline bool exact_sum(double x, double y, double s) {
  const double yy = s - x, xx = s - yy;
  return (x - xx) + (y - yy) == 0;
}

/// o[x] += Σ_{b<M} V[b ld + x] Σ_{m≤b} R[b M + m] τ_x^m for x < n, τ_x = α + β[x]. Eigen's
/// packets of the full native width (the GEMM's), Horner in τ, a scalar tail.
template <int M, class C>
void poly_line(C* PEAL_RESTRICT o, Index n, const C* PEAL_RESTRICT V, Index ld,
               const C* PEAL_RESTRICT beta, C alpha, const C* PEAL_RESTRICT R) {
  namespace eg = eigen_gemm;  // Eigen's packets, through the adaptor
  using Pk = eg::packet_t<C>;
  constexpr Index L = eg::packet_size<C>;
  Pk r[M * M];
  for (int e = 0; e < M * M; ++e) r[e] = eg::pset1<Pk>(R[e]);
  const Pk pa = eg::pset1<Pk>(alpha);
  Index x = 0;
  for (; x + L <= n; x += L) {
    const Pk tau = eg::padd(pa, eg::ploadu<Pk>(beta + x));
    Pk acc = eg::ploadu<Pk>(o + x);
    for (int b = 0; b < M; ++b) {
      Pk y = r[b * M + b];
      for (int m = b - 1; m >= 0; --m) y = eg::pmadd(y, tau, r[b * M + m]);
      acc = eg::pmadd(eg::ploadu<Pk>(V + b * ld + x), y, acc);
    }
    eg::pstoreu(o + x, acc);
  }
  for (; x < n; ++x) {
    const C tau = alpha + beta[x];
    C acc = o[x];
    for (int b = 0; b < M; ++b) {
      C y = R[b * M + b];
      for (int m = b - 1; m >= 0; --m) y = y * tau + R[b * M + m];
      acc += V[b * ld + x] * y;
    }
    o[x] = acc;
  }
}

/// The polynomial parts of a BlockDiagonal<Parts...>: each per-pair part contributes its
/// term above to every pair of a tile (the other parts contribute nothing here).
template <class C, class... Parts>
class PolyEpilogue {
  static constexpr std::size_t N = sizeof...(Parts);
  template <std::size_t I>
  using part_t = std::tuple_element_t<I, std::tuple<Parts...>>;

 public:
  static constexpr bool active = any_poly_part<Parts...>::value;

  explicit PolyEpilogue(const BlockDiagonal<Parts...>& bd)
      : PolyEpilogue(bd, std::make_index_sequence<N>{}) {}

  /// max |λ| of the parts (enters the tile plan's growth rate).
  double rate() const { return rate_; }
  /// Rows of the vector side per token: Σ M over the parts.
  int width() const { return rows_[N]; }

  /// Vector side: rows x < n at signed positions sign·pos[x] (keys: −s_j; queries, when
  /// transpose: t_i) with β_x = sign·pos[x] + anchor, scaled by e^{(λ + lng) β_x};
  /// get(x, c) = coordinate c of row x (as a double).
  template <class Get>
  void vectors(Get&& get, Index n, const double* pos, double sign, double anchor, double lng,
               bool transpose, PolyWork<C>& w) const {
    w.n = n, w.anchor = anchor, w.lng = lng;
    bool exact = true;  // (only used in float: in double τ = p + pos[x] costs the same)
    double posmax = 0, vmax = 0;
    for (Index x = 0; x < n; ++x) {
      const double px = sign * pos[x], b = px + anchor;
      w.pos[x] = px;
      w.beta[x] = C(b);
      exact = exact && exact_sum(px, anchor, b) && double(C(b)) == b;
      posmax = std::max(posmax, std::abs(px));
    }
    w.exact = exact;
    w.posmax = posmax;
    each([&](auto I) {
      using P = part_t<decltype(I)::value>;
      if constexpr (is_per_pair_polynomial<P>::value) {
        constexpr int M = block_traits<P>::dim;
        const int o = off_[I];
        const double lt = lambda_[I] + lng;
        for (Index x = 0; x < n; ++x)
          w.w[x] = lt == 0 ? 1.0 : std::min(std::exp(lt * (w.pos[x] + anchor)), kBig);
        C* V = w.soa + Index(rows_[I]) * w.ld;
        for (int b = 0; b < M; ++b) {
          const int c = o + (transpose ? M - 1 - b : b);
          C* PEAL_RESTRICT v = V + b * w.ld;
          for (Index x = 0; x < n; ++x) {
            v[x] = C(w.w[x] * get(x, c));
            vmax = std::max(vmax, double(std::abs(v[x])));  // NaN data: NaN stays out
          }
        }
      }
    });
    w.vmax = vmax;
  }

  /// o[x] += the polynomial terms of the pairs (broadcast row, vector row x) for x < w.n:
  /// p the broadcast row's signed position (t_i, or −s_j when transpose), get(c) its
  /// coordinate c, scale the score's scale.
  template <class Get>
  void line(Get&& get, double p, double scale, bool transpose, const PolyWork<C>& w, C* o) const {
    const double a = p - w.anchor;  // α: τ = α + β_x
    const C* beta = w.beta;
    C alpha = C(a);
    if constexpr (std::is_same<C, double>::value) {  // τ = t_i − s_j in double
      beta = w.pos, alpha = p;
    } else if (!(w.exact && exact_sum(p, -w.anchor, a) && double(C(a)) == a)) {
      for (Index x = 0; x < w.n; ++x) w.tau[x] = C(p + w.pos[x]);  // in double, rounded once
      beta = w.tau, alpha = C(0);
    }
    each([&](auto I) {
      using P = part_t<decltype(I)::value>;
      if constexpr (is_per_pair_polynomial<P>::value) {
        constexpr int M = block_traits<P>::dim;
        const int o0 = off_[I];
        const double lt = lambda_[I] + w.lng;
        const double f = scale * (lt == 0 ? 1.0 : std::exp(lt * a));
        double y[M], qmax = 0;
        for (int c = 0; c < M; ++c)
          y[c] = f * get(o0 + c), qmax = std::max(qmax, std::abs(get(o0 + c)));
        // A bound on every term of the line (Σ_b |V_b| Σ_m |R_{b,m}| |τ|^m); past a quarter of
        // the largest C (or not finite), the exact per-pair form instead.
        const double tmax = (std::abs(p) + w.posmax) * (1 + 0x1p-40);
        double poly = 0, pw = 1;
        for (int m = 0; m < M; ++m) poly += pw, pw *= tmax / double(m + 1);
        const double bound = std::abs(f) * qmax * w.vmax * M * poly;
        if (!(bound <= 0.25 * double(std::numeric_limits<C>::max()))) {
          past_range_line<M>(get, o0, p, scale, lt * a, transpose, w,
                             w.soa + Index(rows_[I]) * w.ld, o);
          return;
        }
        C R[M * M];
        double inv_fact = 1;  // 1/m!
        for (int m = 0; m < M; ++m) {
          if (m > 0) inv_fact /= double(m);
          for (int b = 0; b < M; ++b)
            R[b * M + m] = b < m ? C(0) : C(y[transpose ? M - 1 - b + m : b - m] * inv_fact);
        }
        poly_line<M>(o, w.n, w.soa + Index(rows_[I]) * w.ld, w.ld, beta, alpha, R);
      }
    });
  }

 private:
  static constexpr double kBig = std::numeric_limits<double>::max();

  // o[x] += scale e^{x_exp} Σ_b V_b[x] Σ_{m≤b} q_{idx}/m! τ_x^m, per pair in long double (its
  // range holds τ^m and the products for any double τ and moderate M), the factor applied
  // by mul_exp; terms with a zero factor are skipped (their exact value is 0).
  template <int M, class Get>
  static void past_range_line(Get& get, int o0, double p, double scale, double x_exp,
                              bool transpose, const PolyWork<C>& w, const C* V, C* o) {
    using L = long double;
    for (Index x = 0; x < w.n; ++x) {
      const L tau = L(p) + L(w.pos[x]);
      L sum = 0;
      for (int b = 0; b < M; ++b) {
        const L vb = L(V[b * w.ld + x]);
        if (vb == 0) continue;
        L pw = 1, inner = 0, inv_fact = 1;
        for (int m = 0; m <= b; ++m) {
          if (m > 0) pw *= tau, inv_fact /= L(m);
          const L q = L(get(o0 + (transpose ? M - 1 - b + m : b - m)));
          if (q != 0) inner += q * inv_fact * pw;
        }
        if (inner != 0) sum += vb * inner;
      }
      if (sum != 0) o[x] += C(mul_exp(L(scale) * sum, L(x_exp)));
    }
  }

  template <std::size_t... I>
  PolyEpilogue(const BlockDiagonal<Parts...>& bd, std::index_sequence<I...>)
      : off_{{bd.template offset<I>()...}} {
    rows_[0] = 0;
    each([&](auto J) {
      constexpr std::size_t i = decltype(J)::value;
      using P = part_t<i>;
      rows_[i + 1] = rows_[i];
      lambda_[i] = 0;
      if constexpr (is_per_pair_polynomial<P>::value) {
        lambda_[i] = block_traits<P>::lambda(bd.template part<i>());
        rate_ = std::max(rate_, std::abs(lambda_[i]));
        rows_[i + 1] += block_traits<P>::dim;
      }
    });
  }
  template <class Fn>
  void each(Fn&& fn) const {
    each_impl(fn, std::make_index_sequence<N>{});
  }
  template <class Fn, std::size_t... I>
  static void each_impl(Fn& fn, std::index_sequence<I...>) {
    (fn(std::integral_constant<std::size_t, I>{}), ...);
  }

  std::array<int, N> off_;
  std::array<int, N + 1> rows_{};
  std::array<double, N> lambda_{};
  double rate_ = 0;
};

/// No polynomial part: nothing to add.
template <class C>
struct NoPolyEpilogue {
  static constexpr bool active = false;
  template <class E>
  explicit NoPolyEpilogue(const E&) {}
  double rate() const { return 0; }
  int width() const { return 0; }
};

}  // namespace coders
}  // namespace detail
}  // namespace peal
