// The kernel-conformance suite (conformance_suite.hpp) for compositions: every block type with
// pass-through coordinates, nested compositions, a basis change, and ALiBi's Jordan
// construction (a rotation bank composed with JordanBlock<2>{0}, the inputs augmented).
#include "conformance_suite.hpp"

using namespace peal_test;
using peal_test::conformance::run_kernel_conformance;

static_assert(conformance::has_shape<AlibiFam>::value, "ALiBi's inputs carry its augmentation");

TEST_CASE("kernel conformance: composition of every block type and pass-through", "[conformance]") {
  run_kernel_conformance<MixedFam>(201);
}
TEST_CASE("kernel conformance: nested compositions", "[conformance]") {
  run_kernel_conformance<NestedFam>(202);
}
TEST_CASE("kernel conformance: basis change", "[conformance]") {
  run_kernel_conformance<BasisChangeFam>(203);
}
TEST_CASE("kernel conformance: ALiBi (Jordan construction)", "[conformance]") {
  run_kernel_conformance<AlibiFam>(204);
}
