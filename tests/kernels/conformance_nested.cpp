// The conformance suite's kernels (KernelsOf, tests/conformance_kernels.hpp) for the nested
// BlockDiagonal compositions (NestedFam); every block type with pass-through coordinates:
// conformance_mixed.cpp.
// One line per encoding type: an explicit instantiation is defined once in the program.
#include "../conformance_kernels.hpp"

using namespace peal_test;

PEAL_CONFORMANCE_KERNELS(NestedFam);
