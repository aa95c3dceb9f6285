// The property suite for block-diagonal compositions of every block type with pass-through
// coordinates. Banks: test_properties_banks.cpp; a basis change:
// test_properties_basis_change.cpp (split for compile time, docs/build-cost.md).
#include "property_suite.hpp"

using namespace peal_test;

#define PEAL_SCALARS(F) Case<F, float>, Case<F, double>, Case<F, long double>

using CompositionCases = std::tuple<PEAL_SCALARS(MixedFam)>;

TEMPLATE_LIST_TEST_CASE("group-law suite: compositions", "[properties]", CompositionCases) {
  run_property_suite<TestType>();
}
