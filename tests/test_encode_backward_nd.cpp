// Tests of include/peal/encode_backward.hpp over N-D points: encode_queries_backward and
// encode_keys_backward for MultiAxis (every block type in 2 and 3 axes; axial 2-D RoPE) and
// PerHead of MultiAxis (RoPE-Mixed), MRoPE's preset: dq / dk against F(p)ᵀ G and G(p)ᵀ G of
// the long double twin, the position gradient (one entry per token and axis) against the
// twin's dense ∂F/∂p_a = F(p) X_aᵀ and ∂G/∂p_a = −X_a G(p) (the axes commute), the parameter
// gradient against a central difference of the loss L(θ) = Σ ⟨G, encoded rows⟩; in place =
// out of place bitwise; bad input throws and writes nothing; 1-D positions for a MultiAxis
// do not compile (ctest multi_axis_1d_positions_backward_does_not_compile).
//
// Tolerances (tests/tolerances.hpp), as in test_encode_backward.cpp with the lag |τ| replaced
// by the point's Σ_a |p_a| and X by X(p) = Σ_a p_a X_a: dq, dk per element Tol<double>::encode;
// the position gradient Tol<double>::derivative(n, x) Σ_h |x_h|₁ |g_h|₁ (1 + n |X_a|) ‖A(p)‖;
// each parameter gradient Tol<double>::derivative_tol of the stencil plus the sum's roundings.
#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <peal/encode_backward.hpp>
#include <peal/presets/mrope.hpp>
#include <peal/per_head.hpp>
#include <peal/presets/vision_rope.hpp>
#include <random>
#include <vector>

#include "derivative_check.hpp"
#include "families.hpp"
#include "tolerances.hpp"

using namespace peal_test;

namespace {

using LD = long double;
using MLD = peal::Matrix<LD>;
using VLD = peal::Vector<LD>;
using peal::Index;
using peal::TensorView;
using peal_test::derivative_check::max_abs;

enum class Side { query, key };

// D axes drawn from Fam: the same block structure, so their generators commute.
template <class Fam, int D>
struct MultiAxisOf {
  static constexpr const char* name = "MultiAxis";
  static constexpr int axes = D;
  template <class S>
  static auto build(Draw& d) {
    using E = decltype(Fam::template build<S>(d));
    std::vector<E> a;
    for (int i = 0; i < D; ++i) a.push_back(Fam::template build<S>(d));
    return peal::MultiAxis<E>(std::move(a));
  }
};
// Two heads of MultiAxisOf (RoPE-Mixed: frequencies per head and axis).
template <class Fam>
struct PerHeadOf {
  static constexpr const char* name = "PerHead of MultiAxis";
  static constexpr int axes = Fam::axes;
  template <class S>
  static auto build(Draw& d) {
    using E = decltype(Fam::template build<S>(d));
    std::vector<E> heads;
    for (int h = 0; h < 2; ++h) heads.push_back(Fam::template build<S>(d));
    return peal::PerHead<E>(std::move(heads));
  }
};

template <class E>
const E& at(const E& e, int) {
  return e;
}
template <class E>
const E& at(const peal::PerHead<E>& e, int h) {
  return e.head(h);
}

template <class Fam>
struct Setup {
  using E = decltype(Fam::template build<double>(std::declval<Draw&>()));
  using EL = decltype(Fam::template build<LD>(std::declval<Draw&>()));
  static constexpr int D = Fam::axes;
  E enc;
  EL twin;
  int tokens, heads, dim;
  std::vector<double> pos, x, g;  // pos token-major [tokens, D]

