// The products of at most kSmallRows rows (a decode step: the G query rows that share a KV
// head), A B^T and A B, register-blocked: every packet of B loaded serves all rows of A, and
// the results stay in packet registers over the whole depth (A B^T: one accumulator per
// (row, key) pair, one horizontal sum per pair at the end) or over a block of B's rows (A B:
// chunks of the output rows). detail/eigen_gemm.hpp declares them and calls them from gemm_abt
// and gemm_ab; Eigen's packing, which would copy the whole n x k operand to multiply it by a
// handful of rows, is skipped. B may also be a half-precision KV cache's rows (Eigen::half,
// Eigen::bfloat16, with C = float), converted in registers as each packet is loaded (load_b).
//
// Compile cost is part of the design (docs/build-cost.md §4). One kernel per row count (1..8)
// made every TU that runs the tiles compile sixteen kernels per scalar type, and the clean-clone
// sanitizer build 27 % longer (commit 07c43f7 reverted it). Here the rows go in chunks of 4, 2
// and 1 (m = 8: two chunks of 4), so abt<C> and ab<C> hold three row kernels each; they are
// plain function templates (not inline), so that an explicit instantiation declaration keeps
// them out of a TU: tests/eigen_kernels.hpp and include/peal/compiled.hpp do so for float and
// double.
//
// Each result element goes through the same operations whatever m, the chunk, the blocking,
// the strides and the alignment: with SIMD packets (explicit FMAs) a row's result does not
// depend on the rows computed with it. Error per element, for any order of the sums (Higham,
// Accuracy and Stability of Numerical Algorithms, 2nd ed., §3.1-3.5):
//   |fl(res') - res'| <= gamma_{k+2} (|res| + |alpha| sum_e |a_ie| |b_e|)
// (k the depth; tests/test_small_products.cpp checks it against long double).
#pragma once

#include <algorithm>
#include <type_traits>
#include <utility>

#include "eigen_gemm.hpp"

