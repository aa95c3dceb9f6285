// Angle reduction for rotation blocks: r ≡ (w_hi + w_lo) · t  (mod 2π), |r| ≤ π + 0.06.
//
// A RotationBlock's phase is ω t (docs/design.md §1). The frequency is held as an
// unevaluated sum ω = w_hi + w_lo of two doubles and the position t is any double, so the
// phase is known exactly; it can be huge (|ω t| ≈ 2^60 for nanosecond timestamps at ω = 1,
// and up to 2^2048 for ω, t near DBL_MAX). Forming ω t in float32, as many engines do, is
// off by 0.05–0.2 rad at t = 1e6. Here the product is formed exactly and reduced mod 2π
// with an absolute error of at most ulp(r)/2 + 2^-57 (≤ 2.3e-16 rad) for EVERY finite
// w_hi, w_lo and t, with or without hardware FMA, so sin/cos of the phase are right to
// ~3.5e-16 absolute at any position (docs/numerics.md, "Angles"; derivation below and in
// the comments of each function).
//
// Three algorithms; the first two are branch free so that loops over many angles vectorize:
//  - reduced_angle_cody_waite: |w_hi t| ≤ 2^45 (every RoPE angle with |t| ≤ 3.5e13):
//    Cody–Waite subtraction of k · 2π, ~12 flops.
//  - reduced_angle_turns: |w_hi t| ≤ 2^64 (same bound; it stays finite for any input but
//    loses accuracy beyond, 6e-16 at 2^100): the phase is converted to turns with a
//    triple-double 1/(2π) and integer parts are dropped exactly, ~75 flops.
//  - reduced_angle_exact (detail/math/angle_exact.hpp): every finite input, Payne–Hanek
//    reduction in integer arithmetic with 33,024 bits of 1/(2π), ~55 ns.
// reduced_angle() picks one per call; detail/math/sincos.hpp picks one per batch. The fast paths
// are used only where their error-free products are exact (see fast_path_bound).
//
// Requirements: IEEE double arithmetic without reassociation (no -ffast-math /
// -fassociative-math, FLT_EVAL_METHOD == 0, i.e. not the x87 unit of 32-bit x86). With
// hardware FMA (PEAL_DETAIL_HAS_FMA) exact products take 2 flops; otherwise Dekker's
// product (17 flops, exact while |operands| ≤ 2^995, beyond which the exact path takes
// over) is used, never a libm call.
#pragma once

#include <cfloat>
#include <cmath>
#include <limits>
#include <utility>

#if defined(__FAST_MATH__) && !defined(PEAL_ALLOW_FAST_MATH)
#pragma message(                                                                          \
    "peal: -ffast-math reassociates the error-free transformations of detail/math/angle.hpp; " \
    "rotation angles lose their accuracy guarantee (define PEAL_ALLOW_FAST_MATH to silence)")
#endif

// PEAL_DETAIL_HAS_FMA: 1 where std::fma on double is an instruction. Predefining it to 0 on
// FMA hardware also needs -ffp-contract=off, or the compiler may fuse Veltkamp's split.
#if !defined(PEAL_DETAIL_HAS_FMA)
#if defined(__FMA__) || defined(__FMA4__) || defined(__ARM_FEATURE_FMA) || defined(__aarch64__) || \
    (defined(_MSC_VER) && defined(__AVX2__))
#define PEAL_DETAIL_HAS_FMA 1
#else
#define PEAL_DETAIL_HAS_FMA 0
#endif
#endif

// The bodies below differ with PEAL_DETAIL_HAS_FMA. An inline namespace named after it keeps
// translation units compiled with and without FMA from sharing (ODR-merging) them; this is
// how tests/test_angle_nofma.cpp checks the Dekker build inside an FMA build (the exact path
// of detail/math/angle_exact.hpp, FMA-free by construction, is tagged too, so that the test
// compares two compilations of it).
#if PEAL_DETAIL_HAS_FMA
#define PEAL_DETAIL_FMA_NAMESPACE with_fma
#else
#define PEAL_DETAIL_FMA_NAMESPACE without_fma
#endif

#include "angle_exact.hpp"