  static Setup make(int tokens, int heads, double lo, double hi, std::uint64_t seed) {
    std::mt19937_64 re(seed), rl(seed), rr(seed + 5);
    Draw de{re, Regime::Random}, dl{rl, Regime::Random};
    auto e = Fam::template build<double>(de);
    auto tw = peal::with_parameters(Fam::template build<LD>(dl), peal::parameters(e).values);
    Setup s{std::move(e), std::move(tw), tokens, heads, 0, {}, {}, {}};
    s.dim = at(s.enc, 0).dim();
    std::uniform_real_distribution<double> u(-1, 1), p(lo, hi);
    for (int i = 0; i < tokens * D; ++i) s.pos.push_back(p(rr));
    const std::size_t n = std::size_t(tokens) * std::size_t(heads) * std::size_t(s.dim);
    for (std::size_t i = 0; i < n; ++i) s.x.push_back(u(rr)), s.g.push_back(u(rr));
    return s;
  }
  TensorView<const double> view(const std::vector<double>& v) const {
    return TensorView<const double>(v.data(), tokens, heads, dim);
  }
  peal::PositionsND positions() const { return peal::PositionsND(pos, D); }
  VLD point(int i) const {
    VLD p(D);
    for (int a = 0; a < D; ++a) p(a) = LD(pos[std::size_t(i * D + a)]);
    return p;
  }
  VLD row(const std::vector<double>& v, int i, int h) const {
    VLD r(dim);
    for (int j = 0; j < dim; ++j) r(j) = LD(v[std::size_t((i * heads + h) * dim + j)]);
    return r;
  }
};

template <class E, class TX, class TG, class TD>
void backward(Side side, const E& e, TX x, const peal::PositionsND& p, TG g, TD dx,
              std::vector<double>* gp, std::vector<double>* gt) {
  if (side == Side::query)
    peal::encode_queries_backward(e, x, p, g, dx, {gp, gt});
  else
    peal::encode_keys_backward(e, x, p, g, dx, {gp, gt});
}

// One call: dq / dk and the position gradient against the twin's dense matrices, the
// parameter gradient against the loss's central difference (every sample-th parameter).
template <class Fam>
void check_nd(Side side, double lo, double hi, int sample = 1) {
  auto s = Setup<Fam>::make(4, 2, lo, hi, 61);
  constexpr int D = Fam::axes;
  const int n = s.dim, T = s.tokens, H = s.heads, P = peal::parameter_count(s.enc);
  std::vector<double> dx(s.x.size()), gp(std::size_t(P), 0.0), gt(std::size_t(T * D), 0.0);
  backward(side, s.enc, s.view(s.x), s.positions(), s.view(s.g),
           TensorView<double>(dx.data(), T, H, n), &gp, &gt);
  const bool q = side == Side::query;

  LD m = 0, a = 0, xmax = 0, tmax = 0;  // the loss's magnitudes (test_encode_backward.cpp)
  for (int i = 0; i < T; ++i) {
    const VLD p = s.point(i), mp = -p;
    for (int h = 0; h < H; ++h) {
      const auto& e = at(s.twin, h);
      const MLD M = q ? MLD(e.F(p)) : MLD(e.G(p)), A = q ? MLD(e.A(p)) : MLD(e.A(mp));
      const MLD X = e.generator_at(p);
      const LD xn = max_abs(X) * n, am = max_abs(A);
      const VLD xv = s.row(s.x, i, h), gv = s.row(s.g, i, h);
      const VLD ref = M.transpose() * gv;  // dq = F(p)ᵀ g, dk = G(p)ᵀ g
      const MLD aa = M.transpose().cwiseAbs();
      const VLD mag = aa * gv.cwiseAbs();
      for (int j = 0; j < n; ++j) {
        const LD tol = Tol<double>::encode(n, mag(j), ref(j), Tol<double>::eps,
                                           LD(Tol<double>::underflow()), Tol<double>::phase(xn),
                                           Tol<double>::angle_eps() * aa.row(j).sum() *
                                               gv.cwiseAbs().sum());
        INFO(Fam::name << " token " << i << " head " << h << " elem " << j);
        CHECK(std::abs(LD(dx[std::size_t((i * H + h) * n + j)]) - ref(j)) <= tol);
      }
      const LD xs = xv.cwiseAbs().sum(), gs = gv.cwiseAbs().sum();
      m += xs * gs * (1 + p.cwiseAbs().sum()) * am;
      a += xs * gs * am;
      xmax = std::max(xmax, xn);
      tmax = std::max(tmax, p.cwiseAbs().maxCoeff());
    }
    // ∂L/∂p_a = Σ_h gᵀ (∂M/∂p_a) x: ∂F/∂p_a = (X_a A(p))ᵀ, ∂G/∂p_a = −X_a A(−p).
    for (int ax = 0; ax < D; ++ax) {
      LD rt = 0, mt = 0, x = 0;
      for (int h = 0; h < H; ++h) {
        const auto& e = at(s.twin, h);
        const MLD Xa = e.generator(ax);
        const MLD A = q ? MLD(e.A(p)) : MLD(e.A(mp));
        const MLD dM = q ? MLD((Xa * A).transpose()) : MLD(-(Xa * A));
        const VLD xv = s.row(s.x, i, h), gv = s.row(s.g, i, h);
        rt += gv.dot(dM * xv);
        mt += xv.cwiseAbs().sum() * gv.cwiseAbs().sum() * (1 + max_abs(Xa) * n) * max_abs(A);
        x = std::max(x, max_abs(MLD(e.generator_at(p))) * n);
      }
      INFO(Fam::name << " position gradient, token " << i << " axis " << ax);
      CHECK(std::abs(LD(gt[std::size_t(i * D + ax)]) - rt) <= Tol<double>::derivative(n, x) * mt);
    }
  }

  const std::vector<LD> theta = peal::parameters(s.twin).values;
  auto loss = [&](std::size_t k, LD delta) {
    std::vector<LD> th = theta;
    th[k] += delta;
    const auto e = peal::with_parameters(s.twin, th);
    LD sum = 0;
    for (int i = 0; i < T; ++i)
      for (int h = 0; h < H; ++h) {
        const MLD M = q ? MLD(at(e, h).F(s.point(i))) : MLD(at(e, h).G(s.point(i)));
        sum += s.row(s.g, i, h).dot(M * s.row(s.x, i, h));
      }
    return sum;
  };
  const peal::ParameterSet names = peal::parameters(s.enc);
  for (int k = q ? 0 : sample / 2; k < P; k += sample) {
    const std::size_t kk = std::size_t(k);
    const LD th = std::abs(theta[kk]);
    const LD h0 = Tol<double>::derivative_step(tmax * D), h = th > 0 ? std::min(h0, th / 8) : h0;
    auto d = [&](LD hh) {
      return (8 * (loss(kk, hh) - loss(kk, -hh)) - (loss(kk, 2 * hh) - loss(kk, -2 * hh))) / (12 * hh);
    };
    const LD dh = d(h), d2h = d(2 * h);
    const LD tol = Tol<double>::derivative_tol(n, xmax, m, a, h, std::abs(dh - d2h)) +
                   Tol<double>::roundings(T * H * D) * m;
    INFO(Fam::name << " " << names.names[kk] << ": " << gp[kk] << " vs " << double(dh));
    CHECK(std::abs(LD(gp[kk]) - dh) <= tol);
  }
}

using Mixed3 = MultiAxisOf<MixedFam, 3>;
using Rope2 = MultiAxisOf<BankFam<RotationFam, peal::Layout::HalfSplit, 4>, 2>;

}  // namespace

