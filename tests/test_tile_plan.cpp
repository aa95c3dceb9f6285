// The tile plan of the fused kernels (include/peal/detail/tiled/tile_plan.hpp): plan_tiles cuts a
// sequence of positions into consecutive tiles of at most max_rows tokens whose positions
// stay within h of the tile's anchor, and marks the tiles whose offsets from their anchor
// equal the reference tile's ("regular": one coefficient table serves them all); plan_run
// cuts a whole run (tiles of both sides, blocks, key splits, threads) from its shape.
#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <limits>
#include <peal/detail/tiled/tile_plan.hpp>
#include <random>
#include <vector>

namespace {

using peal::Index;
using peal::detail::tiled::max_half_spread;
using peal::detail::tiled::plan_tiles;
using peal::detail::tiled::TilePlan;
using peal::detail::tiled::plan_run;
using peal::detail::tiled::rebase_limits;
using peal::detail::tiled::RunPlan;
using peal::detail::tiled::RunShape;

// Every invariant the kernels rely on, checked from the definition.
void check_plan(const std::vector<double>& t, Index max_rows, double h, const TilePlan& p) {
  const Index n = Index(t.size());
  REQUIRE(p.begin.size() == std::size_t(p.size() + 1));
  CHECK(p.begin.front() == 0);
  CHECK(p.begin.back() == n);
  Index widest = 0;
  for (Index I = 0; I < p.size(); ++I) {
    const Index b = p.begin[std::size_t(I)], m = p.rows(I);
    REQUIRE(m >= 1);
    CHECK(m <= max_rows);
    widest = std::max(widest, m);
    double lo = t[std::size_t(b)], hi = lo;
    for (Index r = 0; r < m; ++r) lo = std::min(lo, t[std::size_t(b + r)]), hi = std::max(hi, t[std::size_t(b + r)]);
    CHECK(p.lo[std::size_t(I)] == lo);
    CHECK(p.hi[std::size_t(I)] == hi);
    if (m > 1) CHECK(hi - lo <= 2 * h);
    // Greedy: the next token would have broken the spread or the row limit.
    if (I + 1 < p.size() && m < max_rows) {
      const double next = t[std::size_t(b + m)];
      CHECK(std::max(hi, next) - std::min(lo, next) > 2 * h);
    }
    const double a = p.anchor[std::size_t(I)];
    if (p.regular[std::size_t(I)]) {
      // Its offsets are the reference tile's, exactly.
      for (Index r = 0; r < m; ++r) CHECK(t[std::size_t(b + r)] - a == p.ref_delta[std::size_t(r)]);
    } else {
      CHECK(a == lo + 0.5 * (hi - lo));  // the midpoint: |t − anchor| ≤ h
    }
    for (Index r = 0; r < m; ++r) CHECK(std::abs(t[std::size_t(b + r)] - a) <= h + std::abs(a) * 1e-15);
  }
  CHECK(p.max_rows == widest);
}

}  // namespace

TEST_CASE("tile plan: evenly spaced positions give full, regular tiles", "[tile_plan]") {
  std::vector<double> t(1000);
  for (std::size_t i = 0; i < t.size(); ++i) t[i] = 3.0 + 0.5 * double(i);
  const TilePlan p = plan_tiles(t.data(), Index(t.size()), 64, std::numeric_limits<double>::infinity());
  check_plan(t, 64, std::numeric_limits<double>::infinity(), p);
  CHECK(p.size() == 16);  // ceil(1000 / 64)
  for (Index I = 0; I < p.size(); ++I) CHECK(p.regular[std::size_t(I)] != 0);
}

TEST_CASE("tile plan: the half-spread cuts tiles, both sides of the threshold", "[tile_plan]") {
  std::vector<double> t(100);
  for (std::size_t i = 0; i < t.size(); ++i) t[i] = double(i);
  // 2h = 9: ten tokens per tile (spread 9); 2h just below 9: nine tokens.
  const TilePlan a = plan_tiles(t.data(), 100, 512, 4.5);
  check_plan(t, 512, 4.5, a);
  CHECK(a.rows(0) == 10);
  const TilePlan b = plan_tiles(t.data(), 100, 512, std::nextafter(4.5, 0.0));
  check_plan(t, 512, std::nextafter(4.5, 0.0), b);
  CHECK(b.rows(0) == 9);
}

