// M-RoPE (include/peal/presets/mrope.hpp) against the independent long double references of
// tests/reference/nd_reference.hpp (Qwen2-VL / Qwen2.5-VL sections, Qwen3-VL interleaved),
// per token and through the batch kernels, float and double, small and large positions.
// Tolerance per rotary pair (test_rope.cpp's error model): |x_j| (rotated_pair() +
// reference_angle(|omega_j p_a|)), the reference's own rounding of the product p omega.
#include <catch2/catch.hpp>
#include <cmath>
#include <peal/presets/mrope.hpp>
#include <peal/peal.hpp>
#include <random>
#include <vector>

#include "reference/nd_reference.hpp"
#include "tolerances.hpp"

namespace {

using peal_test::Tol;
using LD = long double;

peal::RopeConfig qwen(int head_dim, double theta, std::vector<int> sec, bool interleaved) {
  peal::RopeConfig c;
  c.head_dim = head_dim;
  c.rope_theta = theta;
  c.scaling.mrope_section = std::move(sec);
  c.scaling.mrope_interleaved = interleaved;
  return c;
}

// Compares one encoded vector y (from x at p) with the reference, pair by pair.
template <class S>
void check_against_reference(const std::vector<S>& y, const std::vector<double>& x, const LD p[3],
                             const peal::RopeConfig& c) {
  std::vector<LD> r(x.begin(), x.end());
  if (c.scaling.mrope_interleaved)
    peal_ref::nd::qwen3_vl(r, p, c.rope_theta, c.scaling.mrope_section);
  else
    peal_ref::nd::qwen2_vl(r, p, c.rope_theta, c.scaling.mrope_section);
  const std::size_t d = x.size(), h = d / 2;
  const LD pmax = std::max({std::fabs(p[0]), std::fabs(p[1]), std::fabs(p[2])});
  for (std::size_t j = 0; j < h; ++j) {
    const LD w = std::pow((LD)c.rope_theta, -2.0L * LD(j) / LD(d));
    const LD norm = std::hypot((LD)x[j], (LD)x[h + j]);
    const LD tol = norm * (Tol<S>::rotated_pair() + Tol<LD>::reference_angle(w * pmax));
    CAPTURE(j, double(p[0]), double(p[1]), double(p[2]));
    CHECK(double(std::fabs((LD)y[j] - r[j])) <= double(tol));
    CHECK(double(std::fabs((LD)y[h + j] - r[h + j])) <= double(tol));
  }
}

template <class S>
void check_preset(const peal::RopeConfig& c) {
  const auto enc = peal::mrope<S>(c);
  const int d = c.head_dim;
  std::mt19937_64 g(11);
  std::uniform_real_distribution<double> u(-1, 1);
  // Small and large (t, h, w); text tokens (t = h = w); 2^40 on one axis.
  const std::vector<std::array<double, 3>> points = {
      {0, 0, 0}, {3, 1, 2}, {17, 4, 9}, {4095, 4000, 12}, {1e6, 1e6, 1e6}, {0x1p40, 5, 0x1p39}};
  const int n = int(points.size()), H = 2;
  std::vector<double> x(std::size_t(n * H * d));
  for (auto& v : x) v = u(g);
  std::vector<double> pos;
  for (const auto& p : points) pos.insert(pos.end(), p.begin(), p.end());
  std::vector<S> batch(x.begin(), x.end());
  peal::encode_queries(enc, peal::TensorView<S>(batch.data(), n, H, d), peal::PositionsND(pos, 3));
  for (int i = 0; i < n; ++i)
    for (int h = 0; h < H; ++h) {
      const std::vector<double> xi(x.begin() + (i * H + h) * d, x.begin() + (i * H + h + 1) * d);
      peal::Vector<S> v(d);
      for (int j = 0; j < d; ++j) v(j) = S(xi[std::size_t(j)]);
      enc.encode_query(v, std::vector<double>(points[std::size_t(i)].begin(), points[std::size_t(i)].end()));
      const LD p[3] = {points[std::size_t(i)][0], points[std::size_t(i)][1], points[std::size_t(i)][2]};
      // the reference gets the values as stored in S
      std::vector<double> xs(xi.size());
      for (std::size_t j = 0; j < xi.size(); ++j) xs[j] = double(S(xi[j]));
      check_against_reference(std::vector<S>(v.data(), v.data() + d), xs, p, c);
      check_against_reference(std::vector<S>(batch.begin() + (i * H + h) * d,
                                             batch.begin() + (i * H + h + 1) * d), xs, p, c);
    }
}

}  // namespace

