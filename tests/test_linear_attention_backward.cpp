// Tests of include/peal/linear_attention_backward.hpp: linear_attention_backward against the
// per-pair formula of the long double twin. The forward is out_ih = Σ_{s_j ≤ t_i} S_hij v_j with
// S_hij = scale γ_h^τ q_ihᵀ A(τ) k_j, so with dO = ∂L/∂out:
//   dS_hij = dO_ih · v_j (the scores backward's reference of tests/scores_backward_check.hpp
//   with that dS: dq, dk, ∂L/∂θ, ∂L/∂t, ∂L/∂s, ∂L/∂γ_h),
//   dv_j = Σ_{h of its group} Σ_{i : s_j ≤ t_i} S_hij dO_ih  (formed here in long double).
// Tolerance: the scores backward's (tests/test_scores_backward.cpp), Tol<C>::score_gradient in
// the arithmetic type C of the storage, of each result's terms' magnitudes; dv's terms are
// |S_hij| |dO_ih| with |S| ≤ scale γ^τ |q|₁ κ² ‖A(τ)‖ |k|₁.
// The O(n) chunkwise backward (detail/tiled/linear_backward_run.hpp; form = chunkwise or
// recurrent) against the same reference with 2 (C + d + dv) more roundings (a chunk's key
// sums, the states' d- and dv-term products), against the quadratic backward (form = parallel)
// within twice that, and against a fourth-order central difference of the long double loss
// L = Σ dO · out (parameters, decays, positions); bitwise equal for 1 and 3 threads.
#include <algorithm>
#include <catch2/catch.hpp>
#include <cstdint>
#include <memory>
#include <peal/linear_attention_backward.hpp>

#include "scores_backward_check.hpp"

using namespace peal_test;
using namespace peal_test::scores_backward_check;

namespace {

// One problem: the inputs (rounded to the storage T), the long double reference (the scores
// backward's with dS = dO · v, and dv), and calls of the backward with any options.
template <class Fam, class T = double>
struct LinearCase {
  using C = peal::detail::tiled::arith_t<T, T>;
  Problem<Fam> pr;
  int dvn, d, P, G;
  std::vector<double> v, dout;
  std::vector<T> qs, ks, vs, ds;
  Reference r;
  std::vector<LD> rdv, mdv;

  // Every gradient of one call.
  struct Result {
    std::vector<double> dq, dk, dv, gp, gt, gs, gg;
  };

  LinearCase(const Shape& sh, Regime regime, std::uint64_t seed, int dv_dim,
             const std::vector<double>& decays = {})
      : pr(Problem<Fam>::make(sh, regime, seed)), dvn(dv_dim) {
    REQUIRE((sh.causal && !sh.alibi));
    if (!decays.empty()) pr.opt.decay = decays;
    std::sort(pr.tq.begin(), pr.tq.end());  // linear attention: positions sorted by time
    std::sort(pr.tk.begin(), pr.tk.end());
    d = pr.d, P = peal::parameter_count(pr.enc), G = sh.Hq / sh.Hk;
    std::mt19937_64 rng(seed + 100);
    std::uniform_real_distribution<double> u(-1, 1);
    v.resize(std::size_t(sh.nk * sh.Hk * dvn));
    dout.resize(std::size_t(sh.nq * sh.Hq * dvn));
    for (auto* x : {&pr.q, &pr.k, &v, &dout})
      for (double& y : *x) y = double(T(x == &pr.q || x == &pr.k ? y : u(rng)));
    const auto stored = [](const std::vector<double>& x) {  // exact: x is already rounded to T
      std::vector<T> y;
      for (double e : x) y.push_back(T(e));
      return y;
    };
    qs = stored(pr.q), ks = stored(pr.k), vs = stored(v), ds = stored(dout);
    // dS = dO · v on the visible pairs: the scores backward's reference gives dq, dk, θ, t, s, γ.
    for (int h = 0; h < sh.Hq; ++h)
      for (int i = 0; i < sh.nq; ++i)
        for (int j = 0; j < sh.nk; ++j) {
          LD s = 0;
          for (int e = 0; e < dvn; ++e)
            s += LD(dout[std::size_t((i * sh.Hq + h) * dvn + e)]) *
                 LD(v[std::size_t((j * sh.Hk + h / G) * dvn + e)]);
          pr.ds[std::size_t((h * sh.nq + i) * sh.nk + j)] =
              pr.tk[std::size_t(j)] > pr.tq[std::size_t(i)] ? 0.0 : double(s);
        }
    r = reference(pr);
    reference_dv();
  }