TEST_CASE("tile plan: irregular gaps, large times, one-token tiles, empty", "[tile_plan]") {
  std::mt19937_64 rng(7);
  std::uniform_real_distribution<double> e(-3, 3);
  std::vector<double> t(2000);
  double c = 1.7e9;
  for (auto& x : t) x = (c += std::pow(10.0, e(rng)));
  for (double h : {0.0, 0.01, 1.0, 100.0, 1e4, std::numeric_limits<double>::infinity()})
    for (Index rows : {1, 7, 512}) {
      INFO("h " << h << ", max_rows " << rows);
      check_plan(t, rows, h, plan_tiles(t.data(), Index(t.size()), rows, h));
    }
  const TilePlan one = plan_tiles(t.data(), Index(t.size()), 512, 0.0);
  CHECK(one.size() == Index(t.size()));  // distinct positions, h = 0: one token per tile
  const TilePlan none = plan_tiles(t.data(), 0, 512, 1.0);
  CHECK(none.size() == 0);
  CHECK(none.begin.size() == 1);
}

TEST_CASE("tile plan: max_half_spread from rate and degree", "[tile_plan]") {
  CHECK(std::isinf(max_half_spread(0, 0, 11.0, 4096.0)));
  CHECK(max_half_spread(2.0, 0, 11.0, 4096.0) == 5.5);  // ρ h = θ
  // (1 + 4h)^p = P: p = 2, P = 4096 gives 1 + 4h = 64.
  CHECK(max_half_spread(0, 2, 11.0, 4096.0) == Approx(63.0 / 4.0));
  CHECK(max_half_spread(100.0, 2, 11.0, 4096.0) == 0.11);  // the tighter of the two
}

// ---- plan_run ----------------------------------------------------------------------------

namespace {

// Positions 0..n-1 and the shape of a float run of a pure rotation (rate 0, degree 0).
struct Shape {
  std::vector<double> t, s;
  RunShape x;
  Shape(Index nq, Index nk, Index d, Index Hq, Index Hk) : t(std::size_t(nq)), s(std::size_t(nk)) {
    for (Index i = 0; i < nq; ++i) t[std::size_t(i)] = double(i);
    for (Index j = 0; j < nk; ++j) s[std::size_t(j)] = double(j);
    x.t = t.data(), x.s = s.data(), x.nq = nq, x.nk = nk, x.d = d, x.Hq = Hq, x.Hk = Hk;
    x.arith_bytes = 4;
    x.exp_budget = rebase_limits<float>::exp_budget, x.poly_budget = rebase_limits<float>::poly_budget;
  }
};

// What every plan keeps: units cover every (block, head unit, split), threads within them.
void check_run_plan(const RunShape& x, const RunPlan& p) {
  const Index head_units = p.across ? 1 : x.Hk;
  CHECK(p.blocks == (p.query.size() + p.tiles_per_block - 1) / p.tiles_per_block);
  CHECK(p.units == p.blocks * head_units * p.splits);
  CHECK(p.splits * p.key_tiles_per_split >= p.key.size());
  CHECK((p.splits - 1) * p.key_tiles_per_split < std::max<Index>(p.key.size(), 1));
  CHECK(p.threads >= 1);
  CHECK(p.threads <= std::max<Index>(1, p.units));
  CHECK(p.threads <= std::max(1, x.threads));
}

}  // namespace

TEST_CASE("run plan: a steep decay goes per pair and keeps the tiles", "[tile_plan]") {
  // n = 1024, d = 128, float: tiles of 256 queries (128 KiB / 512 B) and 512 keys.
  Shape sh(1024, 1024, 128, 1, 1);
  const RunPlan none = plan_run(sh.x);
  CHECK(none.query.size() == 4);
  CHECK(none.key.size() == 2);
  CHECK(!none.pair_decay);
  sh.x.has_decay = true;
  sh.x.decay_rate = std::abs(std::log(1e-300));  // h = 0.016: one-token tiles if rebased
  const RunPlan steep = plan_run(sh.x);
  CHECK(steep.pair_decay);
  CHECK(steep.query.size() == none.query.size());
  CHECK(steep.key.size() == none.key.size());
  sh.x.decay_rate = std::abs(std::log(0.99));  // h = 1104: rebased, at most twice the tiles
  const RunPlan mild = plan_run(sh.x);
  CHECK(!mild.pair_decay);
  CHECK(mild.query.size() + mild.key.size() <= 2 * (none.query.size() + none.key.size()));
  for (const RunPlan* p : {&none, &steep, &mild}) check_run_plan(sh.x, *p);
}

