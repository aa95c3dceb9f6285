// Bulk conversions of contiguous rows between the half-like storage types (Eigen::half,
// Eigen::bfloat16) and float, bit for bit those of Eigen's scalar conversions
// (Eigen/src/Core/arch/Default/Half.h, BFloat16.h):
//
//   f16  -> f32   exact (F16C / AVX-512F vcvtph2ps);
//   bf16 -> f32   exact: the 16 bits shifted left by 16;
//   f32  -> f16   round to nearest even, overflow to ±inf, subnormals kept (vcvtps2ph, imm 0);
//   f32  -> bf16  round to nearest even on the bits (u + 0x7fff + lsb) >> 16, as Eigen's
//                 float_to_bfloat16_rtne; NaN -> 0x7fc0 with its sign (not AVX512-BF16's
//                 vcvtneps2bf16, which flushes subnormals to zero).
//
// NaN stays NaN; its payload may differ from Eigen's scalar path where Eigen computes it
// without F16C. The vector paths sit behind the compiler's own feature macros (__AVX512F__,
// __F16C__, __AVX2__), never a peal option: a header-only library does not choose its users'
// flags (-march=native belongs to the tests and benchmarks). Without them, a portable loop
// (Eigen's scalar conversion for f16; integer shifts, which compilers vectorise, for bf16).
//
// Why: decoding reads each byte of the KV cache once and is bound by memory bandwidth; a
// half-precision cache is half the bytes only if its conversion keeps up with the memory
// (docs/kernels-attention.md §2, "Half-precision caches"). Tested against Eigen's scalar
// conversions for every 16-bit pattern, at lengths that reach the vector body and each tail
// (tests/test_view.cpp, "half rows").
#pragma once

#include <Eigen/Core>
#include <cstdint>
#include <cstring>
#include <type_traits>

#if defined(__AVX512F__) || defined(__F16C__) || defined(__AVX2__)
#include <immintrin.h>
#endif

#include "storage.hpp"

namespace peal {
namespace detail {

namespace half_rows {
using Eigen::Index;

inline std::uint16_t bits(Eigen::half h) { return Eigen::numext::bit_cast<std::uint16_t>(h); }
inline std::uint16_t bits(Eigen::bfloat16 h) { return Eigen::numext::bit_cast<std::uint16_t>(h); }
inline float bf16_bits_to_float(std::uint16_t b) {
  return Eigen::numext::bit_cast<float>(std::uint32_t(b) << 16);
}
// Eigen's float_to_bfloat16_rtne<false> on the bits of a float.
inline std::uint16_t float_bits_to_bf16(std::uint32_t u) {
  if ((u & 0x7fffffffu) > 0x7f800000u) return std::uint16_t((u >> 16 & 0x8000u) | 0x7fc0u);
  return std::uint16_t((u + 0x7fffu + (u >> 16 & 1u)) >> 16);
}
}  // namespace half_rows

/// dst[i] = float(src[i]), i < n (f16 -> f32, exact).
inline void half_to_float(const Eigen::half* src, float* dst, Eigen::Index n) {
  Eigen::Index i = 0;
#if defined(__AVX512F__)
  for (; i + 32 <= n; i += 32) {  // two vectors per step: more loads in flight
    const __m256i a = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + i));
    const __m256i b = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + i + 16));
    _mm512_storeu_ps(dst + i, _mm512_cvtph_ps(a));
    _mm512_storeu_ps(dst + i + 16, _mm512_cvtph_ps(b));
  }
  for (; i + 16 <= n; i += 16)
    _mm512_storeu_ps(
        dst + i, _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + i))));
#endif
#if defined(__F16C__)
  for (; i + 8 <= n; i += 8)
    _mm256_storeu_ps(dst + i,
                     _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i))));
#endif
  for (; i < n; ++i) dst[i] = static_cast<float>(src[i]);
}

/// dst[i] = float(src[i]), i < n (bf16 -> f32, exact: a 16-bit left shift).
inline void bfloat16_to_float(const Eigen::bfloat16* src, float* dst, Eigen::Index n) {
  Eigen::Index i = 0;
#if defined(__AVX512F__)
  for (; i + 16 <= n; i += 16) {
    const __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + i));
    _mm512_storeu_ps(dst + i, _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16)));
  }
#endif
#if defined(__AVX2__)
  for (; i + 8 <= n; i += 8) {
    const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i));
    _mm256_storeu_ps(dst + i, _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16)));
  }
#endif
  for (; i < n; ++i) dst[i] = half_rows::bf16_bits_to_float(half_rows::bits(src[i]));
}