  // dv, and its terms' magnitudes.
  void reference_dv() {
    const Shape& sh = pr.sh;
    rdv.assign(v.size(), 0), mdv.assign(v.size(), 0);
    const LD k2 = heads_kappa2(pr.twin, sh.Hq);
    for (int h = 0; h < sh.Hq; ++h) {
      const auto& tw = head_of(pr.twin, h);
      for (int i = 0; i < sh.nq; ++i)
        for (int j = 0; j < sh.nk; ++j) {
          const LD t = pr.tq[std::size_t(i)], s = pr.tk[std::size_t(j)], tau = t - s;
          if (s > t) continue;
          const LD gamma = pr.opt.decay.empty() ? 1 : LD(pr.opt.decay[std::size_t(h)]);
          const LD f = LD(pr.opt.scale) * std::pow(gamma, tau);
          const MLD A = tw.A(tau);
          const VLD qv = pr.qrow(i, h), kv = pr.krow(j, h / G);
          const LD S = f * qv.dot(A * kv), M = std::abs(f) * qv.cwiseAbs().sum() * max_abs(A) *
                                                   k2 * kv.cwiseAbs().sum();
          for (int e = 0; e < dvn; ++e) {
            const LD o = LD(dout[std::size_t((i * sh.Hq + h) * dvn + e)]);
            rdv[std::size_t((j * sh.Hk + h / G) * dvn + e)] += S * o;
            mdv[std::size_t((j * sh.Hk + h / G) * dvn + e)] += M * std::abs(o);
          }
        }
    }
  }

  peal::LinearAttentionOptions options() const {
    peal::LinearAttentionOptions opt;
    opt.scale = pr.opt.scale;
    opt.decay = pr.opt.decay;
    return opt;
  }

  // block: queries per block of the quadratic backward (0: the public function's choice).
  Result call(const peal::LinearAttentionOptions& opt, peal::Index block = 0) const {
    const Shape& sh = pr.sh;
    const bool decay = !opt.decay.empty();
    Result x{std::vector<double>(pr.q.size(), 7.0), std::vector<double>(pr.k.size(), 7.0),
             std::vector<double>(v.size(), 7.0), std::vector<double>(std::size_t(P), 0.0),
             std::vector<double>(std::size_t(sh.nq), 0.0), std::vector<double>(std::size_t(sh.nk), 0.0),
             std::vector<double>(std::size_t(sh.Hq), 0.0)};
    const peal::LinearAttentionGradients<double> grads{&x.gp, &x.gt, &x.gs, decay ? &x.gg : nullptr};
    const TensorView<const T> qv(qs.data(), sh.nq, sh.Hq, d), kv(ks.data(), sh.nk, sh.Hk, d),
        vv(vs.data(), sh.nk, sh.Hk, dvn), dov(ds.data(), sh.nq, sh.Hq, dvn);
    const TensorView<double> dqv(x.dq.data(), sh.nq, sh.Hq, d), dkv(x.dk.data(), sh.nk, sh.Hk, d),
        dvv(x.dv.data(), sh.nk, sh.Hk, dvn);
    const peal::Positions tq(pr.tq), tk(pr.tk);
    if (block == 0)
      peal::linear_attention_backward(pr.enc, qv, tq, kv, tk, vv, dov, dqv, dkv, dvv, opt, grads);
    else
      peal::detail::linear_backward::run(pr.enc, qv, tq, kv, tk, vv, dov, dqv, dkv, dvv, opt,
                                         grads, block * sh.Hq * sh.nk);
    return x;
  }

