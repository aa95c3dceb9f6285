// The conformance suite's kernels (KernelsOf, tests/conformance_kernels.hpp) for JordanBlock<2, 3,
// 4>.
// One line per encoding type: an explicit instantiation is defined once in the program.
#include "../conformance_kernels.hpp"

using namespace peal_test;

PEAL_CONFORMANCE_KERNELS(JordanFam<2>);
PEAL_CONFORMANCE_KERNELS(JordanFam<3>);
PEAL_CONFORMANCE_KERNELS(JordanFam<4>);