TEMPLATE_TEST_CASE("mrope: Qwen2-VL / Qwen2.5-VL sections [16, 24, 24] match the reference",
                   "[mrope]", float, double) {
  check_preset<TestType>(qwen(128, 1e6, {16, 24, 24}, false));
  check_preset<TestType>(qwen(64, 1e4, {8, 12, 12}, false));
}

TEMPLATE_TEST_CASE("mrope: Qwen3-VL interleaved [24, 20, 20] matches the reference", "[mrope]",
                   float, double) {
  check_preset<TestType>(qwen(128, 5e6, {24, 20, 20}, true));
  check_preset<TestType>(qwen(128, 1e6, {16, 24, 24}, true));  // sections where 3 s_h > d/2
}

TEST_CASE("mrope: the axis of each pair", "[mrope]") {
  const auto a = peal::mrope_pair_axes({16, 24, 24}, false, 64);
  for (int j = 0; j < 64; ++j) CHECK(a[std::size_t(j)] == (j < 16 ? 0 : j < 40 ? 1 : 2));
  const auto b = peal::mrope_pair_axes({24, 20, 20}, true, 64);
  // THW THW ... up to pair 59, then T for 60..63 (3 s_h = 60).
  int counts[3] = {0, 0, 0};
  for (int j = 0; j < 64; ++j) {
    CHECK(b[std::size_t(j)] == (j < 60 ? j % 3 : 0));
    ++counts[b[std::size_t(j)]];
  }
  CHECK(counts[0] == 24);
  CHECK(counts[1] == 20);
  CHECK(counts[2] == 20);
}

TEST_CASE("mrope: text tokens (t = h = w) are plain RoPE, bitwise", "[mrope]") {
  for (bool inter : {false, true}) {
    const auto c = qwen(128, 1e6, inter ? std::vector<int>{24, 20, 20} : std::vector<int>{16, 24, 24}, inter);
    const auto m = peal::mrope<float>(c);
    auto plain = c;
    plain.scaling.mrope_section.clear();
    const auto r = peal::rope<float>(plain);
    const int n = 4, d = 128;
    std::vector<float> x(std::size_t(n * d));
    std::mt19937 g(2);
    std::uniform_real_distribution<float> u(-1, 1);
    for (auto& v : x) v = u(g);
    std::vector<float> y = x;
    std::vector<double> t = {0, 7, 31337, 0x1p33}, p;
    for (double v : t) p.insert(p.end(), {v, v, v});
    peal::encode_keys(m, peal::TensorView<float>(x.data(), n, 1, d), peal::PositionsND(p, 3));
    peal::encode_keys(r, peal::TensorView<float>(y.data(), n, 1, d), t);
    CHECK(x == y);
  }
}

TEST_CASE("mrope: validation", "[mrope][errors]") {
  REQUIRE_THROWS_WITH(peal::mrope<float>(qwen(128, 1e6, {16, 24, 20}, false)),
                      Catch::Contains("sums to 60, but rotary_dim / 2 = 64"));
  REQUIRE_THROWS_WITH(peal::mrope<float>(qwen(128, 1e6, {16, 48}, false)),
                      Catch::Contains("3 entries"));
  REQUIRE_THROWS_WITH(peal::mrope<float>(qwen(128, 1e6, {-8, 48, 24}, false)),
                      Catch::Contains(">= 0"));
  auto c = qwen(128, 1e6, {}, false);
  REQUIRE_THROWS_WITH(peal::mrope<float>(c), Catch::Contains("no mrope_section"));
  c = qwen(128, 0.5, {16, 24, 24}, false);
  REQUIRE_THROWS_WITH(peal::mrope<float>(c), Catch::Contains("rope_theta"));
}
