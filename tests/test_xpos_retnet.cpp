// xPos and RetNet presets (include/peal/presets/xpos.hpp, include/peal/presets/retnet.hpp) against
// tests/reference/preset_reference.hpp (docs/presets.md §9-10), and the numerical point of
// docs/design.md §1: with growth/decay, the global factors F(t), G(s) leave the range of the
// storage type at large positions, while scores through the lag t - s stay accurate.
//
// Tolerances (tolerances.hpp; relative to the magnitude M = sum_i scale_i |q_i| |k_i| of a
// score, or to |x_i| scale_i for an encoded pair): Tol<S>::entry(d) for a d-term dot product
// in S (rotated_pair() for one encoded pair), plus the reference's own angle rounding
// Tol<long double>::reference_angle(|omega p|) per factor (see test_rope.cpp), plus
// Tol<double>::exp_of(|a tau|) for the decay rate a rounded to double and its exponential.
#include <catch2/catch.hpp>
#include <cmath>
#include <limits>
#include <peal/peal.hpp>
#include <peal/scores.hpp>
#include <random>
#include <vector>

#include "kernel_catalogue.hpp"
#include "reference/preset_reference.hpp"
#include "tolerances.hpp"

namespace {

using LD = long double;
using peal_test::Tol;

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
  for (int i = 0; i < v.size(); ++i) out[std::size_t(i)] = LD(v(i));
  return out;
}
LD ang(LD omega, LD p) { return Tol<LD>::reference_angle(std::fabs(omega * p)); }

// Pairwise magnitude sum_i g_i |q_i| |k_i| of interleaved pairs.
template <class S>
LD magnitude(const peal::Vector<S>& q, const peal::Vector<S>& k, const std::vector<LD>& g) {
  LD m = 0;
  for (int i = 0; i < q.size() / 2; ++i)
    m += g[std::size_t(i)] * std::hypot(LD(q(2 * i)), LD(q(2 * i + 1))) *
         std::hypot(LD(k(2 * i)), LD(k(2 * i + 1)));
  return m;
}

// ---- xPos ---------------------------------------------------------------------------------

template <class S>
void xpos_encoded_vs_reference(int d) {
  const auto enc = peal::xpos<S>(d);
  const auto zeta = peal_ref::xpos_scale(d);
  const auto theta = peal_ref::xpos_inv_freq(d);
  for (double p : {0.0, 1.0, 100.0, 4095.0}) {
    for (int which = 0; which < 2; ++which) {
      const bool query = which == 0;
      const auto x = random_vector<S>(d, 40u + unsigned(which));
      peal::Vector<S> y = x;
      if (query)
        enc.encode_query(y, p);
      else
        enc.encode_key(y, p);
      std::vector<LD> r = to_ld(x);
      peal_ref::apply_xpos(r, p, query);  // centre 0: the paper's form, as peal encodes
      for (int i = 0; i < d / 2; ++i) {
        CAPTURE(d, p, query, i);
        const LD a = std::log(zeta[std::size_t(i)]) / 512;
        const LD scale = std::pow(zeta[std::size_t(i)], (query ? 1 : -1) * LD(p) / 512);
        const LD nx = std::hypot(LD(x(2 * i)), LD(x(2 * i + 1))) * scale;
        const LD err = std::hypot(LD(y(2 * i)) - r[std::size_t(2 * i)],
                                  LD(y(2 * i + 1)) - r[std::size_t(2 * i + 1)]);
        REQUIRE(err <= nx * (Tol<S>::rotated_pair() + ang(theta[std::size_t(i)], p) +
                             Tol<double>::exp_of(std::fabs(a * LD(p)))));
      }
    }
  }
}

