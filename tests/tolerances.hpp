// Tolerances of the test suite, in one place (the project style: each bound named, scaled
// by the size of the quantity compared, and derived here). Every test takes its bounds
// from Tol<S>, S the scalar type whose rounding the bound is about (the storage type of a
// kernel's result, its arithmetic type, or the algebra's scalar: float, double, long double,
// Eigen::half, Eigen::bfloat16). Rounding model: fl(a op b) = (a op b)(1 + d), |d| <= u =
// eps / 2 for the correctly rounded operations, to first order in eps; libm functions are
// taken as faithfully rounded (<= 1 ulp). eps is the spacing at 1 (2^-23 float, 2^-52
// double, 2^-63 x87 long double, 2^-10 half, 2^-7 bfloat16); eps_real that of the position
// type real_t<S> (double, or long double for long double); eps_long that of long double.
//
// The algebra (closed forms, products, the property suite of property_suite.hpp):
//   entry(n)        = 4 n eps        rounding of each closed-form entry (computed in
//                                    real_t<S>, rounded once to S) and of an n-term dot
//                                    product (Higham's gamma_n = n u), with a factor 4 of
//                                    slack for the two operands and the subtraction in the
//                                    comparison;
//   phase(x)        = 4 x eps_real   a time rounded to real_t<S> (eps_real / 2) moves A(tau) by
//                                    |X| |d tau| relative, x = |X| |tau| (for long double this
//                                    also covers the rounding of omega tau before sinl/cosl);
//   expm(x)         = 16 (1 + x) eps_long  forward error of Eigen's scaling-and-squaring
//                                    exponential in long double, which grows like |tau X| eps
//                                    (Higham 2005, each squaring doubles the relative error;
//                                    the 1: the Pade step and rounding at small x);
//   encoded_dot(n)  = 2 entry(n) + 4 n eps_long  q~ . k~ with q~ = F(t) q, k~ = G(s) k each
//                                    encoded in S (entry(n) per entry, relative to |F||q|
//                                    and |G||k| componentwise) and summed in long double;
//   range_exponent()= ln(max_S) / 4  F(t) and G(s) whose entries stay within
//                                    [max^(-1/4), max^(1/4)]: products of two such factors
//                                    and of unit vectors neither overflow nor underflow;
//   roundings(k)    = k eps          a value reached by k correctly rounded operations (or
//                                    faithfully rounded libm calls counted as two), first
//                                    order k u, with a factor 2 of slack;
//   gamma(k)        = k u / (1 - k u)  Higham's gamma_k (u = eps / 2), exact, no slack: the
//                                    componentwise bound of LU's residual, which the check
//                                    states with the computed factors (test_lu_inverse.cpp);
//   printed(k)      = 0.5 10^-k      a constant quoted in the docs with k decimals (half a
//                                    unit in the last printed place);
//   jordan_coefficient(x, j, tau) = (2 (x + j ln(|tau| + 1) + j + 2) + 8) eps
//                                    e^{lambda tau} tau^j / j! (exp_poly.hpp), x = |lambda tau|:
//                                    the rounding of lambda tau moves the exponential by x
//                                    ulp (the problem's own conditioning), plus j roundings
//                                    of the recurrence, or j ln|tau| + ln j! ulp in the log
//                                    form, plus 2: twice that, plus 8 ulp;
//   subnormal(rel)  = 2 min_S rel + denorm_min_S  a relative bound rel carried below the
//                                    normal range, where the spacing is fixed;
//   lag_rounding(t, s) = ulp(t) + ulp(s)  two times rounded to the nearest real_t<S> move
//                                    t - s by half an ulp of each, doubled (times |omega|
//                                    gives the phase error of a pure rotation's score);
//   matrix_chain(N, n) = 2 N (n + 2) eps  a product of N n x n matrices against the exact
//                                    one, componentwise: each factor adds gamma_n and the
//                                    rounding of its entries, |fl(prod) - prod| <= N (n + 2) u
//                                    prod |A_i| to first order (linear in N), times 4;
//   diff_step(x), diff_tol(...)      the derivative at 0 by a central difference (below);
//   derivative(...), derivative_tol  ∂A/∂θ and ∂A/∂τ against a fourth-order central
//                                    difference of the long double twin (below).
//
// Presets against the long double reference (tests/reference/preset_reference.hpp):
//   rotated_pair()  = 4 eps          one pair rotated in S from double sin/cos rounded once
//                                    to S: (2 sqrt2 + 1) u |x| ~ 1.9 eps |x|, plus u for the
//                                    attention factor (scale_rotary), about 2x slack;
//   reference_angle(x) = 2 x eps_long the reference rounds omega p (x = |omega p|) to long
//                                    double before cosl/sinl: u_long x, times 4 (a few
//                                    long double ulps of omega as well);
//   exp_of(x)       = 4 (1 + x) eps_real  e^{a tau}, x = |a tau|, with a rounded to real_t<S>
//                                    (x u of the exponent) and a faithfully rounded exp (1 ulp),
//                                    times 2;
//   underflow_zone()= 1e3 min_S      scores within three decades of the normal range, where
//                                    intermediate factors may be subnormal: there a result is
//                                    only required to come out near 0 (< 2 underflow_zone()).
//
// Batch kernels (test_encode.cpp, test_scores.cpp), per element of a result; eps_A / eps_C
// the epsilon of the arithmetic type (float for float/half/bfloat16 storage, double when
// either side stores double: detail::arith_t), eps_T that of the storage type:
//   kernel_entry(k) = 8 k eps_A      y_j = sum_k M_jk x_k over the k non-zeros of row j of
//                                    M = F(t) or G(s): the forward error of a k-term dot
//                                    product, |fl(m.x) - m.x| <= gamma_k |m| |x| (Higham,
//                                    Thm 3.5), plus one rounding of each coefficient to the
//                                    arithmetic type (they come from double sin/cos/exp
//                                    accurate to a few double ulps), with a factor 8 of slack
//                                    (the reference carries double rounding too, and
//                                    vectorized and scalar loops may contract differently);
//                                    relative to (|M| |x|)_j;
//   stored()        = eps_T          the final rounding to storage, <= eps_T / 2 relative
//                                    (round to nearest), with a factor 2; relative to |y|;
//   underflow()     = denorm_min_T   results in the subnormal range of T (absolute);
//   fused_score(d)  = 2 (d + 16) eps_C  one score of the fused kernel: a d-term dot product
//                                    of encoded rows whose entries carry a few roundings each
//                                    (coefficients, relative table, cross factor, row scale):
//                                    (d + ~8) eps_C |q| ||A(tau)|| |k| for block-diagonal
//                                    rotation/scale encodings (docs/kernels-scores.md,
//                                    "Accuracy"), times 2; relative to rho M_ij;
//   alibi_bias(x)   = 4 x eps_T      the bias -m tau formed as -m (t - T) - m (T - s) around
//                                    a tile anchor: two roundings in the output type T of
//                                    terms at most x = |m| (|tau| + width), times 2;
//   flushed()       = 64 min_C       scores whose rebased factors pass through the subnormal
//                                    range: each of up to 64 terms of unit-scale vectors may
//                                    lose up to min_C there (fixed spacing) or flush to 0;
//                                    absolute, relative to |q| |k|;
//   shift_steps(N)  = 3 N eps_A      N shift_keys by the same rounded rotation (c~, s~):
//                                    |c~^2 + s~^2 - 1| <= 2 eps_A plus one rounding of the
//                                    rotated pair per step, errors that add up linearly
//                                    (systematic, not random); relative to the pair's norm;
//   exp_ulps()      = 4              detail::encode_kernels::exp_kernel against std::exp
//                                    (docs/numerics.md, "Growth factors"): Taylor truncation
//                                    < 2^-57, reduction exact, the polynomial ~1 ulp, std::exp
//                                    itself faithful (1 ulp), doubled.
#pragma once

