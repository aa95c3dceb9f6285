// RotationBlock{omega, a}: generator X = [[a, omega], [-omega, a]],
//   A(tau) = e^{a tau} R(-omega tau) = e^{a tau} [[cos wt, sin wt], [-sin wt, cos wt]].
// With a = 0 the query is encoded as R(omega t) q and the key as R(omega s) k: RoPE
// (Su et al. 2021). a < 0 is the decaying rotation of xPos/RetNet (docs/design.md §1).
//
// The frequency is kept as an unevaluated sum omega_hi + omega_lo (two doubles for float
// and double blocks; detail/math/frequency.hpp, shared with RotationJordanBlock) and the angle
// omega*tau is formed exactly and reduced mod 2pi in detail/math/angle.hpp, so sin/cos stay
// accurate to ~1e-15 at |tau| = 2^40 and beyond (docs/numerics.md, "Angles").
#pragma once

#include <array>
#include <cmath>
#include <limits>
#include <vector>

#include "block_traits.hpp"
#include "detail/math/exp_poly.hpp"
#include "detail/math/frequency.hpp"
#include "detail/math/sincos.hpp"
#include "encoding.hpp"

namespace peal {

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
    omega_ = detail::Frequency<Real>::of(omega, "RotationBlock");
  }
  /// From params() of a block: (omega_hi, omega_lo) must be finite and normalised.
  static RotationBlock from_params(const Params& p) {
    RotationBlock b(0.0L, p[2]);
    b.omega_ = detail::Frequency<Real>::from_pair(p[0], p[1], "RotationBlock");
    return b;
  }
  Params params() const { return {omega_.hi, omega_.lo, a_}; }

  long double omega() const { return omega_.value(); }
  Real a() const { return a_; }
  static constexpr int dim() { return Dim; }

  MatrixType generator() const {
    const S w = S(omega_.rounded()), a = S(a_);
    MatrixType x;
    x << a, w, -w, a;
    return x;
  }

  MatrixType A(Real tau) const {
    detail::require_finite(tau, "A", "tau");
    Real s, c;
    omega_.sincos(tau, s, c);
    // e^{a tau} cos, e^{a tau} sin: exact past the range (0 stays 0, never inf·0).
    const Real gc = detail::mul_exp(c, a_ * tau), gs = detail::mul_exp(s, a_ * tau);
    MatrixType m;
    m << S(gc), S(gs), S(-gs), S(gc);
    return m;
  }

  template <class V>
  void apply(V&& v, Real tau, bool transpose) const {
    Real s, c;
    omega_.sincos(tau, s, c);
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

  /// ∂A(τ)/∂θ_k (docs/gradients.md §1): k = 0, ω: τ J A(τ) = τ e^{aτ} [[−s, c], [−c, −s]]
  /// (J = [[0, 1], [−1, 0]] = ∂X/∂ω commutes with X); k = 1, a: τ A(τ).
  MatrixType dA(Real tau, int k) const {
    detail::require_finite(tau, "dA", "tau");
    Real s, c;
    omega_.sincos(tau, s, c);
    const Real gc = detail::mul_exp(tau * c, a_ * tau), gs = detail::mul_exp(tau * s, a_ * tau);
    MatrixType m;
    if (k == 1) {
      m << S(gc), S(gs), S(-gs), S(gc);
      return m;
    }
    m << S(-gs), S(gc), S(-gc), S(-gs);
    return m;
  }

 private:
  detail::Frequency<Real> omega_;  // omega_hi + omega_lo (detail/math/frequency.hpp)
  Real a_ = 0;
};

// Batch-kernel facts (block_traits.hpp): A(δ) = e^{aδ} [[c, s], [−s, c]], (c, s) of ωδ with
// the exact angle reduction (detail/math/sincos.hpp). Trainable: ω (long double, all its bits)
// and a.
template <class S>
struct block_traits<RotationBlock<S>> : block_traits_base<RotationBlock<S>> {
  static constexpr int n_parameters = 2;
  static const char* parameter_name(int k) { return k == 0 ? "omega" : "a"; }
  static long double parameter(const RotationBlock<S>& b, int k) {
    return k == 0 ? b.omega() : static_cast<long double>(b.a());
  }
  static RotationBlock<S> with_parameters(const RotationBlock<S>&, const long double* theta) {
    return RotationBlock<S>(theta[0], real_t<S>(theta[1]));
  }
  static double rate(const RotationBlock<S>& b) { return std::abs(double(b.a())); }
  static void factors(const RotationBlock<S>& b, double d, double& g, double* P) {
    const auto pr = b.params();
    const double wh = double(pr[0]), wl = double(pr[1]);
    double s, c;
    detail::angles_sincos(&wh, &wl, d, 1, &s, &c);
    g = std::exp(double(b.a()) * d);
    P[0] = c, P[1] = s, P[2] = -s, P[3] = c;
  }
};

}  // namespace peal