TEST_CASE("run plan: decoding holds every key head and splits the keys", "[tile_plan]") {
  // One query, 32 query heads over 8 key heads, 32,768 keys, d = 128, packed heads: a unit
  // takes all 8 key heads (key tiles of 256 KiB / (512 B x 8) = 64 keys), and the 512 key
  // tiles go to kSplitUnits = 8 ranges so that threads have work.
  Shape sh(1, 32768, 128, 32, 8);
  sh.x.splits_keys = true;
  sh.x.packed_keys = true;
  sh.x.threads = 2;
  const RunPlan p = plan_run(sh.x);
  CHECK(p.across);
  CHECK(p.stage);
  CHECK(p.head_slots(8) == 8);
  CHECK(p.key.size() == 512);
  CHECK(p.splits == 8);
  CHECK(p.key_tiles_per_split == 64);
  CHECK(p.units == 8);
  CHECK(p.threads == 2);
  check_run_plan(sh.x, p);
  // The split count depends on the problem, never on the threads (nor do the results).
  for (int threads : {1, 3, 64}) {
    sh.x.threads = threads;
    const RunPlan q = plan_run(sh.x);
    CHECK(q.splits == p.splits);
    CHECK(q.key.begin == p.key.begin);
    check_run_plan(sh.x, q);
  }
  // A sink that cannot merge key ranges (scores) neither splits nor holds every head.
  sh.x.splits_keys = false;
  const RunPlan s = plan_run(sh.x);
  CHECK(!s.across);
  CHECK(s.splits == 1);
  check_run_plan(sh.x, s);
  // Heads not packed: every head at once, without the staged copy.
  sh.x.splits_keys = true;
  sh.x.packed_keys = false;
  CHECK(!plan_run(sh.x).stage);
  // Keys the small products can read in place: 1 query row x 4 query heads per key head fit
  // their 8 rows, so each head's rows are streamed, not staged; 3 queries (12 rows) do not.
  sh.x.packed_keys = true;
  sh.x.streamable_keys = true;
  sh.x.small_rows = 8;
  const RunPlan st = plan_run(sh.x);
  CHECK(st.few_rows);
  CHECK(st.stream);
  CHECK(!st.stage);
  CHECK(st.across);
  Shape three(3, 32768, 128, 32, 8);
  three.x.splits_keys = three.x.packed_keys = three.x.streamable_keys = true;
  three.x.small_rows = 8;
  const RunPlan t3 = plan_run(three.x);
  CHECK(!t3.few_rows);
  CHECK(!t3.stream);
  CHECK(t3.stage);
}

TEST_CASE("run plan: threads only for work worth them, counts bounded", "[tile_plan]") {
  Shape small(16, 16, 16, 1, 1);  // 8,192 flops: one thread whatever is asked
  small.x.threads = 8;
  CHECK(plan_run(small.x).threads == 1);
  Shape big(4096, 4096, 128, 8, 8);
  big.x.threads = std::numeric_limits<int>::max();  // counts as kMaxThreads, no overflow
  const RunPlan p = plan_run(big.x);
  CHECK(p.threads <= peal::detail::tiled::kMaxThreads);
  CHECK(p.threads > 1);
  check_run_plan(big.x, p);
  big.x.threads = 2;  // several blocks per head so that two threads share the units
  const RunPlan two = plan_run(big.x);
  CHECK(two.threads == 2);
  CHECK(two.units >= 2);
  check_run_plan(big.x, two);
  Shape empty(0, 0, 64, 1, 1);
  const RunPlan e = plan_run(empty.x);
  CHECK(e.units == 0);
  CHECK(e.query.size() == 0);
}

// ---- plan_strips: tile pairs cut by a mask, along the staircase ----------------------------

