// Options of peal::scores() (scores.hpp); the fused kernels' driver (detail/tiled/tile_run.hpp)
// reads them too.
#pragma once

#include <vector>

#include "view.hpp"

namespace peal {

/// Options of scores(). Aggregate: ScoreOptions{causal, scale, alibi_slopes, decay, threads}.
struct ScoreOptions {
  /// Mask every key with s_j > t_i to −∞ (tiles entirely in the future are not computed).
  bool causal = false;
  /// Multiplies q^T A k (e.g. 1/sqrt(d)); ALiBi is added after scaling.
  double scale = 1.0;
  /// ALiBi slopes m_h, one per query head (empty: none); adds −m_h (t_i − s_j).
  std::vector<double> alibi_slopes;
  /// Scalar decays γ_h ∈ (0, 1], one per query head (empty: none); multiplies by γ_h^(t_i − s_j).
  std::vector<double> decay;
  /// Number of threads with OpenMP (0: omp_get_max_threads()); ignored without OpenMP.
  int threads = 0;
  /// Tile sizes in tokens (0: automatic, TQ = clamp(128 KiB / (d sizeof C), 16, 256) queries
  /// × TK = clamp(256 KiB / (d sizeof C), 32, 512) keys, C the arithmetic type: 256 × 512 for
  /// d ≤ 128 in float, 128 × 256 at d = 128 in double). Mostly for tests/tuning; < 0 throws.
  Index query_tile = 0;
  Index key_tile = 0;
};

}  // namespace peal
