// RoPE for vision transformers over 2-D patch positions (docs/positions-nd.md §2):
//
// * Axial (Heo et al. 2024, naver-ai/rope-vit, compute_axial_cis): interleaved pairs
//   (2j, 2j+1); pair j < d/4 rotates with x by ω_j = θ^(−4j/d), pair d/4 + j with y by the
//   same ω_j; θ = 100. Patch i of an end_x × end_y grid is at (x, y) = (i mod end_x,
//   ⌊i / end_x⌋) (init_t_xy): vit_grid_positions.
// * Mixed (rope-vit, init_random_2d_freqs / compute_mixed_cis): per head h and pair j the
//   angle is f_x x + f_y y, learnable; initialised with a random direction α_h per head as
//   f = |ω_j| (cos α_h, sin α_h) for j < d/4 and |ω_j| (cos(α_h + π/2), sin(α_h + π/2)) for
//   the rest, ω_j = θ^(−4j/d), θ = 10. The caller passes α_h (the code draws it uniformly in
//   [0, 2π)) or the learned frequencies.
// * DINOv3 (facebookresearch/dinov3 RopePositionEmbedding; transformers
//   models/dinov3_vit/modeling_dinov3_vit.py): half-split pairs (j, j + d/2); pair j < d/4
//   rotates with the patch centre's y, pair d/4 + j with its x, at ω_j = 2π / period_j,
//   period_j = base^(4j/d) (base 100), or min_period (max/min)^(j/(d/4 − 1)) when periods are
//   given; coordinates are real, in [−1, 1] (dinov3_patch_coordinates), and training
//   augments them (shift, jitter, rescale: passed as the sampled values).
//
// Prefix tokens (CLS, registers) are not rotated by these models; in the algebra that is
// the point 0 (A(0) = I), so give them position (0, 0) and they are exact.
// The frequencies are computed in long double (the reference code rounds to float32).
#pragma once

#include <cmath>
#include <optional>
#include <string>
#include <vector>

#include "../bank.hpp"
#include "../errors.hpp"
#include "../multi_axis.hpp"
#include "../per_head.hpp"
#include "../rotation_block.hpp"
#include "rope.hpp"

