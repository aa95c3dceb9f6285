// The kernel-conformance suite (conformance_suite.hpp) for RotationJordanBlock<2, 3> (complex
// Jordan chains). The other blocks: test_conformance_blocks.cpp, test_conformance_jordan.cpp.
#include "conformance_suite.hpp"

using namespace peal_test;
using peal_test::conformance::run_kernel_conformance;

TEST_CASE("kernel conformance: RotationJordanBlock<2>", "[conformance]") {
  run_kernel_conformance<RotationJordanFam<2>>(106);
}
TEST_CASE("kernel conformance: RotationJordanBlock<3>", "[conformance]") {
  run_kernel_conformance<RotationJordanFam<3>>(107);
}
