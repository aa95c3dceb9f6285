// JordanBlock<M>{lambda}: generator X = lambda I + N (N: ones on the superdiagonal),
//   A(tau) = e^{lambda tau} sum_{j<M} tau^j N^j / j!,
// upper-triangular Toeplitz with entry (i, i+j) = e^{lambda tau} tau^j / j!. Scores are
// polynomials of degree M-1 in the distance (times e^{lambda tau}); JordanBlock<2>{0}
// with A = [[1, tau], [0, 1]] is the constant-velocity "puck" and, with two fixed extra
// components, ALiBi (docs/design.md §1).
#pragma once

#include <array>
#include <cmath>
#include <vector>

#include "block_traits.hpp"
#include "detail/math/exp_poly.hpp"
#include "encoding.hpp"

namespace peal {

template <int M, class S = double>
class JordanBlock : public Encoding<JordanBlock<M, S>, S> {
  static_assert(M >= 1, "peal: a JordanBlock has size M >= 1");

 public:
  using Real = real_t<S>;
  static constexpr int Dim = M;
  static constexpr int n_params = 1;
  using MatrixType = Eigen::Matrix<S, M, M>;
  using Params = std::array<Real, n_params>;

  explicit JordanBlock(Real lambda) : lambda_(lambda) {
    detail::require_finite(lambda, "JordanBlock", "lambda");
  }
  static JordanBlock from_params(const Params& p) { return JordanBlock(p[0]); }
  Params params() const { return {lambda_}; }

  Real lambda() const { return lambda_; }
  static constexpr int dim() { return Dim; }

  MatrixType generator() const {
    MatrixType x = MatrixType::Zero();
    for (int i = 0; i < M; ++i) x(i, i) = S(lambda_);
    for (int i = 0; i + 1 < M; ++i) x(i, i + 1) = S(1);
    return x;
  }

  MatrixType A(Real tau) const {
    detail::require_finite(tau, "A", "tau");
    Real c[M];
    detail::exp_poly_coefficients(lambda_, tau, M, c);
    MatrixType m = MatrixType::Zero();
    for (int i = 0; i < M; ++i)
      for (int j = i; j < M; ++j) m(i, j) = S(c[j - i]);
    return m;
  }

  template <class V>
  void apply(V&& v, Real tau, bool transpose) const {
    Real cr[M];
    detail::exp_poly_coefficients(lambda_, tau, M, cr);
    S c[M], x[M], y[M];
    bool usual = true;  // every coefficient a normal number of S (or an exact zero)
    for (int j = 0; j < M; ++j) {
      c[j] = S(cr[j]), x[j] = v(j);
      usual = usual && (std::isnormal(c[j]) || (c[j] == 0 && tau == 0 && j > 0));
    }
    bool finite = true;
    for (int i = 0; i < M; ++i) {
      S acc = 0;
      if (transpose) {  // (A^T x)_i = sum_{j<=i} c_{i-j} x_j
        for (int j = 0; j <= i; ++j) acc += c[i - j] * x[j];
      } else {  // (A x)_i = sum_{j>=i} c_{j-i} x_j
        for (int j = i; j < M; ++j) acc += c[j - i] * x[j];
      }
      y[i] = acc;
      finite = finite && std::isfinite(acc);
    }
    if (!(usual && finite)) past_range(x, tau, transpose, y);
    for (int i = 0; i < M; ++i) v(i) = y[i];
  }

  /// ∂A(τ)/∂λ = τ A(τ) (k = 0, the only parameter: ∂X/∂λ = I; docs/gradients.md §2).
  MatrixType dA(Real tau, int /*k*/) const {
    detail::require_finite(tau, "dA", "tau");
    Real c[M];
    detail::exp_poly_coefficients(lambda_, tau, M, c);
    MatrixType m = MatrixType::Zero();
    for (int i = 0; i < M; ++i)
      for (int j = i; j < M; ++j) m(i, j) = S(tau * c[j - i]);
    return m;
  }

 private:
  // A coefficient beyond the range of S (or below it), or a result that overflowed: every
  // term in scaled form, c_d x_j = (f_d x_j)·2^{e_d} (detail/math/exp_poly.hpp), summed without
  // intermediate overflow and rounded once to S. Zero components contribute exactly 0.
  void past_range(const S* x, Real tau, bool transpose, S* y) const {
    for (int j = 0; j < M; ++j)
      if (!std::isfinite(x[j])) return;  // non-finite input: IEEE arithmetic as computed
    Real f[M], m[M];
    long e[M], me[M];
    detail::exp_poly_scaled(lambda_, tau, M, f, e);
    for (int i = 0; i < M; ++i) {
      int n = 0;
      for (int j = 0; j < M; ++j) {
        const int d = transpose ? i - j : j - i;
        if (d < 0) continue;
        m[n] = f[d] * Real(x[j]), me[n] = e[d], ++n;
      }
      y[i] = S(detail::ldexp_sum(m, me, n));
    }
  }

  Real lambda_;
};

// Batch-kernel facts (block_traits.hpp): A(δ) = e^{λδ} P, P_{i,j} = δ^{j−i}/(j−i)! for
// j >= i, a real Jordan chain; M >= 2 is evaluated per pair in compositions.
template <int M, class S>
struct block_traits<JordanBlock<M, S>> : block_traits_base<JordanBlock<M, S>> {
  static constexpr int n_parameters = 1;  // λ
  static const char* parameter_name(int) { return "lambda"; }
  static long double parameter(const JordanBlock<M, S>& b, int) { return b.lambda(); }
  static JordanBlock<M, S> with_parameters(const JordanBlock<M, S>&, const long double* theta) {
    return JordanBlock<M, S>(real_t<S>(theta[0]));
  }
  static constexpr int degree = M - 1;
  static constexpr bool per_pair_polynomial = M >= 2;
  static double rate(const JordanBlock<M, S>& b) { return std::abs(double(b.lambda())); }
  static double lambda(const JordanBlock<M, S>& b) { return double(b.lambda()); }
  static void factors(const JordanBlock<M, S>& b, double d, double& g, double* P) {
    g = std::exp(double(b.lambda()) * d);
    double p[M];
    detail::taylor_row(d, M, p);
    for (int i = 0; i < M; ++i)
      for (int j = 0; j < M; ++j) P[i * M + j] = j >= i ? p[j - i] : 0.0;
  }
};

}  // namespace peal
