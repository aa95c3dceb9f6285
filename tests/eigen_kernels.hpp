// Eigen's blocked GEMM, GEMV and triangular-solve kernels for float, double and long double,
// instantiated once for the test executable (tests/kernels/eigen.cpp) and declared extern here,
// so that the ~60 test TUs stop compiling them each (the fused kernels' GEMM, the references'
// products and their LU solves all reach them). Each is an EIGEN_DONT_INLINE
// member defined outside its class, which an explicit instantiation declaration suppresses;
// the blocking sizes (mr, nr, LhsProgress) come from gebp_traits, so the same lines fit every
// target (-march=native in build/, the baseline in build-asan/). A declaration that names an
// instantiation no TU uses costs nothing; one the kernels stop using only stops saving time.
// Written against Eigen 3.4 (Eigen/src/Core/products/GeneralMatrixMatrix.h,
// GeneralMatrixVector.h, TriangularSolverMatrix.h), as include/peal/detail/eigen_gemm.hpp is.
// Force-included in every test TU through the precompiled header (tests/CMakeLists.txt).
#pragma once

#include <Eigen/Core>
#include <Eigen/Eigenvalues>
#include <Eigen/SVD>
#include <peal/detail/eigen_gemm.hpp>

namespace peal_test_eigen {
using Eigen::Index;
using Eigen::internal::blas_data_mapper;
using Eigen::internal::const_blas_data_mapper;
template <class S>
using Traits = Eigen::internal::gebp_traits<S, S>;
template <class S, int Order>
using In = const_blas_data_mapper<S, Index, Order>;
using MatrixXld = Eigen::Matrix<long double, Eigen::Dynamic, Eigen::Dynamic>;
}  // namespace peal_test_eigen

// The GEMM driver (general_matrix_matrix_product::run, defined in its class: an explicit
// instantiation declaration keeps GCC and clang from emitting it when they do not inline it,
// as they did in 36 of the Release test objects) for each storage order of the operands; a
// row-major result is the column-major product of the transposes.
#define PEAL_TEST_EIGEN_GEMM_DRIVER(EXT, S, LhsOrder, RhsOrder)                              \
  EXT template struct Eigen::internal::general_matrix_matrix_product<                        \
      Eigen::Index, S, LhsOrder, false, S, RhsOrder, false, Eigen::ColMajor, 1>;

// The packing and micro-kernels of general_matrix_matrix_product for both storage orders of
// each operand (peal's A·Bᵀ and A·B, the references' products), then the matrix-vector
// products and the LU's triangular solves.
#define PEAL_TEST_EIGEN_KERNELS_OF(EXT, S)                                                        \
  EXT template struct Eigen::internal::gebp_kernel<                                               \
      S, S, Eigen::Index, Eigen::internal::blas_data_mapper<S, Eigen::Index, Eigen::ColMajor, 0, 1>, \
      peal_test_eigen::Traits<S>::mr, peal_test_eigen::Traits<S>::nr, false, false>;              \
  EXT template struct Eigen::internal::gemm_pack_lhs<                                             \
      S, Eigen::Index, peal_test_eigen::In<S, Eigen::ColMajor>, peal_test_eigen::Traits<S>::mr,   \
      peal_test_eigen::Traits<S>::LhsProgress, peal_test_eigen::Traits<S>::LhsPacket4Packing,     \
      Eigen::ColMajor, false, false>;                                                             \
  EXT template struct Eigen::internal::gemm_pack_lhs<                                             \
      S, Eigen::Index, peal_test_eigen::In<S, Eigen::RowMajor>, peal_test_eigen::Traits<S>::mr,   \
      peal_test_eigen::Traits<S>::LhsProgress, peal_test_eigen::Traits<S>::LhsPacket4Packing,     \
      Eigen::RowMajor, false, false>;                                                             \
  EXT template struct Eigen::internal::gemm_pack_rhs<S, Eigen::Index,                             \
                                                     peal_test_eigen::In<S, Eigen::ColMajor>,     \
                                                     peal_test_eigen::Traits<S>::nr,              \
                                                     Eigen::ColMajor, false, false>;              \
  EXT template struct Eigen::internal::gemm_pack_rhs<S, Eigen::Index,                             \
                                                     peal_test_eigen::In<S, Eigen::RowMajor>,     \
                                                     peal_test_eigen::Traits<S>::nr,              \
                                                     Eigen::RowMajor, false, false>;              \
  EXT template struct Eigen::internal::general_matrix_vector_product<                             \
      Eigen::Index, S, peal_test_eigen::In<S, Eigen::ColMajor>, Eigen::ColMajor, false, S,        \
      peal_test_eigen::In<S, Eigen::RowMajor>, false, 0>;                                         \
  EXT template struct Eigen::internal::general_matrix_vector_product<                             \
      Eigen::Index, S, peal_test_eigen::In<S, Eigen::RowMajor>, Eigen::RowMajor, false, S,        \
      peal_test_eigen::In<S, Eigen::ColMajor>, false, 0>;                                         \
  EXT template struct Eigen::internal::general_matrix_vector_product<                             \
      Eigen::Index, S, peal_test_eigen::In<S, Eigen::ColMajor>, Eigen::ColMajor, false, S,        \
      peal_test_eigen::In<S, Eigen::ColMajor>, false, 0>;                                         \
  EXT template struct Eigen::internal::triangular_solve_matrix<                                   \
      S, Eigen::Index, Eigen::OnTheLeft, Eigen::UnitLower, false, Eigen::ColMajor,                \
      Eigen::ColMajor, 1>;                                                                        \
  EXT template struct Eigen::internal::triangular_solve_matrix<                                   \
      S, Eigen::Index, Eigen::OnTheLeft, Eigen::Upper, false, Eigen::ColMajor, Eigen::ColMajor, 1>; \
  PEAL_TEST_EIGEN_GEMM_DRIVER(EXT, S, Eigen::ColMajor, Eigen::ColMajor)                         \
  PEAL_TEST_EIGEN_GEMM_DRIVER(EXT, S, Eigen::RowMajor, Eigen::ColMajor)                         \
  PEAL_TEST_EIGEN_GEMM_DRIVER(EXT, S, Eigen::ColMajor, Eigen::RowMajor)                         \
  PEAL_TEST_EIGEN_GEMM_DRIVER(EXT, S, Eigen::RowMajor, Eigen::RowMajor)                         \
  EXT template void Eigen::internal::evaluateProductBlockingSizesHeuristic<S, S, 1, Eigen::Index>( \
      Eigen::Index&, Eigen::Index&, Eigen::Index&, Eigen::Index);

