// The kernel-conformance suite (conformance_suite.hpp) for banks: rotations in both layouts,
// real, Jordan and complex Jordan blocks. The presets made of banks (RoPE, xPos, RetNet):
// test_conformance_presets.cpp.
#include "conformance_suite.hpp"

using namespace peal_test;
using peal::Layout;
using peal_test::conformance::run_kernel_conformance;

TEST_CASE("kernel conformance: Bank<RotationBlock>, interleaved and half-split", "[conformance]") {
  run_kernel_conformance<BankFam<RotationFam, Layout::Interleaved>>(301);
  run_kernel_conformance<BankFam<RotationFam, Layout::HalfSplit, 5>>(302);
}
TEST_CASE("kernel conformance: Bank<RealBlock>, Bank<JordanBlock<3>>, Bank<RotationJordanBlock<2>>",
          "[conformance]") {
  run_kernel_conformance<BankFam<RealFam, Layout::Interleaved, 5>>(303);
  run_kernel_conformance<BankFam<JordanFam<3>, Layout::HalfSplit, 3>>(304);
  run_kernel_conformance<BankFam<RotationJordanFam<2>, Layout::Interleaved, 2>>(305);
}
