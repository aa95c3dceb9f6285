// sin and cos of reduced angles, and of many phases ω_i t at once (the RoPE hot loop).
//
// sincos_reduced(r): r = x + j·π/2 with j = round(2r/π), |x| ≤ π/4; minimax polynomials
// for sin and cos on [-π/4, π/4]; the quadrant is applied as a rotation by j·π/2, whose
// cos and sin are 0 or ±1, so it costs no rounding and no branch. Absolute error ≤ 1.2e-16
// for |r| ≤ 2^20 (docs/numerics.md, "Angles").
//
// angles_sincos(w_hi, w_lo, t, n, s, c): s_i, c_i = sin, cos((w_hi_i + w_lo_i) t), the
// reduction of detail/math/angle.hpp followed by sincos_reduced, ≤ 3.5e-16 absolute for every
// finite input. The two fast paths are straight-line arithmetic without libm calls, so their
// loops auto-vectorize (g++/clang++ -O3 with AVX2+FMA or AVX-512: vfmadd…pd on ymm/zmm);
// a batch with a phase beyond them (|ω t| > 2^64) is reduced element by element.
#pragma once

#include <cmath>
#include "angle.hpp"

#include "../compiler.hpp"

namespace peal {
namespace detail {
inline namespace PEAL_DETAIL_FMA_NAMESPACE {  // see detail/math/angle.hpp

// π/2 = pio2_1 + pio2_2 + O(2^-109); 2/π rounded.
inline constexpr double pio2_1 = 0x1.921fb54442d18p+0;
inline constexpr double pio2_2 = 0x1.1a62633145c07p-54;
inline constexpr double two_over_pi = 0x1.45f306dc9c883p-1;

/// s = sin(r), c = cos(r), |error| ≤ 1.2e-16 for |r| ≤ 2^20 (callers pass |r| ≲ 4).
/// Branch free; NaN or ±Inf in, NaN out. sin(-0) is returned as +0.
///
///  - j = round(r·2/π) (exact integer, |j| ≤ 2^20·0.64); h + hl = j·pio2_1 exactly;
///    xh = r - h is exact (Sterbenz: r and h are within a factor 2 when j ≠ 0).
///  - xl = -(hl + j·pio2_2): |xl| ≤ ulp(h)/2 + |j|·2^-53.7; x + y = xh + xl with
///    x = fl(xh + xl), y = (xh - x) + xl (Fast2Sum, exact whenever |xh| ≥ |xl|; otherwise
///    both are below 2^-32 and y is off by ≤ 2^-85). Dropped: j·(π/2 - pio2_1 - pio2_2)
///    ≤ 2^-89 for |j| ≤ 2^20.
///  - sin(x + y) = x + x³ P(x²) + y (1 - x²/2), cos(x + y) = 1 - x²/2 + x⁴ Q(x²) - x y with
///    the degree-6 minimax P, Q of fdlibm's __kernel_sin/__kernel_cos (Sun Microsystems
///    1993; |sin x/x - 1 - x² P| ≤ 2^-58, |cos x - (1 - x²/2 + x⁴ Q)| ≤ 2^-58 on
///    [-π/4, π/4]). The second-order terms in y are ≤ 2^-64. 1 - x²/2 is formed with its
///    rounding error recovered ((1 - w) - x²/2 is exact), so each of sin(x + y), cos(x + y)
///    carries ≤ ulp/2 ≤ 2^-54 from the last addition plus ≤ 2^-56 from the rest.
///  - With m = j - 4·round(j/4) ∈ {-2, …, 2}: cos(jπ/2) = 1 - |m|, sin(jπ/2) = m (2 - |m|),
///    and (s, c) = rotation of (sin x, cos x) by jπ/2: products with 0 or ±1, sums with 0.
inline void sincos_reduced(double r, double& s, double& c) {
  const double j = eft::round_small(r * two_over_pi);
  double h, hl;
  eft::two_prod(j, pio2_1, h, hl);
  const double xh = r - h;
  const double xl = -(hl + j * pio2_2);
  const double x = xh + xl;
  const double y = (xh - x) + xl;

  const double z = x * x;
  // sin x = x + x³ (S1 + z (S2 + … + z S6))
  constexpr double S1 = -1.66666666666666324348e-01, S2 = 8.33333333332248946124e-03,
                   S3 = -1.98412698298579493134e-04, S4 = 2.75573137070700676789e-06,
                   S5 = -2.50507602534068634195e-08, S6 = 1.58969099521155010221e-10;
  const double ps = S1 + z * (S2 + z * (S3 + z * (S4 + z * (S5 + z * S6))));
  const double sin_x = x + ((z * x) * ps + y * (1.0 - 0.5 * z));
  // cos x = 1 - z/2 + z² (C1 + z (C2 + … + z C6))
  constexpr double C1 = 4.16666666666666019037e-02, C2 = -1.38888888888741095749e-03,
                   C3 = 2.48015872894767294178e-05, C4 = -2.75573143513906633035e-07,
                   C5 = 2.08757232129817482790e-09, C6 = -1.13596475577881948265e-11;
  const double pc = C1 + z * (C2 + z * (C3 + z * (C4 + z * (C5 + z * C6))));
  const double hz = 0.5 * z;
  const double w = 1.0 - hz;
  const double cos_x = w + (((1.0 - w) - hz) + (z * (z * pc) - x * y));

  const double m = j - 4.0 * eft::round_small(0.25 * j);
  const double am = std::fabs(m);
  const double cq = 1.0 - am;        // cos(jπ/2)
  const double sq = m * (2.0 - am);  // sin(jπ/2)
  s = sin_x * cq + cos_x * sq;
  c = cos_x * cq - sin_x * sq;
}

/// r[i] (+)= (w_hi[i] + w_lo[i]) t reduced mod 2π into [-π, π]: the reduction of
/// angles_sincos, and the per-axis terms of an N-D angle ω·p = Σ_a ω_a p_a (each reduced
/// exactly, accumulated: |r| stays ≤ D π, well inside sincos_reduced's range). The path is
/// chosen once per call (t is shared): the Cody–Waite path when fast_path_bound(w_hi_i,
/// w_lo_i, |t|) ≤ 2^45 for every i, else the turns path when it is ≤ 2^64 for every i, else
/// reduced_angle element by element (the exact path for the phases beyond 2^64). The tests
/// are ORs of flags (a max over i does not vectorize without -ffast-math); the second is only
/// evaluated when the first fails. A NaN or infinite t, a NaN w_hi or 0·Inf fail both and
/// come out NaN (so does a NaN w_lo).
template <bool Add>
inline void angles_reduced_impl(const double* w_hi, const double* w_lo, double t, int n,
                                double* PEAL_RESTRICT r) {
  const double abs_t = fast_path_t(t);
  int not_cw = 0, not_turns = 0;
  for (int i = 0; i < n; ++i) not_cw |= !(fast_path_bound(w_hi[i], w_lo[i], abs_t) <= cody_waite_limit);
  if (!not_cw) {
    for (int i = 0; i < n; ++i) {
      const double x = reduced_angle_cody_waite(w_hi[i], w_lo[i], t);
      r[i] = Add ? r[i] + x : x;
    }
    return;
  }
  for (int i = 0; i < n; ++i) not_turns |= !(fast_path_bound(w_hi[i], w_lo[i], abs_t) <= turns_limit);
  if (!not_turns) {
    for (int i = 0; i < n; ++i) {
      const double x = reduced_angle_turns(w_hi[i], w_lo[i], t);
      r[i] = Add ? r[i] + x : x;
    }
    return;
  }
  for (int i = 0; i < n; ++i) {
    const double x = reduced_angle(w_hi[i], w_lo[i], t);
    r[i] = Add ? r[i] + x : x;
  }
}
/// r[i] = (w_hi[i] + w_lo[i]) t reduced mod 2π (above).
inline void angles_reduced(const double* w_hi, const double* w_lo, double t, int n, double* r) {
  angles_reduced_impl<false>(w_hi, w_lo, t, n, r);
}
/// r[i] += the same: the per-axis terms of an N-D angle.
inline void angles_reduced_add(const double* w_hi, const double* w_lo, double t, int n,
                               double* r) {
  angles_reduced_impl<true>(w_hi, w_lo, t, n, r);
}

/// Body of angles_sincos for one output type.
template <class Out>
inline void angles_sincos_impl(const double* w_hi, const double* w_lo, double t, int n, Out* s,
                               Out* c) {
  // Two passes per chunk, the reduction into a buffer and then sincos_reduced: each loop
  // vectorizes on its own (one loop doing both did not: g++ 12 -O3, 2-5x slower encode).
  constexpr int chunk = 256;
  double r[chunk];
  for (int i0 = 0; i0 < n; i0 += chunk) {
    const int m = n - i0 < chunk ? n - i0 : chunk;
    angles_reduced(w_hi + i0, w_lo + i0, t, m, r);
    for (int i = 0; i < m; ++i) {
      double si, ci;
      sincos_reduced(r[i], si, ci);
      s[i0 + i] = static_cast<Out>(si);
      c[i0 + i] = static_cast<Out>(ci);
    }
  }
}

/// s[i] = sin((w_hi[i] + w_lo[i]) t), c[i] = cos(…), i < n: one position, n frequencies
/// (a RoPE bank at one token). |error| ≤ 3.5e-16 for every finite input (frequency pairs
/// need not be normalized). NaN/Inf t gives NaN. s and c must not overlap the inputs.
inline void angles_sincos(const double* w_hi, const double* w_lo, double t, int n, double* s,
                          double* c) {
  angles_sincos_impl(w_hi, w_lo, t, n, s, c);
}

/// Float outputs (computed in double, rounded once): |error| ≤ 2^-25 + 3.5e-16.
inline void angles_sincos(const double* w_hi, const double* w_lo, double t, int n, float* s,
                          float* c) {
  angles_sincos_impl(w_hi, w_lo, t, n, s, c);
}

}  // namespace PEAL_DETAIL_FMA_NAMESPACE
}  // namespace detail
}  // namespace peal
