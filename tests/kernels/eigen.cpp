// Eigen's GEMM, GEMV and triangular-solve kernels of tests/eigen_kernels.hpp, instantiated once
// for every test TU that multiplies or solves (the decompositions: eigen_decompositions.cpp).
#include "../eigen_kernels.hpp"

#include <Eigen/Dense>

PEAL_TEST_EIGEN_KERNELS()
PEAL_TEST_SMALL_PRODUCTS()
