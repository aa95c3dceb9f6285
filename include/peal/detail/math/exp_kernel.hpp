// A vectorizable exp in double: exp_kernel(x) = e^x to ~1 ulp (<= 4 ulp tested against
// std::exp, tests/test_encode.cpp), straight-line arithmetic without libm calls so that loops
// over many arguments vectorize; subnormal results and overflow to inf come out as
// std::exp's. Used for the growth factors of the encode kernels (encode.hpp) and the
// per-pair decays of scores() (scores.hpp). docs/numerics.md, "Growth factors".
#pragma once

#include <cstdint>
#include <cstring>

#include "../compiler.hpp"

namespace peal {
namespace detail {

// exp of many arguments at once: out[i] = e^{a[i] p}. Straight-line arithmetic without
// libm calls so the loop vectorizes (the growth factors of decaying rotation banks and real
// banks, n per token). x = k ln2 + r with k = round(x / ln2) and r = x - k ln2_hi - k ln2_lo
// (ln2_hi has 32 significant bits, so k ln2_hi is exact for |k| < 2^21 and r is exact to
// ~2^-80); e^r by its Taylor polynomial of degree 13 on |r| <= ln2/2 (truncation
// r^14/14! < 2^-57); 2^k applied as two exact powers of two 2^k1 2^k2, k1 = floor(k/2), so
// results in the subnormal range and overflow to inf come out as std::exp's (x is clamped
// to [-746, 710] first, where exp is 0, resp. inf). Relative error <= ~2 ulp (double).
inline double exp_kernel(double x) {
  x = x < -746.0 ? -746.0 : x;
  x = x > 710.0 ? 710.0 : x;
  constexpr double log2e = 0x1.71547652b82fep+0;
  constexpr double ln2_hi = 0x1.62e42fefa0000p-1;  // 32 significant bits
  constexpr double ln2_lo = 0x1.cf79abc9e3b3ap-40;
  constexpr double magic = 0x1.8p52;  // adding it rounds |y| < 2^51 to an integer
  const double k = (x * log2e + magic) - magic;
  const double r = (x - k * ln2_hi) - k * ln2_lo;
  double p = 1.0 / 6227020800.0;  // 1/13!
  p = p * r + 1.0 / 479001600.0;
  p = p * r + 1.0 / 39916800.0;
  p = p * r + 1.0 / 3628800.0;
  p = p * r + 1.0 / 362880.0;
  p = p * r + 1.0 / 40320.0;
  p = p * r + 1.0 / 5040.0;
  p = p * r + 1.0 / 720.0;
  p = p * r + 1.0 / 120.0;
  p = p * r + 1.0 / 24.0;
  p = p * r + 1.0 / 6.0;
  p = p * r + 0.5;
  p = p * r + 1.0;
  p = p * r + 1.0;
  // 2^k1 and 2^k2 from their exponent bits: the integer k1 + 1023 sits in the low bits of
  // (k1 + 1023) + 2^52 + 2^51; shifting it into the exponent field needs no conversion.
  const double k1 = ((0.5 * k - 0.25) + magic) - magic;  // floor(k/2) for integer k
  const double k2 = k - k1;                              // |k1|, |k2| <= 539: normal
  const double b1 = (k1 + 1023.0) + magic, b2 = (k2 + 1023.0) + magic;
  std::uint64_t u1, u2;
  std::memcpy(&u1, &b1, sizeof u1);
  std::memcpy(&u2, &b2, sizeof u2);
  u1 <<= 52;
  u2 <<= 52;
  double s1, s2;
  std::memcpy(&s1, &u1, sizeof s1);
  std::memcpy(&s2, &u2, sizeof s2);
  return (p * s1) * s2;
}
inline void exp_batch(const double* PEAL_RESTRICT a, double p, int n, double* PEAL_RESTRICT out) {
  int i = 0;
  for (; i + 8 <= n; i += 8)  // constant inner trip count: vectorizes at -O2 too
    for (int j = 0; j < 8; ++j) out[i + j] = exp_kernel(a[i + j] * p);
  for (; i < n; ++i) out[i] = exp_kernel(a[i] * p);
}

}  // namespace detail
}  // namespace peal
