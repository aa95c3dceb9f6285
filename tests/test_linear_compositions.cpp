// peal::linear_attention (include/peal/linear_attention.hpp) on the compositions, a basis change
// and the presets (RoPE, xPos, RetNet, ALiBi's Jordan block) of tests/families.hpp: the checks
// of linear_family_run.hpp, as test_linear_families.cpp runs them on the banks.
#include <catch2/catch.hpp>

#include "linear_family_run.hpp"

using namespace peal_test;
using namespace peal_test::linear;
using peal::Layout;

TEST_CASE("linear families: compositions and a basis change", "[linear]") {
  run_family<MixedFam>(406, false);
  run_family<NestedFam>(407, false);
  run_family<BasisChangeFam>(408, false);
}
TEST_CASE("linear families: presets (RoPE, xPos, RetNet, ALiBi's Jordan block)", "[linear]") {
  run_family<RopeFam<peal::RopeType::Default, Layout::HalfSplit, 64>>(409, true);
  run_family<RetNetFam<0>>(410, true);
  run_family<XposFam>(411, false);
  run_family<AlibiFam>(412, false);
}