template <class S>
void xpos_lag_scores_vs_reference(int d) {
  const auto enc = peal::xpos<S>(d);
  const auto zeta = peal_ref::xpos_scale(d);
  const LD w0 = peal_ref::xpos_inv_freq(d)[0];
  const auto q = random_vector<S>(d, 1), k = random_vector<S>(d, 2);
  for (double t : {0.0, 4095.0, 1e6, 1099511627776.0, 1099511640121.0}) {
    for (double lag : {0.0, 1.0, 5.0, 100.0, 1000.0, 4000.0}) {
      const double s = t - lag;
      CAPTURE(d, t, lag);
      // Reference with torchscale's centring at c = t (it cancels in the score).
      std::vector<LD> qr = to_ld(q), kr = to_ld(k);
      peal_ref::apply_xpos(qr, t, true, 512.0L, LD(t));
      peal_ref::apply_xpos(kr, s, false, 512.0L, LD(t));
      const LD ref = peal_ref::dot(qr, kr);
      std::vector<LD> g(zeta.size());
      for (std::size_t i = 0; i < g.size(); ++i) g[i] = std::pow(zeta[i], LD(lag) / 512);
      const LD M = magnitude(q, k, g);
      const LD got = enc.score(q, t, k, s);
      const LD a0 = std::fabs(std::log(zeta[0]) / 512);
      REQUIRE(std::fabs(got - ref) <=
              M * (Tol<S>::entry(d) + 2 * ang(w0, t) + Tol<double>::exp_of(a0 * LD(lag))));
    }
  }
}

// ---- RetNet -------------------------------------------------------------------------------

template <class S>
void retnet_lag_scores(int d, int H, const std::vector<double>& times,
                       const std::vector<double>& lags) {
  const auto heads = peal::retnet<S>(d, H);
  const auto gamma = peal_ref::retnet_decay(H);
  const LD w0 = peal_ref::retnet_angles(d)[0];
  const LD tiny = Tol<S>::underflow_zone();  // well inside the normal range
  const auto q = random_vector<S>(d, 3), k = random_vector<S>(d, 4);
  const std::vector<LD> ones(std::size_t(d / 2), 1.0L);
  const LD M1 = magnitude(q, k, ones);
  for (int h = 0; h < H; ++h) {
    const LD a = std::log(gamma[std::size_t(h)]);
    for (double t : times)
      for (double lag : lags) {
        const double s = t - lag;
        CAPTURE(d, h, t, lag);
        const LD ref = peal_ref::retnet_score(to_ld(q), t, to_ld(k), s, gamma[std::size_t(h)]);
        const LD decay = std::pow(gamma[std::size_t(h)], LD(lag));
        const LD got = heads[std::size_t(h)].score(q, t, k, s);
        REQUIRE(std::isfinite(double(got)));
        if (decay * M1 > tiny) {
          // Accurate relative to the true score's magnitude gamma^lag sum |q_i||k_i|.
          const LD M = decay * M1;
          REQUIRE(std::fabs(got - ref) <= M * (Tol<S>::entry(d) + 2 * ang(w0, t) +
                                               Tol<double>::exp_of(std::fabs(a * LD(lag)))));
        } else {
          // The true score is below S's normal range: the result underflows gracefully.
          REQUIRE(std::fabs(got) <= 2 * tiny);
        }
      }
  }
}

}  // namespace

