// The linear-attention suites' kernels (run_linear, tests/linear_kernels.hpp) for the banks of
// test_linear_families.cpp (the rotation bank also serves xPos and RetNet). One line per encoding
// type and storage set: an explicit instantiation is defined once in the program.
#include "../linear_kernels.hpp"

using namespace peal_test;
using peal::Layout;

PEAL_LINEAR_KERNELS(false, BankFam<RotationFam, Layout::Interleaved>);
PEAL_LINEAR_KERNELS(false, BankFam<RealFam, Layout::Interleaved>);
PEAL_LINEAR_KERNELS(false, BankFam<JordanFam<3>, Layout::Interleaved>);
PEAL_LINEAR_KERNELS(false, BankFam<RotationJordanFam<2>, Layout::Interleaved>);
