// Tests of include/peal/scores_nd_backward.hpp: scores_backward and attention_backward over N-D
// points, for MultiAxis rotation banks (3 axes: M-RoPE-like sections, a pure rotation encoded
// at the points as given; and damped rotations with growth and decay on the axes, encoded
// around the forward's anchor p0) and PerHead of them.
//
// Reference: the per-pair formula in long double, S_ij = q_iᵀ A(p_i − p'_j) k_j with A the
// twin's MultiAxis A(τ) = Π_a A_a(τ_a) (same parameters, parameters.hpp), masks by token
// order (query i at key index nk − nq + i), softmax with sinks and softcap as
// tests/attention_backward_check.hpp. Per visible pair, with W = ∂L/∂S_ij (dS scale, or
// dx cap' scale): dq_i += W A k_j, dk_j += W Aᵀ q_i, ∂L/∂θ_{a,x} += W q_iᵀ (Π_{b≠a} A_b(τ_b))
// ∂A_a(τ_a)/∂θ_x k_j (the axes commute), ∂L/∂p_{i,a} += W q_iᵀ X_a A k_j = −(its share of
// ∂L/∂p'_{j,a}); dv and the sinks' gradient as in 1-D. The out and lse the backward takes are
// the reference's (rounded to double); the N-D forward is checked to return them.
//
// Tolerances (tests/tolerances.hpp), derived as tests/attention_backward_check.hpp's (the 1-D
// backward, whose terms each carry a score's relative error) with what the composition adds:
//   - the rows pass through D + 2 encode kernels besides the 1-D backward's products: q̃ and k̃
//     (scores_nd.hpp), the input gradient F(u)ᵀ dq̃ / G(u')ᵀ dk̃, and the D − 1 stagings of the
//     other axes' factors in the N-D encode backward: Tol::kernel_entry(2) each (2 non-zeros
//     per row of a rotation), extra = 16 (D + 2) in Tol::score_gradient;
//   - the factors are formed at the anchored points u = p − p0, u' = p' − p0 (the points for
//     pure rotations), so a pair's terms are measured with max|A(u_i)| max|A(−u'_j)| (≥
//     max|A(τ)|), and a parameter's with 1 + |u_{i,a}| + |u'_{j,a}| (each side's ∂A/∂θ carries
//     its own point: the sides cancel to τ_a only in exact arithmetic);
//   - positions: Tol<double>::phase(x 4 |p|max) in every result, Tol<double>::derivative(d,
//     x 2 |p|max) more in the parameter and point gradients (x = d max_a |X_a|), as in 1-D.
#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <limits>
#include <peal/bank.hpp>
#include <peal/derivatives.hpp>
#include <peal/multi_axis.hpp>
#include <peal/parameters.hpp>
#include <peal/per_head.hpp>
#include <peal/presets/mrope.hpp>
#include <peal/rotation_block.hpp>
#include <peal/scores_nd.hpp>
#include <peal/scores_nd_backward.hpp>
#include <random>
#include <string>
#include <vector>

#include "derivative_check.hpp"
#include "tolerances.hpp"

// The forward's 1-D stage over the encoded rows (double), instantiated once for the test
// executable in tests/kernels/catalogue_attention.cpp (tests/kernel_catalogue.hpp).
extern template void peal::detail::tiled::run_attention<
    double, peal::PassThrough<double>, const double, const double, const double, double>(
    const peal::PassThrough<double>&, const peal::TensorView<const double>&, const peal::Positions&,
    const peal::TensorView<const double>&, const peal::Positions&,
    const peal::TensorView<const double>&, const peal::TensorView<double>&,
    const peal::ScoreOptions&, const peal::detail::tiled::SoftmaxOptions&, double*);

namespace {

using peal_test::Tol;
using LD = long double;
using MLD = peal::Matrix<LD>;
using VLD = peal::Vector<LD>;
using peal::Index;
using peal::TensorView;

template <class S>
using MA = peal::MultiAxis<peal::Bank<peal::RotationBlock<S>>>;
template <class S>
using PH = peal::PerHead<MA<S>>;

constexpr int kAxes = 3;
constexpr int kPairs = 8;  // d = 16
constexpr double kNone = std::numeric_limits<double>::infinity();

enum class Kind {
  mrope,   // sections of the pairs per axis (2, 3, 3), a = 0: a pure rotation
  damped,  // every axis rotates every pair, with decay on the time axis and growth elsewhere
};

// One axis set of S; `salt` varies the parameters (the heads of a PerHead).
template <class S>
MA<S> build(Kind kind, int salt) {
  std::vector<peal::Bank<peal::RotationBlock<S>>> axes;
  const int section[kPairs] = {0, 0, 1, 1, 1, 2, 2, 2};
  for (int a = 0; a < kAxes; ++a) {
    std::vector<peal::RotationBlock<S>> blocks;
    for (int j = 0; j < kPairs; ++j) {
      const long double w = std::pow(100.0L, -LD(j) / kPairs) * (1 + 0.1L * salt + 0.03L * a);
      if (kind == Kind::mrope) {
        blocks.emplace_back(section[j] == a ? w : 0.0L, S(0));
      } else {
        const double damp = a == 0 ? -0.02 * (1 + j % 3) : (j % 2 ? 0.01 : -0.015) * (a + salt);
        blocks.emplace_back(w / (a + 1), S(damp));
      }
    }
    axes.emplace_back(blocks, peal::Layout::HalfSplit);
  }
  return MA<S>(std::move(axes));
}

template <class E>
struct Heads {  // one MultiAxis for every head
  const E& e;
  const E& head(int) const { return e; }
  int offset(int) const { return 0; }
};
template <class E>
struct Heads<peal::PerHead<E>> {
  const peal::PerHead<E>& e;
  const E& head(int h) const { return e.head(h); }
  int offset(int h) const {
    int o = 0;
    for (int i = 0; i < h; ++i) o += peal::parameter_count(e.head(i));
    return o;
  }
};

using peal_test::derivative_check::check_all;
using peal_test::derivative_check::max_abs;

struct Shape {
  int nq, nk, Hq, Hk, dv;
  bool causal;
  double window, softcap;
  bool sinks, keys_encoded;
};

// The points: token-major [tokens, 3]; t in [t0, t0 + 40], h and w in [0, 8).
std::vector<double> points(std::mt19937_64& r, int n, double t0) {
  std::uniform_real_distribution<double> t(t0, t0 + 40), hw(0, 8);
  std::vector<double> p;
  for (int i = 0; i < n; ++i) p.insert(p.end(), {t(r), hw(r), hw(r)});
  return p;
}

// A problem, its long double reference and the magnitudes of the reference's terms.
template <class Enc, class Twin>
struct Problem {
  Enc enc;
  Twin twin;
  Shape sh;
  bool attention;
  int d = 2 * kPairs, D = kAxes;
  std::vector<double> pq, pk, q, k, v, dout, ds, out, lse;
  peal::AttentionOptions opt;
  std::vector<LD> dq, dk, dv, dth, dt, dsp, dsink;  // values
  std::vector<LD> mq, mk, mv, mth, mt, msp, msink;  // Σ |terms|
  LD pmax = 0, xn = 0;

