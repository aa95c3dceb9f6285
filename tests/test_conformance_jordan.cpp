// The kernel-conformance suite (conformance_suite.hpp) for JordanBlock<2, 3, 4>: chains of 2 to
// 4, which scores' GEMM runs unlimited, on 32- and on 8-position float tiles. The other blocks:
// test_conformance_blocks.cpp, test_conformance_rotation_jordan.cpp.
#include "conformance_suite.hpp"

using namespace peal_test;
using peal_test::conformance::run_kernel_conformance;

TEST_CASE("kernel conformance: JordanBlock<2>", "[conformance]") {
  run_kernel_conformance<JordanFam<2>>(103);
}
TEST_CASE("kernel conformance: JordanBlock<3>", "[conformance]") {
  run_kernel_conformance<JordanFam<3>>(104);
}
TEST_CASE("kernel conformance: JordanBlock<4>", "[conformance]") {
  run_kernel_conformance<JordanFam<4>>(105);
}
