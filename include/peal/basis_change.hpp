// BasisChange<E>: the encoding X = P J P^{-1} of an encoding E with generator J, in the
// factored form of docs/design.md §1:
//   A(tau) = P A_J(tau) P^{-1},  F_P(t) = A_J(t)^T P^T,  G_P(s) = A_J(-s) P^{-1},
// so F_P(t)^T G_P(s) = P A_J(t - s) P^{-1} = A(t - s). In a model P is absorbed into the
// query/key projections; here it is applied explicitly. P^{-1} is computed once.
#pragma once

#include <Eigen/Core>
#include <limits>
#include <type_traits>
#include <utility>

#include "detail/math/lu_inverse.hpp"
#include "encoding.hpp"

namespace peal {

template <class E>
class BasisChange {
 public:
  using Scalar = typename E::Scalar;
  using Real = real_t<Scalar>;
  using MatrixType = Matrix<Scalar>;

  /// Throws if P is not square of size inner.dim(), has non-finite entries, or is
  /// numerically singular (reciprocal condition number below dim * epsilon).
  BasisChange(E inner, MatrixType P) : inner_(std::move(inner)), P_(std::move(P)) {
    const int n = inner_.dim();
    detail::require(P_.rows() == n && P_.cols() == n,
                    "BasisChange: P must be square with the size of the encoding");
    detail::require(P_.allFinite(), "BasisChange: P has non-finite entries");
    Scalar rcond;  // 1 / (||P||_1 ||P^{-1}||_1), from the inverse (detail/math/lu_inverse.hpp)
    Pinv_ = detail::lu_inverse(P_, rcond);
    detail::require(n == 0 || rcond > Scalar(n) * std::numeric_limits<Scalar>::epsilon(),
                    "BasisChange: P is singular or too ill-conditioned to invert");
  }

  int dim() const { return inner_.dim(); }
  const E& inner() const { return inner_; }
  const MatrixType& P() const { return P_; }
  const MatrixType& P_inverse() const { return Pinv_; }

  MatrixType generator() const { return P_ * MatrixType(inner_.generator()) * Pinv_; }
  MatrixType A(Real tau) const { return P_ * MatrixType(inner_.A(tau)) * Pinv_; }
  MatrixType F(Real t) const { return MatrixType(inner_.F(t)) * P_.transpose(); }
  MatrixType G(Real s) const { return MatrixType(inner_.G(s)) * Pinv_; }

  template <class V>
  void encode_query(V&& q, Real t) const {
    auto&& m = detail::as_eigen(q);
    detail::require_size(m.size(), dim(), "encode_query");
    Vector<Scalar> y = P_.transpose() * m.template cast<Scalar>();
    inner_.encode_query(y, t);
    m = y.template cast<typename std::decay_t<decltype(m)>::Scalar>();
  }
  template <class V>
  void encode_key(V&& k, Real s) const {
    auto&& m = detail::as_eigen(k);
    detail::require_size(m.size(), dim(), "encode_key");
    Vector<Scalar> y = Pinv_ * m.template cast<Scalar>();
    inner_.encode_key(y, s);
    m = y.template cast<typename std::decay_t<decltype(m)>::Scalar>();
  }
  /// q^T A(t - s) k = (P^T q)^T A_J(t - s) (P^{-1} k).
  template <class VQ, class VK>
  Scalar score(const VQ& q, Real t, const VK& k, Real s) const {
    const auto& qm = detail::as_eigen(q);
    const auto& km = detail::as_eigen(k);
    detail::require_size(qm.size(), dim(), "score (query)");
    detail::require_size(km.size(), dim(), "score (key)");
    const Vector<Scalar> qj = P_.transpose() * qm.template cast<Scalar>();
    const Vector<Scalar> kj = Pinv_ * km.template cast<Scalar>();
    return inner_.score(qj, t, kj, s);
  }

 private:
  E inner_;
  MatrixType P_, Pinv_;
};

namespace detail {
template <class E>
struct is_basis_change : std::false_type {};
template <class I>
struct is_basis_change<BasisChange<I>> : std::true_type {};
}  // namespace detail

/// The encoding with generator P X P^{-1}, X the generator of `inner`.
template <class E, class Derived>
BasisChange<E> change_basis(E inner, const Eigen::MatrixBase<Derived>& P) {
  return BasisChange<E>(std::move(inner), typename BasisChange<E>::MatrixType(P));
}

}  // namespace peal
