// The conformance suite's kernels (KernelsOf, tests/conformance_kernels.hpp) for
// RotationJordanBlock<2, 3>.
// One line per encoding type: an explicit instantiation is defined once in the program.
#include "../conformance_kernels.hpp"

using namespace peal_test;

PEAL_CONFORMANCE_KERNELS(RotationJordanFam<2>);
PEAL_CONFORMANCE_KERNELS(RotationJordanFam<3>);
