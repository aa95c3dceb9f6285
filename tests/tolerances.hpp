// Tolerances of the test suite, in one place (STYLE.md). Every bound is relative to the
// size of the quantity compared and is derived from the rounding model
// fl(a op b) = (a op b)(1 + d), |d| <= eps, first order in eps:
//   entry(n)  = 4 n eps_S     rounding of each closed-form entry (computed in real_t<S>,
//                             rounded once to S) and of an n-term dot product (Higham's
//                             gamma_n = n eps), with a factor 4 of slack for the two
//                             operands and the subtraction in the comparison;
//   phase(x)  = 4 x eps_R     a time rounded to real_t<S> (eps_R) moves A(tau) by
//                             |X| |d tau| relative, x = |X| * |tau| (for long double this
//                             also covers the rounding of omega*tau before sinl/cosl);
//   expm(x)   = 16 x eps_L    forward error of Eigen's scaling-and-squaring matrix
//                             exponential in long double, which grows like |tau X| eps
//                             (Higham 2005, each squaring doubles the relative error).
#pragma once

#include <cmath>
#include <limits>

#include <peal/detail/scalar.hpp>

namespace peal_test {

template <class S>
struct Tol {
  using R = peal::real_t<S>;
  static constexpr long double eps = std::numeric_limits<S>::epsilon();
  static constexpr long double eps_real = std::numeric_limits<R>::epsilon();
  static constexpr long double eps_long = std::numeric_limits<long double>::epsilon();

  static long double entry(int n) { return 4.0L * n * eps; }
  static long double phase(long double x) { return 4.0L * x * eps_real; }
  static long double expm(long double x) { return 16.0L * (1.0L + x) * eps_long; }
  // Step of the central difference (A(h) - A(-h)) / 2h: truncation h^2 |X|^3 / 6 balances
  // rounding eps / h at h ~ eps^(1/3) / |X|.
  static long double diff_step(long double xnorm) { return std::cbrt(eps) / (1.0L + xnorm); }
  static long double diff_tol(long double xnorm, int n) {
    const long double h = diff_step(xnorm);
    return h * h * std::pow(xnorm, 3) / 3.0L + entry(n) * (1.0L + xnorm) / h;
  }
};

}  // namespace peal_test
