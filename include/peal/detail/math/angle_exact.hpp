// Exact reduction of huge phases: r ≡ ω t (mod 2π) for EVERY finite ω and t, by the method
// of Payne & Hanek (1983, "Radian reduction for trigonometric functions", SIGNUM Newsl. 18),
// in integer arithmetic.
//
// Each factor is an integer times a power of two, a double |x| = m·2^e with m < 2^53 (a long
// double is a sum of up to three such pieces), so every exact product is M·2^E with
// M = m1·m2 < 2^106, and never formed as a floating-point number (no overflow, at any E).
// In turns (units of 2π) the phase is M·2^E·(1/2π) = M·Σ_i b_i 2^(E−i), b_i the bits of
// 1/(2π) (detail/math/inv_two_pi_bits.hpp). The terms with i ≤ E are integers and drop out mod 1;
// the next 256 bits form an integer W, and
//     frac(M·2^E/2π) = frac(M·W·2^-256) + δ,   0 ≤ δ < M·2^-256 < 2^-150,
// where frac(M·W·2^-256) is the top 128 bits of M·W mod 2^256 (truncated: < 2^-128 more).
// The fractions of the products are added mod 1 as 128-bit two's complement numbers, read
// as a signed fraction x ∈ [−1/2, 1/2), and r = 2π·x is the 256-bit product x·P,
// P = round(2π·2^125), rounded once to the result type. Error bound, n products (2 for the
// double pair (w_hi + w_lo)·t, up to 9 for long double):
//     |r − exact| ≤ ulp(r)/2 + 2π·n·(2^-128 + 2^-150) + 2^-128.6 ≤ ulp(r)/2 + 2^-122,
// with |r| ≤ π. Only integer operations: the result is the same with and without FMA, at
// any optimisation level; about 55 ns per phase (200 ns in long double; docs/numerics.md,
// "Angle reduction"). Part of detail/math/angle.hpp, which sends phases here only when they are
// beyond its fast paths.
#pragma once

#include <cfloat>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>

#include "inv_two_pi_bits.hpp"

#if !defined(PEAL_DETAIL_FMA_NAMESPACE)
#error "peal: include <peal/detail/math/angle.hpp>, not detail/math/angle_exact.hpp"
#endif

