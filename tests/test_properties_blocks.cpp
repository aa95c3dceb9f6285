// The property suite for RealBlock and RotationBlock, float, double and long double.
// (Split over several files so the instantiations compile in parallel.)
#include "property_suite.hpp"

using namespace peal_test;

#define PEAL_SCALARS(F) Case<F, float>, Case<F, double>, Case<F, long double>

using BlockCases = std::tuple<PEAL_SCALARS(RealFam), PEAL_SCALARS(RotationFam)>;

TEMPLATE_LIST_TEST_CASE("group-law suite: RealBlock, RotationBlock", "[properties]",
                        BlockCases) {
  run_property_suite<TestType>();
}
