// The kernel-conformance suite (conformance_suite.hpp) for xPos and RetNet heads (rotation banks,
// xPos and RetNet heads share one encoding type, Bank<RotationBlock<double>>). RoPE:
// test_conformance_rope.cpp and test_conformance_rope_scaling.cpp.
#include "conformance_suite.hpp"

using namespace peal_test;
using peal::Layout;
using peal_test::conformance::run_kernel_conformance;

TEST_CASE("kernel conformance: xPos and RetNet heads", "[conformance]") {
  run_kernel_conformance<XposFam>(321);
  run_kernel_conformance<RetNetFam<0>>(322);
  run_kernel_conformance<RetNetFam<2>>(323);
}
