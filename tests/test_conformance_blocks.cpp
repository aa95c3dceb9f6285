// The kernel-conformance suite (conformance_suite.hpp) for the blocks: RealBlock, RotationBlock,
// JordanBlock<2, 3, 4> (chains of 2 to 4: unlimited, 32- and 8-position float tiles in scores'
// GEMM), RotationJordanBlock<2, 3>. (Chains of length 1 run the code of RealBlock and
// RotationBlock; the suite is split over three files so that they compile in parallel.)
#include "conformance_suite.hpp"

using namespace peal_test;
using peal_test::conformance::run_kernel_conformance;

TEST_CASE("kernel conformance: RealBlock", "[conformance]") {
  run_kernel_conformance<RealFam>(101);
}
TEST_CASE("kernel conformance: RotationBlock", "[conformance]") {
  run_kernel_conformance<RotationFam>(102);
}
TEST_CASE("kernel conformance: JordanBlock<2>", "[conformance]") {
  run_kernel_conformance<JordanFam<2>>(103);
}
TEST_CASE("kernel conformance: JordanBlock<3>", "[conformance]") {
  run_kernel_conformance<JordanFam<3>>(104);
}
TEST_CASE("kernel conformance: JordanBlock<4>", "[conformance]") {
  run_kernel_conformance<JordanFam<4>>(105);
}
TEST_CASE("kernel conformance: RotationJordanBlock<2>", "[conformance]") {
  run_kernel_conformance<RotationJordanFam<2>>(106);
}
TEST_CASE("kernel conformance: RotationJordanBlock<3>", "[conformance]") {
  run_kernel_conformance<RotationJordanFam<3>>(107);
}
