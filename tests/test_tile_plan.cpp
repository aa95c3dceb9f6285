// The tile plan of the fused kernels (include/peal/detail/tile_plan.hpp): plan_tiles cuts a
// sequence of positions into consecutive tiles of at most max_rows tokens whose positions
// stay within h of the tile's anchor, and marks the tiles whose offsets from their anchor
// equal the reference tile's ("regular": one coefficient table serves them all).
#include <catch2/catch.hpp>
#include <cmath>
#include <limits>
#include <peal/detail/tile_plan.hpp>
#include <random>
#include <vector>

namespace {

using peal::Index;
using peal::detail::scores_kernels::max_half_spread;
using peal::detail::scores_kernels::plan_tiles;
using peal::detail::scores_kernels::TilePlan;

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