  // The scores backward's tolerance, plus dS = dO · v's dv roundings (in double) and `extra`
  // roundings (the chunkwise form's sums over a chunk's keys and the states' d x dv products).
  void check(const Result& x, int p, bool basis, int extra = 0) const {
    const GradientTolerance tol = gradient_tolerance<C>(pr, p, basis);
    const LD more = Tol<double>::roundings(dvn + extra);
    const LD rel = tol.rel + more;
    check_all("dq", x.dq, r.dq, r.mq, rel);
    check_all("dk", x.dk, r.dk, r.mk, rel);
    check_all("dv", x.dv, rdv, mdv, rel);
    check_all("parameter", x.gp, r.dtheta, r.mtheta, tol.position + more);
    check_all("query position", x.gt, r.dt, r.mt, tol.position + more);
    check_all("key position", x.gs, r.ds, r.ms, tol.position + more);
    if (!pr.opt.decay.empty()) check_all("decay", x.gg, r.dg, r.mg, rel);
  }
};

// block: queries per block of the backward (0: the public function's own choice).
template <class Fam, class T = double>
void check_linear_backward(const Shape& sh, Regime regime, int p, bool basis, std::uint64_t seed,
                           int dvn, peal::Index block = 0) {
  const LinearCase<Fam, T> lc(sh, regime, seed, dvn);
  INFO(Fam::name << ", positions [" << sh.lo << ", " << sh.hi << "], "
                 << sizeof(typename LinearCase<Fam, T>::C) * 8
                 << "-bit arithmetic, blocks of " << block << " queries (0: one)");
  lc.check(lc.call(lc.options(), block), p, basis);
}

// Each result of a within `rel` of the terms' magnitudes of b's.
inline void check_close(const char* what, const std::vector<double>& a,
                        const std::vector<double>& b, const std::vector<LD>& mag, LD rel) {
  std::vector<LD> bl(b.begin(), b.end());
  check_all(what, a, bl, mag, rel);
}

// Two calls' results (LinearCase::Result) bit for bit: every gradient.
template <class R>
void check_same_bits(const R& y, const R& x) {
  CHECK(y.dq == x.dq);
  CHECK(y.dk == x.dk);
  CHECK(y.dv == x.dv);
  CHECK(y.gp == x.gp);
  CHECK(y.gt == x.gt);
  CHECK(y.gs == x.gs);
  CHECK(y.gg == x.gg);
}

// The chunkwise O(n) backward (form = chunkwise, keys per chunk `chunk`) against the per-pair
// reference and against the quadratic backward (form = parallel); recurrent takes the same
// path; 1 and 3 threads give the bits of OpenMP's maximum.
template <class Fam, class T = double>
void check_chunkwise(const Shape& sh, Regime regime, int p, bool basis, std::uint64_t seed,
                     int dvn, peal::Index chunk, const std::vector<double>& decays = {}) {
  const LinearCase<Fam, T> lc(sh, regime, seed, dvn, decays);
  INFO(Fam::name << ", positions [" << sh.lo << ", " << sh.hi << "], " << sh.nq << " queries, "
                 << sh.nk << " keys, chunks of " << chunk << ", "
                 << sizeof(typename LinearCase<Fam, T>::C) * 8 << "-bit arithmetic");
  auto opt = lc.options();
  opt.form = peal::LinearForm::chunkwise;
  opt.chunk = chunk;
  const auto x = lc.call(opt);
  lc.check(x, p, basis, 2 * (int(chunk) + lc.d + dvn));
  opt.form = peal::LinearForm::parallel;  // the quadratic backward
  const auto quad = lc.call(opt);
  const GradientTolerance tol = gradient_tolerance<typename LinearCase<Fam, T>::C>(lc.pr, p, basis);
  const LD rel = 2 * (tol.rel + Tol<double>::roundings(2 * (int(chunk) + lc.d + dvn)));
  const LD pos = 2 * (tol.position + Tol<double>::roundings(2 * (int(chunk) + lc.d + dvn)));
  check_close("dq against the quadratic backward", x.dq, quad.dq, lc.r.mq, rel);
  check_close("dk against the quadratic backward", x.dk, quad.dk, lc.r.mk, rel);
  check_close("dv against the quadratic backward", x.dv, quad.dv, lc.mdv, rel);
  check_close("parameter against the quadratic backward", x.gp, quad.gp, lc.r.mtheta, pos);
  check_close("query position against the quadratic backward", x.gt, quad.gt, lc.r.mt, pos);
  check_close("key position against the quadratic backward", x.gs, quad.gs, lc.r.ms, pos);
  if (!lc.pr.opt.decay.empty())
    check_close("decay against the quadratic backward", x.gg, quad.gg, lc.r.mg, rel);
  opt.form = peal::LinearForm::recurrent;
  const auto rec = lc.call(opt);
  CHECK((rec.dq == x.dq && rec.dk == x.dk && rec.dv == x.dv && rec.gp == x.gp));
  opt.form = peal::LinearForm::chunkwise;
  for (int threads : {1, 3}) {
    opt.threads = threads;
    const auto y = lc.call(opt);
    INFO(threads << " threads against OpenMP's maximum");
    check_same_bits(y, x);
  }
}

// L = Σ dO · out in long double, out by the per-pair formula of the twin with parameters θ,
// decays γ and positions tq, tk (sorted: the causal mask is s_j ≤ t_i).
template <class Fam, class T>
LD loss(const LinearCase<Fam, T>& lc, const std::vector<LD>& theta, const std::vector<LD>& gamma,
        const std::vector<LD>& tq, const std::vector<LD>& tk) {
  const Shape& sh = lc.pr.sh;
  const auto tw = peal::with_parameters(lc.pr.twin, theta);
  LD L = 0;
  for (int i = 0; i < sh.nq; ++i)
    for (int j = 0; j < sh.nk; ++j) {
      if (lc.pr.tk[std::size_t(j)] > lc.pr.tq[std::size_t(i)]) continue;  // the mask at θ
      const LD tau = tq[std::size_t(i)] - tk[std::size_t(j)];
      const MLD A = tw.A(tau);
      for (int h = 0; h < sh.Hq; ++h) {
        const LD f = LD(lc.pr.opt.scale) * (gamma.empty() ? 1 : std::pow(gamma[std::size_t(h)], tau));
        const LD S = f * lc.pr.qrow(i, h).dot(A * lc.pr.krow(j, h / lc.G));
        for (int e = 0; e < lc.dvn; ++e)
          L += S * LD(lc.dout[std::size_t((i * sh.Hq + h) * lc.dvn + e)]) *
               LD(lc.v[std::size_t((j * sh.Hk + h / lc.G) * lc.dvn + e)]);
      }
    }
  return L;
}

// The chunkwise backward's parameter, decay and position gradients against a fourth-order
// central difference of that loss (steps 1e-4 (1 + |x|); truncation ~ h^4 |L^(5)|).
template <class Fam>
void check_central_differences(const Shape& sh, Regime regime, int p, bool basis,
                               std::uint64_t seed, int dvn, peal::Index chunk,
                               const std::vector<double>& decays) {
  const LinearCase<Fam> lc(sh, regime, seed, dvn, decays);
  auto opt = lc.options();
  opt.form = peal::LinearForm::chunkwise;
  opt.chunk = chunk;
  const auto x = lc.call(opt);
  lc.check(x, p, basis, 2 * (int(chunk) + lc.d + dvn));
  // θ in the twin's layout, which is enc's (derivative_check.hpp)
  std::vector<LD> theta = peal::parameters(lc.pr.twin).values;
  std::vector<LD> gamma(decays.begin(), decays.end()), tq(lc.pr.tq.begin(), lc.pr.tq.end()),
      tk(lc.pr.tk.begin(), lc.pr.tk.end());
  auto diff = [&](std::vector<LD>& at, std::size_t idx) {
    const LD x0 = at[idx], h = 1e-4L * (1 + std::abs(x0)), steps[4] = {-2, -1, 1, 2};
    LD f[4];
    for (int s = 0; s < 4; ++s) {
      at[idx] = x0 + steps[s] * h;
      f[s] = loss(lc, theta, gamma, tq, tk);
    }
    at[idx] = x0;
    return (f[0] - 8 * f[1] + 8 * f[2] - f[3]) / (12 * h);
  };
  auto against = [&](const char* what, std::vector<LD>& at, const std::vector<double>& got,
                     const std::vector<LD>& mag) {
    for (std::size_t idx = 0; idx < at.size(); ++idx) {
      const LD cd = diff(at, idx);
      INFO(what << "[" << idx << "]: " << got[idx] << " vs " << double(cd));
      CHECK(std::abs(LD(got[idx]) - cd) <= 1e-7L * mag[idx] + 1e-12L);
    }
  };
  against("parameter", theta, x.gp, lc.r.mtheta);
  against("decay", gamma, x.gg, lc.r.mg);
  against("query position", tq, x.gt, lc.r.mt);
  against("key position", tk, x.gs, lc.r.ms);
}

}  // namespace

