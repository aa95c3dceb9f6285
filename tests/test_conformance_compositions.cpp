// The kernel-conformance suite (conformance_suite.hpp) for compositions: every block type with
// pass-through coordinates, and nested compositions. A basis change and ALiBi's Jordan
// construction: test_conformance_basis_alibi.cpp.
#include "conformance_suite.hpp"

using namespace peal_test;
using peal_test::conformance::run_kernel_conformance;

TEST_CASE("kernel conformance: composition of every block type and pass-through", "[conformance]") {
  run_kernel_conformance<MixedFam>(201);
}
TEST_CASE("kernel conformance: nested compositions", "[conformance]") {
  run_kernel_conformance<NestedFam>(202);
}
