// RoPE presets (include/peal/presets/rope.hpp) against the independent long-double reference
// tests/reference/preset_reference.hpp (docs/presets.md §1-7).
//
// Error model of the comparisons (per rotary pair, relative to the pair's norm |x_i|):
//  * peal forms the angle omega_i p exactly and reduces it mod 2pi to 2^-57 rad
//    (detail/math/angle.hpp), takes sin/cos in double and rounds them once to the storage type S;
//    the rotation x0 c - x1 s, x0 s + x1 c in S then costs <= (2 sqrt2 + 1) u |x_i| with
//    u = eps_S / 2, i.e. ~1.9 eps_S ("~2 ulp"); the attention-factor multiply (scale_rotary)
//    adds one more rounding u. Bound used: 4 eps_S.
//  * the reference rounds the product p omega_i to long double (relative 2^-64) before
//    cosl/sinl, so ITS angle is off by up to |omega_i p| 2^-64: 5.4e-14 rad at p = 1e6 and
//    6e-8 rad near p = 2^40 for omega_0 = 1 (half a float32 ulp). Both sides use the same
//    long-double omega_i (bitwise: peal splits it exactly into two doubles). Bound used:
//    |omega_i p| 2^-62 (covers a few long-double ulps of omega_i as well).
//  Tolerance: |peal_i - ref_i| <= |x_i| (4 eps_S + |omega_i p| 2^-62), i.e.
//  Tol<S>::rotated_pair() + Tol<long double>::reference_angle(|omega_i p|) (tolerances.hpp).
//  Measured (these positions, 50 random vectors): float <= ~1.2 eps_f everywhere; double
//  ~1.5 eps_d at 0 and 4095, ~130 eps_d at 1e6 and ~1e8 eps_d (2.4e-8) at 2^40 + 12345: that
//  is the reference's product rounding, not peal's error (against a __float128 evaluation of
//  the same omega_i, peal's double cos/sin are within 1 ulp there). At exactly p = 2^40 the
//  reference's product is exact (a power of two) and double agrees to ~1.6 eps_d.
//  Relative to the exact real theta^(-2i/D), both share omega_i's long-double rounding
//  (2^-64 relative: ~6e-8 rad of phase at 2^40), which is below float resolution.
#include <catch2/catch.hpp>
#include <cmath>
#include <limits>
#include <peal/encode.hpp>
#include <peal/peal.hpp>
#include <peal/scores.hpp>
#include <random>
#include <vector>

#include "kernel_catalogue.hpp"
#include "reference/preset_reference.hpp"
#include "tolerances.hpp"

namespace {

using peal_test::Tol;

using peal::Layout;
using peal::RopeConfig;
using peal::RopeType;
using peal_ref::RopeRef;
using LD = long double;

// 0, 4095, 1e6, 2^40, and 2^40 + 12345 (where the reference's product is rounded).
const std::vector<double> kPositions = {0.0, 4095.0, 1e6, 1099511627776.0, 1099511640121.0};

template <class S>
peal::Vector<S> random_vector(int n, unsigned seed) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> u(-1, 1);
  peal::Vector<S> v(n);
  for (int i = 0; i < n; ++i) v(i) = S(u(rng));
  return v;
}

template <class S>
std::vector<LD> to_ld(const peal::Vector<S>& v) {
  std::vector<LD> out(std::size_t(v.size()));
  for (int i = 0; i < v.size(); ++i) out[std::size_t(i)] = static_cast<LD>(v(i));
  return out;
}

// Coordinates of rotary pair i in a rotary part of size D.
std::pair<int, int> pair_coords(Layout layout, int D, int i) {
  return layout == Layout::HalfSplit ? std::make_pair(i, i + D / 2)
                                     : std::make_pair(2 * i, 2 * i + 1);
}

// Worst error over pairs in units of the bound's first term (eps_S |x_i|), after removing
// the reference's angle allowance; the test requires <= 4.
struct Worst {
  long double eps_units = 0;
};

// peal's preset encoding of q at p (query and key: both are R(omega p) for RoPE; the
// attention factor applied with scale_rotary) against apply_rope_*(ref).
template <class S>
Worst check_encoded(const peal::RopeEncoding<S>& enc, const RopeRef& ref, double p, unsigned seed) {
  const int d = enc.head_dim(), D = enc.rotary_dim();
  const Layout layout = enc.layout();
  const long double eps = Tol<S>::eps;
  Worst w;
  for (int which = 0; which < 2; ++which) {
    const peal::Vector<S> x = random_vector<S>(d, seed + unsigned(which));
    peal::Vector<S> y = x;
    if (which == 0)
      enc.encode_query(y, p);
    else
      enc.encode_key(y, p);
    peal::scale_rotary(enc, y);

    std::vector<LD> r = to_ld(x);
    if (layout == Layout::HalfSplit)
      peal_ref::apply_rope_halfsplit(r, ref, p);
    else
      peal_ref::apply_rope_interleaved(r, ref, p);

    for (int i = 0; i < D / 2; ++i) {
      const auto [a, b] = pair_coords(layout, D, i);
      const LD nx = std::hypot(LD(x(a)), LD(x(b))) * ref.attention_factor;
      const LD err = std::hypot(LD(y(a)) - r[std::size_t(a)], LD(y(b)) - r[std::size_t(b)]);
      const LD ang = Tol<LD>::reference_angle(std::fabs(ref.inv_freq[std::size_t(i)] * LD(p)));
      CAPTURE(i, p, double(err), double(nx));
      REQUIRE(err <= nx * (Tol<S>::rotated_pair() + ang) + Tol<S>::underflow());
      if (nx > 0) w.eps_units = std::max(w.eps_units, std::max(LD(0), err / nx - ang) / eps);
    }
    // Pass-through coordinates: untouched and unscaled.
    for (int j = D; j < d; ++j) REQUIRE(y(j) == x(j));
  }
  return w;
}

// Frequencies and attention factor agree with the reference to long-double rounding (each
// side at most four operations of the published formula: roundings(8)), and the bank
// stores each omega exactly (as a double pair).
template <class S>
void check_parameters(const peal::RopeEncoding<S>& enc, const RopeRef& ref) {
  const long double tol = Tol<long double>::roundings(8);
  REQUIRE(enc.rotary_dim() == ref.rotary_dim);
  REQUIRE(enc.inv_freq().size() == ref.inv_freq.size());
  for (std::size_t i = 0; i < ref.inv_freq.size(); ++i) {
    CAPTURE(i);
    REQUIRE(std::fabs(enc.inv_freq()[i] - ref.inv_freq[i]) <= tol * ref.inv_freq[i]);
    if (!std::is_same<S, long double>::value)  // long double blocks hold omega exactly too
      REQUIRE(enc.rotary().block(int(i)).omega() == enc.inv_freq()[i]);
    REQUIRE(enc.rotary().block(int(i)).a() == 0);
  }
  REQUIRE(std::fabs(enc.attention_factor_long() - ref.attention_factor) <=
          tol * ref.attention_factor);
  REQUIRE(enc.rotary().layout() == enc.layout());
}

