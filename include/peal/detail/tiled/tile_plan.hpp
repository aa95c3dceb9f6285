// The plan of the fused kernels (scores, attention, linear attention; detail/tiled/tile_run.hpp):
// how far a tile may spread around its anchor (rebase_limits, max_half_spread), the cut of a
// sequence of positions into tiles (plan_tiles) and the cut of a whole run into units of
// work and threads (plan_run). Pure functions of the problem's shape, unit-tested in
// tests/test_tile_plan.cpp. docs/kernels-scores.md §2-3.
#pragma once

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "../../view.hpp"

namespace peal {
namespace detail {
namespace tiled {

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

// ---- The plan of a run ----------------------------------------------------------------------
/// What plan_run reads of a problem (TileRun fills it from its arguments and its coder).
struct RunShape {
  const double* t = nullptr;  // query positions, nq of them
  const double* s = nullptr;  // key positions, nk of them
  Index nq = 0, nk = 0, d = 0, Hq = 1, Hk = 1;
  Index arith_bytes = 4;                   // sizeof(C), the arithmetic type
  double exp_budget = 0, poly_budget = 0;  // rebase_limits<C>
  double rate = 0;  // growth rate of the encoding's factors (coder and polynomial parts)
  int degree = 0;   // polynomial degree of the coder's factors
  bool has_decay = false;  // ScoreOptions::decay is set
  double decay_rate = 0;   // max_h |ln γ_h|
  Index query_tile = 0, key_tile = 0;  // ScoreOptions::query_tile / key_tile (0: automatic)
  int threads = 1;            // threads asked for (ScoreOptions::threads or OpenMP's count)
  bool splits_keys = false;   // the sink merges partial results over key ranges
  bool packed_keys = false;   // k's heads lie contiguously: element stride 1, head stride d
  // The small products could read a unit's key rows where they lie (a grouped run: one product
  // per key head's query rows; element stride 1; keys encoded in the arithmetic type, in half
  // precision, or encoded head by head) when the query tiles hold at most small_rows rows of a
  // key head's queries (detail/eigen_gemm.hpp's kSmallRows).
  bool streamable_keys = false;
  Index small_rows = 0;
  bool strips = false;        // the sink computes partially masked tile pairs in strips
  bool causal = false;        // the causal mask (s_j > t_i masked)
  double window = std::numeric_limits<double>::infinity();  // the sink's window (∞: none)
};

/// How a run is cut: the tiles of each side, the blocks of query tiles a unit of work holds,
/// the key splits, the units and the threads that take them.
struct RunPlan {
  TilePlan query, key;
  bool pair_decay = false;  // the scalar decay is applied per pair, not rebased in the tiles
  bool across = false;      // a unit holds every key head (decoding)
  bool stage = false;       // and copies each key token's heads contiguously into kstage
  bool stream = false;      // or reads each head's key rows where they lie (small products)
  bool few_rows = false;    // a key head's query rows in a query tile fit x.small_rows
  Index tiles_per_block = 1, blocks = 0, splits = 1, key_tiles_per_split = 0, units = 0;
  int threads = 1;
  /// Rows of a strip of a partially masked tile pair (plan_strips); 0: such pairs are
  /// computed whole.
  Index strip_rows = 0;
  /// Strips a partially masked pair may have at most (the workspace holds them).
  Index max_strips() const {
    return strip_rows > 0 ? (query.max_rows + strip_rows - 1) / strip_rows : 1;
  }
  /// Key heads a unit holds at once.
  Index head_slots(Index Hk) const { return across ? Hk : 1; }
};

// Per-unit query cache budget: every key tile is encoded once per block of query tiles, so
// a larger block encodes keys less often (measured: 256 KiB re-encoded every key 2-4x as
// often and cost 3-10 % of the GEMM time at d = 128). It is working memory per thread.
inline constexpr Index kBlockBytes = Index(1) << 20;
inline constexpr double kParallelMinFlops = 1 << 23;  // ~0.1 ms of GEMM per thread
// Per-pair decay once the decay multiplies the number of tiles by more than this: the
// crossover measured at n = 2048, d = 128, float (per pair ~16 ms at any γ; rebased 15.3 ms
// with 1.7x the tiles, 16.4 ms with 2.5x; docs/kernels-scores.md §4).
inline constexpr double kPairDecaySplit = 2.0;
// Key splits (RunShape::splits_keys): fewer (query block, key head) units than this and the
// key tiles are split into ranges, so that a decode step on one head still fills the threads.
inline constexpr Index kSplitUnits = 8;
// Rows of a strip of a tile pair cut by the causal mask or a window (plan_strips): the pairs
// computed past the staircase are about strip_rows / 2 per query row, against ~n / 2 visible
// ones in a causal prefill (n = 512: 6 % more work with 32-row strips, 12 % with 64), while
// each strip is one GEMM of strip_rows rows that packs its key columns again.
inline constexpr Index kStripRows = 32;
// At most this many queries (and more than one key head): decoding, RunPlan::across.
inline constexpr Index kAcrossQueries = 16;
// Threads asked for beyond this count as this many: no count overflows the products below,
// nor asks OpenMP for 2^31 threads.
inline constexpr int kMaxThreads = 1024;

/// The plan of a run (docs/kernels-scores.md §2-3 and §5).
inline RunPlan plan_run(const RunShape& x) {
  RunPlan p;
  auto half_spread = [&x](double rate) {
    return max_half_spread(rate, x.degree, x.exp_budget, x.poly_budget);
  };
  // Default tiles (ScoreOptions::query_tile): up to 256 queries x 512 keys (fewer, larger
  // GEMM calls amortise Eigen's packing), fewer for large d so that an encoded query tile
  // stays within 128 KiB and a key tile within 256 KiB, at least 16 x 32.
  const Index cb = x.arith_bytes * std::max<Index>(x.d, 1);
  const Index tq_max =
      x.query_tile > 0 ? x.query_tile : std::clamp<Index>((Index(128) << 10) / cb, 16, 256);
  // Decoding (a few queries, several key heads): a unit takes every key head of its key
  // range (across), so that the rows of all heads of a token, adjacent in an [nk, Hk, d]
  // cache, are read together (one contiguous copy per token into kstage when the heads are
  // packed) instead of head by head, 4 KiB apart, which the hardware prefetcher does not
  // follow (measured: 1.9x the time of a contiguous read). Key tiles are then sized so that
  // the staged rows of every head stay within 256 KiB.
  p.across = x.splits_keys && x.Hk > 1 && x.nq <= kAcrossQueries;
  p.stage = p.across && x.packed_keys && x.nk > 1 && x.d > 0;
  const Index tk_auto = p.across ? std::clamp<Index>((Index(256) << 10) / (cb * x.Hk), 16, 512)
                                 : std::clamp<Index>((Index(256) << 10) / cb, 32, 512);
  const Index tk_max = x.key_tile > 0 ? x.key_tile : tk_auto;
  const double h_base = half_spread(x.rate);
  p.query = plan_tiles(x.t, x.nq, tq_max, h_base);
  p.key = plan_tiles(x.s, x.nk, tk_max, h_base);
  // A scalar decay is rebased through the tiles (its rate enters h) unless that would cut
  // them down: for γ = 1e-300, |ln γ| h ≤ θ gives h = 0.016 in float, tiles of one token
  // and a 1 x 1 GEMM per pair (80x slower at n = 2048). When the decay's h makes more than
  // kPairDecaySplit times as many tiles, the tiles are planned without it and γ^(t_i − s_j)
  // = exp(ln γ (t_i − s_j)) is applied per pair in the epilogue, in double
  // (docs/kernels-scores.md §4, "decay").
  if (x.has_decay && x.decay_rate > 0) {
    const double h = half_spread(x.rate + x.decay_rate);
    TilePlan qd = plan_tiles(x.t, x.nq, tq_max, h);
    TilePlan kd = plan_tiles(x.s, x.nk, tk_max, h);
    if (double(qd.size() + kd.size()) <= kPairDecaySplit * double(p.query.size() + p.key.size())) {
      p.query = std::move(qd);
      p.key = std::move(kd);
    } else {
      p.pair_decay = true;
    }
  }

  // Units: (block of query tiles, key head, key split).
  const int nt = std::clamp(x.threads, 1, kMaxThreads);
  const Index G = x.Hq / x.Hk;
  // Decoding a grouped run with few query rows per key head: the small products read each
  // head's rows where they lie, prefetched ahead, so the staged copy (a second pass over the
  // cache) is not made (decode, f32 token-major, keys encoded: 0.82 -> 1.06 of memcpy,
  // bench/README.md).
  p.few_rows = p.query.max_rows * G <= x.small_rows;
  p.stream = x.streamable_keys && p.few_rows;
  p.stage = p.stage && !p.stream;
  const Index nqt = p.query.size();
  const bool row_decay = x.has_decay && !p.pair_decay;  // γ folded into the query rows
  const Index row_bytes = G * x.d * x.arith_bytes + (row_decay ? G * 8 : 0);
  const Index cap_tiles =
      std::max<Index>(1, kBlockBytes / std::max<Index>(1, row_bytes) / std::max<Index>(1, p.query.max_rows));
  const Index head_units = p.across ? 1 : x.Hk;
  const Index want_blocks = nt > 1 ? (4 * Index(nt) + head_units - 1) / head_units : 1;
  p.tiles_per_block =
      std::min(cap_tiles, std::max<Index>(1, (nqt + want_blocks - 1) / want_blocks));
  p.blocks = (nqt + p.tiles_per_block - 1) / p.tiles_per_block;
  // Few (block, head) units and many key tiles (decoding against a long cache): a sink that
  // can merge partial results (attention's log-sum-exp) splits the key tiles into ranges.
  // The count depends on the problem only, never on the threads, so that results do not.
  // (Query tiles, not blocks: the blocking depends on the thread count.)
  if (x.splits_keys && nqt * head_units < kSplitUnits && p.key.size() > 1)
    p.splits = std::min(p.key.size(), (kSplitUnits + nqt * head_units - 1) / (nqt * head_units));
  p.key_tiles_per_split = (p.key.size() + p.splits - 1) / p.splits;
  p.units = p.blocks * head_units * p.splits;
  // Threads only for work worth a parallel region (~kParallelMinFlops per thread).
  const double flops =
      2.0 * double(x.Hq) * double(x.nq) * double(x.nk) * double(std::max<Index>(x.d, 1));
  const Index by_work = std::max<Index>(1, Index(flops / kParallelMinFlops));
  p.threads = int(std::min<Index>({Index(nt), p.units, by_work}));
  // A tile pair cut by a mask (the diagonal pairs of a causal prefill) is computed in strips
  // of query rows, each over the key columns one of its rows may see (plan_strips).
  if (x.strips && (x.causal || x.window < std::numeric_limits<double>::infinity()))
    p.strip_rows = kStripRows;
  return p;
}

// ---- The staircase of a masked tile pair --------------------------------------------------
/// Rows [r0, r1) of a query tile and the columns [c0, c1) of a key tile they are computed on:
/// every pair of these rows outside the columns is masked. The masked pairs inside lie in
/// columns [m0, m1) (the sink compares positions there only; m0 = m1: every pair visible).
struct TileStrip {
  Index r0 = 0, r1 = 0, c0 = 0, c1 = 0, m0 = 0, m1 = 0;
  bool cut() const { return m0 < m1; }
};

/// Whether strips st[0, n) are a rows x cols tile pair whole: one strip, every row and column
/// (the driver and the attention sink then run one product over the pair).
inline bool whole_pair(const TileStrip* st, Index n, Index rows, Index cols) {
  return n == 1 && st[0].r0 == 0 && st[0].r1 == rows && st[0].c0 == 0 && st[0].c1 == cols;
}

/// Whether the causal mask or the window masks some pair of tile pair (I, J) (from the
/// tiles' position ranges: true may be conservative, false is exact).
inline bool pair_cut(const TilePlan& qp, Index I, const TilePlan& kp, Index J, bool causal,
                     double window) {
  return (causal && kp.hi[std::size_t(J)] > qp.lo[std::size_t(I)]) ||
         qp.hi[std::size_t(I)] - kp.lo[std::size_t(J)] >= window;
}

/// The strips of tile pair (I, J) (positions t of the queries, s of the keys) under the
/// causal mask (s_j > t_i masked) and the window (t_i − s_j ≥ window masked): the rows of
/// query tile I in runs of at most strip_rows, each with the smallest range of key tile J's
/// columns holding every pair one of its rows sees. Strips whose rows see nothing are left
/// out; consecutive strips with the same columns are merged. Masks are by position,
/// so any order of positions works; with sorted positions the strips follow the diagonal
/// (the staircase). Writes at most ceil(rows(I) / strip_rows) strips to out; returns their count.
inline Index plan_strips(const TilePlan& qp, Index I, const TilePlan& kp, Index J, const double* t,
                         const double* s, bool causal, double window, Index strip_rows,
                         TileStrip* out) {
  const Index i0 = qp.begin[std::size_t(I)], m = qp.rows(I);
  const Index j0 = kp.begin[std::size_t(J)], n = kp.rows(J);
  const double* sj = s + j0;
  const Index step = strip_rows > 0 ? strip_rows : std::max<Index>(m, 1);
  Index count = 0;
  for (Index r0 = 0; r0 < m; r0 += step) {
    const Index r1 = std::min(m, r0 + step);
    double tmin = t[i0 + r0], tmax = tmin;
    for (Index r = r0 + 1; r < r1; ++r)
      tmin = std::min(tmin, t[i0 + r]), tmax = std::max(tmax, t[i0 + r]);
    // Key j may be seen by a row of the strip only if s_j ≤ tmax (causal) and
    // tmin − s_j < window.
    auto seen = [&](double x) { return !(causal && x > tmax) && tmin - x < window; };
    Index c0 = 0, c1 = n;
    while (c0 < n && !seen(sj[c0])) ++c0;
    while (c1 > c0 && !seen(sj[c1 - 1])) --c1;
    if (c0 == c1) continue;
    // Columns where a row of the strip masks a pair: s_j > tmin (causal), tmax − s_j ≥ window.
    auto masks = [&](double x) { return (causal && x > tmin) || !(tmax - x < window); };
    Index m0 = c0, m1 = c1;
    while (m0 < c1 && !masks(sj[m0])) ++m0;
    while (m1 > m0 && !masks(sj[m1 - 1])) --m1;
    if (m0 == m1) m0 = m1 = c0;
    if (count > 0) {
      TileStrip& b = out[count - 1];
      if (b.r1 == r0 && b.c0 == c0 && b.c1 == c1 && b.m0 == m0 && b.m1 == m1) {
        b.r1 = r1;
        continue;
      }
    }
    out[count++] = TileStrip{r0, r1, c0, c1, m0, m1};
  }
  return count;
}

/// The products of a pair computed in strips, as rectangles f(r0, r1, c0, c1) of the tile: when
/// the strips cover consecutive rows and share columns (below the diagonal of a causal pair:
/// the keys before its first query), those columns of all their rows first, as one product,
/// then the rest of each strip (its staircase step); else each strip whole. The same
/// rectangles for the scores (Q K^T) and for P V.
template <class F>
void for_each_strip_block(const TileStrip* st, Index n, F&& f) {
  Index r0 = n > 0 ? st[0].r0 : 0, r1 = r0, c0 = 0, c1 = std::numeric_limits<Index>::max();
  bool joint = n > 1;
  for (Index k = 0; joint && k < n; ++k) {
    joint = st[k].r0 == r1;
    r1 = st[k].r1, c0 = std::max(c0, st[k].c0), c1 = std::min(c1, st[k].c1);
  }
  if (!joint || c0 >= c1) {
    for (Index k = 0; k < n; ++k) f(st[k].r0, st[k].r1, st[k].c0, st[k].c1);
    return;
  }
  f(r0, r1, c0, c1);
  for (Index k = 0; k < n; ++k) {
    if (st[k].c0 < c0) f(st[k].r0, st[k].r1, st[k].c0, c0);
    if (c1 < st[k].c1) f(st[k].r0, st[k].r1, c1, st[k].c1);
  }
}

}  // namespace tiled
}  // namespace detail
}  // namespace peal
