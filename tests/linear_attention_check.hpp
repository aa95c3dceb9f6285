// The shared part of tests/test_linear_attention.cpp and tests/test_linear_state*.cpp: packed
// and padded inputs (Packed), outputs (Out), a RoPE config, bitwise comparison, mixed twins.
// Internal linkage on purpose: each test TU holds its own copy, as when they were one file.
#pragma once

#include <catch2/catch.hpp>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "linear_suite.hpp"

namespace {

using namespace peal_test;
using namespace peal_test::linear;
using Catch::Matchers::Contains;
using peal::Layout;
using peal::LinearState;

constexpr double kRetNetGamma = 1 - 0x1p-5;

inline peal::RopeConfig rope_config(int head_dim, Layout layout) {
  peal::RopeConfig c;
  c.head_dim = head_dim;
  c.layout = layout;
  return c;
}

/// Packed random values in (-1, 1) rounded to T (and the same values as long double).
template <class T>
struct Packed {
  Index n, H, dim;
  std::vector<T> x;
  Packed(Index n_, Index H_, Index dim_, std::mt19937_64& rng) : n(n_), H(H_), dim(dim_) {
    std::uniform_real_distribution<double> u(-1, 1);
    for (Index i = 0; i < n * H * dim; ++i) x.push_back(peal::detail::from_arith<T>(u(rng)));
  }
  TensorView<const T> view(Index from = 0, Index count = -1) const {
    if (count < 0) count = n - from;
    return TensorView<const T>(x.data() + from * H * dim, count, H, dim);
  }
  std::vector<LD> values() const {
    std::vector<LD> v;
    for (const T& e : x) v.push_back(LD(peal::detail::to_arith<double>(e)));
    return v;
  }
};

/// An output buffer [n, H, dv] of T, NaN-filled.
template <class T>
struct Out {
  Index n, H, dv;
  std::vector<T> x;
  Out(Index n_, Index H_, Index dv_)
      : n(n_), H(H_), dv(dv_), x(std::size_t(n_ * H_ * dv_), T(std::nanf(""))) {}
  TensorView<T> view(Index from = 0, Index count = -1) {
    if (count < 0) count = n - from;
    return TensorView<T>(x.data() + from * H * dv, count, H, dv);
  }
  LD at(Index i, Index h, Index e) const {
    return LD(peal::detail::to_arith<double>(x[std::size_t((i * H + h) * dv + e)]));
  }
};

template <class X>
bool same_bits(const std::vector<X>& a, const std::vector<X>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(X)) == 0;
}

/// The mixed composition of families.hpp without growth, and its long double twin.
inline auto mixed_twins(std::uint64_t seed) {
  auto tw = twins_without_growth<MixedFam>(seed, Regime::Random);
  REQUIRE(tw.found);
  return tw;
}

}  // namespace