template <class S>
void check_preset(const RopeConfig& cfg, double seq_len, const RopeRef& ref, unsigned seed = 7) {
  const auto enc = peal::rope<S>(cfg, seq_len);
  REQUIRE(enc.dim() == cfg.head_dim);
  check_parameters(enc, ref);
  // A(0) = I: the attention factor is not part of the group.
  REQUIRE(enc.A(0.0) == peal::Matrix<S>::Identity(cfg.head_dim, cfg.head_dim));
  for (double p : kPositions) {
    CAPTURE(p);
    check_encoded(enc, ref, p, seed);
  }
}

// Runs a configuration for float, double and long double storage.
void check_all_scalars(const RopeConfig& cfg, double seq_len, const RopeRef& ref) {
  check_preset<float>(cfg, seq_len, ref);
  check_preset<double>(cfg, seq_len, ref);
  check_preset<long double>(cfg, seq_len, ref);
}

RopeConfig config(int head_dim, double theta, double prf = 1.0, Layout layout = Layout::HalfSplit) {
  RopeConfig c;
  c.head_dim = head_dim;
  c.rope_theta = theta;
  c.partial_rotary_factor = prf;
  c.layout = layout;
  return c;
}

// A LongRoPE factor list in the shape of Phi-3's: float32 values written as doubles,
// rising from `lo` to about `hi` over the pairs. (Synthetic: the published lists are not
// copied here; the preset only divides by them, whatever they are.)
std::vector<double> longrope_list(int n, double lo, double hi) {
  std::vector<double> v(static_cast<std::size_t>(n));
  for (int i = 0; i < n; ++i) {
    const double u = double(i) / double(n - 1);
    v[std::size_t(i)] = double(float(lo + (hi - lo) * u * u * (3 - 2 * u)));
  }
  return v;
}
std::vector<LD> to_ld(const std::vector<double>& v) { return std::vector<LD>(v.begin(), v.end()); }

}  // namespace

TEST_CASE("rope: Llama 2 default (theta 1e4, d 128) matches the reference", "[rope]") {
  for (Layout layout : {Layout::HalfSplit, Layout::Interleaved}) {
    const auto cfg = config(128, 10000.0, 1.0, layout);
    check_all_scalars(cfg, 0, peal_ref::rope_default(128, 10000.0L));
  }
}

TEST_CASE("rope: high theta (Llama 3, theta 5e5) and Code Llama (1e6)", "[rope]") {
  check_all_scalars(config(128, 500000.0), 0, peal_ref::rope_default(128, 500000.0L));
  check_all_scalars(config(128, 1e6), 0, peal_ref::rope_default(128, 1e6L));
}

TEST_CASE("rope: linear scaling, factor 4", "[rope]") {
  auto cfg = config(128, 10000.0);
  cfg.scaling.type = RopeType::Linear;
  cfg.scaling.factor = 4.0;
  check_all_scalars(cfg, 0, peal_ref::rope_linear(128, 10000.0L, 1.0, 4.0L));
}

TEST_CASE("rope: dynamic NTK at several lengths", "[rope]") {
  auto cfg = config(128, 10000.0);
  cfg.max_position_embeddings = 4096;
  cfg.scaling.type = RopeType::Dynamic;
  cfg.scaling.factor = 2.0;
  for (double L : {1.0, 2048.0, 4096.0, 4097.0, 8192.0, 16384.0, 100000.0}) {
    CAPTURE(L);
    const auto ref = peal_ref::rope_dynamic(128, 10000.0L, 1.0, 2.0L, 4096.0L, LD(L));
    check_all_scalars(cfg, L, ref);
    if (L <= 4096) {  // at or below the trained length nothing changes
      const auto plain = peal_ref::rope_default(128, 10000.0L);
      const auto enc = peal::rope<double>(cfg, L);
      for (std::size_t i = 0; i < plain.inv_freq.size(); ++i)
        REQUIRE(enc.inv_freq()[i] == plain.inv_freq[i]);
    }
  }
  // Continuous and increasing base in L: the slowest frequency drops as L grows.
  const auto e1 = peal::rope<double>(cfg, 8192), e2 = peal::rope<double>(cfg, 16384);
  REQUIRE(e2.inv_freq().back() < e1.inv_freq().back());
}

TEST_CASE("rope: YaRN, Qwen2-style (theta 1e6, factor 4, original 32768)", "[rope]") {
  auto cfg = config(128, 1e6);
  cfg.max_position_embeddings = 32768;
  cfg.scaling.type = RopeType::Yarn;
  cfg.scaling.factor = 4.0;
  cfg.scaling.original_max_position_embeddings = 32768;
  const auto ref = peal_ref::rope_yarn(128, 1e6L, 1.0, 4.0L, 32768.0L);
  check_all_scalars(cfg, 0, ref);

  const auto enc = peal::rope<double>(cfg);
  // Current HF semantics: the explicit factor is used (not max/original = 1, issue #38224).
  // 0.1 ln f + 1 in double against peal's long double value rounded once: log, the product
  // by the inexact 0.1 and the sum, roundings(4) relative; docs/presets.md quotes 6 decimals.
  const double af = 0.1 * std::log(4.0) + 1.0;
  REQUIRE(std::abs(enc.attention_factor() - af) <= Tol<double>::roundings(4) * af);
  REQUIRE(std::abs(enc.attention_factor() - 1.138629) <= Tol<double>::printed(6));
  // Correction range c(32) = 23.6 -> low 23, c(1) = 39.65 -> high 40 (docs/presets.md §5.3).
  const auto base = peal_ref::rope_default(128, 1e6L);
  for (int j = 0; j < 64; ++j) {
    CAPTURE(j);
    const LD w = enc.inv_freq()[std::size_t(j)], w0 = base.inv_freq[std::size_t(j)];
    if (j <= 23) REQUIRE(w == w0);
    if (j >= 40) REQUIRE(std::fabs(w - w0 / 4) <= Tol<LD>::roundings(4) * w);
    if (j > 23 && j < 40) REQUIRE((w < w0 && w > w0 / 4));
  }
}

