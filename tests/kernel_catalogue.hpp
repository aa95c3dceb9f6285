// Kernels that several test TUs run with the same template arguments, declared `extern` here
// and instantiated once, in tests/kernels/catalogue.cpp (as include/peal/compiled.hpp does for a
// user's build): without this, each TU that calls them compiles its own copy of the tile driver
// (docs/build-cost.md §3). The list is an optimisation, never a restriction: a call with other
// template arguments compiles where it is made. Include this header before the first call.
//   run_attention over PassThrough<double>: attention's second stage for keys already encoded
//     (AttentionOptions::keys_encoded), one per storage combination the conformance suite uses
//     (it was compiled in every tests/kernels/conformance_*.cpp, 27 copies);
//   run_linear of a rotation bank (xPos, RetNet) in float and double: the linear suites, the
//     RetNet and LinearState tests and the memory tests.
#pragma once

#include <peal/attention.hpp>
#include <peal/bank.hpp>
#include <peal/linear_attention.hpp>
#include <peal/rotation_block.hpp>

#define PEAL_TEST_ENCODED_ATTENTION(EXT, C, Tk, Tv, To)                                        \
  EXT template void                                                                           \
  peal::detail::scores_kernels::run_attention<C, peal::PassThrough<double>, const C, const Tk, \
                                              const Tv, To>(                                   \
      const peal::PassThrough<double>&, const peal::TensorView<const C>&, const peal::Positions&, \
      const peal::TensorView<const Tk>&, const peal::Positions&,                               \
      const peal::TensorView<const Tv>&, const peal::TensorView<To>&,                           \
      const peal::ScoreOptions&, const peal::detail::scores_kernels::SoftmaxOptions&, double*);
#define PEAL_TEST_LINEAR(EXT, C, E, T)                                                         \
  EXT template void peal::detail::linear::run_linear<C, E, const T, const T, const T, T>(      \
      const E&, const peal::TensorView<const T>&, const peal::Positions&,                      \
      const peal::TensorView<const T>&, const peal::Positions&,                                \
      const peal::TensorView<const T>&, const peal::TensorView<T>&,                             \
      const peal::LinearAttentionOptions&, peal::detail::linear::StateData<C>&, bool);

#define PEAL_TEST_CATALOGUE(EXT)                                                  \
  PEAL_TEST_ENCODED_ATTENTION(EXT, float, float, float, float)                    \
  PEAL_TEST_ENCODED_ATTENTION(EXT, float, Eigen::bfloat16, Eigen::half, double)   \
  PEAL_TEST_ENCODED_ATTENTION(EXT, double, double, double, double)                \
  PEAL_TEST_ENCODED_ATTENTION(EXT, double, double, double, float)                 \
  PEAL_TEST_LINEAR(EXT, float, peal::Bank<peal::RotationBlock<double>>, float)    \
  PEAL_TEST_LINEAR(EXT, double, peal::Bank<peal::RotationBlock<double>>, double)

PEAL_TEST_CATALOGUE(extern)
