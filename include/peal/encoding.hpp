// The interface every encoding shares (docs/design.md §2), written once on top of two
// primitives the concrete encoding provides:
//   A(tau)                      exp(tau X), closed form;
//   apply(v, tau, transpose)    v <- A(tau) v, or A(tau)^T v, in place.
// From them: F(t) = A(t)^T, G(s) = A(-s) (so F(t)^T G(s) = A(t-s)), encode_query,
// encode_key and the reference score q^T A(t-s) k.
#pragma once

#include <type_traits>

#include "errors.hpp"
#include "detail/scalar.hpp"

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
  /// be finite (t = 1e308, s = -1e308 are not: invalid_argument).
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
    Vector<S> kk = km.template cast<S>();
    derived().apply(kk, tau, /*transpose=*/false);
    return qm.template cast<S>().dot(kk);
  }

 protected:
  const Derived& derived() const { return static_cast<const Derived&>(*this); }
};

}  // namespace peal