TEST_CASE("rope: YaRN factor from the lengths only when factor is absent", "[rope]") {
  auto cfg = config(128, 1e6);
  cfg.max_position_embeddings = 131072;
  cfg.scaling.type = RopeType::Yarn;
  cfg.scaling.original_max_position_embeddings = 32768;
  const auto ref = peal_ref::rope_yarn(128, 1e6L, 1.0, 4.0L, 32768.0L);  // 131072 / 32768
  check_preset<double>(cfg, 0, ref);
  // And L0 falls back on max_position_embeddings.
  auto c2 = config(64, 10000.0);
  c2.max_position_embeddings = 2048;
  c2.scaling.type = RopeType::Yarn;
  c2.scaling.factor = 8.0;
  check_preset<float>(c2, 0, peal_ref::rope_yarn(64, 10000.0L, 1.0, 8.0L, 2048.0L));
}

TEST_CASE("rope: YaRN, DeepSeek-style (factor 40, original 4096, mscale, interleaved)", "[rope]") {
  auto cfg = config(64, 10000.0, 1.0, Layout::Interleaved);
  cfg.max_position_embeddings = 163840;
  cfg.scaling.type = RopeType::Yarn;
  cfg.scaling.factor = 40.0;
  cfg.scaling.original_max_position_embeddings = 4096;
  cfg.scaling.beta_fast = 32.0;
  cfg.scaling.beta_slow = 1.0;
  SECTION("V3: mscale = mscale_all_dim = 1 -> attention factor 1") {
    cfg.scaling.mscale = 1.0;
    cfg.scaling.mscale_all_dim = 1.0;
    const auto ref =
        peal_ref::rope_yarn(64, 10000.0L, 1.0, 40.0L, 4096.0L, 32.0L, 1.0L, true, 1.0L, 1.0L);
    REQUIRE(ref.attention_factor == 1.0L);
    check_all_scalars(cfg, 0, ref);
  }
  SECTION("mscale 1, mscale_all_dim 0.707: the ratio form") {
    cfg.scaling.mscale = 1.0;
    cfg.scaling.mscale_all_dim = 0.707;
    const auto ref =
        peal_ref::rope_yarn(64, 10000.0L, 1.0, 40.0L, 4096.0L, 32.0L, 1.0L, true, 1.0L, LD(0.707));
    REQUIRE(ref.attention_factor > 1.0L);
    check_all_scalars(cfg, 0, ref);
  }
  SECTION("mscale_all_dim 0 counts as absent (HF `if mscale and mscale_all_dim`)") {
    cfg.scaling.mscale = 0.707;
    cfg.scaling.mscale_all_dim = 0.0;
    const auto enc = peal::rope<double>(cfg);
    const double af = 0.1 * std::log(40.0) + 1.0;  // as above: roundings(4)
    REQUIRE(std::abs(enc.attention_factor() - af) <= Tol<double>::roundings(4) * af);
  }
}

TEST_CASE("rope: YaRN truncate false (gpt-oss-style) and explicit attention_factor", "[rope]") {
  auto cfg = config(64, 150000.0);
  cfg.max_position_embeddings = 131072;
  cfg.scaling.type = RopeType::Yarn;
  cfg.scaling.factor = 32.0;
  cfg.scaling.original_max_position_embeddings = 4096;
  cfg.scaling.truncate = false;
  const auto ref = peal_ref::rope_yarn(64, 150000.0L, 1.0, 32.0L, 4096.0L, 32.0L, 1.0L, false);
  check_all_scalars(cfg, 0, ref);
  REQUIRE(std::abs(peal::rope<double>(cfg).attention_factor() - 1.346574) <=
          Tol<double>::printed(6));
  // truncate changes the ramp.
  auto c2 = cfg;
  c2.scaling.truncate = true;
  REQUIRE(peal::rope<double>(c2).inv_freq() != peal::rope<double>(cfg).inv_freq());

  cfg.scaling.attention_factor = 1.25;
  cfg.scaling.beta_fast = 0.0;  // HF: `beta_fast or 32`
  const auto ref2 = peal_ref::rope_yarn(64, 150000.0L, 1.0, 32.0L, 4096.0L, 32.0L, 1.0L, false,
                                        peal_ref::absent(), peal_ref::absent(), 1.25L);
  check_preset<double>(cfg, 0, ref2);
}

TEST_CASE("rope: LongRoPE, Phi-3-mini-128k-style, both sides of the switch", "[rope]") {
  auto cfg = config(96, 10000.0);
  cfg.max_position_embeddings = 131072;
  cfg.scaling.type = RopeType::LongRope;
  cfg.scaling.original_max_position_embeddings = 4096;
  const auto shortf = longrope_list(48, 1.05, 1.35), longf = longrope_list(48, 1.07, 64.0);
  cfg.scaling.short_factor = shortf;
  cfg.scaling.long_factor = longf;
  for (double L : {1.0, 4095.0, 4096.0, 4097.0, 131072.0}) {
    CAPTURE(L);
    const auto ref = peal_ref::rope_longrope(96, 10000.0L, 1.0, to_ld(shortf), to_ld(longf),
                                             4096.0L, 131072.0L, LD(L));
    check_all_scalars(cfg, L, ref);
    const auto enc = peal::rope<double>(cfg, L);
    // sqrt(1 + ln 32 / ln 4096), whichever table is in use: two logs, the quotient, the sum
    // (weighted by 0.29 under the square root) and the root, ~1.3 eps in all: roundings(4).
    const double af = std::sqrt(1.0 + std::log(32.0) / std::log(4096.0));
    REQUIRE(std::abs(enc.attention_factor() - af) <= Tol<double>::roundings(4) * af);
    REQUIRE(std::abs(enc.attention_factor() - 1.190238) <= Tol<double>::printed(6));
    // theta^(-2i/D) / (theta^(-2i/D) / ext_i) is ext_i to a few long double ulps, then rounded
    // once to double: roundings(1).
    const double expect = L > 4096 ? longf[10] : shortf[10];
    const double ratio =
        double(peal_ref::rope_default(96, 10000.0L).inv_freq[10] / enc.inv_freq()[10]);
    REQUIRE(std::abs(ratio - expect) <= Tol<double>::roundings(1) * expect);
  }
}

