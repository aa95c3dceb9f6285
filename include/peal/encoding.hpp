// The interface every encoding shares (docs/design.md §2), written once on top of two
// primitives the concrete encoding provides:
//   A(tau)                      exp(tau X), closed form;
//   apply(v, tau, transpose)    v <- A(tau) v, or A(tau)^T v, in place.
// From them: F(t) = A(t)^T, G(s) = A(-s) (so F(t)^T G(s) = A(t-s)), encode_query,
// encode_key and the reference score q^T A(t-s) k.
#pragma once

#include <cmath>
#include <type_traits>

#include "detail/math/exp_poly.hpp"
#include "detail/scalar.hpp"
#include "errors.hpp"

namespace peal {

namespace detail {
/// A preset that is an ordinary peal encoding under another name (RopeEncoding is a
/// BlockDiagonal plus metadata) declares `using encoding_type = <that encoding>;` and the
/// batch kernels (encode.hpp, scores.hpp) dispatch on that type instead of falling back to
/// the generic dense path.
template <class E, class = void>
struct has_encoding_type : std::false_type {};
template <class E>
struct has_encoding_type<E, std::void_t<typename E::encoding_type>>
    : std::integral_constant<bool, !std::is_same<typename E::encoding_type, E>::value> {};
}  // namespace detail

template <class Derived, class S>
class Encoding {
 public:
  using Scalar = S;
  using Real = real_t<S>;  // type of parameters and positions

  /// F(t) = A(t)^T: the query factor.
  auto F(Real t) const {
    detail::require_finite(t, "F", "t");
    return typename Derived::MatrixType(derived().A(t).transpose());
  }
  /// G(s) = A(-s): the key factor.
  auto G(Real s) const {
    detail::require_finite(s, "G", "s");
    return derived().A(-s);
  }

  /// q <- F(t) q, in place.
  template <class V>
  void encode_query(V&& q, Real t) const {
    auto&& m = detail::as_eigen(q);
    detail::require_size(m.size(), derived().dim(), "encode_query");
    detail::require_finite(t, "encode_query", "t");
    derived().apply(m, t, /*transpose=*/true);
  }

  /// k <- G(s) k, in place.
  template <class V>
  void encode_key(V&& k, Real s) const {
    auto&& m = detail::as_eigen(k);
    detail::require_size(m.size(), derived().dim(), "encode_key");
    detail::require_finite(s, "encode_key", "s");
    derived().apply(m, -s, /*transpose=*/false);
  }

  /// Reference score q^T A(t - s) k, evaluated through the lag t - s (never through
  /// F(t) and G(s) separately, which overflow for growth/decay at large |t|). The lag must
  /// be finite (t = 1e308, s = -1e308 are not: invalid_argument). Past the range of S the
  /// result is ±inf, 0 or the representable value, not NaN (score_past_range), whenever
  /// the growth over τ/2 is within the range.
  template <class VQ, class VK>
  Scalar score(const VQ& q, Real t, const VK& k, Real s) const {
    const auto& qm = detail::as_eigen(q);
    const auto& km = detail::as_eigen(k);
    detail::require_size(qm.size(), derived().dim(), "score (query)");
    detail::require_size(km.size(), derived().dim(), "score (key)");
    detail::require_finite(t, "score", "t");
    detail::require_finite(s, "score", "s");
    const Real tau = t - s;
    detail::require_finite(tau, "score", "t - s");
    const Vector<S> qq = qm.template cast<S>();
    Vector<S> kk = km.template cast<S>();
    derived().apply(kk, tau, /*transpose=*/false);
    const S direct = qq.dot(kk);
    if (std::isnormal(direct)) return direct;  // else it may have met inf·0, an overflow
    return score_past_range(qq, km.template cast<S>(), kk, tau);  // or an underflow
  }

 private:
  // q^T (A(tau) k) not a normal number. apply() gives each component of A(tau) k exactly
  // (±inf past the range, 0 for an exact zero), so first the dot product without 0·inf and
  // without intermediate overflow (detail::robust_dot). If that is not a normal number
  // either, the product may be representable although A(tau) k is not (a tiny q against an
  // overflow, a huge q against an underflow): A(tau) = A(tau/2) A(tau/2), and
  // u = A(tau/2)^T q, v = A(tau/2) k are finite while the growth over tau/2 is (|growth·tau|
  // < 2·709 in double). Only beyond that can infinite terms of both signs leave NaN.
  Scalar score_past_range(const Vector<S>& q, const Vector<S>& k, const Vector<S>& ak,
                          Real tau) const {
    const int n = int(q.size());
    const S first = detail::robust_dot<S>(q, ak, n);
    if (std::isnormal(first) || !(q.allFinite() && k.allFinite())) return first;
    Vector<S> u = q, v = k;
    derived().apply(u, tau / 2, /*transpose=*/true);
    derived().apply(v, tau / 2, /*transpose=*/false);
    const S second = detail::robust_dot<S>(u, v, n);
    if (u.allFinite() && v.allFinite()) return second;
    return first != first ? second : first;
  }

 protected:
  const Derived& derived() const { return static_cast<const Derived&>(*this); }
};

}  // namespace peal
