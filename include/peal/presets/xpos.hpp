// xPos (Sun et al., "A Length-Extrapolatable Transformer", 2023; microsoft/torchscale
// xpos_relative_position.py; docs/presets.md §9). For a head of even size d, per
// interleaved pair i = 0 .. d/2 - 1 (torchscale rotate_every_two, pairs (2i, 2i+1)):
//   zeta_i = (2i + 0.4 d) / (1.4 d),   omega_i = theta^(-2i/d)   (theta = 10000),
//   query at t:  zeta_i^(+t/B) R(omega_i t) q_i,   key at s:  zeta_i^(-s/B) R(omega_i s) k_i,
// so the score is sum_i zeta_i^((t-s)/B) q_i^T R(-(t-s) omega_i) k_i, B = scale_base = 512.
// In peal: Bank<RotationBlock{omega_i, a_i = ln(zeta_i) / B}>, Layout::Interleaved.
//
// torchscale centres the scale exponent ((t - c)/B with c = ceil(L/2)) so that
// zeta^(t/B) does not leave float range; c cancels in the score. peal encodes with c = 0
// (the paper's form): F(t) and G(s) alone under/overflow once |a t| passes the range of
// the arithmetic type (|ln 0.2857| / 512 * t > 88 at t ~ 4e4 in float), so large positions
// go through score() or the rebasing scores kernel (docs/design.md §1).
#pragma once

#include <cmath>
#include <string>
#include <vector>

#include "../bank.hpp"
#include "../errors.hpp"
#include "../rotation_block.hpp"
#include "rope.hpp"

namespace peal {

/// The xPos encoding of a head of size head_dim (even, >= 2), as torchscale computes it.
/// Limits (rope.hpp, docs/presets.md §12): head_dim <= preset_max_head_dim, every omega_i a
/// double pair in [preset_min_frequency, preset_max_frequency], every a_i finite.
template <class S = double>
Bank<RotationBlock<S>> xpos(int head_dim, double scale_base = 512.0, double theta = 10000.0) {
  detail::require_preset_head_dim(head_dim, "xpos");
  if (head_dim < 2 || head_dim % 2 != 0)
    detail::fail("xpos: head_dim must be even and >= 2, got " + std::to_string(head_dim));
  detail::require_finite(scale_base, "xpos", "scale_base");
  detail::require_finite(theta, "xpos", "theta");
  detail::require(scale_base > 0, "xpos: scale_base must be > 0");
  detail::require(theta > 1, "xpos: theta must be > 1");
  const long double d = head_dim, B = scale_base, th = theta;
  std::vector<RotationBlock<S>> blocks;
  blocks.reserve(std::size_t(head_dim / 2));
  for (int i = 0; i < head_dim / 2; ++i) {
    const long double zeta = (2.0L * i + 0.4L * d) / (1.4L * d);
    const long double omega = 1.0L / std::pow(th, static_cast<long double>(2 * i) / d);
    detail::require_preset_frequency(omega, std::size_t(i), "xpos");
    const auto a = static_cast<real_t<S>>(std::log(zeta) / B);
    if (!std::isfinite(a))
      detail::fail("xpos: a = ln(zeta) / scale_base is not finite for pair " + std::to_string(i) +
                   " (scale_base too small)");
    blocks.emplace_back(omega, a);
  }
  return Bank<RotationBlock<S>>(blocks, Layout::Interleaved);
}

}  // namespace peal
