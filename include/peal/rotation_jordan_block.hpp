// RotationJordanBlock<M>{omega, a}: the real Jordan block of the complex pair a +- i omega,
// size 2M. Generator: C = [[a, omega], [-omega, a]] on the block diagonal, I_2 on the block
// superdiagonal. Since X = I_M (x) C + N (x) I_2 with commuting terms,
//   A(tau) = (e^{N tau} (x) I_2)(I_M (x) e^{C tau}),
// block (i, i+j) = tau^j / j! * e^{a tau} R(-omega tau) (docs/design.md §1). Angles use the
// exact reduction of RotationBlock, magnitudes the stable coefficients of JordanBlock.
#pragma once

#include <array>
#include <cmath>
#include <vector>

#include "block_traits.hpp"
#include "detail/math/exp_poly.hpp"
#include "detail/math/frequency.hpp"
#include "detail/math/sincos.hpp"
#include "encoding.hpp"

namespace peal {

template <int M, class S = double>
class RotationJordanBlock : public Encoding<RotationJordanBlock<M, S>, S> {
  static_assert(M >= 1, "peal: a RotationJordanBlock has M >= 1 rotation pairs");

 public:
  using Real = real_t<S>;
  static constexpr int Dim = 2 * M;
  static constexpr int n_params = 3;  // omega_hi, omega_lo, a
  using MatrixType = Eigen::Matrix<S, Dim, Dim>;
  using Params = std::array<Real, n_params>;

  explicit RotationJordanBlock(long double omega, Real a = 0) : a_(a) {
    detail::require_finite(a, "RotationJordanBlock", "a");
    omega_ = detail::Frequency<Real>::of(omega, "RotationJordanBlock");
  }
  /// From params() of a block: (omega_hi, omega_lo) must be finite and normalised.
  static RotationJordanBlock from_params(const Params& p) {
    RotationJordanBlock b(0.0L, p[2]);
    b.omega_ = detail::Frequency<Real>::from_pair(p[0], p[1], "RotationJordanBlock");
    return b;
  }
  Params params() const { return {omega_.hi, omega_.lo, a_}; }

  long double omega() const { return omega_.value(); }
  Real a() const { return a_; }
  static constexpr int dim() { return Dim; }

  MatrixType generator() const {
    const S w = S(omega_.rounded()), a = S(a_);
    MatrixType x = MatrixType::Zero();
    for (int i = 0; i < M; ++i) {
      x(2 * i, 2 * i) = a;
      x(2 * i, 2 * i + 1) = w;
      x(2 * i + 1, 2 * i) = -w;
      x(2 * i + 1, 2 * i + 1) = a;
      if (i + 1 < M) x(2 * i, 2 * i + 2) = x(2 * i + 1, 2 * i + 3) = S(1);
    }
    return x;
  }

  MatrixType A(Real tau) const {
    detail::require_finite(tau, "A", "tau");
    bool usual;
    return matrix(tau, usual);
  }

  template <class V>
  void apply(V&& v, Real tau, bool transpose) const {
    bool usual;
    const MatrixType a = matrix(tau, usual);
    Eigen::Matrix<S, Dim, 1> x;
    for (int i = 0; i < Dim; ++i) x(i) = v(i);
    Eigen::Matrix<S, Dim, 1> y;
    if (transpose)
      y = a.transpose() * x;
    else
      y = a * x;
    if (!(usual && a.allFinite() && y.allFinite()) && x.allFinite())
      y = past_range(x, tau, transpose);
    for (int i = 0; i < Dim; ++i) v(i) = y(i);
  }

  /// ∂A(τ)/∂θ_k (docs/gradients.md §2): k = 0, ω: τ (I ⊗ J) A(τ), J = [[0, 1], [−1, 0]]
  /// (∂X/∂ω = I ⊗ J commutes with X), block (i, j) = τ c_{j−i} [[−s, c], [−c, −s]];
  /// k = 1, a: τ A(τ).
  MatrixType dA(Real tau, int k) const {
    detail::require_finite(tau, "dA", "tau");
    if (k == 1) return MatrixType(A(tau) * S(tau));
    Real c[M], s, co;
    detail::exp_poly_coefficients(a_, tau, M, c);
    omega_.sincos(tau, s, co);
    MatrixType m = MatrixType::Zero();
    for (int i = 0; i < M; ++i)
      for (int j = i; j < M; ++j) {
        const Real f = tau * c[j - i];
        m(2 * i, 2 * j) = S(-f * s);
        m(2 * i, 2 * j + 1) = S(f * co);
        m(2 * i + 1, 2 * j) = S(-f * co);
        m(2 * i + 1, 2 * j + 1) = S(-f * s);
      }
    return m;
  }

