// Eigen's decompositions of tests/eigen_kernels.hpp (RealSchur and EigenSolver in double and
// long double, JacobiSVD in double), instantiated once for every test TU that decomposes. Apart
// from tests/kernels/eigen.cpp because the sanitizer build compiles that one at -O1 (the GEMM
// the heavy tests run) and this one, whose checks run in seconds, at -O0 like the other
// kernels (ASan + UBSan: 24.5 s at -O1 for both in one TU, 8.6 s for the GEMM alone).
#include "../eigen_kernels.hpp"

#include <Eigen/Dense>

PEAL_TEST_EIGEN_DECOMPOSITIONS()
