// RotationBlock{omega, a}: generator X = [[a, omega], [-omega, a]],
//   A(tau) = e^{a tau} R(-omega tau) = e^{a tau} [[cos wt, sin wt], [-sin wt, cos wt]].
// With a = 0 the query is encoded as R(omega t) q and the key as R(omega s) k: RoPE
// (Su et al. 2021). a < 0 is the decaying rotation of xPos/RetNet (docs/design.md §1).
//
// The frequency is kept as an unevaluated sum omega_hi + omega_lo (two doubles for float
// and double blocks) and the angle omega*tau is formed exactly and reduced mod 2pi in
// detail/angle.hpp, so sin/cos stay accurate to ~1e-15 at |tau| = 2^40 and beyond
// (docs/numerics.md, "Angles").
#pragma once

#include <array>
#include <cmath>
#include <limits>
#include <peal/detail/angle.hpp>
#include <sstream>
#include <vector>

#include "block_traits.hpp"
#include "detail/exp_poly.hpp"
#include "detail/sincos.hpp"
#include "encoding.hpp"

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
// split_frequency returns and what detail/angle.hpp assumes (|lo| <= 2^-52 |hi| there).
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

}  // namespace detail

template <class S = double>
class RotationBlock : public Encoding<RotationBlock<S>, S> {
 public:
  using Real = real_t<S>;
  static constexpr int Dim = 2;
  static constexpr int n_params = 3;  // omega_hi, omega_lo, a
  using MatrixType = Eigen::Matrix<S, 2, 2>;
  using Params = std::array<Real, n_params>;

  /// omega: angular frequency (given in long double so presets keep its extra bits);
  /// a: growth (a > 0) or decay (a < 0) rate.
  explicit RotationBlock(long double omega, Real a = 0) : a_(a) {
    detail::require_finite(a, "RotationBlock", "a");
    detail::split_frequency_checked(omega, omega_hi_, omega_lo_, "RotationBlock");
  }
  /// From params() of a block: (omega_hi, omega_lo) must be finite and normalised.
  static RotationBlock from_params(const Params& p) {
    RotationBlock b(0.0L, p[2]);
    detail::require_normalised_frequency(p[0], p[1], "RotationBlock");
    b.omega_hi_ = p[0];
    b.omega_lo_ = p[1];
    return b;
  }
  Params params() const { return {omega_hi_, omega_lo_, a_}; }

  long double omega() const { return static_cast<long double>(omega_hi_) + omega_lo_; }
  Real a() const { return a_; }
  static constexpr int dim() { return Dim; }

  MatrixType generator() const {
    const S w = S(omega_hi_ + omega_lo_), a = S(a_);
    MatrixType x;
    x << a, w, -w, a;
    return x;
  }

  MatrixType A(Real tau) const {
    detail::require_finite(tau, "A", "tau");
    Real s, c;
    detail::sincos_of_angle(omega_hi_, omega_lo_, tau, s, c);
    // e^{a tau} cos, e^{a tau} sin: exact past the range (0 stays 0, never inf·0).
    const Real gc = detail::mul_exp(c, a_ * tau), gs = detail::mul_exp(s, a_ * tau);
    MatrixType m;
    m << S(gc), S(gs), S(-gs), S(gc);
    return m;
  }

  template <class V>
  void apply(V&& v, Real tau, bool transpose) const {
    Real s, c;
    detail::sincos_of_angle(omega_hi_, omega_lo_, tau, s, c);
    if (transpose) s = -s;  // A^T = e^{a tau} R(omega tau)
    const Real g = std::exp(a_ * tau);
    if (std::isnormal(S(g))) {
      const S gc = S(c * g), gs = S(s * g), x0 = v(0), x1 = v(1);
      v(0) = gc * x0 + gs * x1;
      v(1) = gc * x1 - gs * x0;
    } else {  // e^{a tau} beyond the range of S: rotate, then scale exactly
      const Real x0 = Real(v(0)), x1 = Real(v(1));
      v(0) = S(detail::mul_exp(c * x0 + s * x1, a_ * tau));
      v(1) = S(detail::mul_exp(c * x1 - s * x0, a_ * tau));
    }
  }

 private:
  Real omega_hi_ = 0, omega_lo_ = 0, a_ = 0;
};

// Batch-kernel facts (block_traits.hpp): A(δ) = e^{aδ} [[c, s], [−s, c]], (c, s) of ωδ with
// the exact angle reduction (detail/sincos.hpp).
template <class S>
struct block_traits<RotationBlock<S>> {
  static constexpr int dim = 2;
  static constexpr int degree = 0;
  static constexpr bool per_pair_polynomial = false;
  static double rate(const RotationBlock<S>& b) { return std::abs(double(b.a())); }
  static void factors(const RotationBlock<S>& b, double d, double& g, double* P) {
    const auto pr = b.params();
    const double wh = double(pr[0]), wl = double(pr[1]);
    double s, c;
    detail::angles_sincos(&wh, &wl, d, 1, &s, &c);
    g = std::exp(double(b.a()) * d);
    P[0] = c, P[1] = s, P[2] = -s, P[3] = c;
  }
  static void signature(const RotationBlock<S>& b, std::vector<double>& sig) {
    for (auto p : b.params()) sig.push_back(double(p));
  }
};

}  // namespace peal