#include <cmath>
#include <limits>

#include <peal/detail/scalar.hpp>

namespace peal_test {

/// Epsilon and range of a scalar or storage type, and its position type. Spelled out for
/// the storage-only types: Eigen's epsilon() for half is 2^-13, not the spacing 2^-10 at 1.
template <class S>
struct type_facts {
  using real = peal::real_t<S>;
  static constexpr long double eps = std::numeric_limits<S>::epsilon();
  static constexpr long double min = std::numeric_limits<S>::min();
  static constexpr long double denorm_min = std::numeric_limits<S>::denorm_min();
  static constexpr long double max = std::numeric_limits<S>::max();
};
template <>
struct type_facts<Eigen::half> {
  using real = double;
  static constexpr long double eps = 0x1p-10L, min = 0x1p-14L, denorm_min = 0x1p-24L,
                               max = 65504.0L;
};
template <>
struct type_facts<Eigen::bfloat16> {
  using real = double;
  static constexpr long double eps = 0x1p-7L, min = 0x1p-126L, denorm_min = 0x1p-133L,
                               max = 0x1.fep127L;
};

template <class S>
struct Tol {
  using R = typename type_facts<S>::real;
  static constexpr long double eps = type_facts<S>::eps;
  static constexpr long double eps_real = std::numeric_limits<R>::epsilon();
  static constexpr long double eps_long = std::numeric_limits<long double>::epsilon();

