// The kernel-conformance suite (conformance_suite.hpp) for the diagonalizable blocks: RealBlock
// and RotationBlock. Jordan chains: test_conformance_jordan.cpp and
// test_conformance_rotation_jordan.cpp (chains of length 1 run the code of these two blocks).
// The suite is split over files of about half a minute of compile each, so that they compile in
// parallel and none passes a minute (docs/build-cost.md).
#include "conformance_suite.hpp"

using namespace peal_test;
using peal_test::conformance::run_kernel_conformance;

TEST_CASE("kernel conformance: RealBlock", "[conformance]") {
  run_kernel_conformance<RealFam>(101);
}
TEST_CASE("kernel conformance: RotationBlock", "[conformance]") {
  run_kernel_conformance<RotationFam>(102);
}