namespace peal {
namespace detail {
inline namespace PEAL_DETAIL_FMA_NAMESPACE {

// ---- Error-free transformations ----------------------------------------------------------
namespace eft {

/// p + e == a * b exactly (p = fl(a b)), barring overflow and underflow.
inline void two_prod(double a, double b, double& p, double& e) {
  p = a * b;
#if PEAL_DETAIL_HAS_FMA
  e = std::fma(a, b, -p);
#else
  // Dekker (1971) with Veltkamp's split: each half has at most 26 significant bits, so
  // every partial product is exact and so is each partial sum of e.
  constexpr double splitter = 134217729.0;  // 2^27 + 1
  const double ca = splitter * a, a_hi = ca - (ca - a), a_lo = a - a_hi;
  const double cb = splitter * b, b_hi = cb - (cb - b), b_lo = b - b_hi;
  e = ((a_hi * b_hi - p) + a_hi * b_lo + a_lo * b_hi) + a_lo * b_lo;
#endif
}

/// Dekker's product in any binary format T (used for long double, which has no fast fma).
template <class T>
inline void two_prod_dekker(T a, T b, T& p, T& e) {
  constexpr int digits = std::numeric_limits<T>::digits;
  constexpr T splitter = T(1ULL << ((digits + 1) / 2)) + T(1);
  p = a * b;
  const T ca = splitter * a, a_hi = ca - (ca - a), a_lo = a - a_hi;
  const T cb = splitter * b, b_hi = cb - (cb - b), b_lo = b - b_hi;
  e = ((a_hi * b_hi - p) + a_hi * b_lo + a_lo * b_hi) + a_lo * b_lo;
}

/// s + e == a + b exactly (Knuth's TwoSum: no precondition on the magnitudes).
inline void two_sum(double a, double b, double& s, double& e) {
  s = a + b;
  const double bb = s - a;
  e = (a - (s - bb)) + (b - bb);
}

/// Nearest integer (ties to even) for |x| ≤ 2^51: adding 1.5·2^52 leaves no fraction bits.
/// A vectorizable nearbyint (std::nearbyint is a libm call without SSE4.1). NaN → NaN.
inline double round_small(double x) {
  constexpr double magic = 0x1.8p52;
  return (x + magic) - magic;
}

/// Nearest integer (ties to even) for every finite x, branch free: below 2^52, x ± 2^52 has
/// no fraction bits; from 2^52 on x is an integer and the shift is 0. ±Inf and NaN pass
/// through. (A select of the shift, not of the result, so g++ vectorizes it even for SSE2.)
inline double round_to_int(double x) {
  constexpr double two52 = 0x1p52;
  const double m = std::fabs(x) < two52 ? std::copysign(two52, x) : 0.0;
  return (x + m) - m;
}

}  // namespace eft

// ---- Constants (mpmath, 400 bits; each part is the previous remainder rounded to double) -
/// 2π = two_pi_1 + two_pi_2 + two_pi_3 + O(2^-161).
inline constexpr double two_pi_1 = 0x1.921fb54442d18p+2;
inline constexpr double two_pi_2 = 0x1.1a62633145c07p-52;
inline constexpr double two_pi_3 = -0x1.f1976b7ed8fbcp-108;
/// 1/(2π) = inv_two_pi_1 + inv_two_pi_2 + inv_two_pi_3 + O(2^-164).
inline constexpr double inv_two_pi_1 = 0x1.45f306dc9c883p-3;
inline constexpr double inv_two_pi_2 = -0x1.6b01ec5417056p-57;
inline constexpr double inv_two_pi_3 = -0x1.6447e493ad4cep-111;

// ---- Domains of the fast paths (tested through fast_path_bound below) --------------------
/// reduced_angle_cody_waite: |fl(w_hi t)| ≤ 2^45 and |fl(w_lo t)| ≤ 2^-7 (its tail analysis;
/// a normalized pair within the first limit has |w_lo t| ≤ 2^-52 |w_hi t| ≤ 2^-7).
inline constexpr double cody_waite_limit = 0x1p45;
/// reduced_angle_turns keeps the bound ulp(r)/2 + 2^-57 for |fl(w_hi t)| ≤ 2^64 and
/// |fl(w_lo t)| ≤ 2^12 (its analysis below with Q = 64 needs |w_lo t| ≤ 2^(Q−52)).
inline constexpr double turns_limit = 0x1p64;
/// Without FMA, Dekker's split of an operand x overflows once |x|·(2^27 + 1) > DBL_MAX; the
/// fast paths need |w_hi|, |w_lo|, |t| ≤ dekker_limit (with FMA there is no such limit).
inline constexpr double dekker_limit = 0x1p995;

/// |t| for fast_path_bound; +Inf when t is beyond dekker_limit (no FMA) or not finite.
inline double fast_path_t(double t) {
  const double a = std::fabs(t);
#if PEAL_DETAIL_HAS_FMA
  return a;
#else
  return a <= dekker_limit ? a : std::numeric_limits<double>::infinity();
#endif
}
/// max(|w_hi|, 2^52 |w_lo|)·|t| (abs_t = fast_path_t(t)): the Cody–Waite path is valid when
/// it is ≤ cody_waite_limit, the turns path when it is ≤ turns_limit (both limits on w_lo are
/// 2^-52 times those on w_hi, and scaling by 2^52 commutes with rounding). +Inf or NaN when
/// an operand is beyond dekker_limit (no FMA; 2^52 |w_lo| is already +Inf for
/// |w_lo| > 2^971), so that both tests fail. A NaN w_lo passes them; either path then
/// returns NaN.
inline double fast_path_bound(double w_hi, double w_lo, double abs_t) {
  const double wh = std::fabs(w_hi), wl = 0x1p52 * std::fabs(w_lo);
  double w = wh < wl ? wl : wh;
#if !PEAL_DETAIL_HAS_FMA
  w = wh <= dekker_limit ? w : std::numeric_limits<double>::infinity();
#endif
  return w * abs_t;
}

/// (hi, lo) with hi = fl(w) and lo = fl(w - hi). The subtraction is exact (it cancels the
/// leading 53 bits), so hi + lo == w exactly when long double has ≤ 106 bits (x87: 64), and
/// |lo| ≤ ulp(hi)/2: the normalized pair the reductions below expect.
inline std::pair<double, double> split(long double w) {
  const double hi = static_cast<double>(w);
  const double lo = static_cast<double>(w - static_cast<long double>(hi));
  return {hi, lo};
}

/// r ≡ (w_hi + w_lo) t (mod 2π) for |fl(w_hi t)| ≤ 2^45; |r| ≤ 3.2;
/// |r - exact| ≤ ulp(r)/2 + 2^-57. Requires |w_lo| ≤ 2^-52 |w_hi| (see split()).
///
/// Let p + e = w_hi t exactly (two_prod) and l = fl(w_lo t); with |p| ≤ 2^45:
///  - q = fl(p · fl(1/2π)) has relative error ≤ 2^-52.1, so k = round(q) satisfies
///    |k| ≤ 2^42.4 and |p - 2πk| ≤ π + 2π·2^42.4·2^-52.1 ≤ π + 0.008.
///  - h + hl = k · two_pi_1 exactly (two_prod); |hl| ≤ ulp(h)/2 ≤ 2^-8.
///  - d = p - h is exact: |d| ≤ π + 0.008 + |k|·|2π - two_pi_1| + |hl| < 3.2 < 4, and when
///    k ≠ 0 both |p| and |h| exceed 2, so p and h are multiples of 2^-51 and so is d, and a
///    multiple of 2^-51 below 4 has at most 53 bits.
///  - tail = ((e + l) - hl) - k·two_pi_2 collects terms of size ≤ 2^-8, 2^-7, 2^-8, 2^-9.4:
///    |tail| < 2^-5.5 and its 4 roundings cost ≤ 4·2^-60.
///  - Dropped: w_lo t - l (≤ ulp(l)/2 ≤ 2^-60) and k·two_pi_3 (≤ 2^-64).
///  - r = d + tail: one rounding, ≤ ulp(r)/2 ≤ 2^-52 since |r| < 4.
/// NaN or ±Inf in, NaN out (p - h or e is then NaN).
inline double reduced_angle_cody_waite(double w_hi, double w_lo, double t) {
  double p, e;
  eft::two_prod(w_hi, t, p, e);
  const double l = w_lo * t;
  const double k = eft::round_small(p * inv_two_pi_1);
  double h, hl;
  eft::two_prod(k, two_pi_1, h, hl);
  const double d = p - h;
  const double tail = ((e + l) - hl) - k * two_pi_2;
  return d + tail;
}

/// r ≡ (w_hi + w_lo) t (mod 2π) for every finite input; |r| ≤ π + 2^-50 always;
/// |r - exact| ≤ ulp(r)/2 + |w_hi t|·2^-151 (≤ 2^-52 + 2^-87 for |w_hi t| ≤ 2^64, and
/// still ≤ 6e-16 at 2^100). Requires |w_lo| ≤ 2^-52 |w_hi| (see split()).
///
/// In turns (units of 2π) the phase is X = (p + e + l + el)(I1 + I2 + I3) + O(|p| 2^-164),
/// with p + e = w_hi t, l + el = w_lo t, u + v = e + l (all exact) and I1 + I2 + I3 = 1/2π.
/// Write |p| ≤ 2^Q; log2 bounds:
///  - a1 + b1 = p·I1 exactly: a1 - round(a1) is exact and |b1| ≤ 2^(Q-55).
///  - a2 + b2 = p·I2 exactly: |a2| ≤ 2^(Q-56.5), |b2| ≤ 2^(Q-109).
///  - a3 + b3 = u·I1 exactly: |u| ≤ 2^(Q-51.4), |a3| ≤ 2^(Q-54), |b3| ≤ 2^(Q-107).
///  - u3 + v2 + v3 = b1 + a2 + a3 exactly (two two_sums): |u3| ≤ 2^(Q-53),
///    |v2|, |v3| ≤ 2^(Q-106).
///  - f1 = a1 - round(a1) and f3 = u3 - round(u3) are exact, in [-1/2, 1/2]; s + d = f1 + f3
///    exactly (two_sum). Every integer part is dropped without rounding: this is where a
///    Cody–Waite subtraction of k·2π would lose bits once k has more than ~50 bits.
///  - small = b2 + b3 + v2 + v3 + d + p·I3 + u·I2 + (v + el)·I1: terms ≤ 2^(Q-104) (d ≤ 2^-54),
///    summed with error ≤ 2^(Q-154) turns. Dropped: u·I3, (v + el)·I2 and
///    p·(1/2π - I1 - I2 - I3), all ≤ 2^(Q-161).
///  - small - round(small) and s - round(s + small) are exact and leave |s + small| ≤ 1/2
///    (for Q ≤ 100 round(small) = 0; the step only keeps |r| bounded for absurd inputs).
///  - r = 2π (s + small): h + hl = s·two_pi_1 exactly, then h + (hl + s·two_pi_2 +
///    small·two_pi_1): one final rounding of ≤ ulp(r)/2, the rest ≤ 2^-100.
/// NaN or ±Inf in, NaN out.
inline double reduced_angle_turns(double w_hi, double w_lo, double t) {
  double p, e, l, el, u, v;
  eft::two_prod(w_hi, t, p, e);
  eft::two_prod(w_lo, t, l, el);
  eft::two_sum(e, l, u, v);
  double a1, b1, a2, b2, a3, b3;
  eft::two_prod(p, inv_two_pi_1, a1, b1);
  eft::two_prod(p, inv_two_pi_2, a2, b2);
  eft::two_prod(u, inv_two_pi_1, a3, b3);
  double u2, v2, u3, v3;
  eft::two_sum(b1, a2, u2, v2);
  eft::two_sum(u2, a3, u3, v3);
  const double f1 = a1 - eft::round_to_int(a1);
  const double f3 = u3 - eft::round_to_int(u3);
  double s, d;
  eft::two_sum(f1, f3, s, d);
  double small =
      ((b2 + b3) + (v2 + v3)) + d + p * inv_two_pi_3 + u * inv_two_pi_2 + (v + el) * inv_two_pi_1;
  small -= eft::round_to_int(small);
  s -= eft::round_small(s + small);
  double h, hl;
  eft::two_prod(s, two_pi_1, h, hl);
  return h + ((hl + s * two_pi_2) + small * two_pi_1);
}

/// r ≡ (w_hi + w_lo) t (mod 2π), |r| < 3.2, |r - exact| ≤ ulp(r)/2 + 2^-57 ≤ 2.3e-16
/// for every finite w_hi, w_lo, t (normalized pairs or not): the Cody–Waite path, else the
/// turns path, where they are valid, else the exact Payne–Hanek path (detail/math/angle_exact.hpp,
/// ≤ ulp(r)/2 + 2^-122). NaN or ±Inf in gives NaN; callers check.
inline double reduced_angle(double w_hi, double w_lo, double t) {
  const double x = fast_path_bound(w_hi, w_lo, fast_path_t(t));
  if (x <= cody_waite_limit) return reduced_angle_cody_waite(w_hi, w_lo, t);
  if (x <= turns_limit) return reduced_angle_turns(w_hi, w_lo, t);
  return reduced_angle_exact(w_hi, w_lo, t);
}

// ---- long double -------------------------------------------------------------------------
// 2π = two_pi_1l + two_pi_2l + two_pi_3l in the format of long double.
#if LDBL_MANT_DIG == 64  // x87 extended
inline constexpr long double two_pi_1l = 0xc90fdaa22168c235p-61L;
inline constexpr long double two_pi_2l = -0xece675d1fc8f8cbbp-127L;
inline constexpr long double two_pi_3l = -0xb7ed8fbbacc19c60p-192L;
#elif LDBL_MANT_DIG == 113  // IEEE binary128
inline constexpr long double two_pi_1l = 0x1921fb54442d18469898cc51701b8p-110L;
inline constexpr long double two_pi_2l = 0x1cd129024e088a67cc74020bbea64p-225L;
inline constexpr long double two_pi_3l = -0x13b19376bad7de19c72fec8841abap-339L;
#else                       // long double == double (MSVC, some ARM ABIs), or IBM double-double
inline constexpr long double two_pi_1l = two_pi_1;
inline constexpr long double two_pi_2l = two_pi_2;
inline constexpr long double two_pi_3l = two_pi_3;
#endif

/// r ≡ w t (mod 2π) in long double, |r| ≤ π + 0.4, |r - exact| ≤ ulp(r)/2 + 2^-64
/// (≈ 2.5e-19 on x87) for |w t| ≤ 2^62 and |w|, |t| ≤ remainder_limit_ld. NaN or ±Inf in,
/// NaN out. reduced_angle(long double, long double) below covers every other input.
///
/// Not simply w*t for sinl: the rounding of w*t alone is 2^-64 |w t| (6e-8 rad at 2^40),
/// however well sinl reduces its argument. Instead:
///  - p + e = w t exactly (Dekker; no fast fmal on x87).
///  - r0 = remainder(p, two_pi_1l) is exact (IEEE remainder always is), |r0| ≤ π.
///  - n = (p - r0)/two_pi_1l rounded: p - r0 = n·two_pi_1l exactly, and the two roundings
///    move the quotient by ≤ |n|·2^-63 < 1/2 for |n| < 2^62, so n is the exact quotient.
///  - r = r0 + ((e - n·two_pi_2l) - n·two_pi_3l): |e| ≤ ulp(p)/2 ≤ 2^-2, |n·two_pi_2l| ≤
///    2^-3.7 at |w t| = 2^62; the tail's roundings are ≤ 2^-66 each.
/// Beyond 2^62 (or if |r| > 4 for any reason) one more remainder() keeps |r| ≤ π.
inline long double reduced_angle_remainder(long double w, long double t) {
  long double p, e;
  eft::two_prod_dekker(w, t, p, e);
  const long double r0 = std::remainder(p, two_pi_1l);
  const long double n = std::nearbyint((p - r0) / two_pi_1l);
  long double r = r0 + ((e - n * two_pi_2l) - n * two_pi_3l);
  if (!(std::fabs(r) <= 4.0L)) r = std::remainder(r, two_pi_1l);
  return r;
}

/// Dekker's split in long double (splitter 2^⌈digits/2⌉ + 1) overflows for operands above this.
inline constexpr long double remainder_limit_ld =
    LDBL_MAX /
    static_cast<long double>(1ULL << ((std::numeric_limits<long double>::digits + 1) / 2 + 1));

/// r ≡ w t (mod 2π) in long double for every finite w and t: |r - exact| ≤ ulp(r)/2 + 2^-64
/// (reduced_angle_remainder for |w t| ≤ 2^62, else the exact path, ≤ ulp(r)/2 + 2^-122).
/// NaN or ±Inf in, NaN out.
inline long double reduced_angle(long double w, long double t) {
  if (std::fabs(w * t) <= 0x1p62L && std::fabs(w) <= remainder_limit_ld &&
      std::fabs(t) <= remainder_limit_ld)
    return reduced_angle_remainder(w, t);
  return reduced_angle_exact(w, t);
}

}  // namespace PEAL_DETAIL_FMA_NAMESPACE
}  // namespace detail
}  // namespace peal