TEST_CASE("rope: LongRoPE, Phi-4-mini-like partial rotary 0.75 (af on the rotary part only)",
          "[rope]") {
  auto cfg = config(128, 10000.0, 0.75);
  cfg.max_position_embeddings = 131072;
  cfg.scaling.type = RopeType::LongRope;
  cfg.scaling.original_max_position_embeddings = 4096;
  const auto shortf = longrope_list(48, 1.0, 1.2), longf = longrope_list(48, 1.0, 40.0);
  cfg.scaling.short_factor = shortf;
  cfg.scaling.long_factor = longf;
  for (double L : {2048.0, 65536.0}) {
    const auto ref = peal_ref::rope_longrope(128, 10000.0L, 0.75, to_ld(shortf), to_ld(longf),
                                             4096.0L, 131072.0L, LD(L));
    REQUIRE(ref.rotary_dim == 96);
    check_all_scalars(cfg, L, ref);
  }
  // An explicit factor (v5: it wins over max/original) and an explicit attention_factor.
  cfg.scaling.factor = 16.0;
  const auto ref16 = peal_ref::rope_longrope(128, 10000.0L, 0.75, to_ld(shortf), to_ld(longf),
                                             4096.0L, 131072.0L, 10.0L, peal_ref::absent(), 16.0L);
  check_preset<double>(cfg, 10, ref16);
  cfg.scaling.attention_factor = 1.5;
  REQUIRE(peal::rope<double>(cfg, 10).attention_factor() == 1.5);
}

TEST_CASE("rope: llama3 (Llama 3.1 8B: theta 5e5, factor 8, low 1, high 4, original 8192)",
          "[rope]") {
  auto cfg = config(128, 500000.0);
  cfg.max_position_embeddings = 131072;
  cfg.scaling.type = RopeType::Llama3;
  cfg.scaling.factor = 8.0;
  cfg.scaling.low_freq_factor = 1.0;
  cfg.scaling.high_freq_factor = 4.0;
  cfg.scaling.original_max_position_embeddings = 8192;
  const auto ref = peal_ref::rope_llama3(128, 500000.0L, 1.0, 8.0L, 1.0L, 4.0L, 8192.0L);
  check_all_scalars(cfg, 0, ref);
  // Bands (docs/presets.md §7): pairs 0-28 kept, 29-34 smoothed, 35-63 divided by 8.
  const auto enc = peal::rope<double>(cfg);
  const auto base = peal_ref::rope_default(128, 500000.0L);
  for (int j = 0; j < 64; ++j) {
    CAPTURE(j);
    const LD w = enc.inv_freq()[std::size_t(j)], w0 = base.inv_freq[std::size_t(j)];
    if (j <= 28) REQUIRE(w == w0);
    if (j >= 35) REQUIRE(std::fabs(w - w0 / 8) <= Tol<LD>::roundings(4) * w);
    if (j > 28 && j < 35) REQUIRE((w < w0 && w > w0 / 8));
  }
}

TEST_CASE("rope: frequency_factors (ggml rope_freqs) divide omega_i after the rope type",
          "[rope]") {
  // llama.cpp's converter bakes Llama 3.1's llama3 scaling into the tensor rope_freqs: with
  // factors f_i = w0_i / w3_i (w3 the llama3 frequencies), a default config must give w3.
  auto l3 = config(128, 500000.0);
  l3.scaling.type = RopeType::Llama3;
  l3.scaling.factor = 8.0;
  l3.scaling.low_freq_factor = 1.0;
  l3.scaling.high_freq_factor = 4.0;
  l3.scaling.original_max_position_embeddings = 8192;
  const auto ref = peal_ref::rope_llama3(128, 500000.0L, 1.0, 8.0L, 1.0L, 4.0L, 8192.0L);
  const auto base = peal_ref::rope_default(128, 500000.0L);
  auto cfg = config(128, 500000.0);
  for (int j = 0; j < 64; ++j)
    cfg.frequency_factors.push_back(double(base.inv_freq[std::size_t(j)] /
                                           ref.inv_freq[std::size_t(j)]));
  const auto enc = peal::rope<double>(cfg);
  for (int j = 0; j < 64; ++j) {
    CAPTURE(j);
    const LD w = enc.inv_freq()[std::size_t(j)], w3 = ref.inv_freq[std::size_t(j)];
    // one double rounding of the factor, one long double division
    REQUIRE(std::fabs(w - w3) <= (Tol<double>::roundings(1) + Tol<LD>::roundings(2)) * w3);
  }
  REQUIRE(enc.inv_freq()[40] != base.inv_freq[40]);  // the factors did something
  auto bad = cfg;
  bad.frequency_factors.pop_back();
  REQUIRE_THROWS_WITH(peal::rope<double>(bad), Catch::Contains("frequency_factors has 63"));
  bad = cfg;
  bad.frequency_factors[3] = 0.0;
  REQUIRE_THROWS_WITH(peal::rope<double>(bad), Catch::Contains("frequency_factors[3]"));
  bad = cfg;
  bad.frequency_factors[5] = std::nan("");
  REQUIRE_THROWS_WITH(peal::rope<double>(bad), Catch::Contains("frequency_factors[5]"));
  bad = config(128, 10000.0);
  bad.scaling.mrope_section = {16, 24, 24};
  REQUIRE_THROWS_WITH(peal::rope<double>(bad), Catch::Contains("mrope"));
}

TEST_CASE("rope: partial rotary, GPT-NeoX-20B (d 96, rotary_pct 0.25 -> 24)", "[rope]") {
  const auto cfg = config(96, 10000.0, 0.25);
  const auto ref = peal_ref::rope_default(96, 10000.0L, 0.25);
  REQUIRE(ref.rotary_dim == 24);
  check_all_scalars(cfg, 0, ref);
  const auto enc = peal::rope<float>(cfg);
  REQUIRE(enc.rotary_dim() == 24);
  REQUIRE(enc.part<1>().dim() == 72);
  // Phi-2: d 80, factor 0.4 -> 32 (the double product 80 * 0.4 = 32.000000000000004).
  REQUIRE(peal::rope<double>(config(80, 10000.0, 0.4)).rotary_dim() == 32);
  check_preset<double>(config(80, 10000.0, 0.4), 0, peal_ref::rope_default(80, 10000.0L, 0.4));
}

TEST_CASE("rope: the two layouts are the same encoding up to a fixed permutation", "[rope]") {
  // P maps interleaved coordinates to half-split ones: (2i + c) -> (i + c D/2) on the rotary
  // part, identity on the pass-through part. Then P A_interleaved(tau) P^T = A_halfsplit(tau).
  for (double prf : {1.0, 0.75, 0.25}) {
    auto ch = config(64, 10000.0, prf, Layout::HalfSplit);
    ch.scaling.type = RopeType::Llama3;
    ch.scaling.factor = 8;
    ch.scaling.low_freq_factor = 1;
    ch.scaling.high_freq_factor = 4;
    ch.scaling.original_max_position_embeddings = 8192;
    auto ci = ch;
    ci.layout = Layout::Interleaved;
    const auto eh = peal::rope<double>(ch), ei = peal::rope<double>(ci);
    const int d = eh.dim(), D = eh.rotary_dim();
    peal::Matrix<double> P = peal::Matrix<double>::Zero(d, d);
    for (int i = 0; i < D / 2; ++i)
      for (int c = 0; c < 2; ++c) P(i + c * D / 2, 2 * i + c) = 1;
    for (int j = D; j < d; ++j) P(j, j) = 1;
    for (double tau : {0.0, 1.0, -3.5, 4095.0, 1e6, 1099511627776.0}) {
      CAPTURE(prf, tau);
      REQUIRE((P * ei.A(tau) * P.transpose() - eh.A(tau)).cwiseAbs().maxCoeff() == 0.0);
    }
    REQUIRE((P * ei.generator() * P.transpose() - eh.generator()).cwiseAbs().maxCoeff() == 0.0);
    // The same on vectors: encode(P^T x) = P^T encode(x).
    const peal::Vector<double> x = random_vector<double>(d, 3);
    peal::Vector<double> yh = x, yi = P.transpose() * x;
    eh.encode_query(yh, 12345.0);
    ei.encode_query(yi, 12345.0);
    REQUIRE((P.transpose() * yh - yi).cwiseAbs().maxCoeff() == 0.0);
  }
}

