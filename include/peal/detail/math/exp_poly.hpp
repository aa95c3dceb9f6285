// Coefficients c_j = e^{lambda tau} tau^j / j!, j = 0..M-1: the entries of exp(tau J) for
// a Jordan block J = lambda I + N (docs/numerics.md, "Jordan coefficients"), and the
// products with e^x that must not overflow, underflow or turn into NaN in an intermediate
// step ("Past the range").
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
//
// Past the range. A coefficient that is ±inf or 0 in floating point is still a finite
// nonzero real number, so its product with a zero vector component is 0 and its product
// with a tiny one may be representable. The scaled forms below carry such numbers as
// m·2^e (m finite, e an integer): exp_scaled (e^x), exp_poly_scaled (the c_j), mul_exp
// (v·e^x), ldexp_sum (Σ m_i 2^{e_i}) and robust_dot (a dot product without spurious
// overflow, 0·inf counted as 0). The blocks use them only when the fast form produced a
// non-normal factor or a non-finite result, so the usual path is unchanged.
#pragma once

#include <algorithm>
#include <climits>
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

/// Exponents of scaled numbers are clamped to ±2^20: 2^(2^20) over- or underflows every
/// nonzero finite value of every supported type (long double: 2^±16446).
inline constexpr long kScaledExponentLimit = 1L << 20;
inline int clamp_exponent(long e) {
  return static_cast<int>(std::clamp(e, -2 * kScaledExponentLimit, 2 * kScaledExponentLimit));
}

/// e^x = f·2^k, f ∈ [0.7, 1.42], for any finite or infinite x (k clamped; f = 1 then).
/// k = round(x / ln 2), r = (x − k·ln2_hi) − k·ln2_lo with ln2_hi of 32 significant bits
/// (k·ln2_hi exact for |k| < 2^21), f = exp(r): relative error ~1 ulp of exp plus the
/// conditioning |x| ulp of the argument. NaN gives NaN.
template <class R>
void exp_scaled(R x, R& f, long& k) {
  constexpr R ln2 = R(0.693147180559945309417232121458176568L);
  constexpr R ln2_hi = R(0x1.62e42fefa0000p-1);
  constexpr R ln2_lo = R(1.646594958289708128098443075500134360e-12L);
  if (x != x) {
    f = x, k = 0;
    return;
  }
  if (!(std::fabs(x) < R(kScaledExponentLimit) * ln2)) {
    f = 1, k = x > 0 ? kScaledExponentLimit : -kScaledExponentLimit;
    return;
  }
  const R kr = std::nearbyint(x / ln2);
  k = static_cast<long>(kr);
  f = std::exp((x - kr * ln2_hi) - kr * ln2_lo);
}

/// v·e^x, correct past the range of R: v = 0 gives 0 (e^x is a finite real number), the
/// result is ±inf only when |v|·e^x exceeds the largest R and 0 only when it is below the
/// smallest. Bit-identical to v * std::exp(x) when e^x is a normal number.
template <class R>
R mul_exp(R v, R x) {
  const R e = std::exp(x);
  if (std::isnormal(e) || v == 0 || !std::isfinite(v)) return v == 0 ? v : v * e;
  R f;
  long k;
  exp_scaled(x, f, k);
  int ev;
  const R mv = std::frexp(v, &ev);  // |mv·f| < 1.42: no overflow before the one scaling
  return std::ldexp(mv * f, clamp_exponent(long(ev) + k));
}

/// c_j = f[j]·2^e[j] (f[j] = 0 exactly when tau = 0 and j > 0, else 1/2 ≤ |f[j]| < 1) for
/// every finite lambda and tau: e^{lambda tau} by exp_scaled, tau^j / j! by the recurrence
/// renormalized at each step, so nothing over- or underflows. Relative error ~(j + 2) ulp
/// plus the conditioning |lambda tau| ulp, as the direct form.
template <class R>
void exp_poly_scaled(R lambda, R tau, int m, R* f, long* e) {
  R fe;
  long ke;
  exp_scaled(lambda * tau, fe, ke);
  R p = 1;  // tau^j / j! = p·2^pe
  long pe = 0;
  for (int j = 0; j < m; ++j) {
    int ex = 0;
    f[j] = p == 0 ? R(0) : std::frexp(fe * p, &ex);
    e[j] = p == 0 ? 0 : ke + pe + ex;
    int ep = 0;
    p = std::frexp(p * tau / R(j + 1), &ep);
    pe += ep;
  }
}

/// Σ_{i<n} m[i]·2^e[i] for finite m[i], scaled by the largest term so that no partial sum
/// overflows; the sum is scaled back once (±inf or 0 only for the result itself). Terms
/// 2^1074 times smaller than the largest are lost, as in any floating-point sum.
template <class R>
R ldexp_sum(const R* m, const long* e, int n) {
  long top = LONG_MIN;
  for (int i = 0; i < n; ++i)
    if (m[i] != 0) top = std::max(top, e[i] + std::ilogb(m[i]));
  if (top == LONG_MIN) return R(0);
  R acc = 0;  // each scaled term < 2 in magnitude
  for (int i = 0; i < n; ++i)
    if (m[i] != 0) acc += std::ldexp(m[i], clamp_exponent(e[i] - top));
  return std::ldexp(acc, clamp_exponent(top));
}

/// Σ a(i)·b(i), i < n, past the range: a term with a zero factor is 0 (even against ±inf,
/// which stands for a finite number beyond the range), the finite terms are summed scaled
/// by the largest one, so no partial sum overflows, and infinite terms decide the result
/// when there are any: their sign if they all agree, NaN if they do not.
template <class R, class VA, class VB>
R robust_dot(const VA& a, const VB& b, int n) {
  bool pos_inf = false, neg_inf = false;
  long top = LONG_MIN;
  for (int i = 0; i < n; ++i) {
    const R x = a(i), y = b(i);
    if (x != x || y != y) return std::numeric_limits<R>::quiet_NaN();
    if (x == 0 || y == 0) continue;
    if (std::isinf(x) || std::isinf(y)) {
      ((x < 0) != (y < 0) ? neg_inf : pos_inf) = true;
      continue;
    }
    top = std::max(top, long(std::ilogb(x)) + std::ilogb(y));
  }
  if (pos_inf && neg_inf) return std::numeric_limits<R>::quiet_NaN();
  if (pos_inf || neg_inf)
    return pos_inf ? std::numeric_limits<R>::infinity() : -std::numeric_limits<R>::infinity();
  if (top == LONG_MIN) return R(0);
  R acc = 0;  // each scaled term < 4 in magnitude; fx·fy rounds as x·y does
  for (int i = 0; i < n; ++i) {
    const R x = a(i), y = b(i);
    if (x == 0 || y == 0) continue;
    int ex, ey;
    const R fx = std::frexp(x, &ex), fy = std::frexp(y, &ey);
    acc += std::ldexp(fx * fy, clamp_exponent(long(ex) + ey - top));
  }
  return std::ldexp(acc, clamp_exponent(top));
}

}  // namespace detail
}  // namespace peal
