// The kernel-conformance suite (conformance_suite.hpp) for the RoPE presets with YaRN, LongRoPE
// and Llama 3 scaling, both layouts, full and partial rotary. The others:
// test_conformance_rope.cpp.
#include "conformance_suite.hpp"

using namespace peal_test;
using peal::Layout;
using peal::RopeType;
using peal_test::conformance::run_kernel_conformance;

// [others_shard]: run by ctest's peal_tests_others, to balance the two shards
// (tests/CMakeLists.txt).
TEST_CASE("kernel conformance: RoPE presets with YaRN, LongRoPE and Llama 3 scaling",
          "[conformance][others_shard]") {
  // Both layouts, full and partial rotary, as above.
  run_kernel_conformance<RopeFam<RopeType::Yarn, Layout::HalfSplit, 32>>(315);
  run_kernel_conformance<RopeFam<RopeType::Yarn, Layout::Interleaved, 48, 75>>(316);
  run_kernel_conformance<RopeFam<RopeType::LongRope, Layout::HalfSplit, 32, 50>>(317);
  run_kernel_conformance<RopeFam<RopeType::Llama3, Layout::Interleaved, 24>>(318);
}
