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

#include <peal/detail/angle.hpp>
#include "detail/exp_poly.hpp"
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
    detail::require_finite(omega, "RotationBlock", "omega");
    detail::require_finite(a, "RotationBlock", "a");
    detail::split_frequency(omega, omega_hi_, omega_lo_);
  }
  static RotationBlock from_params(const Params& p) {
    RotationBlock b(0.0L, p[2]);
    detail::require_finite(p[0], "RotationBlock", "omega_hi");
    detail::require_finite(p[1], "RotationBlock", "omega_lo");
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

}  // namespace peal
