// RealBlock{lambda}: a 1x1 generator X = [lambda], A(tau) = e^{lambda tau}.
// lambda < 0 is an exponential decay in distance, lambda > 0 a growth, lambda = 0 a
// constant (docs/design.md §1, block table).
#pragma once

#include <array>
#include <cmath>
#include <vector>

#include "block_traits.hpp"
#include "detail/math/exp_poly.hpp"
#include "encoding.hpp"

namespace peal {

template <class S = double>
class RealBlock : public Encoding<RealBlock<S>, S> {
 public:
  using Real = real_t<S>;
  static constexpr int Dim = 1;
  static constexpr int n_params = 1;
  using MatrixType = Eigen::Matrix<S, 1, 1>;
  using Params = std::array<Real, n_params>;

  explicit RealBlock(Real lambda) : lambda_(lambda) {
    detail::require_finite(lambda, "RealBlock", "lambda");
  }
  static RealBlock from_params(const Params& p) { return RealBlock(p[0]); }
  Params params() const { return {lambda_}; }

  Real lambda() const { return lambda_; }
  static constexpr int dim() { return Dim; }

  MatrixType generator() const { return MatrixType::Constant(S(lambda_)); }
  MatrixType A(Real tau) const {
    detail::require_finite(tau, "A", "tau");
    return MatrixType::Constant(S(std::exp(lambda_ * tau)));
  }

  /// v <- e^{lambda tau} v; past the range of S the product is still exact: 0 for v = 0,
  /// finite when representable, ±inf otherwise (detail::mul_exp).
  template <class V>
  void apply(V&& v, Real tau, bool /*transpose: A is 1x1*/) const {
    v(0) = S(detail::mul_exp(Real(v(0)), lambda_ * tau));
  }

  /// ∂A(τ)/∂λ = τ e^{λτ} (k = 0, the only parameter; docs/gradients.md §1).
  MatrixType dA(Real tau, int /*k*/) const {
    detail::require_finite(tau, "dA", "tau");
    return MatrixType::Constant(S(detail::mul_exp(tau, lambda_ * tau)));
  }

 private:
  Real lambda_;
};

// Batch-kernel facts (block_traits.hpp): A(δ) = e^{λδ} · [1]; one trainable parameter, λ.
template <class S>
struct block_traits<RealBlock<S>> : block_traits_base<RealBlock<S>> {
  static constexpr int n_parameters = 1;
  static const char* parameter_name(int) { return "lambda"; }
  static long double parameter(const RealBlock<S>& b, int) { return b.lambda(); }
  static RealBlock<S> with_parameters(const RealBlock<S>&, const long double* theta) {
    return RealBlock<S>(real_t<S>(theta[0]));
  }
  static double rate(const RealBlock<S>& b) { return std::abs(double(b.lambda())); }
  static void factors(const RealBlock<S>& b, double d, double& g, double* P) {
    g = std::exp(double(b.lambda()) * d);
    P[0] = 1;
  }
};

}  // namespace peal