  Problem(Enc e, Twin t, const Shape& s, bool attn)
      : enc(std::move(e)), twin(std::move(t)), sh(s), attention(attn) {}

  VLD row(const std::vector<double>& x, int i, int h, int H, int n) const {
    VLD r(n);
    for (int e = 0; e < n; ++e) r(e) = LD(x[std::size_t((i * H + h) * n + e)]);
    return r;
  }
  VLD point(const std::vector<double>& p, int i) const {
    VLD r(D);
    for (int a = 0; a < D; ++a) r(a) = LD(p[std::size_t(i * D + a)]);
    return r;
  }
  bool masked(int i, int j) const {  // token order: query i at key index nk − nq + i
    const int t = sh.nk - sh.nq + i;
    return (sh.causal && j > t) || !(double(t - j) < sh.window);
  }

  // p0: the centre of the points' bounding box when an axis grows or decays (scores_nd.hpp).
  VLD anchor() const {
    bool grows = false;
    const auto params = peal::parameters(twin).values;
    const auto names = peal::parameters(twin).names;
    for (std::size_t x = 0; x < params.size(); ++x)
      if (names[x].size() > 2 && names[x].compare(names[x].size() - 2, 2, ".a") == 0 &&
          params[x] != 0)
        grows = true;
    VLD p0 = VLD::Zero(D);
    if (!grows) return p0;
    for (int a = 0; a < D; ++a) {
      double lo = INFINITY, hi = -INFINITY;
      for (int i = 0; i < sh.nq; ++i)
        lo = std::min(lo, pq[std::size_t(i * D + a)]),
        hi = std::max(hi, pq[std::size_t(i * D + a)]);
      for (int j = 0; j < sh.nk; ++j)
        lo = std::min(lo, pk[std::size_t(j * D + a)]),
        hi = std::max(hi, pk[std::size_t(j * D + a)]);
      p0(a) = LD(0.5 * lo + 0.5 * hi);
    }
    return p0;
  }