TEST_CASE("linear attention backward: its kept buffers are 64-byte aligned", "[linear_backward]") {
  // Eigen's loops run the entries before an aligned address as scalar code, whose rounding may
  // differ from the packet code's: with malloc's alignment (an mmap'd block sits 16 bytes past a
  // page) the bits would depend on the heap (detail/tiled/backward_run.hpp, Buffer).
  namespace lb = peal::detail::linear_backward;
  for (Index n : {Index(1), Index(1000), Index(1) << 20}) {
    const double* p = lb::kept_buffer(lb::kS, n, 3);
    CHECK(reinterpret_cast<std::uintptr_t>(p) % 64 == 0);
  }
}

TEST_CASE("linear attention backward: against the per-pair formula", "[linear_backward]") {
  // A mixed composition with a Jordan chain over 3000 positions (anchored tiles, cross factors),
  // decays, grouped-query heads; its basis change; float storage and arithmetic.
  const Shape wide{6, 8, 4, 2, 0, 3000, true, false, true};
  check_linear_backward<MixedFam>(wide, Regime::Large, 2, false, 31, 5);
  check_linear_backward<BasisChangeFam>(wide, Regime::Large, 2, true, 32, 3);
  const Shape small{7, 9, 2, 1, -3, 3, true, false, true};
  check_linear_backward<MixedFam>(small, Regime::Random, 2, false, 33, 4);
  check_linear_backward<MixedFam, float>(small, Regime::Random, 2, false, 34, 4);
  // Queries in blocks of 2 and of 1: dk, dv and the gradients summed over the blocks.
  check_linear_backward<MixedFam>(wide, Regime::Large, 2, false, 35, 5, 2);
  check_linear_backward<MixedFam>(small, Regime::Random, 2, false, 36, 4, 1);
}

