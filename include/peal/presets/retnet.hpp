// RetNet retention (Sun et al., "Retentive Network", 2023; microsoft/torchscale
// retnet.py RetNetRelPos and multiscale_retention.py; docs/presets.md §10). Head h of H
// has decay gamma_h = 1 - 2^(-5-h); with n = d/2 pairs (interleaved, rotate_every_two),
//   omega_i = 10000^(-i/(n-1))     (torch.linspace(0, 1, n): the last exponent is 1;
//                                    omega_0 = 1 when n = 1)
// and the parallel-form score of a query at t and a key at s <= t is
//   gamma_h^(t-s) sum_i q_i^T R(-(t-s) omega_i) k_i.
// In peal: head h is Bank<RotationBlock{omega_i, a = ln gamma_h}> (the same a on every pair),
// Layout::Interleaved, so score(q, t, k, s) = q^T A(t-s) k is exactly the above. Not part of
// the encoding (torchscale applies them around it): the causal mask, the key scaling by
// d^(-1/2) and the row normalisations of the decay mask and of the scores.
//
// retnet_decays(H) gives gamma_h for kernels that apply the decay as a scalar per head
// (ScoreOptions) on top of the pure rotation retnet_rotation<S>(d) (a = 0, shared by all
// heads): gamma^(t-s) times its score is the same retention score.
//
// Numerics: F(t) = gamma^t R(omega t) and G(s) = gamma^(-s) R(omega s) leave float range
// after ~2,800 positions for gamma = 1 - 2^-5 (e^{-a s} > 3.4e38 once s > 88.7 / 0.0317);
// scores must be evaluated through the lag t - s (score(), the rebasing scores kernel).
#pragma once

#include <cmath>
#include <string>
#include <vector>

#include "../bank.hpp"
#include "../errors.hpp"
#include "../rotation_block.hpp"
#include "rope.hpp"

namespace peal {

/// gamma_h = 1 - 2^(-5-h), h = 0 .. n_heads-1 (exact in double for n_heads <= 48).
inline std::vector<double> retnet_decays(int n_heads) {
  if (n_heads <= 0)
    detail::fail("retnet_decays: n_heads must be > 0, got " + std::to_string(n_heads));
  std::vector<double> g(static_cast<std::size_t>(n_heads));
  for (int h = 0; h < n_heads; ++h) g[std::size_t(h)] = 1.0 - std::exp2(-5.0 - h);
  return g;
}

/// omega_i = 10000^(-i/(n-1)), i < n = head_dim/2 (omega_0 = 1 for n = 1), in long double.
/// head_dim <= preset_max_head_dim (rope.hpp); the angles lie in [1e-4, 1], inside the
/// accepted frequency range, and are checked like every preset's.
inline std::vector<long double> retnet_angles(int head_dim) {
  detail::require_preset_head_dim(head_dim, "retnet");
  if (head_dim < 2 || head_dim % 2 != 0)
    detail::fail("retnet: head_dim must be even and >= 2, got " + std::to_string(head_dim));
  const int n = head_dim / 2;
  std::vector<long double> w(static_cast<std::size_t>(n));
  for (int i = 0; i < n; ++i) {
    const long double u = n == 1 ? 0.0L : static_cast<long double>(i) / (n - 1);
    w[std::size_t(i)] = 1.0L / std::pow(10000.0L, u);
    detail::require_preset_frequency(w[std::size_t(i)], std::size_t(i), "retnet");
  }
  return w;
}

/// The rotation part alone, Bank<RotationBlock{omega_i, 0}> (interleaved), shared by every
/// head: for kernels that apply gamma_h^(t-s) as a per-head scalar decay.
template <class S = double>
Bank<RotationBlock<S>> retnet_rotation(int head_dim) {
  std::vector<RotationBlock<S>> blocks;
  for (long double omega : retnet_angles(head_dim)) blocks.emplace_back(omega);
  return Bank<RotationBlock<S>>(blocks, Layout::Interleaved);
}

/// One encoding per head: head h is Bank<RotationBlock{omega_i, ln gamma_h}>, interleaved.
template <class S = double>
std::vector<Bank<RotationBlock<S>>> retnet(int head_dim, int n_heads) {
  if (n_heads <= 0) detail::fail("retnet: n_heads must be > 0, got " + std::to_string(n_heads));
  const std::vector<long double> w = retnet_angles(head_dim);
  std::vector<Bank<RotationBlock<S>>> heads;
  heads.reserve(std::size_t(n_heads));
  for (int h = 0; h < n_heads; ++h) {
    // ln(1 - 2^(-5-h)) without cancellation.
    const auto a = static_cast<real_t<S>>(std::log1p(-std::exp2(-5.0L - h)));
    std::vector<RotationBlock<S>> blocks;
    blocks.reserve(w.size());
    for (long double omega : w) blocks.emplace_back(omega, a);
    heads.emplace_back(blocks, Layout::Interleaved);
  }
  return heads;
}

}  // namespace peal
