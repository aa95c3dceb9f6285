// The linear kernels of tests/kernel_catalogue.hpp, instantiated once for every test TU that runs them.
#include "../kernel_catalogue.hpp"

PEAL_TEST_CATALOGUE_LINEAR()
