// The kernel-conformance suite (conformance_suite.hpp) for banks (rotations in both layouts,
// real, Jordan and complex Jordan blocks) and the presets made of them: RoPE with every
// rope_type, both layouts and partial rotary, xPos, RetNet per head. (Rotation banks, xPos and
// RetNet heads share one encoding type, Bank<RotationBlock<double>>, and every RoPE preset is a
// RopeEncoding<double>: one kernel instantiation each.)
#include "conformance_suite.hpp"

using namespace peal_test;
using peal::Layout;
using peal::RopeType;
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
TEST_CASE("kernel conformance: RoPE presets", "[conformance]") {
  // Every rope_type; both layouts; full and partial rotary (the PassThrough tail); pair counts
  // with a compiled-in loop in encode (8, 16, 32) and without (10, 12, 18).
  run_kernel_conformance<RopeFam<RopeType::Default, Layout::HalfSplit, 64>>(311);
  run_kernel_conformance<RopeFam<RopeType::Default, Layout::Interleaved, 32, 50>>(312);
  run_kernel_conformance<RopeFam<RopeType::Linear, Layout::Interleaved, 32>>(313);
  run_kernel_conformance<RopeFam<RopeType::Dynamic, Layout::HalfSplit, 40, 50>>(314);
  run_kernel_conformance<RopeFam<RopeType::Yarn, Layout::HalfSplit, 32>>(315);
  run_kernel_conformance<RopeFam<RopeType::Yarn, Layout::Interleaved, 48, 75>>(316);
  run_kernel_conformance<RopeFam<RopeType::LongRope, Layout::HalfSplit, 32, 50>>(317);
  run_kernel_conformance<RopeFam<RopeType::Llama3, Layout::Interleaved, 24>>(318);
}
TEST_CASE("kernel conformance: xPos and RetNet heads", "[conformance]") {
  run_kernel_conformance<XposFam>(321);
  run_kernel_conformance<RetNetFam<0>>(322);
  run_kernel_conformance<RetNetFam<2>>(323);
}
