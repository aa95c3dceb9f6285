// ALiBi (Press et al., "Train Short, Test Long", 2022; docs/presets.md §8): head h adds
//   bias(t, s) = -m_h (t - s)
// to the logit of a query at t against a key at s. Slopes m_h are those of the ALiBi
// repository's get_slopes (== BLOOM build_alibi_tensor == MPT with alibi_bias_max 8).
//
// In peal the bias is exact in the algebra (docs/design.md §1): JordanBlock<2>{0} has
// A(tau) = [[1, tau], [0, 1]], and with the query augmented by (1, 0) and the key by
// (0, -m),  (1, 0) A(t - s) (0, -m)^T = -m (t - s). Alibi<S> holds that block and builds
// the augmented vectors [q; 1; 0] and [k; 0; -m] for compose(other, alibi.encoding()):
//
//   auto enc = compose(rope_bank, a.encoding());           // dim d + 2
//   score    = enc.score(a.augment_query(q), t, a.augment_key(k), s)
//            = q^T A_rope(t - s) k - m (t - s).
//
// Numerics: the global factorization encodes the query as (1, t) and the key as
// (m s, -m), so the bias is formed as m s - m t: at t ~ 1e6 in float each product carries
// an error of ~ulp(m t) ~ 0.03 m and the difference of two large numbers keeps only that
// absolute accuracy. Rebasing (anchor t0 per tile: query A(t - t0)^T, key A(t0 - s), as the
// scores kernel does) forms m (t0 - s) + m (t - t0) from small numbers and is accurate
// relative to the bias itself (tests/test_alibi.cpp shows both). The additive form
// alibi_bias(m, t, s) = -m (t - s) evaluates t - s first and is exact-to-rounding too.
#pragma once

#include <cmath>
#include <string>
#include <vector>

#include "../errors.hpp"
#include "../jordan_block.hpp"

namespace peal {

/// Press et al. slopes for n_heads heads: for n a power of two m_k = 2^(-8k/n), k = 1..n;
/// otherwise, with c = 2^floor(log2 n), the c slopes of c heads followed by the first n - c
/// slopes 2^(-8k/(2c)) for odd k = 1, 3, 5, ... Computed as exp2 of an exactly
/// representable exponent, so each slope is correctly rounded (powers of two are exact).
inline std::vector<double> alibi_slopes(int n_heads) {
  if (n_heads <= 0)
    detail::fail("alibi_slopes: n_heads must be > 0, got " + std::to_string(n_heads));
  int c = 1;
  while (c <= n_heads / 2) c *= 2;
  std::vector<double> m;
  m.reserve(std::size_t(n_heads));
  for (int k = 1; k <= c; ++k)
    m.push_back(static_cast<double>(std::exp2(-8.0L * k / static_cast<long double>(c))));
  for (int j = 0; j < n_heads - c; ++j)
    m.push_back(
        static_cast<double>(std::exp2(-8.0L * (2 * j + 1) / static_cast<long double>(2 * c))));
  return m;
}

/// The additive ALiBi bias -m (t - s) (t - s is formed first: exact for integer positions
/// below 2^53, so the result is correctly rounded).
inline double alibi_bias(double m, double t, double s) { return -m * (t - s); }

/// ALiBi for one head of slope m as a peal encoding: JordanBlock<2, S>{0} plus the fixed
/// augmentations query (1, 0), key (0, -m), placed AFTER the coordinates of any other
/// encoding they are composed with.
template <class S = double>
class Alibi {
 public:
  using Scalar = S;
  using EncodingType = JordanBlock<2, S>;

  explicit Alibi(double m) : m_(m), block_(0) { detail::require_finite(m, "alibi", "m"); }

  /// The encoding: A(tau) = [[1, tau], [0, 1]].
  const EncodingType& encoding() const { return block_; }
  double slope() const { return m_; }
  static constexpr int extra_dim() { return 2; }

  /// (1, 0) and (0, -m): the two coordinates appended to a query and a key.
  Eigen::Matrix<S, 2, 1> query_augmentation() const { return {S(1), S(0)}; }
  Eigen::Matrix<S, 2, 1> key_augmentation() const { return {S(0), S(-m_)}; }

  /// [q; 1; 0] (size q.size() + 2). q: Eigen vector, std::vector or std::array.
  template <class V>
  Vector<S> augment_query(const V& q) const {
    return augment(q, query_augmentation());
  }
  /// [k; 0; -m].
  template <class V>
  Vector<S> augment_key(const V& k) const {
    return augment(k, key_augmentation());
  }

  /// The bias through the algebra: (1, 0) A(t - s) (0, -m)^T = -m (t - s).
  S bias(double t, double s) const {
    return block_.score(query_augmentation(), t, key_augmentation(), s);
  }

 private:
  template <class V>
  static Vector<S> augment(const V& v, const Eigen::Matrix<S, 2, 1>& extra) {
    const auto& m = detail::as_eigen(v);
    const Eigen::Index n = m.size();
    Vector<S> out(n + 2);
    out.head(n) = m.template cast<S>();
    out(n) = extra(0);  // element-wise: GCC 12 misreads a 2-float packet copy (-Warray-bounds)
    out(n + 1) = extra(1);
    return out;
  }

  double m_;
  EncodingType block_;
};

/// ALiBi of slope m (the Jordan construction of docs/design.md §1).
template <class S = double>
Alibi<S> alibi(double m) {
  return Alibi<S>(m);
}

}  // namespace peal
