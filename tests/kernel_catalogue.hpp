// Kernels that several test TUs run with the same template arguments, declared `extern` here
// and instantiated once, in tests/kernels/catalogue_*.cpp (as include/peal/compiled.hpp does for
// a user's build): without this, each TU that calls one compiles its own copy of the tile driver
// (docs/build-cost.md §3). The list is an optimisation, never a restriction: a call with other
// template arguments compiles where it is made. Include this header before the first call.
// Chosen from the build (`nm` over peal_tests' objects: the kernels defined in several):
//   attention over PassThrough<double>: its second stage for keys already encoded
//     (AttentionOptions::keys_encoded), once in every tests/kernels/conformance_*.cpp before;
//   scores and attention of the banks and presets the direct tests share with the suites
//     (test_scores*.cpp, test_attention.cpp, test_rope.cpp, test_alibi.cpp, ...);
//   linear attention of a rotation bank (xPos, RetNet), of RoPE and of the mixed composition
//     (the linear suites, test_linear_state.cpp, test_linear_retnet.cpp, test_scores_memory.cpp).
#pragma once

#include <peal/attention.hpp>
#include <peal/bank.hpp>
#include <peal/compiled.hpp>  // PEAL_COMPILED_LINEAR (declares nothing without PEAL_COMPILED)
#include <peal/linear_attention.hpp>
#include <peal/presets/rope.hpp>
#include <peal/rotation_block.hpp>
#include <peal/scores.hpp>

#include "families.hpp"

// ---- One declaration (EXT = extern) or definition (EXT empty) per kernel -----------------------
// Inputs read-only (the public calls pass detail::ro views), all of storage T; output To.
// Linear attention: include/peal/compiled.hpp's PEAL_COMPILED_LINEAR, the same declaration.
#define PEAL_TEST_SCORES(EXT, C, E, T, To)                                                   \
  EXT template void peal::detail::tiled::run_scores<C, E, const T, const T, To>(    \
      const E&, const peal::TensorView<const T>&, const peal::Positions&,                    \
      const peal::TensorView<const T>&, const peal::Positions&, const peal::TensorView<To>&, \
      const peal::ScoreOptions&);
#define PEAL_TEST_ATTENTION(EXT, C, E, Tq, Tk, Tv, To)                                           \
  EXT template void                                                                              \
  peal::detail::tiled::run_attention<C, E, const Tq, const Tk, const Tv, To>(           \
      const E&, const peal::TensorView<const Tq>&, const peal::Positions&,                       \
      const peal::TensorView<const Tk>&, const peal::Positions&,                                 \
      const peal::TensorView<const Tv>&, const peal::TensorView<To>&, const peal::ScoreOptions&, \
      const peal::detail::tiled::SoftmaxOptions&, double*);
namespace peal_test {
namespace catalogue {
using RotBank = peal::Bank<peal::RotationBlock<double>>;
using RotBankF = peal::Bank<peal::RotationBlock<float>>;
using RealBank = peal::Bank<peal::RealBlock<double>>;
using Rope = peal::RopeEncoding<double>;
using RopeF = peal::RopeEncoding<float>;
using Id = peal::PassThrough<double>;
using RotJordan3 = peal::RotationJordanBlock<3, double>;
using Mixed = decltype(MixedFam::build<double>(std::declval<Draw&>()));
}  // namespace catalogue
}  // namespace peal_test

// tests/kernels/catalogue_scores.cpp
#define PEAL_TEST_CATALOGUE_SCORES(EXT)                                         \
  PEAL_TEST_SCORES(EXT, float, peal_test::catalogue::RotBank, float, float)     \
  PEAL_TEST_SCORES(EXT, float, peal_test::catalogue::RotBank, float, double)    \
  PEAL_TEST_SCORES(EXT, double, peal_test::catalogue::RotBank, double, float)   \
  PEAL_TEST_SCORES(EXT, double, peal_test::catalogue::RotBank, double, double)  \
  PEAL_TEST_SCORES(EXT, double, peal_test::catalogue::RealBank, double, double) \
  PEAL_TEST_SCORES(EXT, float, peal_test::catalogue::RotBankF, float, float)    \
  PEAL_TEST_SCORES(EXT, float, peal_test::catalogue::RotJordan3, float, float)  \
  PEAL_TEST_SCORES(EXT, float, peal_test::catalogue::Rope, float, float)        \
  PEAL_TEST_SCORES(EXT, double, peal_test::catalogue::Rope, double, double)     \
  PEAL_TEST_SCORES(EXT, float, peal_test::catalogue::RopeF, float, float)

// tests/kernels/catalogue_attention.cpp
#define PEAL_TEST_CATALOGUE_ATTENTION(EXT)                                                       \
  PEAL_TEST_ATTENTION(EXT, float, peal_test::catalogue::Id, float, float, float, float)          \
  PEAL_TEST_ATTENTION(EXT, float, peal_test::catalogue::Id, float, Eigen::bfloat16, Eigen::half, \
                      double)                                                                    \
  PEAL_TEST_ATTENTION(EXT, double, peal_test::catalogue::Id, double, double, double, double)     \
  PEAL_TEST_ATTENTION(EXT, double, peal_test::catalogue::Id, double, double, double, float)      \
  PEAL_TEST_ATTENTION(EXT, float, peal_test::catalogue::RotBank, float, float, float, float)     \
  PEAL_TEST_ATTENTION(EXT, float, peal_test::catalogue::RotBankF, float, float, float, float)    \
  PEAL_TEST_ATTENTION(EXT, float, peal_test::catalogue::Rope, float, float, float, float)        \
  PEAL_TEST_ATTENTION(EXT, float, peal::RealBlock<double>, float, float, float, float)

// tests/kernels/catalogue_linear.cpp
#define PEAL_TEST_CATALOGUE_LINEAR(EXT)                                    \
  PEAL_COMPILED_LINEAR(EXT, float, peal_test::catalogue::RotBank, float)   \
  PEAL_COMPILED_LINEAR(EXT, double, peal_test::catalogue::RotBank, double) \
  PEAL_COMPILED_LINEAR(EXT, float, peal_test::catalogue::Rope, float)      \
  PEAL_COMPILED_LINEAR(EXT, float, peal_test::catalogue::Mixed, float)

PEAL_TEST_CATALOGUE_SCORES(extern)
PEAL_TEST_CATALOGUE_ATTENTION(extern)
PEAL_TEST_CATALOGUE_LINEAR(extern)
