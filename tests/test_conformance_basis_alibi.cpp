// The kernel-conformance suite (conformance_suite.hpp) for a basis change and ALiBi's Jordan
// construction (a rotation bank composed with JordanBlock<2>{0}, the inputs augmented). The
// other compositions: test_conformance_compositions.cpp.
#include "conformance_suite.hpp"

using namespace peal_test;
using peal_test::conformance::run_kernel_conformance;

static_assert(conformance::has_shape<AlibiFam>::value, "ALiBi's inputs carry its augmentation");

TEST_CASE("kernel conformance: basis change", "[conformance]") {
  run_kernel_conformance<BasisChangeFam>(203);
}
TEST_CASE("kernel conformance: ALiBi (Jordan construction)", "[conformance]") {
  run_kernel_conformance<AlibiFam>(204);
}
