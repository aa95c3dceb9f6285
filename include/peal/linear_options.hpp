// Options of peal::linear_attention (linear_attention.hpp) and of the recurrent state
// peal::LinearState (linear_state.hpp), which must agree when a call continues a state.
#pragma once

#include <optional>
#include <vector>

#include "view.hpp"

namespace peal {

/// Which of the three equal forms computes linear_attention (docs/linear-attention.md §2).
enum class LinearForm {
  automatic,  ///< parallel for short sequences, chunkwise otherwise
  parallel,   ///< every visible pair, tiled like scores (no nq x nk matrix)
  chunkwise,  ///< pairs within a chunk, a d x dv state between chunks
  recurrent   ///< the state, token by token (what decoding does)
};

/// Normalisation of the output rows.
enum class LinearNorm {
  none,   ///< o_i = scale Σ_j γ^(t_i − s_j) (q_i^T A(t_i − s_j) k_j) v_j
  retnet  ///< RetNet's, as microsoft/torchscale applies it in the form used (docs/linear-attention.md §5)
};

/// Options of linear_attention() and LinearState.
struct LinearAttentionOptions {
  /// Multiplies q^T A k (empty: 1/sqrt(d)).
  std::optional<double> scale;
  /// Scalar decays γ_h ∈ (0, 1], one per query head (empty: none): A_h(τ) = γ_h^τ A(τ)
  /// (RetNet's per-head decay on a shared rotation).
  std::vector<double> decay;
  /// Keys per chunk of the chunkwise form (0: automatic, 64); < 0 throws. A chunk of at least
  /// the number of keys is one chunk: memory follows the keys, never this number.
  Index chunk = 0;
  LinearForm form = LinearForm::automatic;
  LinearNorm normalization = LinearNorm::none;
  /// Threads with OpenMP (0: omp_get_max_threads()); < 0 throws. Any larger count is
  /// accepted: a run starts at most the threads its work can use (one per key head in the
  /// chunkwise and recurrent forms, one per tile unit in the parallel form; never more than
  /// 1024, detail::linear::kMaxThreads). Results do not depend on it.
  int threads = 0;
};

}  // namespace peal
