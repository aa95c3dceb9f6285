// The property suite for RotationJordanBlock<M>, M = 1..3, float, double and long double.
#include "property_suite.hpp"

using namespace peal_test;

#define PEAL_SCALARS(F) Case<F, float>, Case<F, double>, Case<F, long double>

using RotationJordanCases =
    std::tuple<PEAL_SCALARS(RotationJordanFam<1>), PEAL_SCALARS(RotationJordanFam<2>),
               PEAL_SCALARS(RotationJordanFam<3>)>;

TEMPLATE_LIST_TEST_CASE("group-law suite: RotationJordanBlock<1..3>", "[properties]",
                        RotationJordanCases) {
  run_property_suite<TestType>();
}