TEST_CASE("xpos: parameters are torchscale's (zeta, theta, interleaved)", "[xpos]") {
  for (int d : {2, 16, 64, 128}) {
    const auto enc = peal::xpos<double>(d);
    const auto zeta = peal_ref::xpos_scale(d);
    const auto theta = peal_ref::xpos_inv_freq(d);
    REQUIRE(enc.dim() == d);
    REQUIRE(enc.layout() == peal::Layout::Interleaved);
    for (int i = 0; i < d / 2; ++i) {
      CAPTURE(d, i);
      const auto b = enc.block(i);
      // Long double formulas on both sides (roundings(4)); a rounded once to double.
      REQUIRE(std::fabs(b.omega() - theta[std::size_t(i)]) <=
              Tol<LD>::roundings(4) * theta[std::size_t(i)]);
      const LD a = std::log(zeta[std::size_t(i)]) / 512;
      REQUIRE(std::fabs(LD(b.a()) - a) <= Tol<double>::roundings(1) * std::fabs(a));
      REQUIRE(b.a() < 0);  // zeta_i < 1: the score decays with distance
    }
  }
  // zeta range quoted in docs/presets.md for d = 64: 0.2857 .. 0.9777, i.e. zeta_0 = 25.6 /
  // 89.6 = 2/7 and zeta_31 = 87.6 / 89.6 = 219/224 (the reference in long double: a few
  // roundings of the inexact 0.4 d and 1.4 d), quoted to 4 decimals.
  const LD z0 = peal_ref::xpos_scale(64).front(), z31 = peal_ref::xpos_scale(64).back();
  REQUIRE(std::fabs(z0 - 2.0L / 7) <= Tol<LD>::roundings(4) * z0);
  REQUIRE(std::fabs(z31 - 219.0L / 224) <= Tol<LD>::roundings(4) * z31);
  REQUIRE(std::fabs(2.0L / 7 - 0.2857L) <= Tol<LD>::printed(4));
  REQUIRE(std::fabs(219.0L / 224 - 0.9777L) <= Tol<LD>::printed(4));
  // Non-default scale_base and theta: a = ln(5.2 / 11.2) / 256 in double (3.2 inexact, the
  // sum, the quotient, the log: ~2.5 eps of a) against peal's long double value rounded
  // once: roundings(4); omega = 500^(-1/4) in long double rounded once against pow in double:
  // roundings(2).
  const auto e2 = peal::xpos<float>(8, 256.0, 500.0);
  const double a1 = std::log((2.0 + 3.2) / 11.2) / 256.0, w1 = std::pow(500.0, -0.25);
  REQUIRE(std::abs(e2.block(1).a() - a1) <= Tol<double>::roundings(4) * std::abs(a1));
  REQUIRE(std::abs(double(e2.block(1).omega()) - w1) <= Tol<double>::roundings(2) * w1);
  REQUIRE_THROWS_AS(peal::xpos<double>(7), peal::invalid_argument);
  REQUIRE_THROWS_AS(peal::xpos<double>(0), peal::invalid_argument);
  REQUIRE_THROWS_AS(peal::xpos<double>(64, 0.0), peal::invalid_argument);
  REQUIRE_THROWS_AS(peal::xpos<double>(64, std::nan("")), peal::invalid_argument);
  REQUIRE_THROWS_AS(peal::xpos<double>(64, 512, 1.0), peal::invalid_argument);
}

TEST_CASE("xpos: encoded vectors match the reference (float and double)", "[xpos]") {
  xpos_encoded_vs_reference<float>(64);
  xpos_encoded_vs_reference<double>(64);
  xpos_encoded_vs_reference<double>(128);
}

TEST_CASE("xpos: scores through the lag match the reference at 0 .. 2^40", "[xpos]") {
  xpos_lag_scores_vs_reference<float>(64);
  xpos_lag_scores_vs_reference<double>(64);
  xpos_lag_scores_vs_reference<long double>(32);
}

TEST_CASE("xpos: the global key factor overflows at large positions (why kernels rebase)",
          "[xpos][numerics]") {
  // zeta_0^(-s/512) = e^{2447} at s = 1e6: past double's range (e^709). torchscale centres
  // the exponent for the same reason; peal rebases per tile instead.
  const auto enc = peal::xpos<double>(64);
  auto k = random_vector<double>(64, 9);
  enc.encode_key(k, 1e6);
  REQUIRE_FALSE(k.allFinite());
  auto q = random_vector<double>(64, 8);
  enc.encode_query(q, 1e6);
  REQUIRE(q(0) == 0.0);  // zeta_0^(1e6/512) underflows
}

