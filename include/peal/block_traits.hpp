// peal::block_traits<B>: the facts a batch kernel needs about a fixed-size block type B
// (A(τ) = exp(τX) with X of size dim x dim), stated once beside the block, in the spirit of
// manif's `*_properties` (docs/design.md, "Adding a block type"). The fused scores kernel
// (scores.hpp, detail/coders/coders.hpp) reads only these traits: a block type with a
// specialisation, alone or in a Bank<B>, gets the tabulated fast path and table caching; a
// type without one still works through the dense fallback (its apply(v, τ, transpose) per
// row, rate and degree from its generator), never cached.
//
// A specialisation `template <...> struct peal::block_traits<B> { ... };` has these members:
//
//   static constexpr int dim;
//       coordinates of one block (B::Dim): A(δ) is dim x dim.
//   static double rate(const B& b);
//       max |Re λ| over the eigenvalues λ of X: |A(δ)| grows at most like e^{rate |δ|} (times
//       the polynomial below). The tile plan keeps rate · h below its limit.
//   static constexpr int degree;   or   static int degree(const B& b);
//       the longest Jordan chain of X minus 1 (0 for a diagonalisable X): the degree of the
//       polynomial factor of A(δ). The tile plan keeps (1 + 4h)^degree below its limit.
//   static void factors(const B& b, double delta, double& g, double* P);
//       A(delta) = g P in double: g >= 0 the magnitude (e^{Re λ δ}, may be +inf or 0),
//       P the dim x dim shape, row-major (P[i dim + j] = entry (i, j)), bounded by the
//       polynomial factor. Kept apart so that composing a huge and a tiny factor multiplies
//       the magnitudes first (clamped) and never forms inf · 0.
//   static void signature(const B& b, std::vector<double>& sig);
//       appends every parameter that A(δ) depends on (exactly, as doubles): two blocks of the
//       same type with equal signatures have equal A(δ). Tables are reused across calls when
//       the signatures (and the block type, which the kernel adds) are equal.
//   static constexpr bool per_pair_polynomial;
//       true only if A(τ) = e^{λτ} Σ_{j<dim} τ^j N^j / j! exactly, N the ones on the first
//       superdiagonal (a real Jordan chain, dim >= 2): scores then evaluates this part per
//       pair (detail/coders/poly_parts.hpp) when it is a top-level part of a composition, instead
//       of through the tiled product, whose polynomial terms cancel. Such traits also give
//         static double lambda(const B& b);   the eigenvalue λ.
//
// For gradients (docs/gradients.md), the trainable parameters θ of the block, optional (a block
// without them runs every forward kernel, and has no parameters.hpp / derivatives.hpp /
// encode_backward.hpp):
//   static constexpr int n_parameters;
//   static const char* parameter_name(int k);          "omega", "a", "lambda", ...
//   static long double parameter(const B& b, int k);   θ_k, with all the bits the block keeps
//   static B with_parameters(const B& b, const long double* theta);
//       the block with θ = theta[0..n_parameters), validated as its constructor validates;
// and, in the class itself beside A(τ), `MatrixType dA(Real tau, int k) const`: ∂A(τ)/∂θ_k in
// closed form.
//
// A specialisation may derive from block_traits_base<B> (below) for what most blocks state
// the same way: dim = B::Dim, degree 0, no per-pair polynomial, and the signature from
// B::params(); it then writes rate and factors (and overrides what differs: the Jordan
// blocks state their degree). tests/toy_block.hpp defines a block of its own with every
// member written out, and the suites check its kernels against its long double twin
// (tests/test_block_protocol_suites.cpp): the template to copy.
#pragma once

#include <type_traits>
#include <vector>

namespace peal {

/// Batch-kernel facts of block type B (members above). Declared only: a type without a
/// specialisation has no traits and takes the dense fallback.
template <class B>
struct block_traits;

/// Defaults a specialisation may derive from. signature: every entry of b.params(), the
/// parameters a block is rebuilt from (B::from_params), so A(δ) depends on nothing else.
template <class B>
struct block_traits_base {
  static constexpr int dim = B::Dim;
  static constexpr int degree = 0;
  static constexpr bool per_pair_polynomial = false;
  static void signature(const B& b, std::vector<double>& sig) {
    for (auto p : b.params()) sig.push_back(double(p));
  }
};

namespace detail {

/// True when block_traits<B> is specialised (complete, with a dim).
template <class B, class = void>
struct has_block_traits : std::false_type {};
template <class B>
struct has_block_traits<B, std::void_t<decltype(block_traits<B>::dim)>> : std::true_type {};

/// block_traits<B>::degree, whether a constant or a function of the block.
template <class B>
int block_degree_of(const B& b) {
  using T = block_traits<B>;
  if constexpr (std::is_invocable<decltype(&T::degree), const B&>::value) {
    return T::degree(b);
  } else {
    (void)b;
    return T::degree;
  }
}

/// The parts a composition evaluates per pair: traits with per_pair_polynomial.
template <class B, class = void>
struct is_per_pair_polynomial : std::false_type {};
template <class B>
struct is_per_pair_polynomial<B, std::enable_if_t<block_traits<B>::per_pair_polynomial>>
    : std::true_type {};

/// p[j] = d^j / j! for j < m (the polynomial factor of a Jordan chain).
inline void taylor_row(double d, int m, double* p) {
  p[0] = 1;
  for (int j = 1; j < m; ++j) p[j] = p[j - 1] * d / double(j);
}

}  // namespace detail
}  // namespace peal
