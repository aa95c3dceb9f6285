// The linear-attention suites' kernels (run_linear, tests/linear_kernels.hpp) for the
// compositions, the basis change, ALiBi and RoPE (test_linear_compositions.cpp; Full: every
// storage set, test_linear_attention.cpp). One line per encoding type and storage set: an
// explicit instantiation is defined once in the program.
#include "../linear_kernels.hpp"

using namespace peal_test;
using peal::Layout;
using peal::RopeType;

PEAL_LINEAR_KERNELS(false, MixedFam);
PEAL_LINEAR_KERNELS(true, MixedFam);
PEAL_LINEAR_KERNELS(false, NestedFam);
PEAL_LINEAR_KERNELS(false, BasisChangeFam);
PEAL_LINEAR_KERNELS(false, AlibiFam);
PEAL_LINEAR_KERNELS(false, RopeFam<RopeType::Default, Layout::HalfSplit, 64>);
PEAL_LINEAR_KERNELS(true, RopeFam<RopeType::Default, Layout::HalfSplit, 64>);