  void reference() {
    const int G = sh.Hq / sh.Hk, dvn = sh.dv, P = peal::parameter_count(enc);
    const Heads<Twin> heads{twin};
    const LD scale = LD(*opt.scale), c = LD(sh.softcap);
    for (auto* x : {&dq, &mq}) x->assign(q.size(), 0);
    for (auto* x : {&dk, &mk}) x->assign(k.size(), 0);
    for (auto* x : {&dv, &mv}) x->assign(v.size(), 0);
    for (auto* x : {&dth, &mth}) x->assign(std::size_t(P), 0);
    for (auto* x : {&dt, &mt}) x->assign(std::size_t(sh.nq * D), 0);
    for (auto* x : {&dsp, &msp}) x->assign(std::size_t(sh.nk * D), 0);
    for (auto* x : {&dsink, &msink}) x->assign(std::size_t(sh.Hq), 0);
    out.assign(std::size_t(sh.nq * sh.Hq * dvn), 0.0);
    lse.assign(std::size_t(sh.nq * sh.Hq), 0.0);
    const VLD p0 = anchor();
    for (int h = 0; h < sh.Hq; ++h)
      for (int a = 0; a < D; ++a) xn = std::max(xn, max_abs(MLD(heads.head(h).generator(a))) * d);
    for (double x : pq) pmax = std::max(pmax, std::abs(LD(x)));
    for (double x : pk) pmax = std::max(pmax, std::abs(LD(x)));
    for (int i = 0; i < sh.nq; ++i)
      for (int h = 0; h < sh.Hq; ++h) {
        const auto& tw = heads.head(h);
        const int kh = h / G;
        const VLD pi = point(pq, i), qv = row(q, i, h, sh.Hq, d);
        std::vector<LD> y(std::size_t(sh.nk)), x(std::size_t(sh.nk)), p(std::size_t(sh.nk), 0);
        VLD o = VLD::Zero(dvn);
        LD D_ = 0, l = 0;
        if (attention) {
          const VLD dov = row(dout, i, h, sh.Hq, dvn);
          LD mx = sh.sinks ? LD(opt.sinks[std::size_t(h)]) : -std::numeric_limits<LD>::infinity();
          for (int j = 0; j < sh.nk; ++j) {
            if (masked(i, j)) continue;
            const VLD tau = pi - point(pk, j);
            y[std::size_t(j)] = scale * qv.dot(MLD(tw.A(tau)) * row(k, j, kh, sh.Hk, d));
            x[std::size_t(j)] = c > 0 ? c * std::tanh(y[std::size_t(j)] / c) : y[std::size_t(j)];
            mx = std::max(mx, x[std::size_t(j)]);
          }
          LD z = sh.sinks ? std::exp(LD(opt.sinks[std::size_t(h)]) - mx) : 0;
          for (int j = 0; j < sh.nk; ++j)
            if (!masked(i, j)) z += std::exp(x[std::size_t(j)] - mx);
          l = z > 0 ? mx + std::log(z) : -std::numeric_limits<LD>::infinity();
          lse[std::size_t(i * sh.Hq + h)] = double(l);
          for (int j = 0; j < sh.nk; ++j) {
            if (masked(i, j)) continue;
            p[std::size_t(j)] = std::exp(x[std::size_t(j)] - l);
            o += p[std::size_t(j)] * row(v, j, kh, sh.Hk, dvn);
          }
          for (int e = 0; e < dvn; ++e) out[std::size_t((i * sh.Hq + h) * dvn + e)] = double(o(e));
          D_ = dov.dot(o);
          if (sh.sinks && z > 0) {
            const LD ps = std::exp(LD(opt.sinks[std::size_t(h)]) - l);
            dsink[std::size_t(h)] -= ps * D_, msink[std::size_t(h)] += ps * std::abs(D_);
          }
        }
        for (int j = 0; j < sh.nk; ++j) {
          if (masked(i, j)) continue;
          const VLD pj = point(pk, j), kv = row(k, j, kh, sh.Hk, d);
          // With keys_encoded the stored row is k̂ = G(p') k and the pair's matrix A(p_i).
          const VLD kin = sh.keys_encoded ? VLD(MLD(tw.G(pj)) * kv) : kv;
          const VLD tau = sh.keys_encoded ? pi : VLD(pi - pj);
          const MLD A = tw.A(tau);
          const VLD ui = pi - p0, uj = pj - p0;
          const LD an = max_abs(MLD(tw.A(ui))) * max_abs(MLD(tw.A(VLD(-uj))));
          const LD Mij = qv.cwiseAbs().sum() * an * kin.cwiseAbs().sum();
          LD w, wmag;
          if (attention) {
            const VLD dov = row(dout, i, h, sh.Hq, dvn), vv = row(v, j, kh, sh.Hk, dvn);
            const LD pj_ = p[std::size_t(j)], dP = dov.dot(vv), dx = pj_ * (dP - D_);
            const LD xc = c > 0 ? x[std::size_t(j)] : 0;
            w = dx * (c > 0 ? 1 - (xc / c) * (xc / c) : 1) * scale;
            wmag = std::abs(w) + scale * pj_ * (std::abs(dP) + std::abs(D_)) * scale * Mij;
            for (int e = 0; e < dvn; ++e) {
              dv[std::size_t((j * sh.Hk + kh) * dvn + e)] += pj_ * dov(e);
              mv[std::size_t((j * sh.Hk + kh) * dvn + e)] +=
                  pj_ * std::abs(dov(e)) * (1 + scale * Mij) + pj_ * std::abs(dov(e));
            }
          } else {
            w = LD(ds[std::size_t((h * sh.nq + i) * sh.nk + j)]) * scale;
            wmag = std::abs(w);
          }
          const VLD ak = A * kin, atq = A.transpose() * qv;
          for (int e = 0; e < d; ++e) {
            dq[std::size_t((i * sh.Hq + h) * d + e)] += w * ak(e);
            mq[std::size_t((i * sh.Hq + h) * d + e)] += wmag * an * kin.cwiseAbs().sum();
            dk[std::size_t((j * sh.Hk + kh) * d + e)] += w * atq(e);
            mk[std::size_t((j * sh.Hk + kh) * d + e)] += wmag * an * qv.cwiseAbs().sum();
          }
          const LD mag = wmag * Mij;
          int off = heads.offset(h);
          for (int a = 0; a < D; ++a) {
            MLD others = MLD::Identity(d, d);
            for (int b = 0; b < D; ++b)
              if (b != a) others = (others * MLD(tw.axis(b).A(tau(b)))).eval();
            const std::vector<MLD> dA = peal::dA(tw.axis(a), tau(a));
            const LD side = 1 + std::abs(ui(a)) + (sh.keys_encoded ? 0 : std::abs(uj(a)));
            for (std::size_t x2 = 0; x2 < dA.size(); ++x2) {
              dth[std::size_t(off) + x2] += w * qv.dot(others * dA[x2] * kin);
              mth[std::size_t(off) + x2] += mag * side;
            }
            off += int(dA.size());
            const LD dpos = w * qv.dot(MLD(tw.generator(a)) * A * kin);
            dt[std::size_t(i * D + a)] += dpos, mt[std::size_t(i * D + a)] += mag * (1 + xn);
            if (!sh.keys_encoded)
              dsp[std::size_t(j * D + a)] -= dpos, msp[std::size_t(j * D + a)] += mag * (1 + xn);
          }
        }
      }
  }

