// ViT presets (include/peal/presets/vision_rope.hpp) against tests/reference/nd_reference.hpp:
// rope-vit axial and mixed, DINOv3 continuous coordinates; per token and batch kernels,
// float and double; prefix tokens at the origin are not rotated. Tolerance per pair as in
// test_mrope.cpp: |x_j| (rotated_pair() + reference_angle(|angle|)).
#include <catch2/catch.hpp>
#include <cmath>
#include <peal/peal.hpp>
#include <peal/presets/vision_rope.hpp>
#include <random>
#include <vector>

#include "reference/nd_reference.hpp"
#include "tolerances.hpp"

namespace {

using peal_test::Tol;
using LD = long double;

std::vector<double> random_vec(int n, unsigned seed) {
  std::mt19937_64 g(seed);
  std::uniform_real_distribution<double> u(-1, 1);
  std::vector<double> x(static_cast<std::size_t>(n));
  for (auto& v : x) v = u(g);
  return x;
}

// y (encoded in S) against the reference r, pair by pair (pairs given by index lists).
template <class S>
void check_pairs(const S* y, const std::vector<LD>& r, const std::vector<double>& x,
                 bool interleaved, LD max_angle) {
  const std::size_t d = x.size(), h = d / 2;
  for (std::size_t j = 0; j < h; ++j) {
    const std::size_t a = interleaved ? 2 * j : j, b = interleaved ? 2 * j + 1 : h + j;
    const LD tol = std::hypot((LD)x[a], (LD)x[b]) *
                   (Tol<S>::rotated_pair() + Tol<LD>::reference_angle(max_angle));
    CAPTURE(j);
    CHECK(double(std::fabs((LD)y[a] - r[a])) <= double(tol));
    CHECK(double(std::fabs((LD)y[b] - r[b])) <= double(tol));
  }
}

template <class S, class E, class Ref>
void check_grid(const E& enc, const std::vector<double>& pos, int d, bool interleaved, Ref ref,
                LD angle_scale) {
  const int n = int(pos.size() / 2), H = 3;
  const auto x = random_vec(n * H * d, 5);
  std::vector<S> xs(x.begin(), x.end()), batch = xs;
  peal::encode_queries(enc, peal::TensorView<S>(batch.data(), n, H, d), peal::PositionsND(pos, 2));
  for (int i = 0; i < n; ++i)
    for (int h = 0; h < H; ++h) {
      const std::size_t off = std::size_t((i * H + h) * d);
      std::vector<double> xi(static_cast<std::size_t>(d));
      for (int j = 0; j < d; ++j) xi[std::size_t(j)] = double(xs[off + std::size_t(j)]);
      std::vector<LD> r(xi.begin(), xi.end());
      ref(r, pos[std::size_t(2 * i)], pos[std::size_t(2 * i + 1)]);
      peal::Vector<S> v(d);
      for (int j = 0; j < d; ++j) v(j) = xs[off + std::size_t(j)];
      enc.encode_query(v, std::vector<double>{pos[std::size_t(2 * i)], pos[std::size_t(2 * i + 1)]});
      const LD reach = angle_scale * (std::fabs(pos[std::size_t(2 * i)]) + std::fabs(pos[std::size_t(2 * i + 1)]));
      check_pairs<S>(v.data(), r, xi, interleaved, reach);
      check_pairs<S>(batch.data() + off, r, xi, interleaved, reach);
    }
}

}  // namespace

TEMPLATE_TEST_CASE("vision_rope: rope-vit axial matches compute_axial_cis", "[vision_rope]",
                   float, double) {
  const int d = 64;
  const auto enc = peal::rope_axial_2d<TestType>(d);  // theta 100
  auto pos = peal::vit_grid_positions(14, 14);
  pos.insert(pos.end(), {1e5, -3e4});  // and a large, negative point
  check_grid<TestType>(enc, pos, d, true,
                       [&](std::vector<LD>& r, LD x, LD y) { peal_ref::nd::vit_axial(r, x, y, 100); },
                       1.0L);
  // init_t_xy: patch 17 of a 14-wide grid is at (3, 1).
  CHECK(pos[34] == 3.0);
  CHECK(pos[35] == 1.0);
}

TEMPLATE_TEST_CASE("vision_rope: RoPE-Mixed matches init_random_2d_freqs / compute_mixed_cis",
                   "[vision_rope]", float, double) {
  const int d = 64;
  const std::vector<double> alpha = {0.0, 1.234, 5.5};
  const auto enc = peal::rope_mixed_2d<TestType>(d, alpha);  // theta 10
  const auto pos = peal::vit_grid_positions(7, 5);
  for (int h = 0; h < 3; ++h)
    check_grid<TestType>(enc.head(h), pos, d, true,
                         [&](std::vector<LD>& r, LD x, LD y) {
                           peal_ref::nd::vit_mixed(r, x, y, 10, alpha[std::size_t(h)]);
                         },
                         1.5L);
  // From frequencies: the same as the initialisation when given its values.
  std::vector<std::vector<double>> fx(1), fy(1);
  const LD m0 = 1.0L, a = 1.234L;
  for (int j = 0; j < d / 2; ++j) {
    const LD mag = std::pow(10.0L, -4.0L * (j % (d / 4)) / d) * m0;
    const LD ang = j < d / 4 ? a : a + std::acos(-1.0L) / 2;
    fx[0].push_back(double(mag * std::cos(ang)));
    fy[0].push_back(double(mag * std::sin(ang)));
  }
  const auto learned = peal::rope_mixed_2d_from_frequencies<double>(fx, fy);
  check_grid<double>(learned.head(0), pos, d, true,
                     [&](std::vector<LD>& r, LD x, LD y) { peal_ref::nd::vit_mixed(r, x, y, 10, a); },
                     // the frequencies were rounded to double: 1 ulp of |f| |p| of phase
                     1.5L + LD(Tol<double>::eps / Tol<LD>::eps));
}