#define PEAL_TEST_EIGEN_KERNELS(EXT)          \
  PEAL_TEST_EIGEN_KERNELS_OF(EXT, float)      \
  PEAL_TEST_EIGEN_KERNELS_OF(EXT, double)     \
  PEAL_TEST_EIGEN_KERNELS_OF(EXT, long double)

// The decompositions: in double, the dense fallback's growth rate (generic_rate in
// include/peal/detail/coders/coders.hpp: EigenSolver, through RealSchur) for the toy block and
// the dense encodings the tests run, and the references' condition numbers (JacobiSVD); in long
// double, the suites' facts of a generator (tests/generator_facts.hpp: EigenSolver), which
// every TU that runs a conformance or linear suite instantiated (~10-19 s of g++ -O2 each:
// test_conformance_rope.cpp 25.4 s, 6.5 s before the facts). Their compute() members are
// defined outside their classes too; clang -ftime-trace put EigenSolver at 10 of the 18 s of
// test_block_protocol.cpp's -O0 compile. Defined in tests/kernels/eigen_decompositions.cpp.
// EigenSolver's compute() is a member template (on the input's type), which the class's
// explicit instantiation does not cover: it is named on its own.
#define PEAL_TEST_EIGEN_SOLVER(EXT, M)  \
  EXT template class Eigen::RealSchur<M>; \
  EXT template class Eigen::EigenSolver<M>; \
  EXT template Eigen::EigenSolver<M>& Eigen::EigenSolver<M>::compute(const Eigen::EigenBase<M>&, bool);
#define PEAL_TEST_EIGEN_DECOMPOSITIONS(EXT)                                      \
  PEAL_TEST_EIGEN_SOLVER(EXT, Eigen::MatrixXd)                                   \
  PEAL_TEST_EIGEN_SOLVER(EXT, peal_test_eigen::MatrixXld)                        \
  EXT template class Eigen::JacobiSVD<Eigen::MatrixXd>;

// peal's own products of at most kSmallRows rows (include/peal/detail/small_products.hpp, the
// decode-shaped products behind gemm_abt and gemm_ab), which every TU that runs the tiles would
// compile: plain function templates, so that the declaration keeps them out (defined in
// tests/kernels/eigen.cpp; no kernel multiplies in long double through them).
#define PEAL_TEST_SMALL_PRODUCTS_OF(EXT, C)                                                     \
  EXT template void peal::detail::eigen_gemm::small::abt<C>(                                    \
      Eigen::Index, Eigen::Index, Eigen::Index, const C*, Eigen::Index, const C*, Eigen::Index, \
      C*, Eigen::Index, Eigen::Index, C);                                                       \
  EXT template void peal::detail::eigen_gemm::small::ab<C>(                                     \
      Eigen::Index, Eigen::Index, Eigen::Index, const C*, Eigen::Index, const C*, Eigen::Index, \
      C*, Eigen::Index, C);
// B stored in half precision (a half KV cache), converted in registers: C = float.
#define PEAL_TEST_SMALL_PRODUCTS_HALF_B(EXT, TB)                                                 \
  EXT template void peal::detail::eigen_gemm::small::abt<float, TB>(                            \
      Eigen::Index, Eigen::Index, Eigen::Index, const float*, Eigen::Index, const TB*,          \
      Eigen::Index, float*, Eigen::Index, Eigen::Index, float);                                 \
  EXT template void peal::detail::eigen_gemm::small::ab<float, TB>(                             \
      Eigen::Index, Eigen::Index, Eigen::Index, const float*, Eigen::Index, const TB*,          \
      Eigen::Index, float*, Eigen::Index, float);
#define PEAL_TEST_SMALL_PRODUCTS(EXT)                   \
  PEAL_TEST_SMALL_PRODUCTS_OF(EXT, float)               \
  PEAL_TEST_SMALL_PRODUCTS_OF(EXT, double)              \
  PEAL_TEST_SMALL_PRODUCTS_HALF_B(EXT, Eigen::half)     \
  PEAL_TEST_SMALL_PRODUCTS_HALF_B(EXT, Eigen::bfloat16)

PEAL_TEST_EIGEN_KERNELS(extern)
PEAL_TEST_EIGEN_DECOMPOSITIONS(extern)
PEAL_TEST_SMALL_PRODUCTS(extern)