/// dst[i] = Eigen::half(src[i]), i < n (f32 -> f16, round to nearest even).
inline void float_to_half(const float* src, Eigen::half* dst, Eigen::Index n) {
  Eigen::Index i = 0;
#if defined(__AVX512F__)
  for (; i + 16 <= n; i += 16)
    _mm256_storeu_si256(
        reinterpret_cast<__m256i*>(dst + i),
        _mm512_cvtps_ph(_mm512_loadu_ps(src + i), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
#endif
#if defined(__F16C__)
  for (; i + 8 <= n; i += 8)
    _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + i),
                     _mm256_cvtps_ph(_mm256_loadu_ps(src + i), _MM_FROUND_TO_NEAREST_INT));
#endif
  for (; i < n; ++i) dst[i] = Eigen::half(src[i]);
}

/// dst[i] = Eigen::bfloat16(src[i]), i < n (f32 -> bf16, round to nearest even, NaN quiet).
inline void float_to_bfloat16(const float* src, Eigen::bfloat16* dst, Eigen::Index n) {
  Eigen::Index i = 0;
#if defined(__AVX512F__)
  {
    const __m512i k7fff = _mm512_set1_epi32(0x7fff), one = _mm512_set1_epi32(1);
    const __m512i sign = _mm512_set1_epi32(0x8000), qnan = _mm512_set1_epi32(0x7fc0);
    for (; i + 16 <= n; i += 16) {
      const __m512 f = _mm512_loadu_ps(src + i);
      const __m512i u = _mm512_castps_si512(f), hi = _mm512_srli_epi32(u, 16);
      const __m512i bias = _mm512_add_epi32(k7fff, _mm512_and_si512(hi, one));
      __m512i r = _mm512_srli_epi32(_mm512_add_epi32(u, bias), 16);
      const __mmask16 nan = _mm512_cmp_ps_mask(f, f, _CMP_UNORD_Q);
      r = _mm512_mask_blend_epi32(nan, r, _mm512_or_si512(_mm512_and_si512(hi, sign), qnan));
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + i), _mm512_cvtepi32_epi16(r));
    }
  }
#endif
#if defined(__AVX2__)
  {
    const __m256i k7fff = _mm256_set1_epi32(0x7fff), one = _mm256_set1_epi32(1);
    const __m256i sign = _mm256_set1_epi32(0x8000), qnan = _mm256_set1_epi32(0x7fc0);
    for (; i + 8 <= n; i += 8) {
      const __m256 f = _mm256_loadu_ps(src + i);
      const __m256i u = _mm256_castps_si256(f), hi = _mm256_srli_epi32(u, 16);
      const __m256i bias = _mm256_add_epi32(k7fff, _mm256_and_si256(hi, one));
      __m256i r = _mm256_srli_epi32(_mm256_add_epi32(u, bias), 16);
      const __m256i nan = _mm256_castps_si256(_mm256_cmp_ps(f, f, _CMP_UNORD_Q));
      r = _mm256_blendv_epi8(r, _mm256_or_si256(_mm256_and_si256(hi, sign), qnan), nan);
      // 32-bit lanes (each ≤ 0xffff) to 16 bits: packus works within 128-bit halves.
      const __m256i p = _mm256_permute4x64_epi64(_mm256_packus_epi32(r, r), 0xd8);
      _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + i), _mm256_castsi256_si128(p));
    }
  }
#endif
  for (; i < n; ++i)
    dst[i] = Eigen::numext::bit_cast<Eigen::bfloat16>(
        half_rows::float_bits_to_bf16(Eigen::numext::bit_cast<std::uint32_t>(src[i])));
}

/// A contiguous row of n stored values in the arithmetic type C (to_arith of each, in bulk:
/// the conversions above for half-like storage into float).
template <class C, class T>
inline void load_row(const T* src, C* dst, Eigen::Index n) {
  using S = std::remove_cv_t<T>;
  if constexpr (std::is_same<S, C>::value) {
    if (n > 0) std::memcpy(dst, src, sizeof(C) * std::size_t(n));
  } else if constexpr (std::is_same<C, float>::value && std::is_same<S, Eigen::half>::value) {
    half_to_float(src, dst, n);
  } else if constexpr (std::is_same<C, float>::value && std::is_same<S, Eigen::bfloat16>::value) {
    bfloat16_to_float(src, dst, n);
  } else {
    for (Eigen::Index i = 0; i < n; ++i) dst[i] = to_arith<C>(src[i]);
  }
}

/// A contiguous row of n arithmetic values rounded to the storage type T (from_arith of
/// each, in bulk for float into half-like storage).
template <class T, class C>
inline void store_row(const C* src, T* dst, Eigen::Index n) {
  if constexpr (std::is_same<T, C>::value) {
    if (n > 0) std::memcpy(dst, src, sizeof(C) * std::size_t(n));
  } else if constexpr (std::is_same<C, float>::value && std::is_same<T, Eigen::half>::value) {
    float_to_half(src, dst, n);
  } else if constexpr (std::is_same<C, float>::value && std::is_same<T, Eigen::bfloat16>::value) {
    float_to_bfloat16(src, dst, n);
  } else {
    for (Eigen::Index i = 0; i < n; ++i) dst[i] = from_arith<T>(src[i]);
  }
}

}  // namespace detail
}  // namespace peal