TEST_CASE("linear attention backward: the chunkwise O(n) form", "[linear_backward][chunkwise]") {
  const std::vector<double> retnet{1 - 1.0 / 32, 1 - 1.0 / 64, 1 - 1.0 / 128, 1 - 1.0 / 256};
  // A Jordan chain and every block type (dense transport A(Δ) between anchors), decays, GQA,
  // dv != d, 75 keys in chunks of 16 (the last one short; two segments of states), irregular
  // positions over 3000; its basis change (transport A_J(Δ)), chunks of 7.
  check_chunkwise<MixedFam>({70, 75, 4, 2, 0, 3000, true, false, true}, Regime::Large, 2, false,
                            41, 5, 16);
  check_chunkwise<BasisChangeFam>({40, 45, 2, 1, 0, 3000, true, false, true}, Regime::Large, 2,
                                  true, 42, 3, 7);
  // RoPE's rotation (pure: anchor 0, no transport) near 10^6, irregular, dv != d, GQA; and with
  // RetNet's per-head decays γ_h = 1 - 2^-(5+h) (the decays anchored per chunk).
  check_chunkwise<RetNetRotationFam>({90, 100, 4, 2, 1e6, 1e6 + 3000, true, false, false},
                               Regime::Random, 0, false, 43, 20, 16);
  check_chunkwise<RetNetRotationFam>({90, 100, 4, 2, 1e6, 1e6 + 3000, true, false, true},
                               Regime::Random, 0, false, 44, 6, 13, retnet);
  // A decaying rotation bank (RetNet's xPos-like damped rotations, not pure) with per-head
  // decays, near 10^6.
  check_chunkwise<RetNetFam<1>>({60, 64, 2, 1, 1e6, 1e6 + 2000, true, false, true},
                                Regime::Random, 0, false, 45, 7, 9, {retnet[0], retnet[2]});
  // Float storage and arithmetic for the pairs (the states in double); then chunks of one key
  // (every pair through the states), no decays, one query head per key head.
  check_chunkwise<MixedFam, float>({20, 24, 2, 1, -3, 3, true, false, true}, Regime::Random, 2,
                                   false, 46, 4, 5);
  // bfloat16 storage (q, k, v and d_out rounded to it before the reference sees them), float
  // arithmetic: the float tolerance, in the three forms.
  check_chunkwise<MixedFam, Eigen::bfloat16>({20, 24, 2, 1, -3, 3, true, false, true},
                                             Regime::Random, 2, false, 48, 4, 5);
  check_chunkwise<MixedFam>({9, 7, 2, 2, 0, 50, true, false, false}, Regime::Random, 2, false,
                            47, 3, 1);
}

