// The property suite for a basis change in float (double and long double:
// test_properties_basis_change.cpp).
#include "property_suite.hpp"

using namespace peal_test;

TEST_CASE("group-law suite: basis change - float", "[properties]") {
  run_property_suite<Case<BasisChangeFam, float>>();
}
