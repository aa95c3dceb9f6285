// detail/math/lu_inverse.hpp: LU with partial pivoting, the inverse from it and rcond, the pieces
// BasisChange inverts P with. Each result against its derived bound (Higham, Accuracy and
// Stability of Numerical Algorithms, 2nd ed.), with the computed factors, and the inverse
// against Eigen's own PartialPivLU in long double (an independent implementation).
#include <catch2/catch.hpp>
#include <Eigen/LU>
#include <cmath>
#include <limits>
#include <peal/basis_change.hpp>
#include <peal/detail/math/lu_inverse.hpp>
#include <peal/rotation_block.hpp>
#include <random>
#include <type_traits>
#include <vector>

#include "tolerances.hpp"

namespace {

using LD = long double;
using MLD = Eigen::Matrix<LD, Eigen::Dynamic, Eigen::Dynamic>;
using Eigen::Index;
using peal_test::Tol;

// The test matrices: uniform entries, one whose first pivot is zero (pivoting needed), and a
// graded one (rows scaled over six decades).
template <class S>
std::vector<peal::Matrix<S>> cases(std::mt19937& rng) {
  std::uniform_real_distribution<double> u(-1, 1);
  std::vector<peal::Matrix<S>> out;
  for (int n : {1, 2, 3, 7, 16, 33}) {
    peal::Matrix<S> a(n, n);
    for (Index i = 0; i < a.size(); ++i) a(i) = S(u(rng));
    out.push_back(a);
    if (n >= 2) {
      a(0, 0) = S(0);
      out.push_back(a);
      for (Index i = 0; i < n; ++i) a.row(i) *= S(std::pow(10.0, 6.0 * double(i) / (n - 1) - 3));
      out.push_back(a);
    }
  }
  return out;
}

// L (unit lower) and U of the packed factors, in long double, with P^T applied to L's rows.
template <class S>
void unpack(const peal::detail::LuFactors<S>& f, MLD& ptl, MLD& u) {
  const Index n = f.lu.rows();
  const MLD lu = f.lu.template cast<LD>();
  ptl = MLD::Zero(n, n), u = MLD::Zero(n, n);
  for (Index i = 0; i < n; ++i)
    for (Index j = 0; j < n; ++j) {
      const Index row = f.perm[std::size_t(i)];  // row i of P A is row perm[i] of A
      if (j < i) ptl(row, j) = lu(i, j);
      if (j == i) ptl(row, j) = 1;
      if (j >= i) u(i, j) = lu(i, j);
    }
}

}  // namespace

TEMPLATE_TEST_CASE("lu_inverse: factors, inverse and rcond within their derived bounds", "[lu]",
                   float, double, long double) {
  using S = TestType;
  std::mt19937 rng(20261206);
  for (const auto& a : cases<S>(rng)) {
    const Index n = a.rows();
    const int ni = int(n);
    INFO("n = " << n);
    const MLD al = a.template cast<LD>();
    const auto f = peal::detail::lu_factor(a);
    REQUIRE(f.ok);
    MLD ptl, u;
    unpack(f, ptl, u);
    CHECK((ptl.cwiseAbs().array() <= 1).all());  // partial pivoting: multipliers |l_ij| <= 1
    const MLD lu_abs = ptl.cwiseAbs() * u.cwiseAbs();
    // Backward error of the factors (Thm 9.3): |A - P^T L U| <= gamma_n |P^T L| |U|, plus the
    // check's own long double evaluation of P^T L U (gamma_n in long double).
    const MLD fac_err = (al - ptl * u).cwiseAbs();
    const MLD fac_bound = (Tol<S>::gamma(ni) + Tol<LD>::gamma(ni)) * lu_abs;
    CHECK((fac_err.array() <= fac_bound.array()).all());

    S rcond = -1;
    const peal::Matrix<S> x = peal::detail::lu_inverse(a, rcond);
    const MLD xl = x.template cast<LD>();
    // Residual of the inverse, column by column (§14.3): |A X - I| <= gamma_3n |P^T L| |U| |X|,
    // plus the check's evaluation of A X (gamma_n in long double, relative to |A| |X|).
    const MLD res = (al * xl - MLD::Identity(n, n)).cwiseAbs();
    const MLD res_bound = Tol<S>::gamma(3 * ni) * lu_abs * xl.cwiseAbs() +
                          Tol<LD>::gamma(ni) * al.cwiseAbs() * xl.cwiseAbs();
    CHECK((res.array() <= res_bound.array()).all());

    // Forward error against Eigen's PartialPivLU in long double: X - A^{-1} = A^{-1} (A X - I),
    // so |X - A^{-1}| <= |A^{-1}| res_bound, plus Eigen's own long double rounding (the same
    // bound in long double, doubled for the blocked algorithm's different order).
    const MLD ref = Eigen::PartialPivLU<MLD>(al).inverse();
    const MLD fwd_bound = ref.cwiseAbs() * res_bound +
                          2 * Tol<LD>::gamma(3 * ni) * ref.cwiseAbs() * lu_abs * ref.cwiseAbs();
    CHECK(((xl - ref).cwiseAbs().array() <= fwd_bound.array()).all());

    // rcond = 1 / (||A||_1 ||X||_1): two n-term sums, a product and a division in S.
    const LD want = 1 / (al.cwiseAbs().colwise().sum().maxCoeff() *
                         xl.cwiseAbs().colwise().sum().maxCoeff());
    CHECK(std::abs(LD(rcond) - want) <= Tol<S>::gamma(2 * ni + 2) * want);
  }
}

