// Coefficients c_j = e^{lambda tau} tau^j / j!, j = 0..M-1: the entries of exp(tau J) for
// a Jordan block J = lambda I + N (docs/numerics.md, "Jordan coefficients").
//
// Direct evaluation e^{lambda tau} * (tau^j / j!), the polynomial factor built by the
// recurrence p_j = p_{j-1} tau / j, is used whenever both factors are finite and
// e^{lambda tau} is a normal number. Otherwise (e^{lambda tau} overflows or underflows, or
// tau^j / j! overflows) the product may still be representable, so the coefficient is
// evaluated in log form,
//   c_j = sign(tau)^j exp(lambda tau + j ln|tau| - ln j!).
// Relative errors: ~(|lambda tau| + j + 2) ulp direct, ~(|lambda tau| + j ln|tau| + ln j!)
// ulp in log form; the |lambda tau| ulp is the conditioning of e^{lambda tau} itself
// (rounding of the product lambda*tau), so neither form loses more than the problem does.
// No intermediate overflow when the result itself is representable.
#pragma once

#include <cmath>
#include <limits>

namespace peal {
namespace detail {

template <class R>
void exp_poly_coefficients(R lambda, R tau, int m, R* c) {
  const R x = lambda * tau;
  const R e = std::exp(x);
  const bool e_ok = std::isnormal(e);
  R p = 1;  // tau^j / j!
  for (int j = 0; j < m; ++j) {
    if (e_ok && std::isfinite(p)) {
      c[j] = e * p;
    } else if (j > 0 && tau == 0) {
      c[j] = 0;
    } else {
      const R mag = std::exp(x + R(j) * std::log(std::abs(tau)) - std::lgamma(R(j + 1)));
      c[j] = (tau < 0 && (j % 2 == 1)) ? -mag : mag;
    }
    p = p * tau / R(j + 1);
  }
}

}  // namespace detail
}  // namespace peal