 private:
  // A(tau); usual: every c_j = e^{a tau} tau^j / j! is a normal number (or an exact zero),
  // so the entries c_j·trig need no scaling. Otherwise each entry is (f_j trig)·2^{e_j}
  // (detail::exp_poly_scaled), exact past the range: 0 stays 0, never inf·0.
  MatrixType matrix(Real tau, bool& usual) const {
    Real c[M], s, co;
    detail::exp_poly_coefficients(a_, tau, M, c);
    omega_.sincos(tau, s, co);
    usual = true;
    for (int j = 0; j < M; ++j)
      usual = usual && (std::isnormal(c[j]) || (c[j] == 0 && tau == 0 && j > 0));
    Real f[M];
    long e[M];
    if (!usual) detail::exp_poly_scaled(a_, tau, M, f, e);
    auto entry = [&](int j, Real trig) {
      if (usual) return S(c[j] * trig);
      const Real m = f[j] * trig;
      return S(detail::ldexp_sum(&m, &e[j], 1));
    };
    MatrixType m = MatrixType::Zero();
    for (int i = 0; i < M; ++i)
      for (int j = i; j < M; ++j) {
        m(2 * i, 2 * j) = entry(j - i, co);
        m(2 * i, 2 * j + 1) = entry(j - i, s);
        m(2 * i + 1, 2 * j) = entry(j - i, -s);
        m(2 * i + 1, 2 * j + 1) = entry(j - i, co);
      }
    return m;
  }
  // A(tau) x (or A^T x) when a coefficient or the result is beyond the range: block (i, i+d)
  // = c_d B with B = [[cos, sin], [-sin, cos]]; the rotated pieces B x_j (B^T x_j) are finite,
  // each term (f_d (B x_j)_r)·2^{e_d} is summed without intermediate overflow (detail/
  // exp_poly.hpp) and rounded once to S.
  Eigen::Matrix<S, Dim, 1> past_range(const Eigen::Matrix<S, Dim, 1>& x, Real tau,
                                      bool transpose) const {
    Real s, co, f[M], m[M];
    long e[M], me[M];
    omega_.sincos(tau, s, co);
    detail::exp_poly_scaled(a_, tau, M, f, e);
    const Real sg = transpose ? -s : s;  // B^T = [[cos, -sin], [sin, cos]]
    Eigen::Matrix<S, Dim, 1> y;
    for (int i = 0; i < M; ++i)
      for (int r = 0; r < 2; ++r) {
        int n = 0;
        for (int j = 0; j < M; ++j) {
          const int d = transpose ? i - j : j - i;
          if (d < 0) continue;
          const Real x0 = Real(x(2 * j)), x1 = Real(x(2 * j + 1));
          const Real bx = r == 0 ? co * x0 + sg * x1 : co * x1 - sg * x0;
          m[n] = f[d] * bx, me[n] = e[d], ++n;
        }
        y(2 * i + r) = S(detail::ldexp_sum(m, me, n));
      }
    return y;
  }

 private:
  detail::Frequency<Real> omega_;  // omega_hi + omega_lo (detail/math/frequency.hpp)
  Real a_ = 0;
};

// Batch-kernel facts (block_traits.hpp): A(δ) = e^{aδ} P, 2x2 block (i, j) of P =
// δ^{j−i}/(j−i)! [[c, s], [−s, c]] for j >= i, (c, s) of ωδ with the exact angle reduction.
template <int M, class S>
struct block_traits<RotationJordanBlock<M, S>> : block_traits_base<RotationJordanBlock<M, S>> {
  static constexpr int n_parameters = 2;  // ω (long double, all its bits), a
  static const char* parameter_name(int k) { return k == 0 ? "omega" : "a"; }
  static long double parameter(const RotationJordanBlock<M, S>& b, int k) {
    return k == 0 ? b.omega() : static_cast<long double>(b.a());
  }
  static RotationJordanBlock<M, S> with_parameters(const RotationJordanBlock<M, S>&,
                                                   const long double* theta) {
    return RotationJordanBlock<M, S>(theta[0], real_t<S>(theta[1]));
  }
  static constexpr int degree = M - 1;
  static double rate(const RotationJordanBlock<M, S>& b) { return std::abs(double(b.a())); }
  static void factors(const RotationJordanBlock<M, S>& b, double d, double& g, double* P) {
    const auto pr = b.params();
    const double wh = double(pr[0]), wl = double(pr[1]);
    double s, c;
    detail::angles_sincos(&wh, &wl, d, 1, &s, &c);
    g = std::exp(double(b.a()) * d);
    double p[M];
    detail::taylor_row(d, M, p);
    constexpr int D = 2 * M;
    for (int i = 0; i < D * D; ++i) P[i] = 0;
    for (int i = 0; i < M; ++i)
      for (int j = i; j < M; ++j) {
        const double f = p[j - i];
        P[(2 * i) * D + 2 * j] = f * c;
        P[(2 * i) * D + 2 * j + 1] = f * s;
        P[(2 * i + 1) * D + 2 * j] = -f * s;
        P[(2 * i + 1) * D + 2 * j + 1] = f * c;
      }
  }
};

}  // namespace peal