TEST_CASE("encode backward, N-D points: every block type in 3 axes, rotations per head",
          "[encode_backward]") {
  for (Side side : {Side::query, Side::key}) {
    check_nd<Mixed3>(side, -1, 1, 3);  // a third of its 3 x 40 parameters, per side
    check_nd<Rope2>(side, -50, 50);
    check_nd<PerHeadOf<Rope2>>(side, -50, 50);
  }
}

// Presets: axial 2-D RoPE and RoPE-Mixed (vision_rope.hpp) at integer grid points, MRoPE
// (mrope.hpp) at (t, h, w) positions; float storage: dq / dk against the dense F(p)ᵀ G, G(p)ᵀ G
// of the encoding (double, per element Tol<float>::encode); in place = out of place bitwise;
// the MRoPE preset object gives what its MultiAxis gives, bitwise.
TEST_CASE("encode backward, N-D points: presets and in place", "[encode_backward]") {
  peal::RopeConfig c;
  c.head_dim = 32;
  c.scaling.mrope_section = {4, 6, 6};
  const auto mrope = peal::mrope<double>(c);
  const int T = 5, n = 32, H = 2;
  auto run = [&](const auto& enc, int D, std::vector<float>* dq_out) {
    std::mt19937_64 r(7);
    std::uniform_real_distribution<double> u(-1, 1), pp(0, 16);
    std::vector<float> x, g;
    std::vector<double> pos;
    for (int i = 0; i < T * H * n; ++i) x.push_back(float(u(r))), g.push_back(float(u(r)));
    for (int i = 0; i < T * D; ++i) pos.push_back(std::floor(pp(r)));
    const peal::PositionsND p(pos, D);
    const int P = peal::parameter_count(enc);
    std::vector<float> dx(x.size()), io;
    std::vector<double> gp(static_cast<std::size_t>(P)), gt(static_cast<std::size_t>(T * D));
    std::vector<double> gp2 = gp;
    const TensorView<const float> xv(x.data(), T, H, n), gv(g.data(), T, H, n);
    for (Side side : {Side::query, Side::key}) {
      std::fill(gp.begin(), gp.end(), 0.0), std::fill(gp2.begin(), gp2.end(), 0.0);
      io = g;
      backward(side, enc, xv, p, gv, TensorView<float>(dx.data(), T, H, n), &gp, &gt);
      TensorView<float> iv(io.data(), T, H, n);
      backward(side, enc, xv, p, iv, iv, &gp2, nullptr);
      CHECK(io == dx);  // in place, bitwise
      CHECK(gp == gp2);
      for (int i = 0; i < T; ++i) {
        peal::Vector<double> pt(D);
        for (int a = 0; a < D; ++a) pt(a) = pos[std::size_t(i * D + a)];
        for (int h = 0; h < H; ++h) {
          const auto& e = at(enc, h);
          const MLD M = side == Side::query ? MLD(e.F(pt).template cast<LD>())
                                            : MLD(e.G(pt).template cast<LD>());
          VLD gr(n);
          for (int j = 0; j < n; ++j) gr(j) = LD(g[std::size_t((i * H + h) * n + j)]);
          const VLD ref = M.transpose() * gr;
          const MLD aa = M.transpose().cwiseAbs();
          const VLD mag = aa * gr.cwiseAbs();
          const LD xn = max_abs(MLD(e.generator_at(pt).template cast<LD>())) * n;
          for (int j = 0; j < n; ++j) {
            const LD tol = Tol<float>::encode(n, mag(j), ref(j), Tol<float>::storage_eps<float>(),
                                              LD(Tol<float>::underflow()), Tol<double>::phase(xn),
                                              Tol<double>::angle_eps() * aa.row(j).sum() *
                                                  gr.cwiseAbs().sum());
            CHECK(std::abs(LD(dx[std::size_t((i * H + h) * n + j)]) - ref(j)) <= tol);
          }
        }
      }
      if (dq_out) dq_out->insert(dq_out->end(), dx.begin(), dx.end());
    }
  };
  run(peal::rope_axial_2d<double>(n), 2, nullptr);
  run(peal::rope_mixed_2d<double>(n, {0.3, 2.0}), 2, nullptr);
  std::vector<float> a, b;
  run(mrope, 3, &a);
  run(mrope.encoding(), 3, &b);
  CHECK(a == b);
}

