// The conformance suite's kernels (KernelsOf, tests/conformance_kernels.hpp) for the banks of
// Jordan blocks and of complex Jordan blocks (test_conformance_banks.cpp). The banks of
// rotations and real blocks: conformance_banks.cpp.
// One line per encoding type: an explicit instantiation is defined once in the program.
#include "../conformance_kernels.hpp"

using namespace peal_test;
using peal::Layout;

PEAL_CONFORMANCE_KERNELS(BankFam<JordanFam<3>, Layout::Interleaved>);
PEAL_CONFORMANCE_KERNELS(BankFam<RotationJordanFam<2>, Layout::Interleaved>);
