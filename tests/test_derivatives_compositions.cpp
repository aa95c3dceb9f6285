// Tests of include/peal/derivatives.hpp on compositions (tests/derivative_check.hpp): the mixed
// composition of every block type, compositions nested in a composition, and a basis change
// (∂A/∂P_ij = E_ij P⁻¹ A − A E_ij P⁻¹ for all d² entries of P), against a fourth-order central
// difference of the long double twin. The basis change runs in double and long double: its
// float instantiation (Eigen's float GEMM and LU around the same templates) would add ~18 s of
// compile to this TU for code that differs from double's only by its rounding, which the
// other families check in float. Its 336 parameters are checked a sixth per case, each one
// twice over the 12 cases (167 s under ASan + UBSan at -O0 for all of them every time).
#include <tuple>

#include "derivative_check.hpp"

using namespace peal_test;
using peal_test::derivative_check::run_family;

namespace {
using CompositionCases = std::tuple<MixedFam, NestedFam>;
}  // namespace

TEMPLATE_LIST_TEST_CASE("derivatives: compositions against central differences", "[derivatives]",
                        CompositionCases) {
  run_family<TestType>();
}

TEST_CASE("derivatives: a basis change against central differences", "[derivatives]") {
  run_family<BasisChangeFam, /*WithFloat=*/false, /*Sample=*/6>();
}