TEST_CASE("retnet: decays and angles are torchscale's", "[retnet]") {
  for (int H : {1, 4, 8, 16}) {
    const auto g = peal::retnet_decays(H);
    const auto ref = peal_ref::retnet_decay(H);
    REQUIRE(g.size() == std::size_t(H));
    for (int h = 0; h < H; ++h) REQUIRE(LD(g[std::size_t(h)]) == ref[std::size_t(h)]);
  }
  REQUIRE(peal::retnet_decays(2)[0] == 0.96875);
  REQUIRE(peal::retnet_decays(2)[1] == 0.984375);
  for (int d : {2, 4, 64, 256}) {
    const auto w = peal::retnet_angles(d);
    const auto ref = peal_ref::retnet_angles(d);
    REQUIRE(w.size() == ref.size());
    for (std::size_t i = 0; i < w.size(); ++i)
      REQUIRE(std::fabs(w[i] - ref[i]) <= Tol<LD>::roundings(4) * ref[i]);
    REQUIRE(w.front() == 1.0L);
    // linspace ends at 1: 10^-4 in long double, rounded once, against the literal 1e-4.
    if (d > 2) REQUIRE(std::abs(double(w.back()) - 1e-4) <= Tol<double>::roundings(2) * 1e-4);
  }
  const auto heads = peal::retnet<float>(64, 4);
  REQUIRE(heads.size() == 4);
  const auto w = peal::retnet_angles(64);
  for (int h = 0; h < 4; ++h) {
    const auto& b = heads[std::size_t(h)];
    REQUIRE(b.dim() == 64);
    REQUIRE(b.layout() == peal::Layout::Interleaved);
    const LD a = std::log(peal_ref::retnet_decay(4)[std::size_t(h)]);
    for (int i = 0; i < 32; ++i) {
      REQUIRE(b.block(i).omega() == w[std::size_t(i)]);
      REQUIRE(std::fabs(LD(b.block(i).a()) - a) <= Tol<double>::roundings(1) * std::fabs(a));
    }
  }
  const auto rot = peal::retnet_rotation<double>(64);
  REQUIRE(rot.block(5).a() == 0.0);
  REQUIRE(rot.block(5).omega() == w[5]);
  REQUIRE_THROWS_AS(peal::retnet<float>(63, 4), peal::invalid_argument);
  REQUIRE_THROWS_AS(peal::retnet<float>(64, 0), peal::invalid_argument);
  REQUIRE_THROWS_AS(peal::retnet_decays(0), peal::invalid_argument);
}

TEST_CASE("retnet: encoded vectors at small positions match the reference", "[retnet]") {
  // F(t) q = gamma^t R(omega t) q and G(s) k = gamma^-s R(omega s) k (torchscale's
  // theta_shift with the decay split between query and key).
  const int d = 64, H = 3;
  const auto gamma = peal_ref::retnet_decay(H);
  const auto rope = peal_ref::retnet_rope(d);
  const auto check = [&](auto tag, double p) {
    using S = decltype(tag);
    const auto heads = peal::retnet<S>(d, H);
    for (int h = 0; h < H; ++h)
      for (int which = 0; which < 2; ++which) {
        const bool query = which == 0;
        const auto x = random_vector<S>(d, 70u + unsigned(which));
        peal::Vector<S> y = x;
        if (query)
          heads[std::size_t(h)].encode_query(y, p);
        else
          heads[std::size_t(h)].encode_key(y, p);
        std::vector<LD> r = to_ld(x);
        peal_ref::apply_rope_interleaved(r, rope, p);
        const LD g = std::pow(gamma[std::size_t(h)], (query ? 1 : -1) * LD(p));
        const LD a = std::log(gamma[std::size_t(h)]);
        for (int i = 0; i < d / 2; ++i) {
          CAPTURE(p, h, query, i);
          const LD nx = std::hypot(LD(x(2 * i)), LD(x(2 * i + 1))) * g;
          const LD err = std::hypot(LD(y(2 * i)) - g * r[std::size_t(2 * i)],
                                    LD(y(2 * i + 1)) - g * r[std::size_t(2 * i + 1)]);
          REQUIRE(err <= nx * (Tol<S>::rotated_pair() + ang(rope.inv_freq[std::size_t(i)], p) +
                               Tol<double>::exp_of(std::fabs(a * LD(p)))));
        }
      }
  };
  for (double p : {0.0, 1.0, 100.0, 1000.0}) check(float{}, p);
  for (double p : {0.0, 1.0, 100.0, 4095.0}) check(double{}, p);
}