  // The relative error of every result and of the parameter and point gradients (top of file).
  template <class C>
  std::pair<LD, LD> tolerance() const {
    const LD rel = Tol<C>::score_gradient(d, 1, 16 * (D + 2), 0, sh.nq * sh.nk * sh.Hq) +
                   Tol<double>::phase(xn * 4 * pmax) + Tol<C>::roundings(sh.dv + 8);
    return {rel, rel + Tol<double>::derivative(d, xn * 2 * pmax)};
  }
};

// The storage of each kernel's inputs: attention in double (double arithmetic), scores in
// float (float arithmetic). One storage type per kernel keeps this TU to one instantiation of
// each 1-D tile driver (docs/build-cost.md).
using TA = double;
using TS = float;
template <class Enc, class Twin>
double stored(const Problem<Enc, Twin>& c, double x) {
  return c.attention ? double(TA(x)) : double(TS(x));
}

template <class Enc, class Twin>
Problem<Enc, Twin> make(Enc enc, Twin twin, const Shape& sh, bool attention, double t0,
                        std::uint64_t seed) {
  std::mt19937_64 r(seed);
  std::uniform_real_distribution<double> u(-1, 1);
  Problem<Enc, Twin> c{std::move(enc), std::move(twin), sh, attention};
  c.pq = points(r, sh.nq, t0);
  c.pk = points(r, sh.nk, t0);
  for (int i = 0; i < sh.nq * sh.Hq * c.d; ++i) c.q.push_back(stored(c, u(r)));
  for (int i = 0; i < sh.nk * sh.Hk * c.d; ++i) c.k.push_back(stored(c, u(r)));
  for (int i = 0; i < sh.nk * sh.Hk * sh.dv; ++i) c.v.push_back(stored(c, u(r)));
  for (int i = 0; i < sh.nq * sh.Hq * sh.dv; ++i) c.dout.push_back(stored(c, u(r)));
  for (int i = 0; i < sh.Hq * sh.nq * sh.nk; ++i) c.ds.push_back(stored(c, u(r)));
  c.opt.causal = sh.causal;
  c.opt.window = sh.window;
  c.opt.softcap = sh.softcap;
  c.opt.scale = 0.6;
  c.opt.keys_encoded = sh.keys_encoded;
  for (int h = 0; h < sh.Hq && sh.sinks; ++h) c.opt.sinks.push_back(0.3 - 0.2 * h);
  c.reference();
  return c;
}

// The kernel's results of one call.
struct Result {
  std::vector<double> dq, dk, dv, gp, gt, gs, gsk;
};

// One call of the N-D backward on problem c (its inputs already rounded to their storage).
template <class Enc, class Twin>
Result run(const Problem<Enc, Twin>& c, int threads = 0) {
  const Shape& sh = c.sh;
  const int d = c.d, D = c.D;
  Result r;
  r.dq.assign(c.q.size(), 7.0), r.dk.assign(c.k.size(), 7.0), r.dv.assign(c.v.size(), 7.0);
  r.gp.assign(std::size_t(peal::parameter_count(c.enc)), 0.0);
  r.gt.assign(std::size_t(sh.nq * D), 0.0), r.gs.assign(std::size_t(sh.nk * D), 0.0);
  r.gsk.assign(std::size_t(sh.Hq), 0.0);
  const peal::PositionsND pq(c.pq, D), pk(c.pk, D);
  const TensorView<double> dq(r.dq.data(), sh.nq, sh.Hq, d), dk(r.dk.data(), sh.nk, sh.Hk, d);
  if (c.attention) {
    std::vector<TA> kin(c.k.begin(), c.k.end());
    if (sh.keys_encoded)  // the cache holds G(p') k
      peal::encode_keys(c.enc, TensorView<TA>(kin.data(), sh.nk, sh.Hk, d), pk);
    const std::vector<TA> qs(c.q.begin(), c.q.end()), vs(c.v.begin(), c.v.end()),
        os(c.out.begin(), c.out.end()), dos(c.dout.begin(), c.dout.end());
    peal::AttentionOptions o = c.opt;
    o.threads = threads;
    peal::attention_backward(c.enc, TensorView<const TA>(qs.data(), sh.nq, sh.Hq, d), pq,
                             TensorView<const TA>(kin.data(), sh.nk, sh.Hk, d), pk,
                             TensorView<const TA>(vs.data(), sh.nk, sh.Hk, sh.dv),
                             TensorView<const TA>(os.data(), sh.nq, sh.Hq, sh.dv), c.lse,
                             TensorView<const TA>(dos.data(), sh.nq, sh.Hq, sh.dv), dq, dk,
                             TensorView<double>(r.dv.data(), sh.nk, sh.Hk, sh.dv), o,
                             {&r.gp, &r.gt, &r.gs, nullptr, sh.sinks ? &r.gsk : nullptr});
  } else {
    const std::vector<TS> qs(c.q.begin(), c.q.end()), ks(c.k.begin(), c.k.end()),
        dss(c.ds.begin(), c.ds.end());
    peal::ScoreOptions o;
    o.causal = sh.causal;
    o.scale = *c.opt.scale;
    o.threads = threads;
    peal::scores_backward(c.enc, TensorView<const TS>(qs.data(), sh.nq, sh.Hq, d), pq,
                          TensorView<const TS>(ks.data(), sh.nk, sh.Hk, d), pk,
                          TensorView<const TS>(dss.data(), sh.Hq, sh.nq, sh.nk), dq, dk, o,
                          {&r.gp, &r.gt, &r.gs, nullptr, nullptr});
  }
  return r;
}

// The relative errors of a problem's results in its kernel's arithmetic.
template <class Enc, class Twin>
std::pair<LD, LD> tolerance(const Problem<Enc, Twin>& c) {
  return c.attention ? c.template tolerance<TA>() : c.template tolerance<TS>();
}

template <class Enc, class Twin>
void check(const Problem<Enc, Twin>& c) {
  const Result r = run(c);
  const auto tol = tolerance(c);
  const LD floor = c.attention ? Tol<TA>::flushed() : Tol<TS>::flushed();
  const Shape& sh = c.sh;
  INFO((c.attention ? "attention backward, double" : "scores backward, float")
       << " storage and arithmetic, |p| <= " << double(c.pmax));
  check_all("dq", r.dq, c.dq, c.mq, tol.first, floor);
  check_all(sh.keys_encoded ? "dk (of the stored rows G(p') k)" : "dk", r.dk, c.dk, c.mk, tol.first,
            floor);
  check_all("parameter", r.gp, c.dth, c.mth, tol.second, floor);
  check_all("query point", r.gt, c.dt, c.mt, tol.second, floor);
  check_all("key point", r.gs, c.dsp, c.msp, tol.second, floor);
  if (c.attention) {
    check_all("dv", r.dv, c.dv, c.mv, tol.first, floor);
    if (sh.sinks) check_all("sink", r.gsk, c.dsink, c.msink, tol.first, floor);
  }
  // Threads: the 1-D backward's shards give the bits of one thread.
  const Result r1 = run(c, 1), r3 = run(c, 3);
  for (const Result* x : {&r1, &r3}) {
    CHECK(x->dq == r.dq);
    CHECK(x->dk == r.dk);
    CHECK(x->dv == r.dv);
    CHECK(x->gp == r.gp);
    CHECK(x->gt == r.gt);
    CHECK(x->gs == r.gs);
    CHECK(x->gsk == r.gsk);
  }
}

MA<double> enc_of(Kind kind) { return build<double>(kind, 0); }
MA<LD> twin_of(const MA<double>& e, Kind kind) {
  return peal::with_parameters(build<LD>(kind, 0), peal::parameters(e).values);
}
PH<double> heads_of(Kind kind, int H) {
  std::vector<MA<double>> h;
  for (int i = 0; i < H; ++i) h.push_back(build<double>(kind, i));
  return PH<double>(std::move(h));
}
PH<LD> twin_of(const PH<double>& e, Kind kind) {
  std::vector<MA<LD>> h;
  for (int i = 0; i < e.heads(); ++i) h.push_back(build<LD>(kind, i));
  return peal::with_parameters(PH<LD>(std::move(h)), peal::parameters(e).values);
}

}  // namespace

