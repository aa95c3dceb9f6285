// The tuned per-token loops of encode and of the coders' apply_heads (detail/coders/coders.hpp):
// one token's coefficients applied to each of its `heads` vectors, unit stride, in the
// arithmetic type. Rotations of interleaved and half-split pairs, and a diagonal scale.
#pragma once

#include <cmath>
#include <cstddef>
#include <type_traits>

#include "../compiler.hpp"

namespace peal {

using Index = std::ptrdiff_t;

namespace detail {

// ---- Inner loops (unit stride, arithmetic type). Each loop runs over chunks of kLoopChunk
// elements with an inner loop of constant trip count, then a scalar tail: GCC's -O2 cost
// model (-fvect-cost-model=very-cheap) vectorizes only loops whose trip count is a known
// multiple of the vector width, -O3 vectorizes either form. No loop-carried dependence,
// restrict-qualified streams, coefficients precomputed per token.
inline constexpr int kLoopChunk = 16;

// Multiply-add a b + c rounded the same way in every loop. Left to itself the compiler
// contracts a two-product sum x y + z w into one FMA, but which product it fuses may differ
// between two loops of the same expression (in place vs out of place: 1 ulp apart in ~13 %
// of the HalfSplit elements with g++ 12 -O3 -march=native). So: an explicit fma where the
// target has one (the same instructions the compiler would emit), else a multiply and an
// add (nothing to contract). Either way the in-place and out-of-place results are bitwise
// equal (tests/test_encode.cpp, "in place and out of place give the same bits").
#if defined(__FMA__) || defined(__FP_FAST_FMA) || defined(__ARM_FEATURE_FMA)
template <class A>
inline A mul_add(A a, A b, A c) {
  return std::fma(a, b, c);
}
#else
template <class A>
inline A mul_add(A a, A b, A c) {
  return a * b + c;
}
#endif

// Interleaved pairs (2i, 2i+1): y[j] = x[j] cc[j] + x[j^1] ss[j] with
// cc = [c0, c0, c1, c1, ...], ss = [-s0, s0, -s1, s1, ...] (g folded in): one lane swap
// (vpermilps), a multiply and an fma per vector. Written pairwise so that the in-place form
// has no dependence between iterations; m = 2n elements. Every chunk function has its
// own restrict-qualified (or single written) pointers, so no runtime alias check (which
// would send the in-place case to the scalar loop) is needed.
#define PEAL_ROTATE_PAIR(x, y)           \
  const A x0 = x[j], x1 = x[j + 1];      \
  y[j] = mul_add(x0, cc[j], x1 * ss[j]); \
  y[j + 1] = mul_add(x1, cc[j + 1], x0 * ss[j + 1]);
template <class A>
inline void rotate_interleaved_chunk(A* PEAL_RESTRICT x, const A* PEAL_RESTRICT cc,
                                     const A* PEAL_RESTRICT ss, int m) {
  for (int j = 0; j < m; j += 2) {
    PEAL_ROTATE_PAIR(x, x)
  }
}
template <class A>
inline void rotate_interleaved_chunk(const A* PEAL_RESTRICT x, A* PEAL_RESTRICT y,
                                     const A* PEAL_RESTRICT cc, const A* PEAL_RESTRICT ss, int m) {
  for (int j = 0; j < m; j += 2) {
    PEAL_ROTATE_PAIR(x, y)
  }
}
#undef PEAL_ROTATE_PAIR
template <class A>
inline void rotate_interleaved(A* PEAL_RESTRICT x, const A* PEAL_RESTRICT cc,
                               const A* PEAL_RESTRICT ss, int n) {
  const int m = 2 * n;
  int i = 0;
  for (; i + kLoopChunk <= m; i += kLoopChunk) rotate_interleaved_chunk(x + i, cc + i, ss + i, kLoopChunk);
  rotate_interleaved_chunk(x + i, cc + i, ss + i, m - i);
}
template <class A>
inline void rotate_interleaved(const A* PEAL_RESTRICT x, A* PEAL_RESTRICT y,
                               const A* PEAL_RESTRICT cc, const A* PEAL_RESTRICT ss, int n) {
  const int m = 2 * n;
  int i = 0;
  for (; i + kLoopChunk <= m; i += kLoopChunk)
    rotate_interleaved_chunk(x + i, y + i, cc + i, ss + i, kLoopChunk);
  rotate_interleaved_chunk(x + i, y + i, cc + i, ss + i, m - i);
}

// Half-split pairs (i, i+n): two contiguous streams lo = x[0..n), hi = x[n..2n).
template <class A>
inline void rotate_halfsplit_chunk(A* PEAL_RESTRICT lo, A* PEAL_RESTRICT hi,
                                   const A* PEAL_RESTRICT c, const A* PEAL_RESTRICT s, int m) {
  for (int j = 0; j < m; ++j) {
    const A x0 = lo[j], x1 = hi[j];
    lo[j] = mul_add(c[j], x0, -(s[j] * x1));
    hi[j] = mul_add(s[j], x0, c[j] * x1);
  }
}
template <class A>
inline void rotate_halfsplit_chunk(const A* PEAL_RESTRICT xlo, const A* PEAL_RESTRICT xhi,
                                   A* PEAL_RESTRICT ylo, A* PEAL_RESTRICT yhi,
                                   const A* PEAL_RESTRICT c, const A* PEAL_RESTRICT s, int m) {
  for (int j = 0; j < m; ++j) {
    const A x0 = xlo[j], x1 = xhi[j];
    ylo[j] = mul_add(c[j], x0, -(s[j] * x1));
    yhi[j] = mul_add(s[j], x0, c[j] * x1);
  }
}
template <class A>
inline void rotate_halfsplit(A* PEAL_RESTRICT x, const A* PEAL_RESTRICT c, const A* PEAL_RESTRICT s,
                             int n) {
  int i = 0;
  for (; i + kLoopChunk <= n; i += kLoopChunk)
    rotate_halfsplit_chunk(x + i, x + n + i, c + i, s + i, kLoopChunk);
  rotate_halfsplit_chunk(x + i, x + n + i, c + i, s + i, n - i);
}
template <class A>
inline void rotate_halfsplit(const A* PEAL_RESTRICT x, A* PEAL_RESTRICT y, const A* PEAL_RESTRICT c,
                             const A* PEAL_RESTRICT s, int n) {
  int i = 0;
  for (; i + kLoopChunk <= n; i += kLoopChunk)
    rotate_halfsplit_chunk(x + i, x + n + i, y + i, y + n + i, c + i, s + i, kLoopChunk);
  rotate_halfsplit_chunk(x + i, x + n + i, y + i, y + n + i, c + i, s + i, n - i);
}

template <class A>
inline void scale_chunk(A* PEAL_RESTRICT x, const A* PEAL_RESTRICT g, int m) {
  for (int j = 0; j < m; ++j) x[j] *= g[j];
}
template <class A>
inline void scale_chunk(const A* PEAL_RESTRICT x, A* PEAL_RESTRICT y, const A* PEAL_RESTRICT g,
                        int m) {
  for (int j = 0; j < m; ++j) y[j] = x[j] * g[j];
}
template <class A>
inline void scale(A* PEAL_RESTRICT x, const A* PEAL_RESTRICT g, int n) {
  int i = 0;
  for (; i + kLoopChunk <= n; i += kLoopChunk) scale_chunk(x + i, g + i, kLoopChunk);
  scale_chunk(x + i, g + i, n - i);
}
template <class A>
inline void scale(const A* PEAL_RESTRICT x, A* PEAL_RESTRICT y, const A* PEAL_RESTRICT g, int n) {
  int i = 0;
  for (; i + kLoopChunk <= n; i += kLoopChunk) scale_chunk(x + i, y + i, g + i, kLoopChunk);
  scale_chunk(x + i, y + i, g + i, n - i);
}

// ---- One token: the same rotation on each of `heads` vectors. The pair count is a
// template parameter for the common rotary sizes (16, 32, 64, 96, 128 coordinates): the
// per-vector loop is then fully unrolled and the coefficients stay in registers across the
// head loop, leaving one load, a lane swap, a multiply, an fma and a store per vector of x
// (measured 20-25% faster than reloading them per head, in place, d = 128, AVX-512).
// N = 0: run-time pair count.
template <class F>
inline void with_pair_count(int n, F&& f) {
  switch (n) {
    case 8:
      f(std::integral_constant<int, 8>{});
      break;
    case 16:
      f(std::integral_constant<int, 16>{});
      break;
    case 32:
      f(std::integral_constant<int, 32>{});
      break;
    case 48:
      f(std::integral_constant<int, 48>{});
      break;
    case 64:
      f(std::integral_constant<int, 64>{});
      break;
    default:
      f(std::integral_constant<int, 0>{});
      break;
  }
}
// Out of line (PEAL_NOINLINE), so that each has the inliner's budget for its own chunk loops:
// inlined into a caller holding every pair count and layout, g++ 12 -O3 kept the chunk loops
// as calls and reloaded the coefficients from the stack (bench_encode, in-place RoPE).
// Local copies of the coefficients: their addresses never escape, so the compiler knows the
// stores to x cannot change them and keeps them in registers across the head loop
// (restrict on the parameters was not enough for g++ 12 to hoist the loads).
template <int N, class A>
PEAL_NOINLINE void rotate_heads_interleaved(A* x, Index heads, Index xs, const A* cc_in, const A* ss_in,
                                     int n) {
  if constexpr (N > 0) {
    A cc[2 * N], ss[2 * N];
    for (int j = 0; j < 2 * N; ++j) cc[j] = cc_in[j], ss[j] = ss_in[j];
    for (Index h = 0; h < heads; ++h) rotate_interleaved(x + h * xs, cc, ss, N);
  } else {
    for (Index h = 0; h < heads; ++h) rotate_interleaved(x + h * xs, cc_in, ss_in, n);
  }
}
template <int N, class A>
PEAL_NOINLINE void rotate_heads_interleaved(const A* x, Index xs, A* y, Index ys, Index heads,
                                     const A* cc_in, const A* ss_in, int n) {
  if constexpr (N > 0) {
    A cc[2 * N], ss[2 * N];
    for (int j = 0; j < 2 * N; ++j) cc[j] = cc_in[j], ss[j] = ss_in[j];
    for (Index h = 0; h < heads; ++h) rotate_interleaved(x + h * xs, y + h * ys, cc, ss, N);
  } else {
    for (Index h = 0; h < heads; ++h) rotate_interleaved(x + h * xs, y + h * ys, cc_in, ss_in, n);
  }
}
template <int N, class A>
PEAL_NOINLINE void rotate_heads_halfsplit(A* x, Index heads, Index xs, const A* c_in, const A* s_in,
                                   int n) {
  if constexpr (N > 0) {
    A c[N], s[N];
    for (int j = 0; j < N; ++j) c[j] = c_in[j], s[j] = s_in[j];
    for (Index h = 0; h < heads; ++h) rotate_halfsplit(x + h * xs, c, s, N);
  } else {
    for (Index h = 0; h < heads; ++h) rotate_halfsplit(x + h * xs, c_in, s_in, n);
  }
}
template <int N, class A>
PEAL_NOINLINE void rotate_heads_halfsplit(const A* x, Index xs, A* y, Index ys, Index heads, const A* c_in,
                                   const A* s_in, int n) {
  if constexpr (N > 0) {
    A c[N], s[N];
    for (int j = 0; j < N; ++j) c[j] = c_in[j], s[j] = s_in[j];
    for (Index h = 0; h < heads; ++h) rotate_halfsplit(x + h * xs, y + h * ys, c, s, N);
  } else {
    for (Index h = 0; h < heads; ++h) rotate_halfsplit(x + h * xs, y + h * ys, c_in, s_in, n);
  }
}


}  // namespace detail
}  // namespace peal