TEMPLATE_TEST_CASE("vision_rope: DINOv3 matches its continuous-coordinate RoPE", "[vision_rope]",
                   float, double) {
  const int d = 64;
  peal::Dinov3RopeConfig c;
  c.head_dim = d;
  const auto enc = peal::dinov3_rope<TestType>(c);  // base 100
  const auto ref = [](std::vector<LD>& r, LD y, LD x) { peal_ref::nd::dinov3(r, y, x, 100); };
  // Patch centres of a 6 x 9 grid in [-1, 1] (separate normalisation, transformers' choice).
  const auto pos = peal::dinov3_patch_coordinates(6, 9);
  CHECK(pos[0] == Approx(2 * (0.5 / 6) - 1).epsilon(1e-15));
  CHECK(pos[1] == Approx(2 * (0.5 / 9) - 1).epsilon(1e-15));
  check_grid<TestType>(enc, pos, d, false, ref, 2 * std::acos(-1.0L));
  // Real-valued, jittered and rescaled coordinates (training-time augmentation).
  peal::Dinov3Augment aug;
  aug.shift_y = 0.13;
  aug.shift_x = -0.4;
  aug.jitter_y = 1.7;
  aug.jitter_x = 0.61;
  aug.rescale = 1.9;
  const auto jit = peal::dinov3_patch_coordinates(5, 4, peal::Dinov3Normalize::Max, aug);
  CHECK(jit[0] == Approx(((2 * (0.5 / 5) - 1) + 0.13) * 1.7 * 1.9).epsilon(1e-14));
  check_grid<TestType>(enc, jit, d, false, ref, 2 * std::acos(-1.0L));
}

TEST_CASE("vision_rope: DINOv3 min/max periods", "[vision_rope]") {
  peal::Dinov3RopeConfig c;
  c.head_dim = 32;
  c.base.reset();
  c.min_period = 0.5;
  c.max_period = 64;
  const auto enc = peal::dinov3_rope<double>(c);
  // period_j = min (max/min)^(j/(d/4 - 1)): omega_0 = 2 pi / 0.5, omega_7 = 2 pi / 64.
  const LD two_pi = 2 * std::acos(-1.0L);
  const auto& y = enc.axis(0);
  CHECK(double(std::fabs((LD)y.params()(0, 0) + (LD)y.params()(0, 1) - two_pi / 0.5L)) <= 1e-15);
  CHECK(double(std::fabs((LD)y.params()(7, 0) + (LD)y.params()(7, 1) - two_pi / 64)) <= 1e-17);
  CHECK(enc.axis(1).params()(0, 0) == 0.0);  // pair 0 follows y only
  CHECK(enc.axis(0).params()(8, 0) == 0.0);  // pair 8 follows x only
  c.min_period.reset();
  REQUIRE_THROWS_WITH(peal::dinov3_rope<double>(c), Catch::Contains("min_period"));
  c.base = 100;
  c.min_period = 1;
  REQUIRE_THROWS_WITH(peal::dinov3_rope<double>(c), Catch::Contains("either base"));
}

TEST_CASE("vision_rope: prefix tokens at the origin are not rotated", "[vision_rope]") {
  // CLS / register tokens: the models skip them; A(0) = I makes position (0, 0) exactly that.
  const auto enc = peal::rope_axial_2d<float>(32);
  const auto x = random_vec(32, 9);
  std::vector<float> q(x.begin(), x.end()), q0 = q;
  peal::encode_queries(enc, peal::TensorView<float>(q.data(), 1, 1, 32),
                       peal::PositionsND(std::vector<double>{0.0, 0.0}, 2));
  CHECK(q == q0);
}

TEST_CASE("vision_rope: validation", "[vision_rope][errors]") {
  REQUIRE_THROWS_WITH(peal::rope_axial_2d<float>(30), Catch::Contains("multiple of 4"));
  REQUIRE_THROWS_WITH(peal::rope_axial_2d<float>(32, 1.0), Catch::Contains("theta"));
  REQUIRE_THROWS_WITH(peal::rope_mixed_2d<float>(32, {}), Catch::Contains("one angle per head"));
  REQUIRE_THROWS_WITH(peal::rope_mixed_2d<float>(32, {NAN}), Catch::Contains("finite"));
  REQUIRE_THROWS_WITH(peal::rope_mixed_2d_from_frequencies<float>({{1.0}}, {{1.0, 2.0}}),
                      Catch::Contains("as many"));
  REQUIRE_THROWS_WITH(peal::vit_grid_positions(0, 3), Catch::Contains("> 0"));
  REQUIRE_THROWS_WITH(peal::dinov3_patch_coordinates(1 << 20, 1 << 20), Catch::Contains("2^28"));
}
