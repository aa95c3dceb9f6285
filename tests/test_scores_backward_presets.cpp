// Tests of include/peal/scores_backward.hpp: RoPE near 1.7e9, xPos, ALiBi's Jordan block, and
// float storage with float arithmetic (the reference, the tolerance and the check:
// tests/scores_backward_check.hpp, derived at the top of tests/test_scores_backward.cpp; split
// from it so that neither TU passes 1.5 GB of compile).
#include <catch2/catch.hpp>

#include "scores_backward_check.hpp"

using namespace peal_test;
using namespace peal_test::scores_backward_check;

TEST_CASE("scores backward: RoPE near 1.7e9, xPos, ALiBi's Jordan block", "[scores_backward]") {
  const Shape rope{5, 7, 4, 2, 1.7e9, 1.7e9 + 4096, true, true, true};
  check_scores_backward<RopePartial>(rope, Regime::Random, 0, false, 7);
  const Shape x{5, 6, 2, 2, 0, 4096, true, false, false};
  check_scores_backward<XposFam>(x, Regime::Random, 0, false, 8);
  check_scores_backward<AlibiFam>(x, Regime::Large, 1, false, 9);  // rates ~1e-3: in range
}

TEST_CASE("scores backward: float storage, float arithmetic", "[scores_backward]") {
  // Float's rebasing budget (2^12 for the Jordan chains) cuts 3000 positions into tiles of
  // half-spread ~16: many tile pairs, Δ ≠ 0 for most.
  const Shape wide{6, 8, 4, 2, 0, 3000, false, true, true};
  check_scores_backward<MixedFam, float>(wide, Regime::Large, 2, false, 13);
  const Shape rope{5, 7, 4, 2, 1.7e9, 1.7e9 + 4096, true, true, true};
  check_scores_backward<RopePartial, float>(rope, Regime::Random, 0, false, 14);
  check_scores_backward<RopePartial, float>(rope, Regime::Random, 0, false, 14, true);  // strided
}

TEST_CASE("scores backward: causal over sorted positions, in row blocks", "[scores_backward]") {
  // One query tile of two row blocks, each stopping at the last key its last row sees.
  const Shape sh{70, 80, 1, 1, 0, 160, true, true, true, true};
  check_scores_backward<RopePartial>(sh, Regime::Random, 0, false, 33);
}
