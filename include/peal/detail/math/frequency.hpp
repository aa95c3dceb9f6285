// The frequency of a rotation (RotationBlock, RotationJordanBlock): ω kept as an unevaluated
// sum hi + lo (two doubles for float and double blocks, two long doubles for long double
// ones), so that the angle ωτ is formed exactly and reduced mod 2π (detail/math/angle.hpp) and
// sin/cos stay accurate to ~1e-15 at |τ| = 2^40 and beyond (docs/numerics.md, "Angles").
// Presets compute ω in long double and keep its extra bits here.
#pragma once

#include <cmath>
#include <limits>
#include <sstream>

#include "../../errors.hpp"
#include "angle.hpp"

namespace peal {
namespace detail {

// sin and cos of (w_hi + w_lo) * t, accurate for any finite t.
inline void sincos_of_angle(double w_hi, double w_lo, double t, double& s, double& c) {
  const double r = reduced_angle(w_hi, w_lo, t);
  s = std::sin(r);
  c = std::cos(r);
}
inline void sincos_of_angle(long double w_hi, long double w_lo, long double t, long double& s,
                            long double& c) {
  const long double r = reduced_angle(w_hi + w_lo, t);  // exact product, reduced mod 2pi
  s = std::sin(r);
  c = std::cos(r);
}

// hi + lo == w to the precision of R: lo is zero when R has w's precision.
template <class R>
void split_frequency(long double w, R& hi, R& lo) {
  hi = static_cast<R>(w);
  lo = static_cast<R>(w - static_cast<long double>(hi));
}

// split_frequency for a constructor: a finite long double omega may not be finite in R
// (1e320 is inf as a double).
template <class R>
void split_frequency_checked(long double w, R& hi, R& lo, const char* where) {
  require_finite(w, where, "omega");
  split_frequency(w, hi, lo);
  if (!std::isfinite(hi) || !std::isfinite(lo)) {
    std::ostringstream os;
    os << where << ": omega = " << w << " is not finite in the block's parameter type";
    fail(os.str());
  }
}

// from_params: (hi, lo) must be finite and normalised, |lo| <= ulp(hi)/2 with
// ulp(x) = 2^(e - p + 1) for |x| in [2^e, 2^(e+1)) (p = digits of R), which is what
// split_frequency returns and what detail/math/angle.hpp assumes (|lo| <= 2^-52 |hi| there).
template <class R>
void require_normalised_frequency(R hi, R lo, const char* where) {
  require_finite(hi, where, "omega_hi");
  require_finite(lo, where, "omega_lo");
  const R ah = std::fabs(hi), top = std::numeric_limits<R>::max();
  const R ulp = ah == top ? ah - std::nextafter(ah, R(0))  // same spacing, no overflow
                          : std::nextafter(ah, std::numeric_limits<R>::infinity()) - ah;
  if (!(std::fabs(lo) <= ulp / 2)) {  // ulp/2 of a subnormal rounds to 0: hi = 0 needs lo = 0
    std::ostringstream os;
    os.precision(std::numeric_limits<R>::max_digits10);
    os << where << ": (omega_hi, omega_lo) = (" << hi << ", " << lo
       << ") is not a normalised pair: omega_lo must satisfy |omega_lo| <= ulp(omega_hi)/2 = "
       << ulp / 2;
    fail(os.str());
  }
}

/// ω = hi + lo, the storage both rotation blocks share.
template <class R>
struct Frequency {
  R hi = 0, lo = 0;

  /// From a long double ω (finite in R, else invalid_argument naming `where`).
  static Frequency of(long double w, const char* where) {
    Frequency f;
    split_frequency_checked(w, f.hi, f.lo, where);
    return f;
  }
  /// From a stored pair (finite and normalised, else invalid_argument naming `where`).
  static Frequency from_pair(R hi, R lo, const char* where) {
    require_normalised_frequency(hi, lo, where);
    Frequency f;
    f.hi = hi, f.lo = lo;
    return f;
  }
  /// ω in long double (hi + lo exactly when R is double).
  long double value() const { return static_cast<long double>(hi) + lo; }
  /// ω rounded to R.
  R rounded() const { return hi + lo; }
  /// sin and cos of ωτ, accurate for any finite τ.
  void sincos(R tau, R& s, R& c) const { sincos_of_angle(hi, lo, tau, s, c); }
};

}  // namespace detail
}  // namespace peal
