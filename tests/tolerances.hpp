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

  // ---- Batch kernels (tests/conformance_suite.hpp). Here S is the kernels' ARITHMETIC type C
  // (float, or double when a view stores double), so eps = eps_C; eps_real = eps_double is
  // the precision of positions and parameters. Each bound is the kernel's documented one; the
  // terms the documents leave out, without which the kernels fail in double arithmetic, are
  // marked as such.

  // Epsilon (spacing at 1) of a storage type, spelled out: Eigen 3.4's
  // numeric_limits<half>::epsilon() is 2^-13, not the spacing 2^-10 of half numbers.
  template <class T>
  static long double storage_eps() {
    if (std::is_same<T, Eigen::half>::value) return std::ldexp(1.0L, -10);
    if (std::is_same<T, Eigen::bfloat16>::value) return std::ldexp(1.0L, -7);
    return std::numeric_limits<T>::epsilon();
  }

  // encode_queries / encode_keys / shift_keys, element j of y = M x (M = F(t), G(s) or the
  // shift factor), docs/kernels-encode.md "Accuracy":
  //   |y - y_ref|_j <= 8 k_j eps_C (|M| |x|)_j + eps_T |y_ref|_j + floor_T + cond (|M| |x|)_j
  // k_j = non-zeros of row j of M: a k_j-term dot product, |fl(m.x) - m.x| <= gamma_k |m||x|
  // (Higham, Thm 3.5), plus one rounding of each coefficient to C, factor 8 of slack (the
  // documented constant); eps_T |y_ref|: the final rounding to the storage type; floor_T its
  // smallest subnormal (results in half's subnormal range). cond: the conditioning of the
  // coefficients, which are computed from rounded arguments: e^{lambda t} with lambda t formed
  // in the encoding's real type moves by |lambda t| eps_real relative (docs/numerics.md,
  // "Jordan coefficients"); the caller passes Tol<Enc>::phase(rate |t|). It is 0 for pure
  // rotations, whose angles are reduced exactly (docs/numerics.md, "Angles").
  // angle: the sin and cos of a rotation are accurate in ABSOLUTE terms, relative to the block's
  // magnitude e^{a t}, not relative to themselves: the reduced angle carries up to 2.3e-16
  // absolute (docs/numerics.md, "Angle reduction", Guarantees), so a small sin(omega t) carries
  // a large relative error. The caller passes angle_eps() * rowsum_j |M| * sum_{l in row j} |x_l|
  // (rowsum |M| >= e^{a t} on a rotation row).
  // cond and angle are not in docs/kernels-encode.md's bound; both are negligible in float
  // arithmetic, and in double arithmetic the kernels exceed the bound without them (a RetNet
  // query at t = 2296: 10x; a rotation with a small sin: 1.4x).
  static long double encode(long double k, long double mag, long double ref, long double eps_t,
                            long double floor_t, long double cond, long double angle) {
    return 8.0L * k * eps * mag + eps_t * std::abs(ref) + floor_t + cond * mag + angle;
  }
  // Absolute error of sin and cos of a rotation's phase: 3.5e-16 for double positions and
  // parameters (angles_sincos, docs/numerics.md "Guarantees"), 4 eps for long double ones
  // (reduced_angle in long double: ulp(r)/2 + 2^-64, then sinl/cosl). Here S is the encoding's.
  static long double angle_eps() {
    return std::is_same<R, long double>::value ? 4.0L * eps_real : 3.5e-16L;
  }

  // Largest tile half-spread h of the scores kernel's polynomial budget for a Jordan chain of
  // p + 1 terms in the GEMM: (1 + 4h)^p <= P, P = 2^12 (float) or 2^20 (double), the documented
  // budget (docs/kernels-scores.md §3, "Thresholds"); infinite for p = 0.
  static long double poly_half_spread(int p) {
    if (p <= 0) return std::numeric_limits<long double>::infinity();
    const long double P = std::is_same<S, float>::value ? 4096.0L : 1048576.0L;
    return 0.25L * (std::pow(P, 1.0L / p) - 1.0L);
  }
  // Amplification of a chain's rounding error by the two-step product, rho_p =
  // (1 + 2 h_q + 2 h_k)^p (docs/kernels-scores.md §3, "Polynomial budget"), h_q and h_k the
  // half-spreads of the query and key tiles.
  static long double score_rho(int p, long double hq, long double hk) {
    return p <= 0 ? 1.0L : std::pow(1.0L + 2.0L * hq + 2.0L * hk, static_cast<long double>(p));
  }

  // scores, one element, docs/kernels-scores.md §3 "Accuracy (tested)":
  //   |out - ref| <= (2 (d + 16) rho + extra) eps_C M + 4 eps_out |m| (|tau| + w)
  //                  + eps_out |ref| + floor_out + phase(lag) M,
  // M = |scale| gamma^tau |q| ||A(tau)|| |k|. The first term is the documented bound: one
  // d-term dot product of encoded rows whose entries carry a few roundings each, bounded by
  // (d + ~8) eps_C |q| ||A|| |k| (Higham, Thm 3.5), factor 2 of slack; rho as above. extra: more
  // terms of the same size where the kernel does more arithmetic than the dot product (a basis
  // change forms P^T q and P^{-1} k, two (d + 1)-term products: extra = 2 (d + 1), with M
  // measured in the inner basis). ALiBi: -m (t - T) - m (T - s) around the tile anchor T, two
  // roundings in the output type of terms at most |m| (|tau| + w), w = h_q + h_k (factor 2 of
  // slack). eps_out |ref| + floor_out: rounding to the output type, twice where the tile buffer
  // rounds the score and then its sum with the bias (two half ulps; |score| <= |ref| + |bias|,
  // the bias part is in the ALiBi term), floor_out its smallest subnormal. lag: the kernel forms
  // differences of positions (t - T, T - S, S - s) and products of rates with them in double,
  // each rounded relative eps_double; they move A(tau) by ||X|| |d tau| (d/dtau A = X A), so
  // lag = (rates) * (|tau| + 2 w) (the caller passes 0 for the angle part when every
  // difference is exact) and phase(x) = 4 x eps_double. This term is not in the documented
  // bound; it matters only in double arithmetic, where the kernel exceeds the documented bound
  // without it at irregular positions (70x for a rotation at tau = 1.3e4).
  static long double score(int d, long double rho, long double extra, long double M,
                           long double alibi, long double eps_out, long double floor_out,
                           long double ref, long double lag) {
    return (2.0L * (d + 16) * rho + extra) * eps * M + 4.0L * eps_out * alibi +
           eps_out * std::abs(ref) + floor_out + phase(lag) * M;
  }
};

}  // namespace peal_test
