// The tile plan of the fused kernels (scores, attention; detail/tile_run.hpp): how far a
// tile may spread around its anchor (rebase_limits, max_half_spread) and the cut of a
// sequence of positions into tiles (plan_tiles). docs/kernels-scores.md §2-3.
#pragma once

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "../view.hpp"

namespace peal {
namespace detail {
namespace scores_kernels {

// ---- Rebasing thresholds (docs/kernels-scores.md, "Rebasing") -----------------------------
// exp_budget θ: every growth/decay factor inside a tile is ≤ e^θ (2^16 for float: the tile
// factors use 16 of float's 254 binary orders of magnitude, so only scores within 2^16 of the
// float range limits can spuriously overflow/underflow; 2^128 for double).
// poly_budget P: Jordan chains make the rounding error of a score grow like (1 + 2h)^p
// relative to |q|‖A‖|k| (cancellation between the polynomial terms of q̃ and k̃); P bounds
// that growth: 2^12 ε_float ≈ 2.4e-4, 2^20 ε_double ≈ 2.3e-10.
template <class C>
struct rebase_limits;
template <>
struct rebase_limits<float> {
  static constexpr double exp_budget = 11.090354888959125;  // 16 ln 2
  static constexpr double poly_budget = 4096.0;             // 2^12
};
template <>
struct rebase_limits<double> {
  static constexpr double exp_budget = 88.722839111672999;  // 128 ln 2
  static constexpr double poly_budget = 1048576.0;          // 2^20
};

/// Largest half-spread h (positions) of a tile: ρ h ≤ θ and (1 + 4h)^p ≤ P (the rounding
/// error of a score grows like (1 + 2 h_q + 2 h_k)^p, h_q and h_k ≤ h the two tiles' spreads).
inline double max_half_spread(double rate, int degree, double exp_budget, double poly_budget) {
  double h = std::numeric_limits<double>::infinity();
  if (rate > 0) h = std::min(h, exp_budget / rate);
  if (degree > 0) h = std::min(h, 0.25 * (std::pow(poly_budget, 1.0 / degree) - 1.0));
  return h;
}

// ---- Tile plan ----------------------------------------------------------------------------
/// Consecutive tiles of at most max_rows tokens whose positions stay within h of the tile's
/// anchor. When positions are evenly spaced every tile is "regular": its offsets from its
/// anchor are those of the reference tile, so one relative table serves all of them.
struct TilePlan {
  std::vector<Index> begin;  // tile I is [begin[I], begin[I+1])
  std::vector<double> anchor, lo, hi;
  std::vector<char> regular;
  std::vector<double> ref_delta;  // t - anchor for the rows of the reference tile
  Index max_rows = 0;
  Index size() const { return Index(anchor.size()); }
  Index rows(Index I) const { return begin[std::size_t(I) + 1] - begin[std::size_t(I)]; }
};

inline TilePlan plan_tiles(const double* t, Index n, Index max_rows, double h) {
  TilePlan p;
  Index i = 0;
  p.begin.push_back(0);
  while (i < n) {
    const Index b = i;
    double lo = t[i], hi = t[i];
    ++i;
    while (i < n && i - b < max_rows) {
      const double nlo = std::min(lo, t[i]), nhi = std::max(hi, t[i]);
      if (!(nhi - nlo <= 2 * h)) break;
      lo = nlo, hi = nhi;
      ++i;
    }
    p.begin.push_back(i);
    p.anchor.push_back(lo + 0.5 * (hi - lo));
    p.lo.push_back(lo);
    p.hi.push_back(hi);
  }
  const Index nt = p.size();
  p.regular.assign(std::size_t(nt), 0);
  if (nt == 0) return p;
  Index ref = 0;
  for (Index I = 0; I < nt; ++I) {
    p.max_rows = std::max(p.max_rows, p.rows(I));
    if (p.rows(I) > p.rows(ref)) ref = I;
  }
  const Index rb = p.begin[std::size_t(ref)], rn = p.rows(ref);
  p.ref_delta.resize(std::size_t(rn));
  for (Index r = 0; r < rn; ++r)
    p.ref_delta[std::size_t(r)] = t[rb + r] - p.anchor[std::size_t(ref)];
  p.regular[std::size_t(ref)] = 1;
  for (Index I = 0; I < nt; ++I) {
    if (I == ref || p.rows(I) > rn) continue;
    const Index b = p.begin[std::size_t(I)];
    const double a = t[b] - p.ref_delta[0];
    bool ok = std::isfinite(a);
    for (Index r = 0; ok && r < p.rows(I); ++r) ok = (t[b + r] - a) == p.ref_delta[std::size_t(r)];
    if (ok) {
      p.regular[std::size_t(I)] = 1;
      p.anchor[std::size_t(I)] = a;
    }
  }
  return p;
}

}  // namespace scores_kernels
}  // namespace detail
}  // namespace peal
