// The kernel-conformance suite (conformance_suite.hpp) for the RoPE presets: plain, linear and
// dynamic scaling here, YaRN, LongRoPE and Llama 3 in test_conformance_rope_scaling.cpp; both
// layouts and partial rotary. (Every RoPE preset is a RopeEncoding<double>: one kernel
// instantiation, but the suite's own code once per family, hence two files.) xPos and RetNet:
// test_conformance_presets.cpp.
#include "conformance_suite.hpp"

using namespace peal_test;
using peal::Layout;
using peal::RopeType;
using peal_test::conformance::run_kernel_conformance;

TEST_CASE("kernel conformance: RoPE presets", "[conformance]") {
  // Both layouts; full and partial rotary (the PassThrough tail); pair counts with a
  // compiled-in loop in encode (8, 16, 32) and without (10, 12, 18, here and in
  // test_conformance_rope_scaling.cpp).
  run_kernel_conformance<RopeFam<RopeType::Default, Layout::HalfSplit, 64>>(311);
  run_kernel_conformance<RopeFam<RopeType::Default, Layout::Interleaved, 32, 50>>(312);
  run_kernel_conformance<RopeFam<RopeType::Linear, Layout::Interleaved, 32>>(313);
  run_kernel_conformance<RopeFam<RopeType::Dynamic, Layout::HalfSplit, 40, 50>>(314);
}