// The same call again, after allocations that move where the allocator puts the call's working
// memory (its alignment): every output bit for bit, in the quadratic and the chunkwise form.
template <class Fam, class T>
void repeatable(const LinearCase<Fam, T>& lc) {
  INFO(Fam::name << ", " << sizeof(T) * 8 << "-bit storage");
  for (const auto form : {peal::LinearForm::parallel, peal::LinearForm::chunkwise}) {
    auto opt = lc.options();
    opt.form = form;
    opt.chunk = 6;
    const auto x = lc.call(opt);
    std::vector<std::unique_ptr<char[]>> held;
    for (int round = 1; round <= 8; ++round) {
      held.emplace_back(new char[std::size_t(8 * round)]);  // the heap moves by 16 bytes or so
      const auto y = lc.call(opt);
      INFO((form == peal::LinearForm::parallel ? "parallel" : "chunkwise") << ", call " << round + 1);
      check_same_bits(y, x);
    }
  }
}

TEST_CASE("linear attention backward: repeated calls give the same bits",
          "[linear_backward][determinism]") {
  // Odd dv, so that the rows' alignment varies within a buffer too.
  const std::vector<double> decays{0.97, 0.9, 0.99, 0.95};
  const LinearCase<MixedFam> mixed({37, 41, 4, 2, 0, 300, true, false, true}, Regime::Random, 61,
                                   5, decays);
  // RoPE's pure rotation near 10^6 (cached coefficient tables, detail/tiled/arena.hpp).
  const LinearCase<RetNetRotationFam> rope({33, 35, 4, 2, 1e6, 1e6 + 500, true, false, true},
                                           Regime::Random, 62, 7, decays);
  // Float storage and arithmetic for the pairs.
  const LinearCase<MixedFam, float> mixed_float({20, 24, 2, 1, -3, 3, true, false, true},
                                                Regime::Random, 63, 5);
  repeatable(mixed);
  repeatable(rope);
  repeatable(mixed_float);
}

TEST_CASE("linear attention backward: the chunkwise form against central differences",
          "[linear_backward][chunkwise]") {
  // Every parameter (the Jordan chains' rates, the rotations', the basis P), the decays and
  // every position, against the long double loss itself.
  check_central_differences<MixedFam>({24, 26, 2, 1, 0, 40, true, false, true}, Regime::Random,
                                      2, false, 48, 3, 5, {0.9, 0.97});
  check_central_differences<BasisChangeFam>({16, 18, 2, 2, 0, 30, true, false, true},
                                            Regime::Random, 2, true, 49, 2, 4, {0.95, 0.8});
}

