// Eigen's GEMM, GEMV and triangular-solve kernels and the decompositions of
// tests/eigen_kernels.hpp, instantiated once for every test TU that multiplies, solves or
// decomposes.
#include "../eigen_kernels.hpp"

#include <Eigen/Dense>

PEAL_TEST_EIGEN_KERNELS()
PEAL_TEST_EIGEN_DECOMPOSITIONS()