TEST_CASE("N-D backward: attention against the per-pair reference", "[scores_nd_backward]") {
  // GQA (4 query heads over 2 key heads), dv != d, more keys than queries (the queries are the
  // last tokens), sinks and a softcap; causal with a window, or neither.
  const Shape causal{5, 7, 4, 2, 6, true, 4, 2.5, true, false};
  const Shape wide{5, 7, 4, 2, 6, false, kNone, 0, false, false};
  for (Kind kind : {Kind::mrope, Kind::damped}) {
    INFO((kind == Kind::mrope ? "M-RoPE-like rotations" : "damped rotations (anchored)"));
    const MA<double> e = enc_of(kind);
    for (const Shape& sh : {causal, wide}) check(make(e, twin_of(e, kind), sh, true, 3000, 11));
  }
  // A KV cache encoded once (pure rotations): dk of the stored rows, keys add nothing to θ, p'.
  Shape enc = causal;
  enc.keys_encoded = true;
  const MA<double> e = enc_of(Kind::mrope);
  check(make(e, twin_of(e, Kind::mrope), enc, true, 0, 13));
}

TEST_CASE("N-D backward: scores against the per-pair reference", "[scores_nd_backward]") {
  for (Kind kind : {Kind::mrope, Kind::damped}) {
    INFO((kind == Kind::mrope ? "M-RoPE-like rotations" : "damped rotations (anchored)"));
    const MA<double> e = enc_of(kind);
    for (bool causal : {true, false}) {
      const Shape sh{5, 7, 4, 2, 6, causal, kNone, 0, false, false};
      check(make(e, twin_of(e, kind), sh, false, 3000, 21));
    }
  }
}

TEST_CASE("N-D backward: PerHead of MultiAxis (RoPE-Mixed-like)",
          "[scores_nd_backward][per_head]") {
  const Shape sh{5, 7, 4, 2, 6, true, kNone, 1.5, true, false};
  for (Kind kind : {Kind::mrope, Kind::damped}) {
    const PH<double> e = heads_of(kind, 4);
    check(make(e, twin_of(e, kind), sh, true, 3000, 31));
    check(make(e, twin_of(e, kind), sh, false, 3000, 32));
  }
}

// The out and lse the backward takes are the forward's: the N-D forward on the reference's
// inputs returns them within the same relative error.
TEST_CASE("N-D backward: out and lse as the forward returns them", "[scores_nd_backward]") {
  const Shape sh{5, 7, 4, 2, 6, true, 4, 2.5, true, false};
  for (Kind kind : {Kind::mrope, Kind::damped}) {
    const MA<double> e = enc_of(kind);
    const auto c = make(e, twin_of(e, kind), sh, true, 3000, 41);
    std::vector<double> out(c.out.size()), lse(c.lse.size());
    peal::AttentionOptions o = c.opt;
    o.lse = lse.data();
    peal::attention(
        c.enc, TensorView<const double>(c.q.data(), sh.nq, sh.Hq, c.d),
        peal::PositionsND(c.pq, kAxes), TensorView<const double>(c.k.data(), sh.nk, sh.Hk, c.d),
        peal::PositionsND(c.pk, kAxes), TensorView<const double>(c.v.data(), sh.nk, sh.Hk, sh.dv),
        TensorView<double>(out.data(), sh.nq, sh.Hq, sh.dv), o);
    const LD rel = c.template tolerance<double>().first;
    for (std::size_t x = 0; x < lse.size(); ++x)
      CHECK(std::abs(LD(lse[x]) - LD(c.lse[x])) <= rel * (1 + std::abs(LD(c.lse[x]))));
    for (std::size_t x = 0; x < out.size(); ++x) CHECK(std::abs(LD(out[x]) - LD(c.out[x])) <= rel);
  }
}