TEST_CASE("linear attention backward: no keys, no queries, bad input", "[linear_backward]") {
  const Shape sh{3, 4, 2, 1, 0, 10, true, false, true};
  auto pr = Problem<MixedFam>::make(sh, Regime::Random, 37);
  std::sort(pr.tq.begin(), pr.tq.end());
  std::sort(pr.tk.begin(), pr.tk.end());
  const int d = pr.d, P = peal::parameter_count(pr.enc);
  std::vector<double> v(4 * 2, 0.5), dout(3 * 2 * 2, 0.25), dq(pr.q.size(), 7.0), dk(pr.k.size(), 7.0),
      dv(v.size(), 7.0), gp(std::size_t(P), 0.0), short_gp(std::size_t(P + 1), 0.0), none_pos;
  const TensorView<const double> q(pr.q.data(), 3, 2, d), k(pr.k.data(), 4, 1, d),
      vv(v.data(), 4, 1, 2), dO(dout.data(), 3, 2, 2);
  const TensorView<double> dqv(dq.data(), 3, 2, d), dkv(dk.data(), 4, 1, d), dvv(dv.data(), 4, 1, 2),
      none;
  const peal::Positions tq(pr.tq), tk(pr.tk), empty(none_pos);
  peal::LinearAttentionOptions opt;
  opt.decay = pr.opt.decay;
  auto all = [](const std::vector<double>& x, double value) {
    return std::all_of(x.begin(), x.end(), [&](double y) { return y == value; });
  };
  // No keys: dq is 0. No queries: dk and dv are 0.
  peal::linear_attention_backward(pr.enc, q, tq, TensorView<const double>(pr.k.data(), 0, 1, d),
                                  empty, TensorView<const double>(v.data(), 0, 1, 2), dO, dqv,
                                  none, none, opt, {&gp});
  CHECK(all(dq, 0.0));
  peal::linear_attention_backward(pr.enc, TensorView<const double>(pr.q.data(), 0, 2, d), empty,
                                  k, tk, vv, TensorView<const double>(dout.data(), 0, 2, 2), none,
                                  dkv, dvv, opt, {&gp});
  CHECK(all(dk, 0.0));
  CHECK(all(dv, 0.0));
  CHECK(all(gp, 0.0));
  // Bad input: thrown before anything is written.
  std::fill(dq.begin(), dq.end(), 7.0);
  using Catch::Contains;
  peal::LinearAttentionOptions retnet = opt;
  retnet.normalization = peal::LinearNorm::retnet;
  retnet.form = peal::LinearForm::automatic;  // (the forms normalise differently: give one)
  CHECK_THROWS_WITH(peal::linear_attention_backward(pr.enc, q, tq, k, tk, vv, dO, dqv, dkv, dvv,
                                                    retnet, {&gp}),
                    Contains("the output depends on the form"));
  CHECK_THROWS_WITH(peal::linear_attention_backward(pr.enc, q, tq, k, tk, vv, dO, dqv, dkv, dvv,
                                                    opt, {&short_gp}),
                    Contains("parameter gradient has"));
  CHECK_THROWS_WITH(peal::linear_attention_backward(pr.enc, q, tq, k, tk, vv,
                                                    TensorView<const double>(dout.data(), 3, 1, 2),
                                                    dqv, dkv, dvv, opt, {&gp}),
                    Contains("d_out is"));
  CHECK_THROWS_WITH(peal::linear_attention_backward(pr.enc, q, tq, k, tk, vv, dO,
                                                    TensorView<double>(dout.data(), 3, 2, 2), dkv,
                                                    dvv, opt, {&gp}),
                    Contains("dq must have the extents of q"));
  std::vector<double> unsorted = pr.tk;
  std::swap(unsorted[0], unsorted[3]);
  CHECK_THROWS_WITH(peal::linear_attention_backward(pr.enc, q, tq, k, peal::Positions(unsorted),
                                                    vv, dO, dqv, dkv, dvv, opt, {&gp}),
                    Contains("non-decreasing"));
  std::vector<double> dg(2, 0.0);
  peal::LinearAttentionOptions no_decay;
  CHECK_THROWS_WITH(peal::linear_attention_backward(pr.enc, q, tq, k, tk, vv, dO, dqv, dkv, dvv,
                                                    no_decay, {&gp, nullptr, nullptr, &dg}),
                    Contains("decay gradient was asked for"));
  CHECK(all(dq, 7.0));
  CHECK(all(dk, 0.0));  // as the call above left it
  CHECK(all(gp, 0.0));
}