  static long double entry(int n) { return 4.0L * n * eps; }
  static long double phase(long double x) { return 4.0L * x * eps_real; }
  static long double expm(long double x) { return 16.0L * (1.0L + x) * eps_long; }

  static long double encoded_dot(int n) { return 2 * entry(n) + 4.0L * n * eps_long; }
  static long double range_exponent() { return std::log(type_facts<S>::max) / 4; }
  static long double roundings(int k) { return k * eps; }
  static long double gamma(int k) { return k * (eps / 2) / (1 - k * (eps / 2)); }
  static long double printed(int decimals) { return 0.5L * std::pow(10.0L, -decimals); }
  static long double matrix_chain(int N, int n) { return 2.0L * N * (n + 2) * eps; }
  static long double jordan_coefficient(long double lambda_tau, int j, long double tau) {
    const long double growth = lambda_tau + j * std::log(std::abs(tau) + 1) + j + 2;
    return (2 * growth + 8) * eps;
  }
  static long double subnormal(long double rel) {
    return 2 * type_facts<S>::min * rel + type_facts<S>::denorm_min;
  }
  static long double lag_rounding(long double t, long double s) {
    const auto ulp = [](long double x) {
      const R r = R(std::abs(x));
      return static_cast<long double>(std::nextafter(r, std::numeric_limits<R>::infinity()) - r);
    };
    return ulp(t) + ulp(s);
  }

  static long double rotated_pair() { return 4 * eps; }
  static long double reference_angle(long double x) { return 2 * x * eps_long; }
  static long double exp_of(long double x) { return 4.0L * (1.0L + x) * eps_real; }
  static long double underflow_zone() { return 1e3L * type_facts<S>::min; }

  static long double kernel_entry(int k) { return 8.0L * k * eps; }
  static long double stored() { return eps; }
  static long double underflow() { return type_facts<S>::denorm_min; }
  static long double fused_score(long d) { return 2.0L * (d + 16) * eps; }
  static long double alibi_bias(long double x) { return 4 * x * eps; }
  static long double flushed() { return 64.0L * type_facts<S>::min; }
  static long double shift_steps(int N) { return 3.0L * N * eps; }
  static constexpr int exp_ulps() { return 4; }