TEST_CASE("rope: attention factor is a fixed scale of the rotary coordinates", "[rope]") {
  auto cfg = config(64, 10000.0);
  cfg.scaling.type = RopeType::Yarn;
  cfg.scaling.factor = 4.0;
  cfg.scaling.original_max_position_embeddings = 4096;
  const auto enc = peal::rope<double>(cfg);
  const double af = enc.attention_factor();
  REQUIRE(af > 1.0);
  const peal::Vector<double> q = random_vector<double>(64, 11), k = random_vector<double>(64, 12);
  // HF: (af R(t) q) . (af R(s) k) = af^2 q^T A(t - s) k: scale before or after encoding, or
  // multiply the score by af^2 (full rotary head).
  peal::Vector<double> qa = q, ka = k, qb = q, kb = k;
  peal::scale_rotary(enc, qa);
  peal::scale_rotary(enc, ka);
  enc.encode_query(qa, 1000.0);
  enc.encode_key(ka, 990.0);
  enc.encode_query(qb, 1000.0);
  enc.encode_key(kb, 990.0);
  peal::scale_rotary(enc, qb);
  peal::scale_rotary(enc, kb);
  const double s_plain = enc.score(q, 1000.0, k, 990.0);
  // Relative to the score itself: roundings(64), one per coordinate. That is tighter than the
  // generic entry(64) |q|^T |A| |k| af^2 (20x the old relative 1e-13 here, where the score
  // cancels to ~1/40 of that size) and is kept as tight as before: the three orders of
  // scaling and rotating round the same exactly rotated products, measured ~2 eps of the
  // score apart.
  const double want = af * af * s_plain;
  REQUIRE(std::abs(qa.dot(ka) - want) <= Tol<double>::roundings(64) * std::abs(want));
  REQUIRE(std::abs(qb.dot(kb) - want) <= Tol<double>::roundings(64) * std::abs(want));
  // std::vector overload.
  std::vector<double> v(64, 1.0);
  peal::scale_rotary(enc, v);
  REQUIRE(v[0] == af);
  // Partial rotary: the pass-through part is not scaled.
  auto cp = cfg;
  cp.partial_rotary_factor = 0.5;
  const auto ep = peal::rope<float>(cp);
  peal::Vector<float> w = peal::Vector<float>::Ones(64);
  peal::scale_rotary(ep, w);
  REQUIRE(w(31) == float(ep.attention_factor()));
  REQUIRE(w(32) == 1.0f);
  REQUIRE_THROWS_AS(peal::scale_rotary(ep, peal::Vector<float>(63)), peal::invalid_argument);
}

TEST_CASE("rope: scale_rotary on a [tokens, heads, dim] view", "[rope]") {
  auto cfg = config(16, 10000.0, 0.5);
  cfg.scaling.type = RopeType::Yarn;
  cfg.scaling.factor = 8.0;
  cfg.scaling.original_max_position_embeddings = 1024;
  const auto enc = peal::rope<float>(cfg);
  const float af = float(enc.attention_factor());
  std::vector<float> buf(3 * 2 * 16, 2.0f);
  peal::scale_rotary(enc, peal::make_view(buf.data(), 3, 2, 16));
  for (int t = 0; t < 3; ++t)
    for (int h = 0; h < 2; ++h)
      for (int i = 0; i < 16; ++i)
        REQUIRE(buf[std::size_t((t * 2 + h) * 16 + i)] == (i < 8 ? 2.0f * af : 2.0f));
  std::vector<Eigen::half> hb(2 * 16, Eigen::half(1.0f));
  peal::scale_rotary(enc, peal::make_view(hb.data(), 2, 1, 16));
  REQUIRE(float(hb[0]) == float(Eigen::half(af)));
  REQUIRE(float(hb[8]) == 1.0f);
  std::vector<float> bad(2 * 15);
  REQUIRE_THROWS_AS(peal::scale_rotary(enc, peal::make_view(bad.data(), 2, 1, 15)),
                    peal::invalid_argument);
}

TEST_CASE("rope: presets run through the batch kernels like any encoding", "[rope][encode]") {
  // The kernels see a RopeEncoding as the BlockDiagonal it is (rotation-bank kernel).
  static_assert(
      std::is_same<peal::detail::encode_kernels::kernel_t<float, peal::RopeEncoding<float>>,
                   peal::detail::encode_kernels::kernel_t<
                       float, peal::RopeEncoding<float>::encoding_type>>::value,
      "RopeEncoding must use the BlockDiagonal kernel");
  auto cfg = config(96, 10000.0, 0.75);
  cfg.max_position_embeddings = 131072;
  cfg.scaling.type = RopeType::LongRope;
  cfg.scaling.original_max_position_embeddings = 4096;
  cfg.scaling.short_factor = longrope_list(36, 1.0, 1.2);
  cfg.scaling.long_factor = longrope_list(36, 1.0, 40.0);
  const auto enc = peal::rope<float>(cfg, 100000);
  const int T = 5, H = 3, d = 96;
  const std::vector<double> pos = {0.0, 1.0, 4095.0, 1e6, 1099511627776.0};
  std::vector<float> q(std::size_t(T * H * d)), k(q.size());
  std::mt19937 rng(5);
  std::uniform_real_distribution<float> u(-1, 1);
  for (auto& x : q) x = u(rng);
  for (auto& x : k) x = u(rng);
  std::vector<float> qe = q, ke = k;
  peal::encode_queries(enc, peal::make_view(qe.data(), T, H, d), peal::Positions(pos));
  peal::encode_keys(enc, peal::make_view(ke.data(), T, H, d), peal::Positions(pos));
  for (int t = 0; t < T; ++t)
    for (int h = 0; h < H; ++h) {
      const std::size_t off = std::size_t((t * H + h) * d);
      peal::Vector<float> qv = Eigen::Map<peal::Vector<float>>(q.data() + off, d);
      peal::Vector<float> kv = Eigen::Map<peal::Vector<float>>(k.data() + off, d);
      // The same float coefficients (double sin/cos rounded once) on both sides; the two
      // evaluations of x c - y s may contract differently: roundings(2) of |F| |x|.
      const Eigen::VectorXd mq =
          Eigen::MatrixXd(enc.F(pos[std::size_t(t)]).template cast<double>()).cwiseAbs() *
          qv.cast<double>().cwiseAbs();
      const Eigen::VectorXd mk =
          Eigen::MatrixXd(enc.G(pos[std::size_t(t)]).template cast<double>()).cwiseAbs() *
          kv.cast<double>().cwiseAbs();
      enc.encode_query(qv, pos[std::size_t(t)]);
      enc.encode_key(kv, pos[std::size_t(t)]);
      for (int i = 0; i < d; ++i) {
        REQUIRE(std::fabs(qe[off + std::size_t(i)] - qv(i)) <= Tol<float>::roundings(2) * mq(i));
        REQUIRE(std::fabs(ke[off + std::size_t(i)] - kv(i)) <= Tol<float>::roundings(2) * mk(i));
      }
    }
}

