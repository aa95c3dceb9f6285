// The property suite for block-diagonal compositions of every block type with pass-through
// coordinates, and a basis change. Banks: test_properties_banks.cpp.
#include "property_suite.hpp"

using namespace peal_test;

#define PEAL_SCALARS(F) Case<F, float>, Case<F, double>, Case<F, long double>

using CompositionCases = std::tuple<PEAL_SCALARS(MixedFam), PEAL_SCALARS(BasisChangeFam)>;

TEMPLATE_LIST_TEST_CASE("group-law suite: compositions, basis change", "[properties]",
                        CompositionCases) {
  run_property_suite<TestType>();
}