// M-RoPE's preset object (include/peal/presets/mrope.hpp) in its own parameter layout
// (parameters.hpp: inv_freq[i], one per rotary pair): its attention backward is its MultiAxis's,
// bit for bit, with the gradient of inv_freq[i] the MultiAxis gradient named
// "axis[a].part[0].block[i].omega" for a = pair_axis()[i] (found by name here, not by the
// header's index arithmetic). encode_backward's central-difference check of the same layout:
// tests/test_encode_backward_nd.cpp.
TEST_CASE("N-D backward: M-RoPE in its inv_freq layout", "[scores_nd_backward]") {
  peal::RopeConfig c;
  c.head_dim = 16;
  c.scaling.mrope_section = {2, 3, 3};
  const auto enc = peal::mrope<double>(c);
  const Index nq = 6, nk = 9, Hq = 4, Hk = 2, d = 16, dv = 5;
  std::mt19937_64 r(5);
  std::uniform_real_distribution<double> u(-1, 1), pp(0, 30);
  auto fill = [&](Index count) {
    std::vector<double> x(static_cast<std::size_t>(count));
    for (auto& e : x) e = u(r);
    return x;
  };
  const auto q = fill(nq * Hq * d), k = fill(nk * Hk * d), v = fill(nk * Hk * dv),
             dout = fill(nq * Hq * dv);
  std::vector<double> tq(static_cast<std::size_t>(nq * 3)), tk(static_cast<std::size_t>(nk * 3));
  for (auto& t : tq) t = std::floor(pp(r));
  for (auto& t : tk) t = std::floor(pp(r));
  const peal::PositionsND pq(tq, 3), pk(tk, 3);
  const TensorView<const double> qv(q.data(), nq, Hq, d), kv(k.data(), nk, Hk, d),
      vv(v.data(), nk, Hk, dv), dov(dout.data(), nq, Hq, dv);
  std::vector<double> out(static_cast<std::size_t>(nq * Hq * dv)),
      lse(static_cast<std::size_t>(nq * Hq));
  peal::AttentionOptions opt;
  opt.causal = true;
  opt.lse = lse.data();
  peal::attention(enc, qv, pq, kv, pk, vv, TensorView<double>(out.data(), nq, Hq, dv), opt);
  opt.lse = nullptr;
  const TensorView<const double> ov(out.data(), nq, Hq, dv);
  struct Grads {
    std::vector<double> dq, dk, dv, params, gq, gk;
  };
  auto run = [&](const auto& e) {
    Grads g{std::vector<double>(q.size()), std::vector<double>(k.size()),
            std::vector<double>(v.size()),
            std::vector<double>(static_cast<std::size_t>(peal::parameter_count(e))),
            std::vector<double>(tq.size()), std::vector<double>(tk.size())};
    peal::attention_backward(e, qv, pq, kv, pk, vv, ov, lse, dov,
                             TensorView<double>(g.dq.data(), nq, Hq, d),
                             TensorView<double>(g.dk.data(), nk, Hk, d),
                             TensorView<double>(g.dv.data(), nk, Hk, dv), opt,
                             {&g.params, &g.gq, &g.gk, nullptr, nullptr});
    return g;
  };
  const Grads a = run(enc), b = run(enc.encoding());
  CHECK(a.dq == b.dq);
  CHECK(a.dk == b.dk);
  CHECK(a.dv == b.dv);
  CHECK(a.gq == b.gq);
  CHECK(a.gk == b.gk);
  const auto names = peal::parameters(enc.encoding()).names;
  REQUIRE(a.params.size() == 8);
  for (std::size_t i = 0; i < a.params.size(); ++i) {
    const std::string name = "axis[" + std::to_string(enc.pair_axis()[i]) + "].part[0].block[" +
                             std::to_string(i) + "].omega";
    const auto at = std::find(names.begin(), names.end(), name);
    REQUIRE(at != names.end());
    INFO(name);
    CHECK(a.params[i] == b.params[std::size_t(at - names.begin())]);
    CHECK(a.params[i] != 0.0);
  }
  std::vector<double> wrong(b.params.size()), dq(q.size());
  CHECK_THROWS_AS(peal::attention_backward(enc, qv, pq, kv, pk, vv, ov, lse, dov,
                                           TensorView<double>(dq.data(), nq, Hq, d),
                                           TensorView<double>(), TensorView<double>(), opt,
                                           {&wrong, nullptr, nullptr, nullptr, nullptr}),
                  peal::invalid_argument);
  CHECK(std::all_of(dq.begin(), dq.end(), [](double x) { return x == 0.0; }));
}