TEST_CASE("rope: validation", "[rope][errors]") {
  using peal::invalid_argument;
  const auto ok = config(128, 10000.0);
  REQUIRE_NOTHROW(peal::rope<float>(ok));

  auto c = ok;
  c.head_dim = 0;
  REQUIRE_THROWS_AS(peal::rope<float>(c), invalid_argument);
  c.head_dim = -4;
  REQUIRE_THROWS_AS(peal::rope<float>(c), invalid_argument);
  c = ok;
  c.head_dim = 127;  // odd rotary dim
  REQUIRE_THROWS_WITH(peal::rope<float>(c), Catch::Contains("even"));
  c = config(10, 10000.0, 0.5);  // int(5.0) = 5: odd
  REQUIRE_THROWS_AS(peal::rope<float>(c), invalid_argument);
  for (double prf : {0.0, -0.5, 1.5, std::nan("")}) {
    c = config(128, 10000.0, prf);
    REQUIRE_THROWS_AS(peal::rope<float>(c), invalid_argument);
  }
  for (double theta : {1.0, 0.5, -10.0, std::nan(""), std::numeric_limits<double>::infinity()}) {
    c = config(128, theta);
    CAPTURE(theta);
    REQUIRE_THROWS_WITH(peal::rope<float>(c), Catch::Contains("rope_theta"));
  }

  // linear
  c = ok;
  c.scaling.type = RopeType::Linear;
  REQUIRE_THROWS_WITH(peal::rope<float>(c), Catch::Contains("requires rope_scaling.factor"));
  c.scaling.factor = 0.5;
  REQUIRE_THROWS_WITH(peal::rope<float>(c), Catch::Contains(">= 1"));
  c.scaling.factor = std::nan("");
  REQUIRE_THROWS_WITH(peal::rope<float>(c), Catch::Contains("finite"));

  // dynamic: needs max_position_embeddings and seq_len > 0
  c = ok;
  c.scaling.type = RopeType::Dynamic;
  c.scaling.factor = 2.0;
  REQUIRE_THROWS_WITH(peal::rope<float>(c, 100), Catch::Contains("max_position_embeddings"));
  c.max_position_embeddings = 4096;
  REQUIRE_THROWS_WITH(peal::rope<float>(c), Catch::Contains("seq_len"));
  REQUIRE_THROWS_AS(peal::rope<float>(c, std::nan("")), invalid_argument);
  REQUIRE_THROWS_AS(peal::rope<float>(c, -1), invalid_argument);
  REQUIRE_NOTHROW(peal::rope<float>(c, 10));
  REQUIRE_NOTHROW(peal::validate_rope_config(c));
  c.max_position_embeddings = std::nan("");
  REQUIRE_THROWS_AS(peal::rope<float>(c, 10), invalid_argument);

  // yarn
  c = ok;
  c.scaling.type = RopeType::Yarn;
  c.scaling.factor = 4.0;
  REQUIRE_THROWS_WITH(peal::rope<float>(c), Catch::Contains("original_max_position_embeddings"));
  c.scaling.original_max_position_embeddings = 4096;
  REQUIRE_NOTHROW(peal::rope<float>(c));
  c.scaling.factor = 0.9;
  REQUIRE_THROWS_AS(peal::rope<float>(c), invalid_argument);
  c.scaling.factor.reset();
  REQUIRE_THROWS_WITH(peal::rope<float>(c), Catch::Contains("factor"));
  c.scaling.factor = 4.0;
  c.scaling.beta_fast = -1.0;
  REQUIRE_THROWS_AS(peal::rope<float>(c), invalid_argument);
  c.scaling.beta_fast.reset();
  c.scaling.mscale = std::nan("");
  REQUIRE_THROWS_AS(peal::rope<float>(c), invalid_argument);
  c.scaling.mscale.reset();
  c.scaling.attention_factor = 0.0;
  REQUIRE_THROWS_AS(peal::rope<float>(c), invalid_argument);

  // longrope
  c = config(96, 10000.0);
  c.max_position_embeddings = 131072;
  c.scaling.type = RopeType::LongRope;
  c.scaling.original_max_position_embeddings = 4096;
  REQUIRE_THROWS_WITH(peal::rope<float>(c, 10), Catch::Contains("short_factor"));
  c.scaling.short_factor = std::vector<double>(48, 1.0);
  c.scaling.long_factor = std::vector<double>(47, 1.0);
  REQUIRE_THROWS_WITH(peal::rope<float>(c, 10), Catch::Contains("expected rotary_dim/2 = 48"));
  c.scaling.long_factor = std::vector<double>(48, 1.0);
  REQUIRE_NOTHROW(peal::rope<float>(c, 10));
  REQUIRE_THROWS_WITH(peal::rope<float>(c), Catch::Contains("seq_len"));
  (*c.scaling.long_factor)[3] = std::nan("");
  REQUIRE_THROWS_AS(peal::rope<float>(c, 10), invalid_argument);
  (*c.scaling.long_factor)[3] = 0.0;
  REQUIRE_THROWS_AS(peal::rope<float>(c, 10), invalid_argument);
  (*c.scaling.long_factor)[3] = 1.0;
  c.scaling.factor = 0.5;
  REQUIRE_THROWS_AS(peal::rope<float>(c, 10), invalid_argument);

  // llama3
  c = ok;
  c.scaling.type = RopeType::Llama3;
  c.scaling.factor = 8;
  c.scaling.low_freq_factor = 1;
  c.scaling.high_freq_factor = 4;
  REQUIRE_THROWS_WITH(peal::rope<float>(c), Catch::Contains("original_max_position_embeddings"));
  c.scaling.original_max_position_embeddings = 8192;
  REQUIRE_NOTHROW(peal::rope<float>(c));
  c.scaling.high_freq_factor = 1;  // equal factors (Llama 4): no smooth band, accepted
  REQUIRE_NOTHROW(peal::rope<float>(c));
  c.scaling.high_freq_factor = 0.5;  // high < low: refused
  REQUIRE_THROWS_AS(peal::rope<float>(c), invalid_argument);
  c.scaling.high_freq_factor.reset();
  REQUIRE_THROWS_WITH(peal::rope<float>(c), Catch::Contains("high_freq_factor"));

  // Type names.
  REQUIRE(peal::rope_type_from_string("su") == RopeType::LongRope);
  REQUIRE(std::string(peal::to_string(RopeType::Llama3)) == "llama3");
  REQUIRE_THROWS_WITH(peal::rope_type_from_string("mrope"), Catch::Contains("unknown rope_type"));
}

