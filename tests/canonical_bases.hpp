// Bases for the canonical-form tests (test_canonical_form.cpp, test_from_transition.cpp): a
// random orthogonal matrix, a random basis change of a given condition number with its exact
// inverse, and the scale Σ(τ) of the rounding bound of a returned encoding.
#pragma once

#include <Eigen/Core>
#include <cmath>
#include <complex>
#include <peal/canonical_form.hpp>
#include <random>

namespace peal_test {
namespace canonical {

using MatL = Eigen::Matrix<long double, Eigen::Dynamic, Eigen::Dynamic>;

/// A random orthogonal n × n matrix (Gram–Schmidt of a Gaussian matrix).
inline MatL random_orthogonal(int n, std::mt19937& rng) {
  std::normal_distribution<double> g;
  MatL A(n, n);
  for (int i = 0; i < n; ++i)
    for (int j = 0; j < n; ++j) A(i, j) = g(rng);
  using C = std::complex<long double>;  // the instantiation canonical_form compiles anyway
  return peal::detail::canonical::orthonormalise<C>(A.cast<C>()).real();
}

/// P = U Σ Vᵀ with σ log-spaced in [1, kappa]: κ₂(P) = kappa exactly, P⁻¹ = V Σ⁻¹ Uᵀ.
struct Basis {
  MatL P, Pinv;
};
inline Basis random_basis(int n, long double kappa, std::mt19937& rng) {
  const MatL U = random_orthogonal(n, rng), V = random_orthogonal(n, rng);
  Eigen::Matrix<long double, Eigen::Dynamic, 1> s(n);
  for (int i = 0; i < n; ++i) s(i) = std::pow(kappa, n > 1 ? (long double)i / (n - 1) : 0.0L);
  return {U * s.asDiagonal() * V.transpose(), V * s.cwiseInverse().asDiagonal() * U.transpose()};
}

/// Σ(τ) = ‖ |P̂| |A_Ĵ(τ)| |P̂⁻¹| ‖_F of a returned encoding: the scale of its rounding bound
/// (test_canonical_form.cpp derives the bound).
template <class E>
long double terms(const E& enc, long double tau) {
  const MatL P = enc.P().template cast<long double>().cwiseAbs();
  const MatL Pi = enc.P_inverse().template cast<long double>().cwiseAbs();
  const MatL A = enc.inner().A(typename E::Real(tau)).template cast<long double>().cwiseAbs();
  return (P * A * Pi).norm();
}

}  // namespace canonical
}  // namespace peal_test