// M-RoPE's own parameter layout (parameters.hpp: inv_freq[i], one per rotary pair, each on its
// own axis): the gradient against a fourth-order central difference of the loss
// L(θ) = Σ gᵀ F(p_i) x_i (queries) or Σ gᵀ G(p_i) x_i (keys), F and G of
// with_parameters(enc, θ ± h) in double, summed in long double; both section layouts (Qwen2-VL
// contiguous [2, 3, 3], Qwen3-VL interleaved); the round trip of parameters() is bitwise; a
// gradient sized for the MultiAxis layout is refused before anything is written.
TEST_CASE("encode backward, N-D points: the inv_freq layout of M-RoPE", "[encode_backward]") {
  const int T = 6, H = 2, n = 20;
  for (bool interleaved : {false, true}) {
    INFO("interleaved sections: " << interleaved);
    peal::RopeConfig c;
    c.head_dim = n;
    c.partial_rotary_factor = 0.8;  // 16 rotary coordinates, 4 passing through
    c.scaling.mrope_section = {2, 3, 3};
    c.scaling.mrope_interleaved = interleaved;
    const auto enc = peal::mrope<double>(c);
    const auto pset = peal::parameters(enc);
    REQUIRE(pset.size() == 8);
    CHECK(pset.names[3] == "inv_freq[3]");
    const auto same = peal::with_parameters(enc, pset.values);
    CHECK(same.encoding().A(peal::Vector<double>::Constant(3, 7.5)) ==
          enc.encoding().A(peal::Vector<double>::Constant(3, 7.5)));
    std::mt19937_64 r(91);
    std::uniform_real_distribution<double> u(-1, 1), pp(-20, 20);
    std::vector<double> x, g, pos, dx(std::size_t(T * H * n));
    for (int i = 0; i < T * H * n; ++i) x.push_back(u(r)), g.push_back(u(r));
    for (int i = 0; i < T * 3; ++i) pos.push_back(pp(r));
    const peal::PositionsND p(pos, 3);
    const TensorView<const double> xv(x.data(), T, H, n), gv(g.data(), T, H, n);
    for (Side side : {Side::query, Side::key}) {
      INFO((side == Side::query ? "queries" : "keys"));
      // L(θ) and its terms' magnitude, summed in long double over tokens and heads.
      auto loss = [&](const peal::MRopeEncoding<double>& e, LD* mag) {
        LD l = 0;
        for (int i = 0; i < T; ++i) {
          peal::Vector<double> pt(3);
          for (int a = 0; a < 3; ++a) pt(a) = pos[std::size_t(i * 3 + a)];
          const MLD M = side == Side::query ? MLD(e.encoding().F(pt).template cast<LD>())
                                            : MLD(e.encoding().G(pt).template cast<LD>());
          for (int h = 0; h < H; ++h) {
            VLD xi(n), gi(n);
            for (int j = 0; j < n; ++j)
              xi(j) = LD(x[std::size_t((i * H + h) * n + j)]),
              gi(j) = LD(g[std::size_t((i * H + h) * n + j)]);
            l += gi.dot(M * xi);
            if (mag) *mag += gi.cwiseAbs().dot(M.cwiseAbs() * xi.cwiseAbs()) * max_abs(pt.cast<LD>());
          }
        }
        return l;
      };
      std::vector<double> gp(8, 0.0), gt(std::size_t(T * 3), 0.0);
      backward(side, enc, xv, p, gv, TensorView<double>(dx.data(), T, H, n), &gp, &gt);
      LD mag = 0;
      loss(enc, &mag);
      for (int k = 0; k < 8; ++k) {
        const LD th = pset.values[std::size_t(k)], h = LD(1e-3) * th;
        auto at = [&](LD step) {
          auto v = pset.values;
          v[std::size_t(k)] = th + step;
          return loss(peal::with_parameters(enc, v), nullptr);
        };
        const LD fd = (LD(8) * (at(h) - at(-h)) - (at(2 * h) - at(-2 * h))) / (LD(12) * h);
        // Fourth-order difference: truncation ~ h⁴ |∂⁵L| ≤ (h p)⁴ mag / 30 (p ≤ 20: 1e-6 mag
        // at θ = 1); rounding ~ 8 ε_double mag / h (F in double; ε mag / (1e-3 θ)).
        const LD bound = (LD(1e-3) * 20) * (LD(1e-3) * 20) * (LD(1e-3) * 20) * (LD(1e-3) * 20) *
                             mag + LD(8) * LD(2.3e-16) * mag / h + LD(1e-12) * mag;
        INFO("inv_freq[" << k << "] = " << double(th) << ": " << gp[std::size_t(k)] << " vs "
                         << double(fd) << ", bound " << double(bound));
        CHECK(std::abs(LD(gp[std::size_t(k)]) - fd) <= bound);
      }
      // Sized for the MultiAxis layout (3 axes x (ω, a) x 8 pairs): refused, nothing written.
      std::vector<double> wrong(std::size_t(peal::parameter_count(enc.encoding())), 0.0);
      REQUIRE(wrong.size() == 48);
      std::vector<double> before = dx;
      CHECK_THROWS_AS(backward(side, enc, xv, p, gv, TensorView<double>(dx.data(), T, H, n),
                               &wrong, nullptr),
                      peal::invalid_argument);
      CHECK(dx == before);
      CHECK(std::all_of(wrong.begin(), wrong.end(), [](double w) { return w == 0.0; }));
    }
  }
}

