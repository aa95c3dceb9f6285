// The kernels of the toy block's families (tests/toy_block.hpp), for the conformance and linear
// suites that tests/test_block_protocol.cpp runs on them. One line per encoding type.
#include "../conformance_kernels.hpp"
#include "../linear_kernels.hpp"
#include "../toy_block.hpp"

PEAL_CONFORMANCE_KERNELS(peal_test::ToyFam);
PEAL_CONFORMANCE_KERNELS(peal_test::ToyMixFam);
PEAL_LINEAR_KERNELS(false, peal_test::ToyMixFam);
