// The one adaptor between peal and Eigen's internal namespace (Eigen::internal): the blocked
// GEMM kernel, its packing workspace and blocking heuristic (used by detail/tiled/tile_run.hpp and
// detail/tiled/attention_sink.hpp), and the
// packet primitives of the small products (detail/small_products.hpp, included at the end) and
// of the per-pair polynomial epilogue (detail/coders/poly_parts.hpp). No other
// peal header names Eigen::internal; a change of Eigen touches this file only.
//
// Written against Eigen 3.4 (3.4.0). On an Eigen upgrade, check (Eigen/src/Core/products/
// GeneralMatrixMatrix.h, GeneralBlockPanelKernel.h, GenericPacketMath.h):
//   - general_matrix_matrix_product<Index, LhsScalar, LhsStorageOrder, ConjugateLhs,
//     RhsScalar, RhsStorageOrder, ConjugateRhs, ResStorageOrder, ResInnerStride>::run(rows,
//     cols, depth, lhs, lhsStride, rhs, rhsStride, res, resIncr, resStride, alpha, blocking,
//     info) keeps its template parameters and argument order (3.3 had no ResInnerStride
//     and no resIncr);
//   - level3_blocking<LhsScalar, RhsScalar> keeps its protected members m_blockA, m_blockB,
//     m_mc, m_nc, m_kc (GemmBlocking below sets them to caller-owned buffers) and its
//     default constructor, and run() still packs into blockA()/blockB() when they are set;
//   - computeProductBlockingSizes<LhsScalar, RhsScalar, KcFactor>(k, m, n, num_threads) keeps
//     its in/out arguments (k, m, n are reduced to the cache-blocked sizes);
//   - packet_traits<C>::type / ::size, pset1, padd, pmadd, ploadu, pstoreu keep their meaning
//     (pmadd(a, b, c) = a * b + c), and predux sums the lanes of a packet.
// tests/test_scores.cpp compares the fused kernels with a per-pair reference and catches a
// silent change of any of these; bench/bench_scores.cpp shows a lost vectorisation.
#pragma once

#include <Eigen/Core>