TEST_CASE("encode backward, N-D points: bad input throws and writes nothing", "[encode_backward]") {
  auto s = Setup<Rope2>::make(4, 2, -5, 5, 71);
  const int n = s.dim, P = peal::parameter_count(s.enc);
  std::vector<double> out(s.x.size(), 7.0), gp(std::size_t(P), 0.0), gt(8, 0.0);
  TensorView<double> o(out.data(), 4, 2, n);
  using peal::invalid_argument;
  // A position gradient with one entry per token (not per token and axis).
  std::vector<double> per_token(4, 0.0);
  CHECK_THROWS_AS(backward(Side::query, s.enc, s.view(s.x), s.positions(), s.view(s.g), o, &gp,
                           &per_token),
                  invalid_argument);
  // Points with three axes for a 2-axis encoding; a NaN coordinate.
  std::vector<double> p3(12, 0.0), bad = s.pos;
  bad[5] = std::nan("");
  CHECK_THROWS_AS(backward(Side::key, s.enc, s.view(s.x), peal::PositionsND(p3, 3), s.view(s.g),
                           o, &gp, &gt),
                  invalid_argument);
  CHECK_THROWS_AS(backward(Side::key, s.enc, s.view(s.x), peal::PositionsND(bad, 2), s.view(s.g),
                           o, &gp, &gt),
                  invalid_argument);
  // dq over the input.
  std::vector<double> xs = s.x;
  TensorView<double> xv(xs.data(), 4, 2, n);
  CHECK_THROWS_AS(backward(Side::query, s.enc, xv, s.positions(), s.view(s.g), xv, &gp, &gt),
                  invalid_argument);
  CHECK(xs == s.x);
  for (double v : out) CHECK(v == 7.0);
  for (double v : gp) CHECK(v == 0.0);
  for (double v : gt) CHECK(v == 0.0);
}