TEST_CASE("retnet: global F(t), G(s) leave float range; the score through the lag does not",
          "[retnet][numerics]") {
  // gamma_0 = 1 - 2^-5, a = ln gamma = -0.03175: the key factor e^{-a s} passes FLT_MAX
  // (e^88.72) at s = 88.72 / 0.03175 ~ 2794, the query factor underflows soon after.
  const int d = 64;
  const auto head = peal::retnet<float>(d, 1)[0];
  const auto q = random_vector<float>(d, 5), k = random_vector<float>(d, 6);
  {
    peal::Vector<float> ke = k;
    head.encode_key(ke, 2750.0);
    REQUIRE(ke.allFinite());  // e^87.3 ~ 9e37: still finite
  }
  for (double t : {2900.0, 4095.0, 65535.0, 1e6}) {
    const double s = t - 10;
    CAPTURE(t);
    peal::Vector<float> qe = q, ke = k;
    head.encode_query(qe, t);
    head.encode_key(ke, s);
    REQUIRE_FALSE(ke.allFinite());  // inf
    const float global = qe.dot(ke);
    REQUIRE_FALSE(std::isfinite(global));  // 0 * inf = nan, or denormal * inf = inf
    // Through the lag: A(t - s) = gamma^10 R(-10 omega), accurate.
    const LD ref = peal_ref::retnet_score(to_ld(q), t, to_ld(k), s, peal_ref::retnet_decay(1)[0]);
    const LD M = std::pow(peal_ref::retnet_decay(1)[0], 10.0L) *
                 magnitude(q, k, std::vector<LD>(std::size_t(d / 2), 1.0L));
    REQUIRE(std::fabs(LD(head.score(q, t, k, s)) - ref) <= M * Tol<float>::entry(d));
  }
}

TEST_CASE("retnet: scores through the lag over n = 65,536 positions and near t = 1e9",
          "[retnet][numerics]") {
  const std::vector<double> lags = {0, 1, 2, 5, 17, 100, 1000, 2000, 2700, 10000, 65535};
  // Every query time of a 65,536-token sequence is covered by the lag; sample the ends.
  const std::vector<double> seq = {65535.0, 40000.0, 65535.0 - 1};
  const std::vector<double> far = {1e9, 1e9 + 123.0, 1099511627776.0};
  retnet_lag_scores<float>(64, 4, seq, lags);
  retnet_lag_scores<float>(64, 4, far, lags);
  retnet_lag_scores<double>(64, 4, seq, lags);
  retnet_lag_scores<double>(64, 4, far, lags);
  retnet_lag_scores<double>(128, 8, {65535.0}, {0, 3, 333, 4444});
}

// ---- The fused scores kernel (include/peal/scores.hpp) ------------------------------------

