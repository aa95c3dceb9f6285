// The toy block (tests/toy_block.hpp), a block type peal does not know, through the suites every
// built-in block runs, with no edit to them: kernel conformance (encode, shift, scores,
// attention against the long double twin, every storage, view, option and thread count; the
// suite reads the toy's growth rate and chain length from its generator,
// tests/generator_facts.hpp), the group-law properties (float, double, long double) and linear
// attention in its three forms. Apart from tests/test_block_protocol.cpp so that both compile
// in parallel, each under a minute (docs/build-cost.md).
#include "conformance_suite.hpp"
#include "linear_family_run.hpp"
#include "property_suite.hpp"
#include "toy_block.hpp"

// The toy families' kernels: tests/kernels/conformance_toy.cpp.
PEAL_CONFORMANCE_KERNELS_EXTERN(peal_test::ToyFam);
PEAL_CONFORMANCE_KERNELS_EXTERN(peal_test::ToyMixFam);
PEAL_LINEAR_KERNELS_EXTERN(false, peal_test::ToyMixFam);

TEST_CASE("block protocol: a user block runs the kernel-conformance suite", "[protocol]") {
  peal_test::conformance::run_kernel_conformance<peal_test::ToyFam>(131);
  peal_test::conformance::run_kernel_conformance<peal_test::ToyMixFam>(132);
}

TEST_CASE("block protocol: a user block runs the property suite", "[protocol]") {
  using peal_test::Case;
  peal_test::run_property_suite<Case<peal_test::ToyFam, float>>();
  peal_test::run_property_suite<Case<peal_test::ToyFam, double>>();
  peal_test::run_property_suite<Case<peal_test::ToyFam, long double>>();
  peal_test::run_property_suite<Case<peal_test::ToyMixFam, double>>();
}

TEST_CASE("block protocol: a user block runs the linear-attention suite", "[protocol]") {
  peal_test::linear::run_family<peal_test::ToyMixFam>(133, false);
}

