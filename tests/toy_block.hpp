// A block type that peal does not know, defined the way a user defines one (tests/
// test_block_protocol.cpp, docs/design.md §5 "Adding a block type"): its class, deriving from
// peal::Encoding as the built-in blocks do, and its peal::block_traits specialisation, nothing
// else. Its families run the suites every built-in block runs (conformance, properties, linear
// attention), so "no edit to the kernels" is checked with no edit to the suites either: the
// suites read what they need of a type they have no overload for from its long double
// generator (tests/generator_facts.hpp).
#pragma once

#include <array>
#include <cmath>
#include <vector>

#include <peal/peal.hpp>

#include "families.hpp"

namespace toy {

/// ScaledRotation{a, w}: X = [[a, w], [−w, a]], A(τ) = e^{aτ} R(−wτ) = e^{aτ} [[c, s], [−s, c]],
/// (c, s) = (cos wτ, sin wτ). Its own parameter layout (a first, one frequency) and its own
/// angle evaluation (wτ in long double), unknown to peal's kernels.
template <class S = double>
class ScaledRotation : public peal::Encoding<ScaledRotation<S>, S> {
 public:
  using Real = peal::real_t<S>;
  static constexpr int Dim = 2;
  static constexpr int n_params = 2;  // a, w
  using MatrixType = Eigen::Matrix<S, 2, 2>;
  using Params = std::array<Real, n_params>;

  ScaledRotation(Real a, Real w) : a_(a), w_(w) {}
  static ScaledRotation from_params(const Params& p) { return ScaledRotation(p[0], p[1]); }
  Params params() const { return {a_, w_}; }
  Real a() const { return a_; }
  Real w() const { return w_; }
  static constexpr int dim() { return Dim; }

  MatrixType generator() const {
    MatrixType x;
    x << S(a_), S(w_), S(-w_), S(a_);
    return x;
  }
  MatrixType A(Real tau) const {
    const long double th = (long double)w_ * tau, g = std::exp((long double)a_ * tau);
    const long double c = std::cos(th), s = std::sin(th);
    MatrixType m;
    m << S(g * c), S(g * s), S(-g * s), S(g * c);
    return m;
  }
  template <class V>
  void apply(V&& v, Real tau, bool transpose) const {
    const MatrixType m = A(tau);
    const S x0 = v(0), x1 = v(1);
    v(0) = transpose ? m(0, 0) * x0 + m(1, 0) * x1 : m(0, 0) * x0 + m(0, 1) * x1;
    v(1) = transpose ? m(0, 1) * x0 + m(1, 1) * x1 : m(1, 0) * x0 + m(1, 1) * x1;
  }
  /// ∂A(τ)/∂a = τ A(τ) (k = 0); ∂A(τ)/∂w = τ J A(τ), J = [[0, 1], [−1, 0]] (k = 1).
  MatrixType dA(Real tau, int k) const {
    const MatrixType m = A(tau);
    if (k == 0) return MatrixType(m * S(tau));
    MatrixType j;
    j << S(0), S(1), S(-1), S(0);
    return MatrixType(j * m * S(tau));
  }

 private:
  Real a_, w_;
};

/// The same block without traits: peal takes the per-row fallback.
struct Untraited : ScaledRotation<double> {
  using ScaledRotation<double>::ScaledRotation;
  static Untraited from_params(const Params& p) { return Untraited(p[0], p[1]); }
};

}  // namespace toy

// The block's batch-kernel facts, beside it (block_traits.hpp).
template <class S>
struct peal::block_traits<toy::ScaledRotation<S>> {
  using B = toy::ScaledRotation<S>;
  static constexpr int dim = 2;
  static constexpr int degree = 0;
  static constexpr bool per_pair_polynomial = false;
  static double rate(const B& b) { return std::abs(double(b.a())); }
  static void factors(const B& b, double d, double& g, double* P) {
    const long double th = (long double)b.w() * d;
    g = std::exp(double(b.a()) * d);
    const double c = double(std::cos(th)), s = double(std::sin(th));
    P[0] = c, P[1] = s, P[2] = -s, P[3] = c;
  }
  static void signature(const B& b, std::vector<double>& sig) {
    sig.push_back(double(b.a()));
    sig.push_back(double(b.w()));
  }
  // Its trainable parameters (parameters.hpp), in its own order: a, then w.
  static constexpr int n_parameters = 2;
  static const char* parameter_name(int k) { return k == 0 ? "a" : "w"; }
  static long double parameter(const B& b, int k) { return k == 0 ? b.a() : b.w(); }
  static B with_parameters(const B&, const long double* th) {
    return B(peal::real_t<S>(th[0]), peal::real_t<S>(th[1]));
  }
};

namespace peal_test {

/// The toy block alone: ScaledRotation{a, w} with a real part and a frequency drawn as
/// RotationFam draws its own (Draw::real, Draw::omega).
struct ToyFam {
  static constexpr const char* name = "toy";
  template <class S>
  static auto build(Draw& d) {
    const double w = d.omega();
    return toy::ScaledRotation<S>(peal::real_t<S>(d.real()), peal::real_t<S>(w));
  }
};
/// The toy block in a half-split Bank, composed with a bank of peal's rotations, pass-through
/// coordinates and the toy block alone.
struct ToyMixFam {
  static constexpr const char* name = "toy mix";
  template <class S>
  static auto build(Draw& d) {  // one draw per statement: the twins draw in the same order
    auto bank = BankFam<ToyFam, peal::Layout::HalfSplit, 3>::build<S>(d);
    auto rope = BankFam<RotationFam, peal::Layout::Interleaved, 2>::build<S>(d);
    auto lone = ToyFam::build<S>(d);
    return peal::compose(bank, rope, peal::PassThrough<S>(1), lone);
  }
};

}  // namespace peal_test