namespace {

// 32 queries at the end of a 65,536-token sequence (shifted by `base`) against 1024 keys: 768
// spread over the whole sequence and the last 256 positions; causal.
struct RetnetBatch {
  int d, H, nq = 32, nk = 1024;
  std::vector<double> tq, tk;
  std::vector<float> q, k;
  RetnetBatch(int d_, int H_, double base) : d(d_), H(H_) {
    for (int i = 0; i < nq; ++i) tq.push_back(base + 65504 + i);
    for (int j = 0; j < nk; ++j)
      tk.push_back(base + (j < 768 ? std::floor(j * 85.3) : 65535.0 - (1023 - j)));
    std::mt19937 rng(17);
    std::uniform_real_distribution<float> u(-1, 1);
    q.resize(std::size_t(nq * H * d));
    k.resize(std::size_t(nk * H * d));
    for (auto& x : q) x = u(rng);
    for (auto& x : k) x = u(rng);
  }
  peal::Vector<float> qv(int i, int h) const {
    return Eigen::Map<const peal::Vector<float>>(q.data() + (i * H + h) * d, d);
  }
  peal::Vector<float> kv(int j, int h) const {
    return Eigen::Map<const peal::Vector<float>>(k.data() + (j * H + h) * d, d);
  }
};

// The long-double reference of every causal entry: gamma_h^(t-s) R(t omega) q . R(s omega) k
// (peal_ref::retnet_score, with the rotations hoisted out of the (i, j) loop), and the
// magnitude M = gamma^(t-s) sum |q_i||k_i|.
struct RetnetReference {
  std::vector<LD> ref, mag;
  explicit RetnetReference(const RetnetBatch& b) {
    const auto gamma = peal_ref::retnet_decay(b.H);
    const auto rope = peal_ref::retnet_rope(b.d);
    const std::vector<LD> ones(std::size_t(b.d / 2), 1.0L);
    std::vector<std::vector<LD>> qr, kr;
    for (int i = 0; i < b.nq; ++i)
      for (int h = 0; h < b.H; ++h) {
        qr.push_back(to_ld(b.qv(i, h)));
        peal_ref::apply_rope_interleaved(qr.back(), rope, b.tq[std::size_t(i)]);
      }
    for (int j = 0; j < b.nk; ++j)
      for (int h = 0; h < b.H; ++h) {
        kr.push_back(to_ld(b.kv(j, h)));
        peal_ref::apply_rope_interleaved(kr.back(), rope, b.tk[std::size_t(j)]);
      }
    ref.assign(std::size_t(b.H * b.nq * b.nk), 0.0L);
    mag = ref;
    for (int h = 0; h < b.H; ++h)
      for (int i = 0; i < b.nq; ++i)
        for (int j = 0; j < b.nk; ++j) {
          const LD lag = LD(b.tq[std::size_t(i)]) - LD(b.tk[std::size_t(j)]);
          if (lag < 0) continue;
          const LD g = std::pow(gamma[std::size_t(h)], lag);
          const std::size_t o = std::size_t((h * b.nq + i) * b.nk + j);
          ref[o] = g * peal_ref::dot(qr[std::size_t(i * b.H + h)], kr[std::size_t(j * b.H + h)]);
          mag[o] = g * magnitude(b.qv(i, h), b.kv(j, h), ones);
        }
  }
};

// out[h][i][j] against the reference; returns the worst error in units of eps_f d M over the
// representable entries. Entries are checked in bulk (one REQUIRE per kind of failure).
double check_retnet_scores(const RetnetBatch& b, const RetnetReference& r,
                           const std::vector<float>& out) {
  const LD w0 = peal_ref::retnet_angles(b.d)[0];
  const LD eps = Tol<float>::eps;
  const LD tiny = Tol<float>::underflow_zone();
  double worst = 0;
  long bad_mask = 0, bad_finite = 0, bad_tiny = 0, bad_err = 0;
  for (int h = 0; h < b.H; ++h)
    for (int i = 0; i < b.nq; ++i)
      for (int j = 0; j < b.nk; ++j) {
        const double t = b.tq[std::size_t(i)], s = b.tk[std::size_t(j)];
        const std::size_t o = std::size_t((h * b.nq + i) * b.nk + j);
        const float got = out[o];
        if (s > t) {
          bad_mask += got != -std::numeric_limits<float>::infinity();
          continue;
        }
        if (!std::isfinite(got)) {
          ++bad_finite;
          continue;
        }
        const LD M = r.mag[o];
        if (M <= tiny) {
          bad_tiny += std::fabs(got) > 2 * tiny;
          continue;
        }
        const LD err = std::fabs(LD(got) - r.ref[o]);
        bad_err += err > M * (Tol<float>::entry(b.d) + 2 * ang(w0, t));
        worst = std::max(worst, double(err / (M * eps * b.d)));
      }
  REQUIRE(bad_mask == 0);    // causal: -inf above the diagonal
  REQUIRE(bad_finite == 0);  // never inf/nan below it
  REQUIRE(bad_tiny == 0);    // unrepresentable true values come out ~0
  REQUIRE(bad_err == 0);     // within 4 d eps_f M of the reference
  return worst;
}

}  // namespace