  // Derivative at 0 by the central difference D = (A(h) - A(-h)) / 2h. Step: truncation
  // h^2 |X|^3 / 6 balances rounding eps / h at h ~ eps^(1/3) / |X|. Error of D against X:
  // truncation h^2 |X|^3 / 3 (the /6 of the Taylor remainder doubled for e^{h|X|} <= 2 of
  // the third derivative), plus the rounding of A(+-h) (entry(n) |A(+-h)| each, and the
  // phase of the rounded h) divided by 2h.
  static long double diff_step(long double xnorm) { return std::cbrt(eps) / (1.0L + xnorm); }
  static long double diff_tol(long double h, long double xnorm, int n, long double norm_plus,
                              long double norm_minus) {
    return h * h * std::pow(xnorm, 3) / 3.0L +
           (entry(n) * (norm_plus + norm_minus) + phase(xnorm * h) * 2 * norm_plus) / (2.0L * h);
  }

  // ∂A(τ)/∂θ_k (derivatives.hpp), computed in S, against the fourth-order central difference
  // of its long double twin (same parameters), D(h) = (8 (A(θ+h) − A(θ−h)) − (A(θ+2h) −
  // A(θ−2h))) / 12h, in the max norm. Every closed form is τ, P or P⁻¹ times entries of A (of
  // A_J moved by P), so the error is measured against m = (1 + |τ|) κ² ‖A(τ)‖_max (κ = ‖P‖∞
  // ‖P⁻¹‖∞, 1 without a basis change):
  //   the closed form   derivative(n, x) m, derivative = entry(n) + phase(x) + 2 angle_eps():
  //                     an n-term product and the rounding to S, the rounding of the rate
  //                     times τ (x = |X| |τ|), the absolute error of sin and cos;
  //   the difference    rounding: each A(θ ± jh) carries Tol<long double>::derivative(n, x)
  //                     κ² ‖A‖ (the same bound in long double), and the stencil's weights sum
  //                     to 18 / 12h = 1.5 / h; truncation: O(h⁴), estimated from D(2h) by
  //                     Richardson, |D(h) − D(2h)| / 15, taken twice.
  // Step h = ε_long^(1/5) / (1 + |τ|): A depends on a block's parameters through θτ, so its
  // fifth derivative grows like |τ|⁵ and this step balances it against the rounding.
  static long double derivative(int n, long double x) {
    return entry(n) + phase(x) + 2 * angle_eps();
  }
  static long double derivative_step(long double tau) {
    return std::pow(eps_long, 0.2L) / (1.0L + std::abs(tau));
  }
  static long double derivative_tol(int n, long double x, long double m, long double a_kappa2,
                                    long double h, long double richardson) {
    const long double ld = Tol<long double>::entry(n) + Tol<long double>::phase(x) +
                           2 * Tol<long double>::angle_eps();
    return derivative(n, x) * m + 1.5L * ld * a_kappa2 / h + 2 * richardson / 15;
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

  // scores_backward (tests/test_scores_backward.cpp), relative to each result's Σ |terms|
  // (per pair, |W| |q| κ² ‖A(τ)‖ |k|, times 1 + |τ| for a parameter): every term is formed from
  // the same rebased rows and cross factors as a forward score, so it carries the score's
  // relative error (2 (d + 16) ρ + extra) ε and the lag / angle term phase(x) (x = |X| times the
  // largest |position|, four times: t − T, T − S, S − s and the absolute phases of pure
  // rotations); the sums over pairs, heads and tiles add N roundings (N terms, first order).
  static long double score_gradient(int d, long double rho, long double extra, long double x,
                                    long N) {
    return (2.0L * (d + 16) * rho + extra) * eps + phase(x) + roundings(int(N));
  }

  // ---- attention (tests/conformance_suite.hpp, tests/test_attention.cpp). S is again the
  // arithmetic type C; every bound is against softmax of the long double logits times V.
  //
  // Logits. attention() forms x_j = cap(score_j) - m_h (t - s_j) from scores' tile (the score
  // in C, without ALiBi: Tol::score with alibi = 0 and eps_out = eps_C, the tile buffer), so the
  // logit error is
  //   delta_j = |cap(y + e) - cap(y)|_{|e| <= score tol}   (cap monotone: the larger of the
  //             two endpoint moves; <= the score tol, cap being 1-Lipschitz)
  //           + softcap rounding: x / c and C(1/c) (two roundings of the argument, u |y| each
  //             times cap' <= 1), tanh (Eigen's, a few ulp of |cap|) and the product with c:
  //             (|y| + 8 |cap y|) eps, factor 2 of slack included;
  //           + ALiBi: C(-m (t - T) - m (S - s)) (double, rounded once to C) added in C:
  //             two roundings of terms <= |m| (|tau| + 2 w) around the tile anchors, times 2:
  //             alibi_bias(|m| (|tau| + 2 w));
  //           + the exponent: e^{x_j + C(K - m_new)} forms K - m_new (<= L, L the largest
  //             |logit| of the row plus the ALiBi anchor terms) and x_j + that in C (<= 2 L),
  //             rounding u L + 2 u L, and exp itself (Eigen's vectorized exp, ~1 ulp): with a
  //             factor 2 of slack (3 L + 4) eps; relative errors of the weights act as logit
  //             errors (P_j (1 + eta) = e^{x_j + ln(1 + eta)}).
  // attention_logit: the first three terms of one logit; attention_exponent(L): the last, for
  // the row (L its largest |logit| plus ALiBi anchor term).
  static long double attention_logit(long double cap_move, long double y, long double capped,
                                     bool softcap, long double alibi) {
    return cap_move + (softcap ? (std::abs(y) + 8 * std::abs(capped)) * eps : 0.0L) +
           alibi_bias(alibi);
  }
  static long double attention_exponent(long double L) { return (3 * L + 4) * eps; }
  // Output, one element, relative to V = max_j |v_j| (that element over the row's visible keys):
  // softmax is Lipschitz in the max norm of the logits: with |delta_j| <= delta, every weight
  // p_j = e^{x_j} / sum moves to p_j e^{delta_j} / sum_k p_k e^{delta_k}, within
  // p_j (e^{2 delta} - 1) (the sink's logit is exact: the same bound), so
  // |sum_j dp_j v_j| <= (e^{2 delta} - 1) V. The sums in C (Higham, Thm 3.1 / 3.5, first order,
  // all terms of one sign or bounded by p_j V): the weights of one key tile summed in C (n_tile
  // terms), the PV product of one tile (n_tile terms, Eigen's GEMM), O accumulated over the key
  // tiles (n_tiles terms), O rescaled by C(e^{m - m'}) at most once per tile while l is rescaled
  // in double (n_tiles roundings), the key splits merged in C (C(f) o and the sum: 2 per split,
  // <= 2 n_tiles), the final O / l rounded to C (2): (2 n_tile + 5 n_tiles + 2) u, times 2:
  //   attention_out = (e^{2 delta} - 1 + 2 (n_tile + 3 n_tiles + 1) eps) V,
  // plus the rounding to the output storage (eps_out |ref| + its floor, added by the caller).
  static long double attention_out(long double delta, long double n_tile, long double n_tiles,
                                   long double V) {
    return (std::expm1(2 * delta) + 2 * (n_tile + 3 * n_tiles + 1) * eps) * V;
  }
  // lse = m + ln l (double): the logits' delta moves ln sum e^{x_j} by <= delta; l's relative
  // error (n_tile + 2 n_tiles + 2) u as above moves ln l by as much; m + ln l in double and the
  // log: 2 u_double (|lse| + |m|) <= 4 u_double (|lse| + L). Factor 2 of slack on the sums.
  static long double attention_lse(long double delta, long double n_tile, long double n_tiles,
                                   long double lse, long double L) {
    return delta + (n_tile + 2 * n_tiles + 2) * eps +
           4 * std::numeric_limits<double>::epsilon() * (std::abs(lse) + L);
  }

  // ---- linear attention with RetNet's normalisation (tests/test_linear_retnet.cpp). S is the
  // arithmetic type C. One output element o_i[e] = sum_{j<=i} w_ij v_j[e] / D_i against the long
  // double reference tests/reference/retnet_torchscale.hpp (Result::bound, Result::cond):
  //   |o - ref| <= linear_retention(d, n) (B_i[e] + cond_i |ref|) + eps_T |ref| + floor_T,
  // B_i[e] = sum_j gamma^(i-j) |q_i| |k_j| scale |v_j[e]| / (sqrt(S) D_i) bounds the terms: each
  // w_ij is a d-term dot product of rotated rows plus a few roundings (rotation coefficients,
  // decay power, scale, mask norm: ~8; Higham, Thm 3.5), summed over <= n keys or carried through
  // <= n state updates (one rounding of each state entry per update, on decayed older terms);
  // the divisor D_i (an abs sum of the same terms, or K_c, the 1-norm of the chunk state) has the
  // same relative error times its conditioning cond_i (the terms' bound over the divisor), which
  // moves o by cond_i |o|. (d + n + 8) eps for the first order u sums, factor 4 of slack.
  static long double linear_retention(int d, long n) { return 4.0L * (d + n + 8) * eps; }

  // ---- linear_attention_backward with RetNet's normalisation
  // (tests/test_linear_retnet_backward.cpp). S is the arithmetic type C. The backward is the
  // unnormalised one with d_out's rows scaled by c_i = 1 / (sqrt(S_i) D_i), plus ∂L/∂S_i times
  // ∂S_i (include/peal/detail/tiled/linear_retnet_backward.hpp). Relative to each result's
  // Σ |terms| (as score_gradient):
  //   score_gradient(d, 1, 0, x, N): the scores backward's terms, N terms summed;
  //   cond (2 (d + 16) eps + phase(x)): D_i, an abs sum of scores (or the 1-norm of a chunk
  //     state: sums of the same products), carries their relative error times its conditioning
  //     cond = Σ |term| bounds / D_i (linear_retention's cond_i), and every term of row i is
  //     divided by it;
  //   roundings(3 n): S_i, a recurrence over <= n keys of one exponential (two roundings, libm
  //     faithful) and one addition each.
  static long double retnet_gradient(int d, long double x, long N, long n, long double cond) {
    return score_gradient(d, 1, 0, x, N) + cond * (2.0L * (d + 16) * eps + phase(x)) +
           roundings(int(3 * n));
  }
  // A derivative against the fourth-order central difference of a function L computed in S,
  // D(h) = (L(x − 2h) − 8 L(x − h) + 8 L(x + h) − L(x + 2h)) / 12h = L′(x) + T(h):
  //   difference_rounding(h, k, F) = 1.5 roundings(k) F / h: each L carries at most
  //     roundings(k) F (k roundings on the path of each of its terms, F = Σ |terms|), weighted
  //     (1 + 8 + 8 + 1) / 12h; it also bounds the two-point D(h) = (L(x + h) − L(x − h)) / 2h
  //     (weights 1/h), which for an L affine in x has no truncation;
  //   difference_truncation(D(h), D(2h)) = 2 |D(2h) − D(h)| / 15: T(h) = c h⁴ + O(h⁶) (the
  //     remainder −h⁴ L⁽⁵⁾(ξ) / 30), so D(2h) − D(h) = 15 c h⁴ + O(h⁶): the doubled step measures
  //     the truncation (Richardson), with a factor 2 for the O(h⁶) part.
  static long double difference_rounding(long double h, int k, long double F) {
    return 1.5L * roundings(k) * F / h;
  }
  static long double difference_truncation(long double D_h, long double D_2h) {
    return 2 * std::abs(D_2h - D_h) / 15;
  }

  // ---- linear attention (tests/linear_suite.hpp, test_linear_attention.cpp,
  // test_linear_families.cpp). S is the arithmetic type C. Against the long double double sum
  //   o_ie = scale sum_j gamma^tau_ij (q_i^T A(tau_ij) k_j) v_je,
  // relative to the sizes of its terms, not to o (the terms can cancel):
  //   Ssum = sum_j m_ij |v_je|, m_ij = |scale| gamma^tau |q_i| ||A(tau)|| |k_j| (inner basis),
  //   Tsum = sum_j m_ij |v_je| (J_i - j), J_i the last key visible to query i.
  // Every form builds a term from products of rebased factors: the chunkwise and recurrent forms
  // carry key j in a state that crosses at most b_ij = (J_i - j) / chunk + 1 chunk boundaries
  // (each one product A(delta) M, a d-term dot product per entry, and the rounding of the decay
  // factor) and read it once (q^T A(t - c) M, one more d-term product); the parallel form and
  // the intra-chunk part form the score from rebased rows as scores() does. One d-term product
  // of factors that carry a few roundings each: (d + 8) u rho |q| ||A|| |k| (the scores
  // kernel's bound, docs/kernels-scores.md §3; rho its polynomial amplification, 1 without a
  // Jordan chain, Tol::score_rho capped at the budget), i.e. (d + 16) rho eps with a factor 2.
  // Rotation blocks (|R| has 2-norm <= sqrt 2) and forward polynomial factors (entries >= 0, so
  // |A(a)| |A(b)| = |A(a + b)|) keep the first-order propagation of each rounding within a
  // few times ||A(tau)||, counted in the factor 2. The values: sums of at most `chunk` terms at
  // once (the chunk's k v^T product or the intra-chunk P V product, Higham Thm 3.1: chunk u),
  // one addition per boundary into the state (b_ij u), the scale and the store (2 u). Per term
  //   ((d + 16) rho (b_ij + 1) + chunk + b_ij + 2) u, times 2,
  // summed with b_ij <= (J_i - j) / chunk + 1:
  //   linear_out = 2 eps ((p + 2) (Tsum / chunk + Ssum) + (p + chunk + 2) Ssum),
  //   p = (d + 16) rho.
  // chunk = 1 is the recurrent form (one boundary per key), chunk = nk the parallel form. The
  // caller adds eps_out |ref| + floor_out (the output storage) and phase(lag) for the rounded
  // position differences and products rate * tau (as Tol::score).
  static long double linear_out(long double d, long double chunk, long double rho,
                                long double Ssum, long double Tsum) {
    const long double p = (d + 16) * rho;
    return 2 * eps * ((p + 2) * (Tsum / chunk + Ssum) + (p + chunk + 2) * Ssum);
  }
};

/// Absolute tolerances of the angle reduction (include/peal/detail/math/angle.hpp) and of sin/cos
/// of reduced angles (include/peal/detail/math/sincos.hpp), in radians (tests/test_angle.cpp).
struct AngleTol {
  // reduced_angle: <= ulp(r)/2 + 2^-57 for |w t| <= 2^64, |r| < 4 so ulp(r)/2 <= 2^-52
  // (angle.hpp). Beyond 2^64 the turns path adds <= |w t| 2^-151; the tolerance doubles that.
  static constexpr double reduced = 0x1p-52 + 0x1p-56;  // 2.4e-16
  static double reduced_at(double abs_phase) { return reduced + abs_phase * 0x1p-150; }
  // sincos_reduced: <= 2^-54 from the last addition + <= 2^-56 from the rest (sincos.hpp);
  // 1.2e-16 ~ 1.7 x that bound.
  static constexpr double sincos = 1.2e-16;
  // sin/cos of a phase = angle error (sin, cos are 1-Lipschitz) + sincos_reduced error.
  static double phase_sincos(double abs_phase) { return reduced_at(abs_phase) + sincos; }
  // A table's sin/cos rounded to double: <= 2^-54 more.
  static constexpr double table_rounding = 0x1p-54;
  // Float outputs are rounded once from double: <= 2^-25 for values in [-1, 1], plus the
  // double result's own error.
  static constexpr double to_float = 0x1p-25 + 4e-16;
  // Long double reduction: <= ulp(r)/2 + 2^-64 <= 1.5 eps for |r| < 4 (eps = 2^-63 on x87);
  // a table's r is itself rounded to long double (<= eps more); 4 eps leaves 1.5 eps of slack.
  static constexpr long double reduced_long = 4 * std::numeric_limits<long double>::epsilon();
};

}  // namespace peal_test