TEST_CASE("rope: presets in the fused scores kernel, attention factor as scale or scale_rotary",
          "[rope][scores]") {
  static_assert(
      std::is_same<peal::detail::coders::coder_t<float, peal::RopeEncoding<float>>,
                   peal::detail::coders::coder_t<
                       float, peal::RopeEncoding<float>::encoding_type>>::value,
      "RopeEncoding must use the BlockDiagonal coder");
  // Full rotary (YaRN, Qwen2-style): HF's af on cos and sin == ScoreOptions::scale *= af^2.
  // Partial rotary (Phi-4-mini-like LongRoPE): scale_rotary on q and k instead, since the
  // pass-through part must stay unscaled. Float storage, positions up to 2^40.
  const int H = 2, nq = 6, nk = 9;
  const std::vector<double> tq = {0, 1, 4095, 1e6, 1099511627776.0, 1099511640121.0};
  const std::vector<double> tk = {
      0, 3, 4000, 999990, 1e6, 1099511627700.0, 1099511627776.0, 1099511640000.0, 1099511640121.0};
  for (int which = 0; which < 2; ++which) {
    RopeConfig cfg;
    peal_ref::RopeRef ref;
    if (which == 0) {
      cfg = config(128, 1e6);
      cfg.scaling.type = RopeType::Yarn;
      cfg.scaling.factor = 4.0;
      cfg.scaling.original_max_position_embeddings = 32768;
      ref = peal_ref::rope_yarn(128, 1e6L, 1.0, 4.0L, 32768.0L);
    } else {
      cfg = config(128, 10000.0, 0.75);
      cfg.max_position_embeddings = 131072;
      cfg.scaling.type = RopeType::LongRope;
      cfg.scaling.original_max_position_embeddings = 4096;
      cfg.scaling.short_factor = longrope_list(48, 1.0, 1.2);
      cfg.scaling.long_factor = longrope_list(48, 1.0, 40.0);
      ref = peal_ref::rope_longrope(128, 10000.0L, 0.75, to_ld(*cfg.scaling.short_factor),
                                    to_ld(*cfg.scaling.long_factor), 4096.0L, 131072.0L, 1e5L);
    }
    CAPTURE(which);
    const auto enc = peal::rope<float>(cfg, 1e5);
    const int d = enc.head_dim();
    std::vector<float> q(std::size_t(nq * H * d)), k(std::size_t(nk * H * d));
    std::mt19937 rng(9);
    std::uniform_real_distribution<float> u(-1, 1);
    for (auto& x : q) x = u(rng);
    for (auto& x : k) x = u(rng);
    std::vector<float> qs = q, ks = k, out(std::size_t(H * nq * nk));
    peal::ScoreOptions opt;
    if (enc.rotary_dim() == d) {
      opt.scale = double(enc.attention_factor()) * double(enc.attention_factor());
    } else {
      peal::scale_rotary(enc, peal::make_view(qs.data(), nq, H, d));
      peal::scale_rotary(enc, peal::make_view(ks.data(), nk, H, d));
    }
    peal::scores(enc, peal::make_view(qs.data(), nq, H, d), peal::Positions(tq),
                 peal::make_view(ks.data(), nk, H, d), peal::Positions(tk),
                 peal::make_view(out.data(), H, nq, nk), opt);
    for (int h = 0; h < H; ++h)
      for (int i = 0; i < nq; ++i)
        for (int j = 0; j < nk; ++j) {
          std::vector<LD> qr(static_cast<std::size_t>(d)), kr(static_cast<std::size_t>(d));
          for (int e = 0; e < d; ++e) {
            qr[std::size_t(e)] = q[std::size_t((i * H + h) * d + e)];
            kr[std::size_t(e)] = k[std::size_t((j * H + h) * d + e)];
          }
          LD M = 0;
          for (int e = 0; e < d; ++e) M += std::fabs(qr[std::size_t(e)] * kr[std::size_t(e)]);
          M *= ref.attention_factor * ref.attention_factor;
          peal_ref::apply_rope_halfsplit(qr, ref, tq[std::size_t(i)]);
          peal_ref::apply_rope_halfsplit(kr, ref, tk[std::size_t(j)]);
          const LD want = peal_ref::dot(qr, kr);
          // Both factors' reference angles (omega <= 1) and a d-term dot product in float.
          const LD angle_err =
              2 * Tol<LD>::reference_angle(LD(std::max(tq[std::size_t(i)], tk[std::size_t(j)])));
          CAPTURE(h, i, j);
          REQUIRE(std::fabs(LD(out[std::size_t((h * nq + i) * nk + j)]) - want) <=
                  M * (Tol<float>::entry(d) + angle_err));
        }
  }
}