TEST_CASE("retnet: fused scores kernel, per-head decay option, n = 65,536 and t ~ 1e9",
          "[retnet][scores]") {
  // The rotation shared by all heads plus ScoreOptions::decay = gamma_h (the scalar-decay
  // epilogue), and the per-head encodings a = ln gamma_h (rebased inside the kernel): both
  // accurate relative to the true score wherever it is representable in float, at any
  // absolute time; entries whose true value is below float range come out ~0. (Measured:
  // <= 0.03 d eps_f M for the decay option; the per-head encodings reach ~1.5 d eps_f M
  // only for entries within a few decades of FLT_MIN, where intermediate factors are
  // subnormal, and <= 0.03 d eps_f M elsewhere.)
  for (double base : {0.0, 1e9 - 65536}) {
    CAPTURE(base);
    const RetnetBatch b(64, 4, base);
    const RetnetReference ref(b);
    const auto q = peal::make_view(b.q.data(), b.nq, b.H, b.d);
    const auto k = peal::make_view(b.k.data(), b.nk, b.H, b.d);
    std::vector<float> out(std::size_t(b.H * b.nq * b.nk));
    const auto ov = peal::make_view(out.data(), b.H, b.nq, b.nk);

    peal::ScoreOptions opt;
    opt.causal = true;
    opt.decay = peal::retnet_decays(b.H);
    peal::scores(peal::retnet_rotation<float>(b.d), q, peal::Positions(b.tq), k,
                 peal::Positions(b.tk), ov, opt);
    const double w1 = check_retnet_scores(b, ref, out);

    // Per-head encodings: one call per head over strided single-head views.
    const auto heads = peal::retnet<float>(b.d, b.H);
    peal::ScoreOptions opt1;
    opt1.causal = true;
    for (int h = 0; h < b.H; ++h) {
      const peal::Strides qs{b.H * b.d, b.d, 1}, ks{b.H * b.d, b.d, 1};
      peal::TensorView<const float> qh(b.q.data() + h * b.d, b.nq, 1, b.d, qs);
      peal::TensorView<const float> kh(b.k.data() + h * b.d, b.nk, 1, b.d, ks);
      peal::scores(heads[std::size_t(h)], qh, peal::Positions(b.tq), kh, peal::Positions(b.tk),
                   peal::make_view(out.data() + std::size_t(h * b.nq * b.nk), 1, b.nq, b.nk), opt1);
    }
    const double w2 = check_retnet_scores(b, ref, out);
    CAPTURE(w1, w2);
    SUCCEED("worst error / (eps_f d M): decay option " << w1 << ", per-head encodings " << w2);
  }
}

// ---- Limits (docs/presets.md §12, "Limits"): head_dim <= 65536, every omega a double pair
// in [2^-1022, 2^20] ----------------------------------------------------------------------
TEST_CASE("xpos, retnet: head_dim and frequencies are bounded", "[xpos][retnet][errors][limits]") {
  using Catch::Contains;
  // head_dim, both sides (no table is built past the bound).
  REQUIRE(peal::xpos<float>(65536).dim() == 65536);
  REQUIRE_THROWS_WITH(peal::xpos<float>(65538), Contains("head_dim") && Contains("65536"));
  REQUIRE_THROWS_WITH(peal::xpos<double>(1 << 30), Contains("65536"));
  REQUIRE(peal::retnet_rotation<float>(65536).dim() == 65536);
  REQUIRE_THROWS_WITH(peal::retnet_rotation<float>(65538), Contains("65536"));
  REQUIRE_THROWS_WITH(peal::retnet<float>(1 << 30, 1), Contains("65536"));
  REQUIRE_THROWS_WITH(peal::retnet_angles(1 << 30), Contains("65536"));
  // xPos with theta near DBL_MAX: omega_{d/2-1} = theta^(-(d-2)/d) falls below 2^-1022 (it
  // used to be stored as a subnormal double, losing its bits).
  REQUIRE_THROWS_WITH(peal::xpos<double>(4096, 512.0, 1.7e308),
                      Contains("xpos") && Contains("pair 2045") && Contains("2^-1022"));
  REQUIRE_NOTHROW(peal::xpos<double>(4, 512.0, 1.7e308));  // omega_1 = 7.7e-155
  // A scale_base so small that a = ln(zeta) / B is not finite: a clear xpos error.
  REQUIRE_THROWS_WITH(peal::xpos<double>(64, 1e-320), Contains("xpos"));
}