namespace peal {
namespace detail {
namespace eigen_gemm {
namespace small {

/// Packet registers of the target (AVX-512: 32, AVX/SSE on x86-64: 16).
inline constexpr int kRegisters = EIGEN_ARCH_DEFAULT_NUMBER_OF_REGISTERS;

/// Rows per chunk of the row kernels: 4 x NB accumulators fit beside NB key packets.
inline constexpr Index kChunkRows = 4;

/// The largest power of two <= x, within [1, 8].
constexpr int pow2_within_8(int x) { return x >= 8 ? 8 : x >= 4 ? 4 : x >= 2 ? 2 : 1; }

/// Keys per block of A B^T for M rows: M x NB accumulators, NB key packets and one row
/// packet, four registers spare.
template <int M>
inline constexpr int kKeyBlock = pow2_within_8((kRegisters - 4) / (M + 1));
/// Packets per chunk of an output row of A B for M rows: M x NC accumulators, NC value
/// packets and one broadcast weight.
template <int M>
inline constexpr int kChunkPackets = pow2_within_8((kRegisters - 2) / (M + 1));

/// Rows of B ahead of the one being read whose lines are prefetched (rows far apart defeat
/// the hardware prefetcher).
inline constexpr Index kAhead = 8;

/// f(std::integral_constant<int, I>{}) for I = 0, ..., N - 1, unrolled: constant indices let
/// the compiler keep arrays of packets in registers.
template <class F, int... I>
EIGEN_STRONG_INLINE void unroll_seq(F& f, std::integer_sequence<int, I...>) {
  (f(std::integral_constant<int, I>{}), ...);
}
template <int N, class F>
EIGEN_STRONG_INLINE void unroll(F&& f) {
  unroll_seq(f, std::make_integer_sequence<int, N>{});
}

/// sums[0..3] = the sums of the lanes of x0..x3. Eigen's predux for each, except on AVX-512
/// and AVX, where the four share their shuffles (the halves, then quarters, of two packets
/// added in one instruction): 15 instructions instead of 36 for AVX-512 floats, where the
/// horizontal sums were half the instructions of A B^T (4-row products of a decode's key
/// tile 1.2x faster, bench/README.md). Every lane sum goes through one fixed tree for its
/// packet type, whichever of the four places it takes.
template <class P, class C>
EIGEN_STRONG_INLINE void lane_sums4(const P& x0, const P& x1, const P& x2, const P& x3, C* sums) {
  sums[0] = predux(x0), sums[1] = predux(x1), sums[2] = predux(x2), sums[3] = predux(x3);
}
#if defined(EIGEN_VECTORIZE_AVX512)
// (All-lanes _mask_ forms and a masked store: GCC 12's plain forms start from an "undefined"
// register that -Wuninitialized reports at every use.)
/// Quarters (128 bits) of x and y picked by Imm, as _mm512_shuffle_f32x4 / _f64x2.
template <int Imm>
EIGEN_STRONG_INLINE __m512 quarters(const __m512& x, const __m512& y) {
  return _mm512_mask_shuffle_f32x4(x, __mmask16(0xffff), x, y, Imm);
}
template <int Imm>
EIGEN_STRONG_INLINE __m512d quarters(const __m512d& x, const __m512d& y) {
  return _mm512_mask_shuffle_f64x2(x, __mmask8(0xff), x, y, Imm);
}
EIGEN_STRONG_INLINE void lane_sums4(const __m512& a, const __m512& b, const __m512& c,
                                    const __m512& d, float* sums) {
  constexpr int lo = _MM_SHUFFLE(1, 0, 1, 0), hi = _MM_SHUFFLE(3, 2, 3, 2);
  // Quarters (128 bits) [a0 + a2, a1 + a3, b0 + b2, b1 + b3], the same for c, d.
  const __m512 ab = _mm512_add_ps(quarters<lo>(a, b), quarters<hi>(a, b));
  const __m512 cd = _mm512_add_ps(quarters<lo>(c, d), quarters<hi>(c, d));
  // Quarter q: the four partial sums of input q; then within quarters (x0 + x2) + (x1 + x3).
  __m512 x = _mm512_add_ps(quarters<_MM_SHUFFLE(2, 0, 2, 0)>(ab, cd),
                           quarters<_MM_SHUFFLE(3, 1, 3, 1)>(ab, cd));
  constexpr __mmask16 all = 0xffff;
  x = _mm512_add_ps(x, _mm512_mask_permute_ps(x, all, x, _MM_SHUFFLE(1, 0, 3, 2)));
  x = _mm512_add_ps(x, _mm512_mask_permute_ps(x, all, x, _MM_SHUFFLE(2, 3, 0, 1)));
  const __m512i first = _mm512_set_epi32(0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 12, 8, 4, 0);
  _mm512_mask_storeu_ps(sums, __mmask16(0xf), _mm512_mask_permutexvar_ps(x, all, first, x));
}
EIGEN_STRONG_INLINE void lane_sums4(const __m512d& a, const __m512d& b, const __m512d& c,
                                    const __m512d& d, double* sums) {
  constexpr int lo = _MM_SHUFFLE(1, 0, 1, 0), hi = _MM_SHUFFLE(3, 2, 3, 2);
  const __m512d ab = _mm512_add_pd(quarters<lo>(a, b), quarters<hi>(a, b));
  const __m512d cd = _mm512_add_pd(quarters<lo>(c, d), quarters<hi>(c, d));
  __m512d x = _mm512_add_pd(quarters<_MM_SHUFFLE(2, 0, 2, 0)>(ab, cd),
                            quarters<_MM_SHUFFLE(3, 1, 3, 1)>(ab, cd));
  constexpr __mmask8 all = 0xff;
  x = _mm512_add_pd(x, _mm512_mask_permute_pd(x, all, x, 0x55));  // within quarters: x0 + x1
  const __m512i first = _mm512_set_epi64(0, 0, 0, 0, 6, 4, 2, 0);
  _mm512_mask_storeu_pd(sums, __mmask8(0xf), _mm512_mask_permutexvar_pd(x, all, first, x));
}
#endif
#if defined(EIGEN_VECTORIZE_AVX)
EIGEN_STRONG_INLINE void lane_sums4(const __m256& a, const __m256& b, const __m256& c,
                                    const __m256& d, float* sums) {
  // Halves [a_lo + a_hi | b_lo + b_hi], the same for c, d; then pairs within the halves.
  const __m256 ab =
      _mm256_add_ps(_mm256_permute2f128_ps(a, b, 0x20), _mm256_permute2f128_ps(a, b, 0x31));
  const __m256 cd =
      _mm256_add_ps(_mm256_permute2f128_ps(c, d, 0x20), _mm256_permute2f128_ps(c, d, 0x31));
  __m256 x = _mm256_hadd_ps(ab, cd);  // [a01 a23 c01 c23 | b01 b23 d01 d23]
  x = _mm256_hadd_ps(x, x);           // [a c . . | b d . .]
  _mm_storeu_ps(sums, _mm_unpacklo_ps(_mm256_castps256_ps128(x), _mm256_extractf128_ps(x, 1)));
}
EIGEN_STRONG_INLINE void lane_sums4(const __m256d& a, const __m256d& b, const __m256d& c,
                                    const __m256d& d, double* sums) {
  const __m256d ab =
      _mm256_add_pd(_mm256_permute2f128_pd(a, b, 0x20), _mm256_permute2f128_pd(a, b, 0x31));
  const __m256d cd =
      _mm256_add_pd(_mm256_permute2f128_pd(c, d, 0x20), _mm256_permute2f128_pd(c, d, 0x31));
  const __m256d x = _mm256_hadd_pd(ab, cd);  // [a c | b d]
  const __m128d ac = _mm256_castpd256_pd128(x), bd = _mm256_extractf128_pd(x, 1);
  _mm_storeu_pd(sums, _mm_unpacklo_pd(ac, bd));
  _mm_storeu_pd(sums + 2, _mm_unpackhi_pd(ac, bd));
}
#endif

/// A packet of C from W = packet_size<C> consecutive elements of B: loaded as they are when B
/// stores C, converted in registers when B stores Eigen::half or Eigen::bfloat16 (C = float: a
/// KV cache kept in half precision, read once, never staged as floats). The conversions are
/// exact, bit for bit static_cast<float> (detail/half_rows.hpp), so a product over half rows
/// equals the product over their float copies.
template <class C, class TB>
EIGEN_STRONG_INLINE packet_t<C> load_b(const TB* p) {
  using P = packet_t<C>;
  if constexpr (std::is_same<TB, C>::value) {
    return ploadu<P>(p);
  } else {
    static_assert(std::is_same<C, float>::value, "small products: half-like B with C = float");
#if defined(EIGEN_VECTORIZE_AVX512)
    if constexpr (packet_size<C> == 16) {
      // (The zero-masked forms: GCC 12's plain ones start from an "undefined" register that
      // -Wmaybe-uninitialized reports in every includer.)
      const __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
      constexpr __mmask16 all = 0xffff;
      if constexpr (std::is_same<TB, Eigen::half>::value)
        return _mm512_maskz_cvtph_ps(all, h);
      else
        return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_maskz_cvtepu16_epi32(all, h), 16));
    }
#endif
#if defined(EIGEN_VECTORIZE_AVX2) && defined(__F16C__)
    if constexpr (packet_size<C> == 8) {
      const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
      if constexpr (std::is_same<TB, Eigen::half>::value)
        return _mm256_cvtph_ps(h);
      else
        return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
    }
#endif
    constexpr Index W = packet_size<C>;
    C x[W];
    for (Index e = 0; e < W; ++e) x[e] = C(p[e]);
    return ploadu<P>(x);
  }
}

/// s[i NB + j] = a_i . b_j for the M rows of A and NB rows of B (k long): per pair, one packet
/// accumulator over the whole packets of k, its lane sum (four pairs at a time; s holds
/// kSumSlots<M * NB>), then the scalar tail.
template <int N>
inline constexpr int kSumSlots = (N + 3) / 4 * 4;
template <class C, int M, int NB, class TB>
EIGEN_STRONG_INLINE void dots(Index k, const C* a, Index lda, const TB* b, Index ldb, C* s) {
  using P = packet_t<C>;
  constexpr Index W = packet_size<C>;
  constexpr int N = kSumSlots<M * NB>;
  P acc[N];  // pair (i, j) at i NB + j; the slots past M NB stay 0
  unroll<N>([&](auto p) { acc[p] = pset1<P>(C(0)); });
  const Index kw = k - k % W;
  for (Index e = 0; e < kw; e += W) {
    P bp[NB];
    unroll<NB>([&](auto j) { bp[j] = load_b<C>(b + j * ldb + e); });
    unroll<M>([&](auto i) {
      const P ap = ploadu<P>(a + i * lda + e);
      unroll<NB>([&](auto j) { acc[i * NB + j] = pmadd(ap, bp[j], acc[i * NB + j]); });
    });
  }
  unroll<N / 4>([&](auto g) {
    lane_sums4(acc[4 * g], acc[4 * g + 1], acc[4 * g + 2], acc[4 * g + 3], s + 4 * g);
  });
  if (kw == k) return;
  unroll<M>([&](auto i) {
    unroll<NB>([&](auto j) {
      C& sum = s[i * NB + j];
      for (Index e = kw; e < k; ++e) sum += a[i * lda + e] * C(b[j * ldb + e]);
    });
  });
}

/// res(i, j) += alpha a_i . b_j for the M rows of A (M x k) and the n rows of B (n x k), res
/// element (i, j) at res[i ri + j rj]: blocks of kKeyBlock<M> keys, then one key at a time.
template <class C, int M, class TB>
EIGEN_STRONG_INLINE void abt_rows(Index n, Index k, const C* a, Index lda, const TB* b, Index ldb,
                                  C* res, Index ri, Index rj, C alpha) {
  constexpr int NB = kKeyBlock<M>;
  C s[kSumSlots<M * NB>];
  const Index row_bytes = k * Index(sizeof(TB));
  auto add = [&](Index j, int nb) {
    for (int i = 0; i < M; ++i)
      for (int jj = 0; jj < nb; ++jj) res[i * ri + (j + jj) * rj] += alpha * s[i * nb + jj];
  };
  Index j = 0;
  for (; j + NB <= n; j += NB) {
    for (Index r = j + kAhead; r < std::min(n, j + kAhead + NB); ++r)
      prefetch_row(b + r * ldb, row_bytes);
    dots<C, M, NB, TB>(k, a, lda, b + j * ldb, ldb, s);
    add(j, NB);
  }
  for (; j < n; ++j) {
    dots<C, M, 1, TB>(k, a, lda, b + j * ldb, ldb, s);
    add(j, 1);
  }
}

/// Columns [col, col + NC W) of the M output rows (res, ld ldr) += alpha sum_j a_ij b_j over
/// rows [j0, j1) of B: the M x NC packets stay in registers over the rows, each packet of b_j
/// loaded once for all M rows, weights broadcast. Rows below ahead_end are prefetched kAhead
/// rows ahead (row_bytes each).
template <class C, int M, int NC, class TB>
EIGEN_STRONG_INLINE void axpys(Index j0, Index j1, Index col, const C* a, Index lda, const TB* b,
                               Index ldb, C* res, Index ldr, C alpha, Index ahead_end,
                               Index row_bytes) {
  using P = packet_t<C>;
  constexpr Index W = packet_size<C>;
  P o[M][NC];
  unroll<M>([&](auto i) {
    unroll<NC>([&](auto c) { o[i][c] = ploadu<P>(res + i * ldr + col + c * W); });
  });
  for (Index j = j0; j < j1; ++j) {
    if (j + kAhead < ahead_end) prefetch_row(b + (j + kAhead) * ldb, row_bytes);
    P bp[NC];
    unroll<NC>([&](auto c) { bp[c] = load_b<C>(b + j * ldb + col + c * W); });
    unroll<M>([&](auto i) {
      const P w = pset1<P>(alpha * a[i * lda + j]);
      unroll<NC>([&](auto c) { o[i][c] = pmadd(w, bp[c], o[i][c]); });
    });
  }
  unroll<M>(
      [&](auto i) { unroll<NC>([&](auto c) { pstoreu(res + i * ldr + col + c * W, o[i][c]); }); });
}

/// res (M x n, ld ldr) += alpha A B for the M rows of A (M x k) and B (k x n): B in blocks of
/// rows that stay in L1 while chunks of kChunkPackets<M> packets of columns pass over them,
/// then single packets, then the scalar columns.
template <class C, int M, class TB>
EIGEN_STRONG_INLINE void ab_rows(Index n, Index k, const C* a, Index lda, const TB* b, Index ldb,
                                 C* res, Index ldr, C alpha) {
  constexpr Index W = packet_size<C>, NC = kChunkPackets<M>;
  const Index nw = n - n % W;           // columns in whole packets
  const Index nc = nw - nw % (NC * W);  // columns in whole chunks
  const Index row_bytes = n * Index(sizeof(TB));
  // One pass over the columns: B streams once; several: blocks of B of <= 16 KiB (L1).
  const Index rows = nw > NC * W ? std::max<Index>(16, 16384 / std::max<Index>(row_bytes, 1)) : k;
  for (Index j0 = 0; j0 < k; j0 += rows) {
    const Index j1 = std::min(k, j0 + rows);
    Index ahead_end = k;  // the first pass over a block prefetches the rows ahead
    Index col = 0;
    for (; col < nc; col += NC * W, ahead_end = 0)
      axpys<C, M, NC, TB>(j0, j1, col, a, lda, b, ldb, res, ldr, alpha, ahead_end, row_bytes);
    for (; col < nw; col += W, ahead_end = 0)
      axpys<C, M, 1, TB>(j0, j1, col, a, lda, b, ldb, res, ldr, alpha, ahead_end, row_bytes);
    for (Index j = j0; j < j1; ++j)  // the columns past the last whole packet
      for (int i = 0; i < M; ++i) {
        const C w = alpha * a[i * lda + j];
        for (Index e = nw; e < n; ++e) res[i * ldr + e] += w * C(b[j * ldb + e]);
      }
  }
}

/// f(std::integral_constant<int, M>{}, i) for the chunks of rows [i, i + M) of [0, m):
/// chunks of kChunkRows, then 2, then 1 (m = 7: 4, 2, 1).
template <class F>
EIGEN_STRONG_INLINE void row_chunks(Index m, F&& f) {
  static_assert(kChunkRows == 4, "row_chunks: chunks of 4, 2 and 1 rows");
  Index i = 0;
  for (; i + 4 <= m; i += 4) f(std::integral_constant<int, 4>{}, i);
  if (i + 2 <= m) f(std::integral_constant<int, 2>{}, i), i += 2;
  if (i < m) f(std::integral_constant<int, 1>{}, i);
}

template <class C, class TB>
void abt(Index m, Index n, Index k, const C* a, Index lda, const TB* b, Index ldb, C* res,
         Index ri, Index rj, C alpha) {
  row_chunks(m, [&](auto M, Index i) {
    abt_rows<C, decltype(M)::value, TB>(n, k, a + i * lda, lda, b, ldb, res + i * ri, ri, rj,
                                        alpha);
  });
}

template <class C, class TB>
void ab(Index m, Index n, Index k, const C* a, Index lda, const TB* b, Index ldb, C* res,
        Index ldr, C alpha) {
  row_chunks(m, [&](auto M, Index i) {
    ab_rows<C, decltype(M)::value, TB>(n, k, a + i * lda, lda, b, ldb, res + i * ldr, ldr, alpha);
  });
}

}  // namespace small
}  // namespace eigen_gemm
}  // namespace detail
}  // namespace peal
