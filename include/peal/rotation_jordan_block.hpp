// RotationJordanBlock<M>{omega, a}: the real Jordan block of the complex pair a +- i omega,
// size 2M. Generator: C = [[a, omega], [-omega, a]] on the block diagonal, I_2 on the block
// superdiagonal. Since X = I_M (x) C + N (x) I_2 with commuting terms,
//   A(tau) = (e^{N tau} (x) I_2)(I_M (x) e^{C tau}),
// block (i, i+j) = tau^j / j! * e^{a tau} R(-omega tau) (docs/design.md §1). Angles use the
// exact reduction of RotationBlock, magnitudes the stable coefficients of JordanBlock.
#pragma once

#include <array>

#include "detail/exp_poly.hpp"
#include "rotation_block.hpp"

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
    detail::split_frequency_checked(omega, omega_hi_, omega_lo_, "RotationJordanBlock");
  }
  /// From params() of a block: (omega_hi, omega_lo) must be finite and normalised.
  static RotationJordanBlock from_params(const Params& p) {
    RotationJordanBlock b(0.0L, p[2]);
    detail::require_normalised_frequency(p[0], p[1], "RotationJordanBlock");
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
    Real c[M], s, co;
    detail::exp_poly_coefficients(a_, tau, M, c);
    detail::sincos_of_angle(omega_hi_, omega_lo_, tau, s, co);
    MatrixType m = MatrixType::Zero();
    for (int i = 0; i < M; ++i)
      for (int j = i; j < M; ++j) {
        const Real g = c[j - i];
        m(2 * i, 2 * j) = S(g * co);
        m(2 * i, 2 * j + 1) = S(g * s);
        m(2 * i + 1, 2 * j) = S(-g * s);
        m(2 * i + 1, 2 * j + 1) = S(g * co);
      }
    return m;
  }

  template <class V>
  void apply(V&& v, Real tau, bool transpose) const {
    const MatrixType a = A(tau);
    Eigen::Matrix<S, Dim, 1> x;
    for (int i = 0; i < Dim; ++i) x(i) = v(i);
    if (transpose)
      x = (a.transpose() * x).eval();
    else
      x = (a * x).eval();
    for (int i = 0; i < Dim; ++i) v(i) = x(i);
  }

 private:
  Real omega_hi_ = 0, omega_lo_ = 0, a_ = 0;
};

}  // namespace peal