TEMPLATE_TEST_CASE("lu_inverse: singular matrices give rcond 0 or below n eps", "[lu]", float,
                   double, long double) {
  using S = TestType;
  S rcond = -1;
  peal::Matrix<S> zero_col(3, 3);
  zero_col << 1, 0, 2, 3, 0, 4, 5, 0, 6;
  CHECK_FALSE(peal::detail::lu_factor(zero_col).ok);
  peal::detail::lu_inverse(zero_col, rcond);
  CHECK(rcond == S(0));
  peal::Matrix<S> twin_rows(3, 3);  // integers: the elimination is exact, the last pivot 0
  twin_rows << 1, 2, 3, 4, 5, 6, 1, 2, 3;
  CHECK_FALSE(peal::detail::lu_factor(twin_rows).ok);
  rcond = -1;
  peal::detail::lu_inverse(twin_rows, rcond);
  CHECK(rcond == S(0));
  // Hilbert matrix of order 12: kappa_1 = 4.1e16 (from its exact rational inverse), beyond
  // 1 / (n eps) in float and double, not in long double (1 / (12 * 2^-63) = 7.7e17).
  peal::Matrix<S> h(12, 12);
  for (Index i = 0; i < 12; ++i)
    for (Index j = 0; j < 12; ++j) h(i, j) = S(1) / S(i + j + 1);
  peal::detail::lu_inverse(h, rcond);
  if (!std::is_same<S, long double>::value) CHECK(rcond < S(12) * std::numeric_limits<S>::epsilon());
  peal::Matrix<S> empty(0, 0);
  CHECK(peal::detail::lu_inverse(empty, rcond).size() == 0);
  CHECK(rcond == S(1));
}

TEST_CASE("BasisChange: P^{-1} from lu_inverse, ill-conditioned P refused", "[lu]") {
  const peal::RotationBlock<double> r(0.7);
  Eigen::Matrix2d p;
  p << 0, 2, 3, 1;  // first pivot zero
  const auto b = peal::change_basis(r, p);
  double rcond = 0;
  CHECK(b.P_inverse() == peal::detail::lu_inverse(peal::Matrix<double>(p), rcond));
  // ||P||_1 = 3, P^{-1} = [-1/6 1/3; 1/2 0], ||P^{-1}||_1 = 2/3: rcond 1/2, to a few roundings.
  CHECK(std::abs(rcond - 0.5) <= Tol<double>::gamma(8) * 0.5);
  Eigen::Matrix2d near;
  near << 1, 1, 1, 1 + 1e-15;  // kappa_1 ~ 4e15 > 1 / (2 eps) = 2.3e15
  CHECK_THROWS_AS(peal::change_basis(r, near), peal::invalid_argument);
}
