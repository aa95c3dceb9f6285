// peal's compiled mode: the kernels of the presets users run, explicitly instantiated once in
// the static library peal::compiled (src/compiled_*.cpp; CMake option PEAL_BUILD_COMPILED), and
// declared `extern template` here for a TU built with PEAL_COMPILED defined (the target defines
// it for whatever links it), so that such a TU compiles its calls and checks, not the kernels.
// Without PEAL_COMPILED this header declares nothing: header-only is the default, and both modes
// run the same code (tests/compiled/ checks them bitwise equal; docs/build-cost.md §3).
//
// What is compiled, for every storage T of float, double, Eigen::half and Eigen::bfloat16 with
// its arithmetic C (double for double, float otherwise), inputs read-only (detail::ro: a
// writable input view runs the same instance) and outputs of T:
//   encodings: RopeEncoding<double> (every rope_type, both layouts, partial rotary),
//              Bank<RotationBlock<double>> (xPos, RetNet's rotation, rotation banks),
//              PassThrough<double> (no encoding: ALiBi by slopes, keys already encoded, and
//              the second stage of N-D attention), MRopeEncoding<double> (N-D encode);
//   kernels:   encode_queries / encode_keys / shift_keys (in and out of place, also into C),
//              scores (out of C), attention (and its keys_encoded path), linear_attention
//              without a state (Bank<RotationBlock<double>> and PassThrough<double>).
// and, once per arithmetic (float, double), the small products every tiled kernel reaches.
// Any other call (another encoding, mixed storages, a LinearState) compiles in the user's TU
// as in header-only mode: the list below is an optimisation, never a restriction.
#pragma once

#include "attention.hpp"
#include "bank.hpp"
#include "encode.hpp"
#include "linear_attention.hpp"
#include "presets/mrope.hpp"
#include "presets/rope.hpp"
#include "rotation_block.hpp"
#include "scores.hpp"
#include "scores_nd.hpp"

// ---- One declaration (EXT = extern) or definition (EXT empty) per kernel ------------------
#define PEAL_COMPILED_ENCODE(EXT, E, TS, TD, POS)                                            \
  EXT template void peal::detail::encode_kernels::run<E, const TS, TD, POS>(                \
      const E&, peal::detail::encode_kernels::Mode, const peal::TensorView<const TS>&,        \
      const peal::TensorView<TD>&, const POS&);
#define PEAL_COMPILED_SCORES(EXT, C, E, T)                                                   \
  EXT template void peal::detail::tiled::run_scores<C, E, const T, const T, C>(     \
      const E&, const peal::TensorView<const T>&, const peal::Positions&,                    \
      const peal::TensorView<const T>&, const peal::Positions&, const peal::TensorView<C>&,   \
      const peal::ScoreOptions&);
#define PEAL_COMPILED_ATTENTION(EXT, C, E, Tq, Tk, Tv)                                       \
  EXT template void                                                                         \
  peal::detail::tiled::run_attention<C, E, const Tq, const Tk, const Tv, Tv>(       \
      const E&, const peal::TensorView<const Tq>&, const peal::Positions&,                   \
      const peal::TensorView<const Tk>&, const peal::Positions&,                             \
      const peal::TensorView<const Tv>&, const peal::TensorView<Tv>&,                         \
      const peal::ScoreOptions&, const peal::detail::tiled::SoftmaxOptions&, double*);
#define PEAL_COMPILED_LINEAR(EXT, C, E, T)                                                   \
  EXT template void peal::detail::linear::run_linear<C, E, const T, const T, const T, T>(    \
      const E&, const peal::TensorView<const T>&, const peal::Positions&,                    \
      const peal::TensorView<const T>&, const peal::Positions&,                              \
      const peal::TensorView<const T>&, const peal::TensorView<T>&,                           \
      const peal::LinearAttentionOptions&, peal::detail::linear::StateData<C>&, bool);

// ---- The kernels of one 1-D encoding E for storage T (arithmetic C) ------------------------
#define PEAL_COMPILED_ONE_D(EXT, E, T, C)            \
  PEAL_COMPILED_ENCODE(EXT, E, T, T, peal::Positions) \
  PEAL_COMPILED_SCORES(EXT, C, E, T)                  \
  PEAL_COMPILED_ATTENTION(EXT, C, E, T, T, T)

// ---- Everything for storage T whose arithmetic C is T (float, double) ----------------------
#define PEAL_COMPILED_STORAGE(EXT, T, C)                                               \
  PEAL_COMPILED_ONE_D(EXT, peal::RopeEncoding<double>, T, C)                           \
  PEAL_COMPILED_ONE_D(EXT, peal::Bank<peal::RotationBlock<double>>, T, C)              \
  PEAL_COMPILED_ONE_D(EXT, peal::PassThrough<double>, T, C)                            \
  PEAL_COMPILED_ENCODE(EXT, peal::MRopeEncoding<double>, T, T, peal::PositionsND)      \
  PEAL_COMPILED_LINEAR(EXT, C, peal::Bank<peal::RotationBlock<double>>, T)             \
  PEAL_COMPILED_LINEAR(EXT, C, peal::PassThrough<double>, T)

// ---- A storage-only type T (Eigen::half, Eigen::bfloat16; C = float): also the kernels its
// calls reach through buffers of C (keys_encoded: queries encoded into C; N-D: q and k) ------
#define PEAL_COMPILED_HALF_STORAGE(EXT, T, C)                                                  \
  PEAL_COMPILED_STORAGE(EXT, T, C)                                                             \
  PEAL_COMPILED_ENCODE(EXT, peal::RopeEncoding<double>, T, C, peal::Positions)                 \
  PEAL_COMPILED_ENCODE(EXT, peal::Bank<peal::RotationBlock<double>>, T, C, peal::Positions)    \
  PEAL_COMPILED_ENCODE(EXT, peal::MRopeEncoding<double>, T, C, peal::PositionsND)              \
  PEAL_COMPILED_ATTENTION(EXT, C, peal::PassThrough<double>, C, T, T)                          \
  PEAL_COMPILED_ATTENTION(EXT, C, peal::PassThrough<double>, C, C, T)

// ---- The products of at most kSmallRows rows (detail/small_products.hpp) every tiled kernel of
// arithmetic C reaches (once per C: src/compiled_float.cpp and src/compiled_double.cpp) -------
#define PEAL_COMPILED_SMALL_PRODUCTS(EXT, C)                                                       \
  EXT template void peal::detail::eigen_gemm::small::abt<C>(peal::Index, peal::Index, peal::Index, \
                                                            const C*, peal::Index, const C*,       \
                                                            peal::Index, C*, peal::Index,          \
                                                            peal::Index, C);                       \
  EXT template void peal::detail::eigen_gemm::small::ab<C>(peal::Index, peal::Index, peal::Index,  \
                                                           const C*, peal::Index, const C*,        \
                                                           peal::Index, C*, peal::Index, C);

#if defined(PEAL_COMPILED) && !defined(PEAL_COMPILED_SOURCE)
PEAL_COMPILED_SMALL_PRODUCTS(extern, float)
PEAL_COMPILED_SMALL_PRODUCTS(extern, double)
PEAL_COMPILED_STORAGE(extern, float, float)
PEAL_COMPILED_STORAGE(extern, double, double)
PEAL_COMPILED_HALF_STORAGE(extern, Eigen::half, float)
PEAL_COMPILED_HALF_STORAGE(extern, Eigen::bfloat16, float)
#endif
