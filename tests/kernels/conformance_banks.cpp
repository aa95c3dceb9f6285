// The conformance suite's kernels (KernelsOf, tests/conformance_kernels.hpp) for the banks of
// rotations (also xPos and RetNet, test_conformance_presets.cpp) and of real blocks. The banks of
// Jordan blocks: conformance_jordan_banks.cpp (split for compile time).
// One line per encoding type: an explicit instantiation is defined once in the program.
#include "../conformance_kernels.hpp"

using namespace peal_test;
using peal::Layout;

PEAL_CONFORMANCE_KERNELS(BankFam<RotationFam, Layout::Interleaved>);
PEAL_CONFORMANCE_KERNELS(BankFam<RealFam, Layout::Interleaved>);
