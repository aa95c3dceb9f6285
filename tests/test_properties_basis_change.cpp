// The property suite for a basis change (BasisChange over the mixed composition, in a random
// well-conditioned basis), in double and long double; float: test_properties_basis_change_float.cpp
// (one file held the three and passed the minute and 1.5 GB of compile, docs/build-cost.md §3).
// The compositions themselves: test_properties_compositions.cpp.
#include "property_suite.hpp"

using namespace peal_test;

using BasisChangeCases = std::tuple<Case<BasisChangeFam, double>, Case<BasisChangeFam, long double>>;

TEMPLATE_LIST_TEST_CASE("group-law suite: basis change", "[properties]", BasisChangeCases) {
  run_property_suite<TestType>();
}
