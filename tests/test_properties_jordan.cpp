// The property suite for JordanBlock<M>, M = 1..6, float, double and long double.
#include "property_suite.hpp"

using namespace peal_test;

#define PEAL_SCALARS(F) Case<F, float>, Case<F, double>, Case<F, long double>

using JordanCases =
    std::tuple<PEAL_SCALARS(JordanFam<1>), PEAL_SCALARS(JordanFam<2>), PEAL_SCALARS(JordanFam<3>),
               PEAL_SCALARS(JordanFam<4>), PEAL_SCALARS(JordanFam<5>), PEAL_SCALARS(JordanFam<6>)>;

TEMPLATE_LIST_TEST_CASE("group-law suite: JordanBlock<1..6>", "[properties]", JordanCases) {
  run_property_suite<TestType>();
}
