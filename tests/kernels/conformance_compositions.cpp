// The conformance suite's kernels (KernelsOf, tests/conformance_kernels.hpp) for the two
// BlockDiagonal compositions of MixedFam and NestedFam.
// One line per encoding type: an explicit instantiation is defined once in the program.
#include "../conformance_kernels.hpp"

using namespace peal_test;

PEAL_CONFORMANCE_KERNELS(MixedFam);
PEAL_CONFORMANCE_KERNELS(NestedFam);