namespace peal {
namespace detail {
inline namespace PEAL_DETAIL_FMA_NAMESPACE {  // see detail/math/angle.hpp
namespace payne_hanek {

using u64 = std::uint64_t;

static_assert(std::numeric_limits<double>::is_iec559, "peal: angle reduction needs IEEE double");
// The 256-bit window after bit E must lie inside the table for the largest exponent of a
// product of two pieces: E ≤ 2·(max_exponent − 53), for double and for long double.
static_assert(2 * (LDBL_MAX_EXP - 53) + 256 <= 64 * inv_two_pi_words &&
                  2 * (DBL_MAX_EXP - 53) + 256 <= 64 * inv_two_pi_words,
              "peal: the 1/(2 pi) table is too short for this long double format");

/// hi·2^64 + lo == a·b exactly.
inline void mul_64x64(u64 a, u64 b, u64& hi, u64& lo) {
#if defined(__SIZEOF_INT128__)
  __extension__ typedef unsigned __int128 u128;
  const u128 p = static_cast<u128>(a) * b;
  hi = static_cast<u64>(p >> 64);
  lo = static_cast<u64>(p);
#else
  const u64 a0 = a & 0xffffffffu, a1 = a >> 32, b0 = b & 0xffffffffu, b1 = b >> 32;
  const u64 p00 = a0 * b0, p01 = a0 * b1, p10 = a1 * b0, p11 = a1 * b1;
  const u64 mid = (p00 >> 32) + (p01 & 0xffffffffu) + (p10 & 0xffffffffu);
  lo = (mid << 32) | (p00 & 0xffffffffu);
  hi = p11 + (p01 >> 32) + (p10 >> 32) + (mid >> 32);
#endif
}

/// Leading zero bits of x ≠ 0.
inline int leading_zeros(u64 x) {
#if defined(__GNUC__) || defined(__clang__)
  return __builtin_clzll(x);
#else
  int n = 0;
  for (; !(x >> 63); x <<= 1) ++n;
  return n;
#endif
}

/// A fraction of a turn, (hi·2^64 + lo)·2^-128 mod 1; as a signed value (two's complement)
/// in [−1/2, 1/2).
struct Turns {
  u64 hi = 0, lo = 0;
};

inline Turns add(Turns a, Turns b) {
  Turns r;
  r.lo = a.lo + b.lo;
  r.hi = a.hi + b.hi + (r.lo < a.lo ? 1 : 0);
  return r;
}

inline Turns negate(Turns a) {
  Turns r;
  r.lo = ~a.lo + 1;
  r.hi = ~a.hi + (r.lo == 0 ? 1 : 0);
  return r;
}

/// b_{p+1} … b_{p+64} of 1/(2π), most significant first; bits before the binary point
/// (p < 0) are zero. Offsets past the table never occur (static_assert above).
inline u64 inv_two_pi_window(long p) {
  const long q = p >= 0 ? p / 64 : -((63 - p) / 64);  // floor(p / 64)
  const int s = static_cast<int>(p - 64 * q);         // 0 … 63
  auto word = [](long k) { return k >= 0 && k < inv_two_pi_words ? inv_two_pi_bits[k] : u64(0); };
  const u64 w = word(q);
  return s == 0 ? w : (w << s) | (word(q + 1) >> (64 - s));
}

/// frac(m1·m2·2^E / 2π) for m1, m2 < 2^53, truncated: the exact value lies in
/// [x, x + 2^-128 + 2^-150).
inline Turns product_turns(u64 m1, u64 m2, int e) {
  if (m1 == 0 || m2 == 0) return {};
  u64 m[2];
  mul_64x64(m1, m2, m[1], m[0]);  // M < 2^106
  u64 w[4];                       // W: bits E+1 … E+256, w[3] the most significant limb
  for (int k = 0; k < 4; ++k) w[3 - k] = inv_two_pi_window(long(e) + 64 * k);
  u64 r[4] = {0, 0, 0, 0};  // M·W mod 2^256
  for (int i = 0; i < 2; ++i) {
    u64 carry = 0;
    for (int j = 0; i + j < 4; ++j) {
      u64 hi, lo;
      mul_64x64(m[i], w[j], hi, lo);  // hi ≤ 2^64 − 2: the two carries below cannot overflow
      lo += carry;
      hi += lo < carry ? 1 : 0;
      r[i + j] += lo;
      hi += r[i + j] < lo ? 1 : 0;
      carry = hi;
    }
  }
  return {r[3], r[2]};
}

/// |x| = m·2^e, m < 2^53 (IEEE double, subnormals included; x finite).
inline void split_double(double x, u64& m, int& e) {
  u64 b;
  std::memcpy(&b, &x, sizeof b);
  const int biased = static_cast<int>((b >> 52) & 0x7ff);
  m = b & ((u64(1) << 52) - 1);
  if (biased == 0) {
    e = -1074;
  } else {
    m |= u64(1) << 52;
    e = biased - 1075;
  }
}

/// frac(a·b / 2π) for finite doubles, signed.
inline Turns product_turns(double a, double b) {
  u64 ma, mb;
  int ea, eb;
  split_double(a, ma, ea);
  split_double(b, mb, eb);
  const Turns f = product_turns(ma, mb, ea + eb);
  return std::signbit(a) != std::signbit(b) ? negate(f) : f;
}

/// |x| = Σ_{k<n} m_k 2^{e_k}, m_k < 2^53, n ≤ 3 (159 bits: every IEEE long double; x finite).
/// frexp, scaling by 2^53, floor and the subtraction of an integer part are all exact.
inline int split_long_double(long double x, u64* m, int* e) {
  int ex;
  long double f = std::frexp(std::fabs(x), &ex);  // [1/2, 1), or 0
  int n = 0;
  while (f != 0 && n < 3) {
    f = std::ldexp(f, 53);
    const long double d = std::floor(f);
    m[n] = static_cast<u64>(d);
    e[n] = ex - 53 * (n + 1);
    f -= d;
    ++n;
  }
  return n;
}

/// The 256-bit product |x|·P, P = round(2π·2^125) (x a signed fraction of a turn), as
/// top·2^shift with top ≥ 2^63 and sticky set when bits below top were dropped. top = 0
/// when x = 0. (2π·|x| = |x|·P·2^-253 up to 2^-128.6.)
inline void radians_bits(Turns x, u64& top, u64& next, bool& sticky, int& shift) {
  constexpr u64 p_hi = 0xc90fdaa22168c234u, p_lo = 0xc4c6628b80dc1cd1u;
  const u64 a[2] = {x.lo, x.hi}, p[2] = {p_lo, p_hi};
  u64 r[4] = {0, 0, 0, 0};
  for (int i = 0; i < 2; ++i) {
    u64 carry = 0;
    for (int j = 0; j < 2; ++j) {
      u64 hi, lo;
      mul_64x64(a[i], p[j], hi, lo);
      lo += carry;
      hi += lo < carry ? 1 : 0;
      r[i + j] += lo;
      hi += r[i + j] < lo ? 1 : 0;
      carry = hi;
    }
    r[i + 2] = carry;
  }
  int top_limb = 3;
  while (top_limb >= 0 && r[top_limb] == 0) --top_limb;
  if (top_limb < 0) {
    top = next = 0, sticky = false, shift = 0;
    return;
  }
  const int lz = leading_zeros(r[top_limb]);
  auto limb = [&](int k) { return k >= 0 ? r[k] : u64(0); };
  auto shifted = [&](int k) {  // limb k of R·2^lz
    return lz == 0 ? limb(k) : (limb(k) << lz) | (limb(k - 1) >> (64 - lz));
  };
  top = shifted(top_limb);
  next = shifted(top_limb - 1);
  sticky = shifted(top_limb - 2) != 0 || (top_limb >= 3 && shifted(top_limb - 3) != 0);
  shift = 64 * top_limb - lz - 253;  // |x|·P·2^-253 = top·2^shift + lower bits
}

/// 2π·x rounded to nearest double (the 256-bit value is rounded once: the sticky bit below
/// the 64 leading bits makes the conversion of `top` a correct rounding).
inline double to_radians(Turns x) {
  const bool neg = (x.hi >> 63) != 0;
  if (neg) x = negate(x);  // −1/2 negates to itself, read as the magnitude 1/2
  u64 top, next;
  bool sticky;
  int shift;
  radians_bits(x, top, next, sticky, shift);
  const double v = std::ldexp(static_cast<double>(top | ((next != 0 || sticky) ? 1 : 0)), shift);
  return neg ? -v : v;
}

/// 2π·x in long double (128 leading bits, one rounding for formats of ≤ 113 bits).
inline long double to_radians_long(Turns x) {
  const bool neg = (x.hi >> 63) != 0;
  if (neg) x = negate(x);
  u64 top, next;
  bool sticky;
  int shift;
  radians_bits(x, top, next, sticky, shift);
  const long double v =
      std::ldexp(static_cast<long double>(top) +
                     std::ldexp(static_cast<long double>(next | (sticky ? 1 : 0)), -64),
                 shift);
  return neg ? -v : v;
}

}  // namespace payne_hanek

/// r ≡ (w_hi + w_lo)·t (mod 2π) for any finite doubles (no normalization of the pair
/// needed), |r| ≤ π, |r − exact| ≤ ulp(r)/2 + 2^-122. NaN or ±Inf in, NaN out.
inline double reduced_angle_exact(double w_hi, double w_lo, double t) {
  namespace ph = payne_hanek;
  if (!(std::isfinite(w_hi) && std::isfinite(w_lo) && std::isfinite(t)))
    return std::numeric_limits<double>::quiet_NaN();
  return ph::to_radians(ph::add(ph::product_turns(w_hi, t), ph::product_turns(w_lo, t)));
}

/// r ≡ w·t (mod 2π) for any finite long doubles, |r| ≤ π, |r − exact| ≤ ulp(r)/2 + 2^-122.
/// NaN or ±Inf in, NaN out.
inline long double reduced_angle_exact(long double w, long double t) {
  namespace ph = payne_hanek;
  if (!(std::isfinite(w) && std::isfinite(t))) return std::numeric_limits<long double>::quiet_NaN();
  ph::u64 mw[3], mt[3];
  int ew[3], et[3];
  const int nw = ph::split_long_double(w, mw, ew), nt = ph::split_long_double(t, mt, et);
  ph::Turns s;
  for (int i = 0; i < nw; ++i)
    for (int j = 0; j < nt; ++j) s = ph::add(s, ph::product_turns(mw[i], mt[j], ew[i] + et[j]));
  if (std::signbit(w) != std::signbit(t)) s = ph::negate(s);
  return ph::to_radians_long(s);
}

}  // namespace PEAL_DETAIL_FMA_NAMESPACE
}  // namespace detail
}  // namespace peal