namespace peal {

namespace detail {
namespace vision {

inline void require_dim4(int head_dim, const char* what) {
  require_preset_head_dim(head_dim, what);
  if (head_dim % 4 != 0)
    fail(std::string(what) + ": head_dim must be a multiple of 4 (two axes of pairs), got " +
         std::to_string(head_dim));
}
inline void require_theta(double theta, const char* what) {
  if (!std::isfinite(theta) || !(theta > 1))
    fail(std::string(what) + ": theta must be finite and > 1, got " + std::to_string(theta));
}
// θ^(−4j/d), j < d/4 (rope-vit: 1 / θ^(arange(0, d, 4)[:d/4] / d)).
inline std::vector<long double> magnitudes(int head_dim, double theta) {
  std::vector<long double> m(std::size_t(head_dim / 4));
  for (int j = 0; j < head_dim / 4; ++j)
    m[std::size_t(j)] = std::pow(static_cast<long double>(theta), -4.0L * j / head_dim);
  return m;
}
// A 2-axis rotation bank from per-axis frequency lists (one entry per pair).
template <class S>
MultiAxis<Bank<RotationBlock<S>>> two_axes(const std::vector<long double>& fx,
                                           const std::vector<long double>& fy, Layout layout,
                                           const char* what) {
  std::vector<RotationBlock<S>> bx, by;
  for (std::size_t j = 0; j < fx.size(); ++j) {
    const long double w[2] = {fx[j], fy[j]};
    for (long double x : w)
      if (x != 0) require_preset_frequency(std::fabs(x), j, what);
    bx.emplace_back(fx[j]);
    by.emplace_back(fy[j]);
  }
  return MultiAxis<Bank<RotationBlock<S>>>(
      {Bank<RotationBlock<S>>(bx, layout), Bank<RotationBlock<S>>(by, layout)});
}

}  // namespace vision
}  // namespace detail

/// rope-vit's axial 2-D RoPE (axis 0 = x, axis 1 = y), interleaved pairs.
template <class S = double>
MultiAxis<Bank<RotationBlock<S>>> rope_axial_2d(int head_dim, double theta = 100.0) {
  namespace v = detail::vision;
  v::require_dim4(head_dim, "rope_axial_2d");
  v::require_theta(theta, "rope_axial_2d");
  const auto m = v::magnitudes(head_dim, theta);
  const std::size_t q = m.size();
  std::vector<long double> fx(2 * q, 0.0L), fy(2 * q, 0.0L);
  for (std::size_t j = 0; j < q; ++j) {
    fx[j] = m[j];
    fy[q + j] = m[j];
  }
  return v::two_axes<S>(fx, fy, Layout::Interleaved, "rope_axial_2d");
}

/// rope-vit's RoPE-Mixed from learned frequencies fx[h][j], fy[h][j] (heads × d/2 pairs),
/// interleaved pairs: head h, pair j rotates by fx x + fy y.
template <class S = double>
PerHead<MultiAxis<Bank<RotationBlock<S>>>> rope_mixed_2d_from_frequencies(
    const std::vector<std::vector<double>>& fx, const std::vector<std::vector<double>>& fy) {
  if (fx.empty() || fx.size() != fy.size())
    detail::fail("rope_mixed_2d: fx and fy must have the same number (> 0) of heads");
  std::vector<MultiAxis<Bank<RotationBlock<S>>>> heads;
  for (std::size_t h = 0; h < fx.size(); ++h) {
    if (fx[h].size() != fy[h].size() || fx[h].size() != fx[0].size() || fx[h].empty() ||
        int(fx[h].size()) > preset_max_head_dim / 2)
      detail::fail("rope_mixed_2d: head " + std::to_string(h) +
                   " must have as many (> 0) x and y frequencies as head 0");
    std::vector<long double> x(fx[h].begin(), fx[h].end()), y(fy[h].begin(), fy[h].end());
    for (std::size_t j = 0; j < x.size(); ++j)
      if (!std::isfinite(double(x[j])) || !std::isfinite(double(y[j])))
        detail::fail("rope_mixed_2d: frequencies must be finite (head " + std::to_string(h) +
                     ", pair " + std::to_string(j) + ")");
    heads.push_back(detail::vision::two_axes<S>(x, y, Layout::Interleaved, "rope_mixed_2d"));
  }
  return PerHead<MultiAxis<Bank<RotationBlock<S>>>>(std::move(heads));
}

/// rope-vit's RoPE-Mixed at its initialisation: one direction alpha[h] per head (the code
/// draws it in [0, 2π)); theta 10.
template <class S = double>
PerHead<MultiAxis<Bank<RotationBlock<S>>>> rope_mixed_2d(int head_dim,
                                                         const std::vector<double>& alpha,
                                                         double theta = 10.0) {
  namespace v = detail::vision;
  v::require_dim4(head_dim, "rope_mixed_2d");
  v::require_theta(theta, "rope_mixed_2d");
  if (alpha.empty()) detail::fail("rope_mixed_2d: one angle per head, got none");
  const auto m = v::magnitudes(head_dim, theta);
  const std::size_t q = m.size();
  const long double half_pi = std::acos(-1.0L) / 2;
  std::vector<MultiAxis<Bank<RotationBlock<S>>>> heads;
  for (std::size_t h = 0; h < alpha.size(); ++h) {
    detail::require_finite(alpha[h], "rope_mixed_2d", "alpha");
    const long double a = alpha[h];
    std::vector<long double> fx(2 * q), fy(2 * q);
    for (std::size_t j = 0; j < q; ++j) {
      fx[j] = m[j] * std::cos(a);
      fy[j] = m[j] * std::sin(a);
      fx[q + j] = m[j] * std::cos(half_pi + a);
      fy[q + j] = m[j] * std::sin(half_pi + a);
    }
    heads.push_back(v::two_axes<S>(fx, fy, Layout::Interleaved, "rope_mixed_2d"));
  }
  return PerHead<MultiAxis<Bank<RotationBlock<S>>>>(std::move(heads));
}

/// rope-vit's init_t_xy: patch i of an end_x × end_y grid at (i mod end_x, ⌊i / end_x⌋),
/// token-major [end_x end_y, 2] (x, y).
inline std::vector<double> vit_grid_positions(int end_x, int end_y) {
  if (end_x <= 0 || end_y <= 0 || (long long)end_x * end_y > (1LL << 28))
    detail::fail("vit_grid_positions: grid sizes must be > 0 with at most 2^28 patches");
  std::vector<double> p(std::size_t(2) * std::size_t(end_x) * std::size_t(end_y));
  for (long long i = 0; i < (long long)end_x * end_y; ++i) {
    p[std::size_t(2 * i)] = double(i % end_x);
    p[std::size_t(2 * i + 1)] = double(i / end_x);
  }
  return p;
}

/// DINOv3's RoPE parameters: base, or (min_period, max_period) instead.
struct Dinov3RopeConfig {
  int head_dim = 0;
  std::optional<double> base = 100.0;
  std::optional<double> min_period;
  std::optional<double> max_period;
};

/// DINOv3's RoPE (axis 0 = y, axis 1 = x), half-split pairs.
template <class S = double>
MultiAxis<Bank<RotationBlock<S>>> dinov3_rope(const Dinov3RopeConfig& c) {
  namespace v = detail::vision;
  v::require_dim4(c.head_dim, "dinov3_rope");
  const int q = c.head_dim / 4;
  const bool periods = c.min_period || c.max_period;
  if (periods == bool(c.base))
    detail::fail("dinov3_rope: give either base or both min_period and max_period");
  std::vector<long double> period(static_cast<std::size_t>(q));
  if (!periods) {
    v::require_theta(*c.base, "dinov3_rope");
    for (int j = 0; j < q; ++j)
      period[std::size_t(j)] = std::pow(static_cast<long double>(*c.base), 4.0L * j / c.head_dim);
  } else {
    if (!c.min_period || !c.max_period || !std::isfinite(*c.min_period) ||
        !std::isfinite(*c.max_period) || !(*c.min_period > 0) || !(*c.max_period >= *c.min_period))
      detail::fail("dinov3_rope: need finite 0 < min_period <= max_period");
    const long double lo = *c.min_period, hi = *c.max_period, r = hi / lo;
    for (int j = 0; j < q; ++j) {
      const long double e = q > 1 ? static_cast<long double>(j) / (q - 1) : 0.0L;  // linspace
      period[std::size_t(j)] = std::pow(r, e) / r * hi;
    }
  }
  const long double two_pi = 2 * std::acos(-1.0L);
  std::vector<long double> fy(std::size_t(2 * q), 0.0L), fx(std::size_t(2 * q), 0.0L);
  for (int j = 0; j < q; ++j) {
    fy[std::size_t(j)] = two_pi / period[std::size_t(j)];
    fx[std::size_t(q + j)] = two_pi / period[std::size_t(j)];
  }
  return v::two_axes<S>(fy, fx, Layout::HalfSplit, "dinov3_rope");
}

/// How DINOv3 normalises patch centres (its normalize_coords; transformers uses separate).
enum class Dinov3Normalize { Separate, Max, Min };

/// The training-time augmentation of DINOv3's coordinates, as sampled values: coords are
/// shifted by shift, then multiplied by jitter (per axis), then by rescale.
struct Dinov3Augment {
  double shift_y = 0, shift_x = 0, jitter_y = 1, jitter_x = 1, rescale = 1;
};

/// Patch centres of an H × W grid in [−1, 1], token-major [H W, 2] (y, x), row-major patches.
inline std::vector<double> dinov3_patch_coordinates(int H, int W,
                                                    Dinov3Normalize n = Dinov3Normalize::Separate,
                                                    const Dinov3Augment& aug = {}) {
  if (H <= 0 || W <= 0 || (long long)H * W > (1LL << 28))
    detail::fail("dinov3_patch_coordinates: H, W must be > 0 with at most 2^28 patches");
  const double v[5] = {aug.shift_y, aug.shift_x, aug.jitter_y, aug.jitter_x, aug.rescale};
  for (double x : v) detail::require_finite(x, "dinov3_patch_coordinates", "augmentation");
  const double dh = n == Dinov3Normalize::Separate ? H : n == Dinov3Normalize::Max ? std::max(H, W)
                                                                                   : std::min(H, W);
  const double dw = n == Dinov3Normalize::Separate ? W : dh;
  std::vector<double> p(std::size_t(2) * std::size_t(H) * std::size_t(W));
  std::size_t k = 0;
  for (int i = 0; i < H; ++i)
    for (int j = 0; j < W; ++j) {
      const double y = 2.0 * ((i + 0.5) / dh) - 1.0, x = 2.0 * ((j + 0.5) / dw) - 1.0;
      p[k++] = (y + aug.shift_y) * aug.jitter_y * aug.rescale;
      p[k++] = (x + aug.shift_x) * aug.jitter_x * aug.rescale;
    }
  return p;
}

}  // namespace peal