namespace {

using peal::detail::tiled::plan_strips;
using peal::detail::tiled::TileStrip;

// Pairs a run computes: Σ over tile pairs of its strips' areas; every pair a row sees is in a
// strip of its row, the masked pairs inside a strip are in its columns [m0, m1) (the tightest
// such range), and no row sees anything outside its strip. Returns the computed pairs.
double computed_pairs(const Shape& sh, const RunPlan& p, bool causal, double window) {
  auto sees = [&](double t, double s) { return !(causal && s > t) && t - s < window; };
  double area = 0;
  std::vector<TileStrip> st(std::size_t(p.max_strips()));
  for (Index I = 0; I < p.query.size(); ++I)
    for (Index J = 0; J < p.key.size(); ++J) {
      const Index ns = plan_strips(p.query, I, p.key, J, sh.t.data(), sh.s.data(), causal, window,
                                   p.strip_rows, st.data());
      REQUIRE(ns <= p.max_strips());
      const Index i0 = p.query.begin[std::size_t(I)], j0 = p.key.begin[std::size_t(J)];
      std::vector<int> strip_of(std::size_t(p.query.rows(I)), -1);
      for (Index k = 0; k < ns; ++k) {
        const TileStrip& s = st[std::size_t(k)];
        REQUIRE(s.r0 < s.r1);
        REQUIRE(s.c0 < s.c1);
        CHECK(s.r1 <= p.query.rows(I));
        CHECK(s.c1 <= p.key.rows(J));
        if (k > 0) CHECK(s.r0 >= st[std::size_t(k - 1)].r1);
        if (p.strip_rows > 0) CHECK((s.r0 % p.strip_rows == 0));
        area += double(s.r1 - s.r0) * double(s.c1 - s.c0);
        Index m0 = s.c1, m1 = s.c0;  // the hull of the columns holding a masked pair
        for (Index r = s.r0; r < s.r1; ++r) {
          strip_of[std::size_t(r)] = int(k);
          for (Index c = s.c0; c < s.c1; ++c)
            if (!sees(sh.t[std::size_t(i0 + r)], sh.s[std::size_t(j0 + c)]))
              m0 = std::min(m0, c), m1 = std::max(m1, c + 1);
        }
        if (m0 >= m1) {  // exact: only the columns with a masked pair compare positions
          CHECK(!s.cut());
        } else {
          CHECK(s.m0 == m0);
          CHECK(s.m1 == m1);
        }
      }
      for (Index r = 0; r < p.query.rows(I); ++r)
        for (Index c = 0; c < p.key.rows(J); ++c) {
          if (!sees(sh.t[std::size_t(i0 + r)], sh.s[std::size_t(j0 + c)])) continue;
          const int k = strip_of[std::size_t(r)];
          REQUIRE(k >= 0);
          CHECK(c >= st[std::size_t(k)].c0);
          CHECK(c < st[std::size_t(k)].c1);
        }
    }
  return area;
}

}  // namespace

TEST_CASE("run plan: causal tile pairs are computed along the staircase", "[tile_plan]") {
  // A sink that takes strips (attention) under the causal mask: the pairs computed past the
  // diagonal are at most strip_rows / 2 per query row (strips of strip_rows rows), not the
  // whole diagonal tile pairs (n = 512: one 512-key tile, every pair computed).
  for (Index n : {Index(1), Index(63), Index(64), Index(65), Index(511), Index(512), Index(513),
                  Index(1024), Index(2048)}) {
    Shape sh(n, n, 128, 4, 4);
    sh.x.strips = true;
    sh.x.causal = true;
    const RunPlan p = plan_run(sh.x);
    check_run_plan(sh.x, p);
    REQUIRE(p.strip_rows > 0);
    const double visible = double(n) * double(n + 1) / 2;
    const double area = computed_pairs(sh, p, true, std::numeric_limits<double>::infinity());
    CAPTURE(n, area, visible);
    CHECK(area >= visible);
    CHECK(area <= visible + double(n) * double(p.strip_rows) / 2);
  }
  // No mask, or a sink that does not take strips: no strips (whole tile pairs).
  Shape sh(512, 512, 128, 4, 4);
  sh.x.strips = true;
  CHECK(plan_run(sh.x).strip_rows == 0);
  sh.x.strips = false;
  sh.x.causal = true;
  CHECK(plan_run(sh.x).strip_rows == 0);
}

TEST_CASE("run plan: strips with irregular, unsorted positions and windows", "[tile_plan]") {
  // Masks are by position: with any order of positions every visible pair is in its row's
  // strip and the masked columns are exact (computed_pairs); with a window the strips end on both
  // sides.
  std::mt19937 rng(5);
  std::uniform_real_distribution<double> u(-3, 3);
  for (int variant = 0; variant < 4; ++variant) {
    const Index nq = 300, nk = 700;
    Shape sh(nq, nk, 64, 2, 1);
    double base = 1.7e9;
    for (auto& x : sh.s) x = base += std::pow(10.0, u(rng));
    for (Index i = 0; i < nq; ++i) sh.t[std::size_t(i)] = sh.s[std::size_t(2 * i + 1)];
    if (variant & 1) {  // shuffled queries and keys (the tiles' spreads grow: rate 0 here)
      std::shuffle(sh.t.begin(), sh.t.end(), rng);
      std::shuffle(sh.s.begin(), sh.s.end(), rng);
    }
    const bool causal = variant != 2;
    const double window = variant >= 2 ? 2e4 : std::numeric_limits<double>::infinity();
    sh.x.strips = true, sh.x.causal = causal, sh.x.window = window;
    sh.x.query_tile = 100, sh.x.key_tile = 48;
    const RunPlan p = plan_run(sh.x);
    REQUIRE(p.strip_rows > 0);
    CAPTURE(variant);
    const double area = computed_pairs(sh, p, causal, window);
    CHECK(area <= double(nq) * double(nk));
    if (variant == 0) CHECK(area <= 0.5 * double(nq) * double(nk) + nq * p.strip_rows);
  }
}
