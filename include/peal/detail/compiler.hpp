// Compiler hints used by the batch kernels (encode.hpp, scores.hpp). Each can be predefined
// by the user to override it.
//   PEAL_RESTRICT   `__restrict` where supported. Only on function parameters: g++ ignores it
//                   on local pointers (a half-split loop written with restrict locals stayed
//                   scalar), which is why the kernels' loops live in small functions.
//   PEAL_NOINLINE   keeps a loop out of line (g++ -O3 vectorized an inlined per-token head
//                   loop across heads instead of along the vector: 1.6x slower).
//   PEAL_PREFETCH(p, rw)   a prefetch hint (rw: 0 read, 1 write), nothing elsewhere.
#pragma once

#ifndef PEAL_RESTRICT
#if defined(__GNUC__) || defined(__clang__) || defined(_MSC_VER)
#define PEAL_RESTRICT __restrict
#else
#define PEAL_RESTRICT
#endif
#endif

#ifndef PEAL_NOINLINE
#if defined(__GNUC__) || defined(__clang__)
#define PEAL_NOINLINE __attribute__((noinline))
#elif defined(_MSC_VER)
#define PEAL_NOINLINE __declspec(noinline)
#else
#define PEAL_NOINLINE
#endif
#endif

#ifndef PEAL_PREFETCH
#if defined(__GNUC__) || defined(__clang__)
#define PEAL_PREFETCH(p, rw) __builtin_prefetch((p), (rw), 3)
#else
#define PEAL_PREFETCH(p, rw) ((void)0)
#endif
#endif

// A loop whose float sums may be vectorised (reassociated): OpenMP's simd reduction when
// g++ compiles with OpenMP, else nothing (the loop stays scalar; no unknown-pragma warning,
// and no clang -Wpass-failed warning where clang does not vectorise the loop, e.g. at -O1).
#ifndef PEAL_SIMD_REDUCTION
#if defined(_OPENMP) && defined(__GNUC__) && !defined(__clang__)
#define PEAL_PRAGMA(x) _Pragma(#x)
#define PEAL_SIMD_REDUCTION(...) PEAL_PRAGMA(omp simd reduction(__VA_ARGS__))
#else
#define PEAL_SIMD_REDUCTION(...)
#endif
#endif
