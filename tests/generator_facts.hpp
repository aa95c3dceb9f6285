// What the suites need to know of an encoding whose type they have no overload for (a user's
// block, tests/toy_block.hpp), read from its long double generator X: independent of the
// kernels, which read the block's traits instead. Eigen's eigenvalue solver in long double is
// compiled once (tests/eigen_kernels.hpp declares it extern; tests/kernels/eigen_decompositions.cpp).
#pragma once

#include <Eigen/Eigenvalues>
#include <algorithm>
#include <cmath>
#include <limits>

#include <peal/peal.hpp>

namespace peal_test {
namespace generator_facts {

/// The real parts of X's eigenvalues (Eigen's eigenvalue solver in long double).
template <class M>
peal::Vector<long double> real_parts(const M& X) {
  if (X.size() == 0) return {};
  // A plain matrix: the solver's compute() is a member template on the input's type, and the
  // extern one is for this type.
  const peal::Matrix<long double> Xm = X;
  const Eigen::EigenSolver<peal::Matrix<long double>> es(Xm, /*computeEigenvectors=*/false);
  return es.eigenvalues().real();
}

/// max Re λ over the eigenvalues λ of X (−inf for an empty X).
template <class M>
long double max_real_part(const M& X) {
  const peal::Vector<long double> re = real_parts(X);
  return re.size() ? re.maxCoeff() : -std::numeric_limits<long double>::infinity();
}

/// max |Re λ|: the rate of the exponential factors of A(τ) = e^{τX}.
template <class M>
long double growth_rate(const M& X) {
  const peal::Vector<long double> re = real_parts(X);
  return re.size() ? re.cwiseAbs().maxCoeff() : 0.0L;
}

/// An upper bound of the longest Jordan chain minus one: 0 for a normal X (X Xᵀ = Xᵀ X to the
/// rounding of long double: unitarily diagonalisable), else dim − 1 (the degree of e^{τX}'s
/// polynomial part cannot exceed it). Bounds built on it hold; for a non-normal X they are
/// those of the longest chain X's size allows.
template <class M>
int chain_degree_bound(const M& X) {
  if (X.size() == 0) return 0;
  const long double n = X.norm();
  const long double c = (X * X.transpose() - X.transpose() * X).norm();
  return c <= 64 * std::numeric_limits<long double>::epsilon() * n * n ? 0 : int(X.rows()) - 1;
}

}  // namespace generator_facts
}  // namespace peal_test