// ---- Limits (docs/presets.md §12, "Limits") ------------------------------------------------
TEST_CASE("rope: sizes are bounded for configurations built in code too",
          "[rope][errors][limits]") {
  using Catch::Contains;
  // head_dim <= 65536, both sides; the bound is checked before any table is built.
  REQUIRE(peal::rope<float>(config(65536, 10000.0)).rotary_dim() == 65536);
  REQUIRE_THROWS_WITH(peal::rope<float>(config(65538, 10000.0)),
                      Contains("head_dim") && Contains("65536"));
  REQUIRE_THROWS_WITH(peal::rope<float>(config(1 << 30, 10000.0)), Contains("65536"));
  REQUIRE_THROWS_WITH(peal::validate_rope_config(config(std::numeric_limits<int>::max(), 1e4)),
                      Contains("65536"));
  // Lengths <= 2^53, both sides.
  const double two53 = 9007199254740992.0;
  auto c = config(64, 10000.0);
  c.max_position_embeddings = two53;
  REQUIRE_NOTHROW(peal::rope<double>(c, two53));
  c.max_position_embeddings = 2 * two53;
  REQUIRE_THROWS_WITH(peal::rope<double>(c),
                      Contains("max_position_embeddings") && Contains("2^53"));
  c.max_position_embeddings.reset();
  REQUIRE_THROWS_WITH(peal::rope<double>(c, 2 * two53), Contains("seq_len") && Contains("2^53"));
  c.scaling.original_max_position_embeddings = 1e300;
  REQUIRE_THROWS_WITH(peal::validate_rope_config(c),
                      Contains("original_max_position_embeddings") && Contains("2^53"));
  // The public constructor checks its sizes as well.
  peal::RopeFrequencies f = peal::rope_frequencies(config(8, 10000.0));
  REQUIRE_NOTHROW(peal::RopeEncoding<double>(f, 8, Layout::HalfSplit, RopeType::Default));
  REQUIRE_NOTHROW(peal::RopeEncoding<double>(f, 10, Layout::HalfSplit, RopeType::Default));
  REQUIRE_THROWS_AS(peal::RopeEncoding<double>(f, 6, Layout::HalfSplit, RopeType::Default),
                    peal::invalid_argument);
  f.rotary_dim = 6;  // 4 frequencies for 3 pairs
  REQUIRE_THROWS_AS(peal::RopeEncoding<double>(f, 8, Layout::HalfSplit, RopeType::Default),
                    peal::invalid_argument);
}

// Every frequency a preset produces must be, as the double pair a float or double encoding
// stores, in [2^-1022, 2^20] (docs/presets.md §12, "Limits"): above, omega t overflows to
// inf (NaN after reduction); below, omega_hi is subnormal or 0 and the pair no longer holds
// omega. Both sides of both bounds, for every formula that can reach them.
TEST_CASE("rope: every preset frequency is a double pair in [2^-1022, 2^20]",
          "[rope][errors][limits]") {
  using Catch::Contains;
  // LongRoPE divides by the factors: omega_0 = 1 / short_factor[0] (head_dim 2: one pair).
  auto longrope = [](double f0) {
    auto c = config(2, 10000.0);
    c.max_position_embeddings = 131072;
    c.scaling.type = RopeType::LongRope;
    c.scaling.original_max_position_embeddings = 4096;
    c.scaling.short_factor = std::vector<double>{f0};
    c.scaling.long_factor = std::vector<double>{1.0};
    return c;
  };
  const auto top = peal::rope<float>(longrope(0x1p-20), 10);  // omega = 2^20 exactly
  REQUIRE(top.rotary().block(0).omega() == 0x1p20L);
  Eigen::VectorXf q(2);
  q << 0.6f, -0.8f;
  top.encode_query(q, 1099511627776.0);  // omega t = 2^60: finite, a rotation
  REQUIRE(q.allFinite());
  REQUIRE(std::fabs(q.norm() - 1.0f) <= 4 * std::numeric_limits<float>::epsilon());
  REQUIRE_THROWS_WITH(peal::rope<float>(longrope(0x1p-21), 10),
                      Contains("pair 0") && Contains("short_factor[0]") && Contains("2^20"));
  REQUIRE_THROWS_WITH(peal::rope<double>(longrope(std::nextafter(0x1p-20, 0.0)), 10),
                      Contains("pair 0"));
  REQUIRE_THROWS_WITH(peal::rope<double>(longrope(1e-320), 10), Contains("pair 0"));
  REQUIRE_THROWS_WITH(peal::rope<double>(longrope(1e-300), 10), Contains("pair 0"));
  // The lower bound: linear omega_0 = 1 / factor.
  auto linear = [](double f) {
    auto c = config(2, 10000.0);
    c.scaling.type = RopeType::Linear;
    c.scaling.factor = f;
    return c;
  };
  REQUIRE(peal::rope<double>(linear(0x1p1022)).rotary().block(0).omega() == 0x1p-1022L);
  REQUIRE_THROWS_WITH(peal::rope<double>(linear(0x1p1023)),
                      Contains("pair 0") && Contains("2^-1022"));
  // Long double encodings get the same check (validation does not depend on S).
  REQUIRE_THROWS_AS(peal::rope<long double>(linear(0x1p1023)), peal::invalid_argument);
  // Default: theta near DBL_MAX sends the last pair below 2^-1022 at large D.
  REQUIRE_THROWS_WITH(peal::validate_rope_config(config(4096, 1.7e308)),
                      Contains("pair 2045") && Contains("\"default\""));
  REQUIRE_NOTHROW(peal::validate_rope_config(config(4, 1.7e308)));  // omega_1 = 7.7e-155
  // Dynamic: the base grows with factor * seq_len / max_position_embeddings.
  auto dyn = config(4, 10000.0);
  dyn.scaling.type = RopeType::Dynamic;
  dyn.scaling.factor = 1e300;
  dyn.max_position_embeddings = 1;
  REQUIRE_NOTHROW(peal::rope<double>(dyn, 1));
  REQUIRE_THROWS_WITH(peal::rope<double>(dyn, 9007199254740992.0), Contains("pair 1"));
  // YaRN and llama3 divide the low frequencies by the factor.
  auto yarn = config(64, 10000.0);
  yarn.scaling.type = RopeType::Yarn;
  yarn.scaling.factor = 1e305;
  yarn.scaling.original_max_position_embeddings = 4096;
  REQUIRE_THROWS_WITH(peal::rope<double>(yarn), Contains("\"yarn\""));
  yarn.scaling.factor = 1e200;
  REQUIRE_NOTHROW(peal::rope<double>(yarn));
  auto l3 = config(64, 10000.0);
  l3.scaling.type = RopeType::Llama3;
  l3.scaling.factor = 1e305;
  l3.scaling.low_freq_factor = 1;
  l3.scaling.high_freq_factor = 4;
  l3.scaling.original_max_position_embeddings = 8192;
  REQUIRE_THROWS_WITH(peal::rope<double>(l3), Contains("\"llama3\""));
  l3.scaling.factor = 1e200;
  REQUIRE_NOTHROW(peal::rope<double>(l3));
  // And the public constructor, given frequencies computed elsewhere.
  peal::RopeFrequencies f;
  f.rotary_dim = 2;
  f.inv_freq = {1e320L};
  REQUIRE_THROWS_WITH(peal::RopeEncoding<double>(f, 2, Layout::HalfSplit, RopeType::Default),
                      Contains("pair 0"));
}
