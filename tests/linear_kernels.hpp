// peal::linear_attention over the type-erased buffers of the linear-attention tests
// (linear_suite.hpp): run_linear<Full, E> dispatches on the storage types of q, k, v and out.
// Kept apart from the suite (no Catch2, no reference) so that the kernels of every family's
// encoding type are instantiated once, in tests/kernels/linear_*.cpp (PEAL_LINEAR_KERNELS),
// while the suites declare them extern (PEAL_LINEAR_EXTERN_ALL) and compile test logic only.
#pragma once

#include <peal/linear_attention.hpp>
#include <stdexcept>

#include "conformance_kernels.hpp"

namespace peal_test {
namespace linear {

using conformance::Buffer;
using conformance::Storage;
using conformance::typed;
using peal::LinearAttentionOptions;
using peal::Positions;

// ---- Running the kernel over type-erased buffers -------------------------------------------------
/// linear_attention on buffers of the storage quads the tests instantiate: every storage in its
/// own arithmetic (float/float/float/float, double/.../double), half and bfloat16 inputs with float
/// and double outputs, and float inputs with a double output (Full); (float, double) only otherwise.
template <bool Full, class E>
void run_linear(const E& enc, const Buffer& q, const Positions& tq, const Buffer& k,
                const Positions& tk, const Buffer& v, Buffer& out, const LinearAttentionOptions& opt) {
  using S = Storage;
  auto is = [&](S a, S b, S c, S e) {
    return q.type() == a && k.type() == b && v.type() == c && out.type() == e;
  };
  auto go = [&](auto tq_, auto tk_, auto tv_, auto to_) {
    using Tq = decltype(tq_);
    using Tk = decltype(tk_);
    using Tv = decltype(tv_);
    using To = decltype(to_);
    peal::linear_attention(enc, typed<const Tq>(q.view()), tq, typed<const Tk>(k.view()), tk,
                           typed<const Tv>(v.view()), typed<To>(out.view()), opt);
  };
  if (is(S::f32, S::f32, S::f32, S::f32)) return go(float(), float(), float(), float());
  if (is(S::f64, S::f64, S::f64, S::f64)) return go(double(), double(), double(), double());
  if constexpr (Full) {
    if (is(S::f16, S::bf16, S::f16, S::f32))
      return go(Eigen::half(), Eigen::bfloat16(), Eigen::half(), float());
    if (is(S::bf16, S::f16, S::bf16, S::f64))
      return go(Eigen::bfloat16(), Eigen::half(), Eigen::bfloat16(), double());
    if (is(S::f32, S::f32, S::f32, S::f64)) return go(float(), float(), float(), double());
  }
  throw std::logic_error("run_linear: storage combination not instantiated");
}

}  // namespace linear
}  // namespace peal_test

// run_linear<Full, E> for the encoding type of family Fam (as PEAL_CONFORMANCE_KERNELS).
#define PEAL_LINEAR_KERNELS(FULL, ...) PEAL_LINEAR_KERNELS_WITH(, FULL, __VA_ARGS__)
#define PEAL_LINEAR_KERNELS_EXTERN(FULL, ...) PEAL_LINEAR_KERNELS_WITH(extern, FULL, __VA_ARGS__)
#define PEAL_LINEAR_KERNELS_WITH(EXTERN, FULL, ...)                                           \
  EXTERN template void peal_test::linear::run_linear<FULL>(                                  \
      const peal_test::conformance::encoding_t<__VA_ARGS__, double>&,                       \
      const peal_test::conformance::Buffer&, const peal::Positions&,                         \
      const peal_test::conformance::Buffer&, const peal::Positions&,                         \
      const peal_test::conformance::Buffer&, peal_test::conformance::Buffer&,                \
      const peal::LinearAttentionOptions&)

// The encoding types the linear suites run (test_linear_families.cpp,
// test_linear_compositions.cpp, test_linear_attention.cpp), by one family each.
#define PEAL_LINEAR_EXTERN_ALL()                                                               \
  PEAL_LINEAR_KERNELS_EXTERN(false, peal_test::MixedFam);                                   \
  PEAL_LINEAR_KERNELS_EXTERN(true, peal_test::MixedFam);                                    \
  PEAL_LINEAR_KERNELS_EXTERN(false, peal_test::NestedFam);                                  \
  PEAL_LINEAR_KERNELS_EXTERN(false, peal_test::BasisChangeFam);                             \
  PEAL_LINEAR_KERNELS_EXTERN(false, peal_test::AlibiFam);                                   \
  PEAL_LINEAR_KERNELS_EXTERN(false, peal_test::RopeFam<peal::RopeType::Default, peal::Layout::HalfSplit, 64>); \
  PEAL_LINEAR_KERNELS_EXTERN(true, peal_test::RopeFam<peal::RopeType::Default, peal::Layout::HalfSplit, 64>);  \
  PEAL_LINEAR_KERNELS_EXTERN(false, peal_test::BankFam<peal_test::RotationFam, peal::Layout::Interleaved>);     \
  PEAL_LINEAR_KERNELS_EXTERN(false, peal_test::BankFam<peal_test::RealFam, peal::Layout::Interleaved>);         \
  PEAL_LINEAR_KERNELS_EXTERN(false, peal_test::BankFam<peal_test::JordanFam<3>, peal::Layout::Interleaved>);    \
  PEAL_LINEAR_KERNELS_EXTERN(false, peal_test::BankFam<peal_test::RotationJordanFam<2>, peal::Layout::Interleaved>)
