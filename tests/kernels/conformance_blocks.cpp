// The conformance suite's kernels (KernelsOf, tests/conformance_kernels.hpp) for the single blocks
// (RealBlock, RotationBlock).
// One line per encoding type: an explicit instantiation is defined once in the program.
#include "../conformance_kernels.hpp"

using namespace peal_test;

PEAL_CONFORMANCE_KERNELS(RealFam);
PEAL_CONFORMANCE_KERNELS(RotationFam);