// Translation invariance: the score depends on p − p' only, so shifting every point by one
// vector leaves dq, dk, dv and the parameter gradient unchanged (to the rounding of each call,
// bounded as against the reference), and the point gradients of queries and keys sum to zero
// per axis (the anchor's total derivative, scores_nd_backward.hpp).
TEST_CASE("N-D backward: translation invariance", "[scores_nd_backward]") {
  const Shape sh{5, 7, 4, 2, 6, true, kNone, 2.5, true, false};
  const double shift[kAxes] = {1024.5, -300.25, 77.0};
  for (Kind kind : {Kind::mrope, Kind::damped})
    for (bool attention : {true, false}) {
      INFO((kind == Kind::mrope ? "M-RoPE-like" : "damped")
           << (attention ? " attention" : " scores"));
      const MA<double> e = enc_of(kind);
      const auto a = make(e, twin_of(e, kind), sh, attention, 100, 51);
      auto b = a;
      for (std::size_t x = 0; x < b.pq.size(); ++x) b.pq[x] += shift[x % kAxes];
      for (std::size_t x = 0; x < b.pk.size(); ++x) b.pk[x] += shift[x % kAxes];
      b.pmax = 0;
      b.reference();  // the same values; magnitudes at the shifted points
      const Result ra = run(a), rb = run(b);
      const auto ta = tolerance(a), tb = tolerance(b);
      auto same = [&](const char* what, const std::vector<double>& x, const std::vector<double>& y,
                      const std::vector<LD>& ma, const std::vector<LD>& mb, LD rel_a, LD rel_b) {
        for (std::size_t i = 0; i < x.size(); ++i) {
          INFO(what << "[" << i << "]: " << x[i] << " vs " << y[i]);
          CHECK(std::abs(LD(x[i]) - LD(y[i])) <= rel_a * ma[i] + rel_b * mb[i]);
        }
      };
      same("dq", ra.dq, rb.dq, a.mq, b.mq, ta.first, tb.first);
      same("dk", ra.dk, rb.dk, a.mk, b.mk, ta.first, tb.first);
      same("dv", ra.dv, rb.dv, a.mv, b.mv, ta.first, tb.first);
      same("parameter", ra.gp, rb.gp, a.mth, b.mth, ta.second, tb.second);
      same("query point", ra.gt, rb.gt, a.mt, b.mt, ta.second, tb.second);
      same("key point", ra.gs, rb.gs, a.msp, b.msp, ta.second, tb.second);
      for (int which = 0; which < 2; ++which) {
        const auto* c = which == 0 ? &a : &b;
        const Result& r = which == 0 ? ra : rb;
        const LD rel = (which == 0 ? ta : tb).second;
        for (int ax = 0; ax < kAxes; ++ax) {
          LD sum = 0, mag = 0;
          for (int i = 0; i < sh.nq; ++i)
            sum += r.gt[std::size_t(i * kAxes + ax)], mag += c->mt[std::size_t(i * kAxes + ax)];
          for (int j = 0; j < sh.nk; ++j)
            sum += r.gs[std::size_t(j * kAxes + ax)], mag += c->msp[std::size_t(j * kAxes + ax)];
          INFO("axis " << ax << ": sum of the point gradients " << double(sum));
          CHECK(std::abs(sum) <= rel * mag);
        }
      }
    }
}

