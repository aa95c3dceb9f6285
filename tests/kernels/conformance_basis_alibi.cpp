// The conformance suite's kernels (KernelsOf, tests/conformance_kernels.hpp) for BasisChange over
// MixedFam's composition, and ALiBi's Jordan construction.
// One line per encoding type: an explicit instantiation is defined once in the program.
#include "../conformance_kernels.hpp"

using namespace peal_test;

PEAL_CONFORMANCE_KERNELS(BasisChangeFam);
PEAL_CONFORMANCE_KERNELS(AlibiFam);
