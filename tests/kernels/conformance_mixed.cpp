// The conformance suite's kernels (KernelsOf, tests/conformance_kernels.hpp) for the
// BlockDiagonal composition of every block type with pass-through coordinates (MixedFam); the
// nested compositions (NestedFam): conformance_nested.cpp. Apart since the two in one TU took
// 1.64 GB under the sanitizers (docs/build-cost.md §4).
// One line per encoding type: an explicit instantiation is defined once in the program.
#include "../conformance_kernels.hpp"

using namespace peal_test;

PEAL_CONFORMANCE_KERNELS(MixedFam);