TEST_CASE("N-D backward: bad input throws before anything is written",
          "[scores_nd_backward][errors]") {
  using Catch::Contains;
  const MA<double> e = enc_of(Kind::damped);
  const int nq = 3, nk = 4, H = 2, d = 16, D = kAxes;
  std::vector<double> q(nq * H * d, 0.5), k(nk * H * d, 0.25), v(nk * H * d, 0.125),
      out(nq * H * d, 0.1), dout(nq * H * d, 0.2), ds(H * nq * nk, 0.3), lse(nq * H, 1.0);
  std::vector<double> pq = {0, 0, 0, 1, 0, 1, 2, 1, 0}, pk = {0, 0, 0, 1, 1, 1, 2, 2, 2, 3, 0, 1};
  std::vector<double> dq(q.size(), 7.0), dk(k.size(), 7.0), dv(v.size(), 7.0),
      gp(std::size_t(peal::parameter_count(e)), 0.0), gt(nq * D, 0.0), gs(nk * D, 0.0);
  const auto dq0 = dq, dk0 = dk, dv0 = dv;
  const TensorView<const double> Q(q.data(), nq, H, d), K(k.data(), nk, H, d),
      V(v.data(), nk, H, d), O(out.data(), nq, H, d), DO(dout.data(), nq, H, d);
  const TensorView<double> dQ(dq.data(), nq, H, d), dK(dk.data(), nk, H, d),
      dV(dv.data(), nk, H, d);
  const peal::PositionsND PQ(pq, D), PK(pk, D);
  peal::AttentionOptions ao;
  peal::ScoreOptions so;
  auto attn = [&](const peal::PositionsND& a, const peal::PositionsND& b,
                  const std::vector<double>& l, TensorView<double> x, TensorView<double> y,
                  TensorView<double> z, const peal::AttentionOptions& o,
                  peal::AttentionGradients<double> g) {
    peal::attention_backward(e, Q, a, K, b, V, O, l, DO, x, y, z, o, g);
  };
  // scores_backward in float storage (as the tests above run it).
  const std::vector<float> qf(q.begin(), q.end()), kf(k.begin(), k.end()),
      dsf(ds.begin(), ds.end());
  const TensorView<const float> Qf(qf.data(), nq, H, d), Kf(kf.data(), nk, H, d),
      DS(dsf.data(), H, nq, nk);
  auto scr = [&](const peal::PositionsND& a, TensorView<const float> s, TensorView<double> x,
                 const peal::ScoreOptions& o, peal::ScoresGradients<double> g) {
    peal::scores_backward(e, Qf, a, Kf, PK, s, x, dK, o, g);
  };
  const peal::AttentionGradients<double> all{&gp, &gt, &gs, nullptr, nullptr};
  // The valid calls run (their results are not checked here).
  {
    auto a1 = dq, a2 = dk, a3 = dv;
    auto g1 = gp, g2 = gt, g3 = gs;
    peal::attention_backward(e, Q, PQ, K, PK, V, O, lse, DO,
                             TensorView<double>(a1.data(), nq, H, d),
                             TensorView<double>(a2.data(), nk, H, d),
                             TensorView<double>(a3.data(), nk, H, d), ao, {&g1, &g2, &g3});
  }
  std::vector<double> short_t(nq, 0.0), nan_p = pq;
  nan_p[4] = std::nan("");
  const std::vector<double> lse_short(nq, 1.0);
  std::vector<double> far = pk;
  far[9] = 1e5;  // spread too far for the decay
  peal::AttentionOptions alibi, ke, sinks;
  alibi.alibi_slopes = {0.1, 0.2};
  ke.keys_encoded = true;  // with decay: refused
  peal::ScoreOptions decay;
  decay.decay = {0.9, 0.9};
  std::vector<double> sink_g(H, 0.0);
  CHECK_THROWS_WITH(attn(PQ, PK, lse_short, dQ, dK, dV, ao, all), Contains("lse has"));
  CHECK_THROWS_WITH(attn(PQ, PK, lse, dQ, dK, dV, ao, {&gp, &short_t, &gs}),
                    Contains("query point"));
  CHECK_THROWS_WITH(attn(peal::PositionsND(nan_p, D), PK, lse, dQ, dK, dV, ao, all),
                    Contains("finite"));
  CHECK_THROWS_WITH(attn(PQ, peal::PositionsND(far, D), lse, dQ, dK, dV, ao, all),
                    Contains("spread too far"));
  CHECK_THROWS_WITH(attn(PQ, PK, lse, dQ, dK, dV, alibi, all), Contains("ALiBi"));
  CHECK_THROWS_WITH(attn(PQ, PK, lse, dQ, dK, dV, ke, all), Contains("keys_encoded"));
  CHECK_THROWS_WITH(attn(PQ, PK, lse, dQ, dK, dV, ao, {&gp, &gt, &gs, nullptr, &sink_g}),
                    Contains("sink"));
  CHECK_THROWS_WITH(attn(peal::PositionsND(pk, D), PK, lse, dQ, dK, dV, ao, all),
                    Contains("positions for"));
  CHECK_THROWS_WITH(
      attn(peal::PositionsND(std::vector<double>(nq * 2, 0.0), 2), PK, lse, dQ, dK, dV, ao, all),
      Contains("axes"));
  // Gradient views over an input or over each other.
  CHECK_THROWS_WITH(attn(PQ, PK, lse, TensorView<double>(dv.data(), nq, H, d), dK, dV, ao, all),
                    Contains("overlaps"));
  CHECK_THROWS_WITH(attn(PQ, PK, lse, dQ, dK, TensorView<double>(dk.data(), nk, H, d), ao, all),
                    Contains("dv overlaps dk"));
  CHECK_THROWS_WITH(attn(PQ, PK, lse, TensorView<double>(const_cast<double*>(q.data()), nq, H, d),
                         dK, dV, ao, all),
                    Contains("dq overlaps q"));
  // scores_backward
  CHECK_THROWS_WITH(scr(PQ, TensorView<const float>(dsf.data(), H, nq, nk - 1), dQ, so, {&gp}),
                    Contains("d_scores is"));
  CHECK_THROWS_WITH(scr(PQ, DS, dQ, decay, {&gp}), Contains("decays need scalar positions"));
  std::vector<double> gp_short(3, 0.0);
  CHECK_THROWS_WITH(scr(PQ, DS, dQ, so, {&gp_short}), Contains("parameter gradient"));
  CHECK_THROWS_WITH(scr(peal::PositionsND(nan_p, D), DS, dQ, so, {&gp}), Contains("finite"));
  CHECK_THROWS_WITH(scr(PQ, DS, TensorView<double>(dk.data(), nq, H, d), so, {&gp}),
                    Contains("overlaps dk"));
  // Per head: every head's points and the whole views before head 0 writes.
  const PH<double> ph = heads_of(Kind::damped, 2);
  std::vector<double> gph(std::size_t(peal::parameter_count(ph)), 0.0);
  CHECK_THROWS_WITH(peal::attention_backward(ph, Q, PQ, K, peal::PositionsND(far, D), V, O, lse, DO,
                                             dQ, dK, dV, ao, {&gph, &gt, &gs}),
                    Contains("spread too far"));
  CHECK_THROWS_WITH(peal::scores_backward(ph, Qf, PQ, Kf, PK, DS, dQ, dK, so, {&gp, &gt, &gs}),
                    Contains("parameter gradient"));
  const PH<double> ph3 = heads_of(Kind::damped, 3);
  CHECK_THROWS_WITH(peal::scores_backward(ph3, Qf, PQ, Kf, PK, DS, dQ, dK, so),
                    Contains("per-head encoding 3"));
  CHECK(dq == dq0);
  CHECK(dk == dk0);
  CHECK(dv == dv0);
  CHECK(gp == std::vector<double>(gp.size(), 0.0));
  CHECK(gph == std::vector<double>(gph.size(), 0.0));
  CHECK(gt == std::vector<double>(gt.size(), 0.0));
  CHECK(gs == std::vector<double>(gs.size(), 0.0));
  CHECK(sink_g == std::vector<double>(sink_g.size(), 0.0));
}