namespace peal {
namespace detail {
namespace eigen_gemm {

using Eigen::Index;

/// Eigen's GEMM packing workspace; GemmBlocking<C> points it at caller-owned buffers.
template <class C>
using level3_blocking = Eigen::internal::level3_blocking<C, C>;

/// The workspace of gemm_abt: mc x kc and kc x nc packing buffers A and B (from the caller's
/// arena, sized by product_blocking_sizes), not owned.
template <class C>
struct GemmBlocking : level3_blocking<C> {
  GemmBlocking() = default;
  GemmBlocking(Index mc, Index nc, Index kc, C* A, C* B) {
    this->m_mc = mc, this->m_nc = nc, this->m_kc = kc;
    this->m_blockA = A, this->m_blockB = B;
  }
};

/// Eigen's cache-blocking heuristic for a k-deep product of an m x k and a k x n operand on
/// one thread: reduces (kc, mc, nc) in place to the block sizes of the packing buffers.
template <class C>
void product_blocking_sizes(Index& kc, Index& mc, Index& nc) {
  Eigen::internal::computeProductBlockingSizes<C, C, 1>(kc, mc, nc, Index(1));
}

/// Products with at most this many rows (decoding: the G query rows that share a KV head) skip
/// Eigen's packing, which would copy the whole n x k operand to multiply it by a handful of
/// rows: the register-blocked kernels of detail/small_products.hpp read each packet of B once,
/// from where it lies, for all m rows of A.
inline constexpr Index kSmallRows = 8;

namespace small {  // detail/small_products.hpp (included at the end of this file)
/// res(i, j) += alpha a_i . b_j, i < m <= kSmallRows, j < n, res element (i, j) at
/// res[i ri + j rj]; B stores C, or Eigen::half / Eigen::bfloat16 with C = float (converted in
/// registers).
template <class C, class TB = C>
void abt(Index m, Index n, Index k, const C* a, Index lda, const TB* b, Index ldb, C* res,
         Index ri, Index rj, C alpha);
/// res (m x n, ld ldr) += alpha A B for A m x k (m <= kSmallRows) and B k x n, row-major; B as
/// for abt.
template <class C, class TB = C>
void ab(Index m, Index n, Index k, const C* a, Index lda, const TB* b, Index ldb, C* res,
        Index ldr, C alpha);
}  // namespace small

/// Prefetch the cache lines of one row (bytes long) into L1.
inline void prefetch_row(const void* p, Index bytes) {
#if defined(__GNUC__) || defined(__clang__)
  const char* c = static_cast<const char*>(p);
  for (Index off = 0; off < bytes; off += 64) __builtin_prefetch(c + off);
#else
  (void)p, (void)bytes;
#endif
}

/// res (m x n, order ResOrder, leading dimension ldr) += alpha A B^T, with A m x k and B n x k,
/// both row-major. Eigen's own blocked kernel, called without its OpenMP layer (the caller's
/// threads already split the work; Eigen's nested parallel regions would oversubscribe); for
/// m <= kSmallRows, small::abt.
template <class C, int ResOrder>
inline void gemm_abt(Index m, Index n, Index k, const C* a, Index lda, const C* b, Index ldb,
                     C* res, Index ldr, C alpha, level3_blocking<C>& blocking) {
  if (m <= kSmallRows) {
    small::abt<C>(m, n, k, a, lda, b, ldb, res, ResOrder == Eigen::RowMajor ? ldr : 1,
                  ResOrder == Eigen::RowMajor ? 1 : ldr, alpha);
    return;
  }
  Eigen::internal::general_matrix_matrix_product<Index, C, Eigen::RowMajor, false, C,
                                                 Eigen::ColMajor, false, ResOrder,
                                                 1>::run(m, n, k, a, lda, b, ldb, res, 1, ldr,
                                                         alpha, blocking, nullptr);
}

/// res (m x n, order ResOrder) += alpha A B, with A m x k and B k x n, both row-major (the
/// P V product of attention, detail/tiled/attention_sink.hpp); for m <= kSmallRows, small::ab.
template <class C, int ResOrder>
inline void gemm_ab(Index m, Index n, Index k, const C* a, Index lda, const C* b, Index ldb, C* res,
                    Index ldr, C alpha, level3_blocking<C>& blocking) {
  static_assert(ResOrder == Eigen::RowMajor, "gemm_ab: row-major results only");
  if (m <= kSmallRows) {
    small::ab<C>(m, n, k, a, lda, b, ldb, res, ldr, alpha);
    return;
  }
  Eigen::internal::general_matrix_matrix_product<Index, C, Eigen::RowMajor, false, C,
                                                 Eigen::RowMajor, false, ResOrder,
                                                 1>::run(m, n, k, a, lda, b, ldb, res, 1, ldr,
                                                         alpha, blocking, nullptr);
}

/// res (m x n, row-major) += alpha A^T B, with A k x m and B k x n, both row-major (the
/// state update M += V^T K of linear attention, detail/tiled/linear_ops.hpp): A^T is read as a
/// column-major operand, without a transposed copy.
template <class C>
inline void gemm_atb(Index m, Index n, Index k, const C* a, Index lda, const C* b, Index ldb, C* res,
                     Index ldr, C alpha, level3_blocking<C>& blocking) {
  Eigen::internal::general_matrix_matrix_product<Index, C, Eigen::ColMajor, false, C,
                                                 Eigen::RowMajor, false, Eigen::RowMajor,
                                                 1>::run(m, n, k, a, lda, b, ldb, res, 1, ldr,
                                                         alpha, blocking, nullptr);
}

/// SIMD packets of the native width Eigen's GEMM uses for C (size 1: a plain scalar).
template <class C>
using packet_t = typename Eigen::internal::packet_traits<C>::type;
template <class C>
inline constexpr Index packet_size = Eigen::internal::packet_traits<C>::size;
using Eigen::internal::padd;
using Eigen::internal::ploadu;
using Eigen::internal::pmadd;
using Eigen::internal::predux;
using Eigen::internal::pset1;
using Eigen::internal::pstoreu;

}  // namespace eigen_gemm
}  // namespace detail
}  // namespace peal

#include "small_products.hpp"
