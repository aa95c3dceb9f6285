// The inverse of a square matrix by LU with partial pivoting, and its reciprocal 1-norm
// condition number: what BasisChange needs from P once, at construction.
//   P A = L U  (Golub & Van Loan, Matrix Computations, 4th ed., Alg. 3.4.1: the pivot is the
//              largest |entry| of the column, ties to the first; L unit lower, U upper);
//   X = A^{-1} column by column: L U x_j = P e_j, forward then back substitution (§3.4.9).
// Componentwise, |A X - I| <= gamma_{3n} |P^T L| |U| |X| (Higham, Accuracy and Stability of
// Numerical Algorithms, 2nd ed., Thm 9.3 and §14.3), which tests/test_lu_inverse.cpp checks.
// rcond = 1 / (||A||_1 ||X||_1) is computed from the inverse, not estimated.
// Written out rather than taken from Eigen::PartialPivLU: its blocked decomposition, its solve
// and its condition estimator cost every TU that constructs a BasisChange ~17 s of g++ -O2
// (tests/kernels/conformance_basis_alibi.cpp 69 -> 52 s; docs/build-cost.md §3). The matrices
// here are small (an encoding's dim) and factored once, so the plain loops cost nothing.
#pragma once

#include <Eigen/Core>
#include <cmath>
#include <utility>
#include <vector>

#include "../scalar.hpp"

namespace peal {
namespace detail {

/// P A = L U packed: lu holds U on and above the diagonal, L's multipliers below it; row i of
/// P A is row perm[i] of A. ok is false when a column had no non-zero pivot (A singular).
template <class S>
struct LuFactors {
  Matrix<S> lu;
  std::vector<Eigen::Index> perm;
  bool ok = true;
};

template <class S>
LuFactors<S> lu_factor(const Matrix<S>& a) {
  using std::abs;
  const Eigen::Index n = a.rows();
  LuFactors<S> f{a, std::vector<Eigen::Index>(std::size_t(n)), true};
  auto& lu = f.lu;
  for (Eigen::Index i = 0; i < n; ++i) f.perm[std::size_t(i)] = i;
  for (Eigen::Index k = 0; k < n; ++k) {
    Eigen::Index p = k;
    for (Eigen::Index i = k + 1; i < n; ++i)
      if (abs(lu(i, k)) > abs(lu(p, k))) p = i;
    if (!(abs(lu(p, k)) > S(0))) {  // zero (or NaN) column below the diagonal
      f.ok = false;
      return f;
    }
    if (p != k) {
      for (Eigen::Index j = 0; j < n; ++j) std::swap(lu(p, j), lu(k, j));
      std::swap(f.perm[std::size_t(p)], f.perm[std::size_t(k)]);
    }
    for (Eigen::Index i = k + 1; i < n; ++i) lu(i, k) /= lu(k, k);
    for (Eigen::Index j = k + 1; j < n; ++j) {  // rank-1 update of the trailing block
      const S u = lu(k, j);
      for (Eigen::Index i = k + 1; i < n; ++i) lu(i, j) -= lu(i, k) * u;
    }
  }
  return f;
}

/// A^{-1} from LU with partial pivoting, and rcond = 1 / (||A||_1 ||A^{-1}||_1); rcond = 0 when
/// A is singular to working precision or the inverse overflows (the inverse is then unspecified).
template <class S>
Matrix<S> lu_inverse(const Matrix<S>& a, S& rcond) {
  using std::abs;
  const Eigen::Index n = a.rows();
  const LuFactors<S> f = lu_factor(a);
  Matrix<S> x = Matrix<S>::Zero(n, n);
  rcond = S(0);
  if (!f.ok) return x;
  for (Eigen::Index i = 0; i < n; ++i) x(i, f.perm[std::size_t(i)]) = S(1);  // P I
  for (Eigen::Index c = 0; c < n; ++c) {
    for (Eigen::Index k = 0; k < n; ++k)  // L y = P e_c (unit diagonal)
      for (Eigen::Index i = k + 1; i < n; ++i) x(i, c) -= f.lu(i, k) * x(k, c);
    for (Eigen::Index k = n - 1; k >= 0; --k) {  // U x = y
      x(k, c) /= f.lu(k, k);
      for (Eigen::Index i = 0; i < k; ++i) x(i, c) -= f.lu(i, k) * x(k, c);
    }
  }
  const auto norm1 = [n](const Matrix<S>& m) {
    S best = S(0);
    for (Eigen::Index j = 0; j < n; ++j) {
      S sum = S(0);
      for (Eigen::Index i = 0; i < n; ++i) sum += abs(m(i, j));
      if (!(sum <= best)) best = sum;  // NaN propagates
    }
    return best;
  };
  const S norms = norm1(a) * norm1(x);
  rcond = n == 0 ? S(1) : (std::isfinite(norms) && norms > S(0) ? S(1) / norms : S(0));
  return x;
}

}  // namespace detail
}  // namespace peal
