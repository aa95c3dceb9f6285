// Tests of include/peal/linear_state_backward.hpp: the backward of LinearState::step and of
// linear_attention(..., state), for truncated backpropagation through time.
//  - One step from a state of earlier keys, against a fourth-order central difference of the
//    long double loss L = Σ dO · out + Σ_σ ⟨D_σ, M'_σ⟩ (out and M' by the formula of the step
//    with the twin's A(Δ), the state M read back by LinearState::matrix): every parameter, every
//    decay and every entry of q, k, v and the state before.
//  - A chain of T steps backwards (d_state_in of a step is d_state of the one before) against the
//    per-pair reference of tests/scores_backward_check.hpp (dS = dO · v on the visible pairs, dv
//    formed per pair) and against linear_attention_backward (recurrent form) over the same
//    tokens; 1 and 2 threads bitwise equal. Likewise two calls continuing a state.
//  - Bad input throws before anything is written.
// Tolerances (tests/tolerances.hpp), each relative to the magnitudes of the terms a result sums:
//  - against the reference: the scores backward's (gradient_tolerance, as
//    tests/test_linear_attention_backward.cpp) plus the states' rounding over the chain: the
//    forward's state goes through T transports of d-term products and the backward's adjoint
//    through T more, Tol<double>::matrix_chain(T, d) each, and the dv-term products of dS = dO · v;
//  - chain against linear_attention_backward: the sum of both bounds (each against the
//    reference), twice;
//  - central differences: the backward's rounding in double, Tol<double>::roundings over its
//    passes (four encode passes of d-term products, the dv-term products, the exponentials, a
//    basis change's 2 (d + 1) terms) plus the phase of |X| Δ, relative to the terms' magnitudes
//    (the loss with every factor replaced by its absolute value: for a variable x the loss is
//    linear in, its coefficient of |x|; for a parameter, (1 + |Δ|) κ² times that loss; for a
//    decay, |Δ| / γ times it); the stencil's own error: rounding 1.5 ε_long L_abs / h and the
//    truncation estimated by Richardson, |D(h) − D(2h)| / 15, taken twice
//    (Tol::derivative_tol's model).
#include <algorithm>
#include <catch2/catch.hpp>
#include <peal/linear_state_backward.hpp>

#include "scores_backward_check.hpp"

using namespace peal_test;
using namespace peal_test::scores_backward_check;

// Named, so that the file may share a unity group with test_linear_attention_backward.cpp.
namespace test_linear_state_backward {
namespace {

template <class T>
TensorView<const T> token(const std::vector<T>& x, int j, int heads, int dim) {
  return TensorView<const T>(x.data() + std::size_t(j) * heads * dim, 1, heads, dim);
}
template <class T>
TensorView<T> token(std::vector<T>& x, int j, int heads, int dim) {
  return TensorView<T>(x.data() + std::size_t(j) * heads * dim, 1, heads, dim);
}

// One sequence: q, k at the steps' times (tq = tk, sorted), values, d_out, decays; the forward
// by LinearState::step, keeping the state before each step.
template <class Fam>
struct StepCase {
  using E = typename Problem<Fam>::E;
  using State = peal::LinearState<E, double>;
  Problem<Fam> pr;
  int d, dvn, Hq, Hk, G, T, P, heads;
  std::vector<double> v, dout, out;
  peal::LinearAttentionOptions opt;
  std::vector<State> before;

  struct Result {
    std::vector<double> dq, dk, dv, gp, gg;
  };

  StepCase(const Shape& sh, Regime regime, std::uint64_t seed, int dv_dim,
           const std::vector<double>& decays, bool same_times = true)
      : pr(Problem<Fam>::make(sh, regime, seed)), dvn(dv_dim) {
    std::sort(pr.tk.begin(), pr.tk.end());
    std::sort(pr.tq.begin(), pr.tq.end());
    if (same_times) pr.tq = pr.tk;
    d = pr.d, Hq = sh.Hq, Hk = sh.Hk, G = Hq / Hk, T = sh.nk, P = peal::parameter_count(pr.enc);
    opt.scale = pr.opt.scale;
    opt.decay = decays;
    pr.opt.decay = decays;
    pr.sh.decay = !decays.empty();
    heads = decays.empty() ? Hk : Hq;
    std::mt19937_64 rng(seed + 100);
    std::uniform_real_distribution<double> u(-1, 1);
    v.resize(std::size_t(sh.nk * Hk * dvn));
    dout.resize(std::size_t(sh.nq * Hq * dvn));
    for (double& x : v) x = u(rng);
    for (double& x : dout) x = u(rng);
    if (same_times) {
      State st(pr.enc, Hq, Hk, dvn, opt);
      out.assign(dout.size(), 0.0);
      for (int j = 0; j < T; ++j) {
        before.push_back(st);
        st.step(token(pr.k, j, Hk, d), token(v, j, Hk, dvn), token(pr.q, j, Hq, d), pr.tk[std::size_t(j)],
                token(out, j, Hq, dvn));
      }
    }
  }

  Result zeros() const {
    return {std::vector<double>(pr.q.size(), 7.0), std::vector<double>(pr.k.size(), 7.0),
            std::vector<double>(v.size(), 7.0), std::vector<double>(std::size_t(P), 0.0),
            std::vector<double>(std::size_t(Hq), 0.0)};
  }

  // The steps backwards, d_state_in of each the d_state of the one before (in place).
  Result chain(int threads) const {
    Result x = zeros();
    std::vector<double> dS(std::size_t(heads * d * dvn), 0.0);
    for (int j = T - 1; j >= 0; --j) {
      const TensorView<double> ds(dS.data(), heads, d, dvn);
      peal::linear_state_step_backward(
          before[std::size_t(j)], token(pr.k, j, Hk, d), token(v, j, Hk, dvn), token(pr.q, j, Hq, d),
          pr.tk[std::size_t(j)], token(dout, j, Hq, dvn),
          j == T - 1 ? TensorView<const double>() : peal::detail::ro(ds), token(x.dk, j, Hk, d),
          token(x.dv, j, Hk, dvn), token(x.dq, j, Hq, d), ds,
          {&x.gp, opt.decay.empty() ? nullptr : &x.gg}, threads);
    }
    return x;
  }

  Result full(peal::LinearForm form) const {
    Result x = zeros();
    auto o = opt;
    o.form = form;
    const int nq = pr.sh.nq;
    peal::linear_attention_backward(
        pr.enc, TensorView<const double>(pr.q.data(), nq, Hq, d), peal::Positions(pr.tq),
        TensorView<const double>(pr.k.data(), T, Hk, d), peal::Positions(pr.tk),
        TensorView<const double>(v.data(), T, Hk, dvn), TensorView<const double>(dout.data(), nq, Hq, dvn),
        TensorView<double>(x.dq.data(), nq, Hq, d), TensorView<double>(x.dk.data(), T, Hk, d),
        TensorView<double>(x.dv.data(), T, Hk, dvn), o,
        {&x.gp, nullptr, nullptr, opt.decay.empty() ? nullptr : &x.gg});
    return x;
  }
};

// The per-pair reference (dS = dO · v on the visible pairs) and dv with its terms' magnitudes.
template <class Fam>
struct Expected {
  Reference r;
  std::vector<LD> dv, mdv;
};
template <class Fam>
Expected<Fam> expected(StepCase<Fam>& c) {
  auto& pr = c.pr;
  const Shape& sh = pr.sh;
  Expected<Fam> x;
  for (int h = 0; h < sh.Hq; ++h)
    for (int i = 0; i < sh.nq; ++i)
      for (int j = 0; j < sh.nk; ++j) {
        LD s = 0;
        for (int e = 0; e < c.dvn; ++e)
          s += LD(c.dout[std::size_t((i * sh.Hq + h) * c.dvn + e)]) *
               LD(c.v[std::size_t((j * sh.Hk + h / c.G) * c.dvn + e)]);
        pr.ds[std::size_t((h * sh.nq + i) * sh.nk + j)] =
            pr.tk[std::size_t(j)] > pr.tq[std::size_t(i)] ? 0.0 : double(s);
      }
  x.r = reference(pr);
  x.dv.assign(c.v.size(), 0), x.mdv.assign(c.v.size(), 0);
  const LD k2 = heads_kappa2(pr.twin, sh.Hq);
  for (int h = 0; h < sh.Hq; ++h)
    for (int i = 0; i < sh.nq; ++i)
      for (int j = 0; j < sh.nk; ++j) {
        const LD t = pr.tq[std::size_t(i)], s = pr.tk[std::size_t(j)], tau = t - s;
        if (s > t) continue;
        const LD gamma = pr.opt.decay.empty() ? 1 : LD(pr.opt.decay[std::size_t(h)]);
        const LD f = LD(pr.opt.scale) * std::pow(gamma, tau);
        const MLD A = pr.twin.A(tau);
        const VLD qv = pr.qrow(i, h), kv = pr.krow(j, h / c.G);
        const LD S = f * qv.dot(A * kv),
                 M = std::abs(f) * qv.cwiseAbs().sum() * max_abs(A) * k2 * kv.cwiseAbs().sum();
        for (int e = 0; e < c.dvn; ++e) {
          const LD o = LD(c.dout[std::size_t((i * sh.Hq + h) * c.dvn + e)]);
          x.dv[std::size_t((j * sh.Hk + h / c.G) * c.dvn + e)] += S * o;
          x.mdv[std::size_t((j * sh.Hk + h / c.G) * c.dvn + e)] += M * std::abs(o);
        }
      }
  return x;
}

template <class Fam>
struct Bounds {
  LD rel, position;
};
// The reference's bound for a chain of T steps (the top of this file).
template <class Fam>
Bounds<Fam> chain_bounds(const StepCase<Fam>& c, int p, bool basis) {
  const GradientTolerance tol = gradient_tolerance<double>(c.pr, p, basis);
  const LD more = Tol<double>::roundings(c.dvn) + 2 * Tol<double>::matrix_chain(c.T, c.d);
  return {tol.rel + more, tol.position + more};
}

template <class Fam>
void check_against(const char* what, const typename StepCase<Fam>::Result& x,
                   const Expected<Fam>& e, const Bounds<Fam>& b, bool decay) {
  INFO(what);
  check_all("dq", x.dq, e.r.dq, e.r.mq, b.rel);
  check_all("dk", x.dk, e.r.dk, e.r.mk, b.rel);
  check_all("dv", x.dv, e.dv, e.mdv, b.rel);
  check_all("parameter", x.gp, e.r.dtheta, e.r.mtheta, b.position);
  if (decay) check_all("decay", x.gg, e.r.dg, e.r.mg, b.rel);
}

inline void check_close(const char* what, const std::vector<double>& a, const std::vector<double>& b,
                        const std::vector<LD>& mag, LD rel) {
  check_all(what, a, std::vector<LD>(b.begin(), b.end()), mag, rel);
}

// T steps backwards against the reference and against linear_attention_backward (recurrent
// form); 1 and 2 threads bitwise equal.
template <class Fam>
void check_chain(const Shape& sh, Regime regime, int p, bool basis, std::uint64_t seed, int dvn,
                 const std::vector<double>& decays) {
  StepCase<Fam> c(sh, regime, seed, dvn, decays);
  INFO(Fam::name << ", " << c.T << " steps over [" << sh.lo << ", " << sh.hi << "], "
                 << (decays.empty() ? "no decays" : "decays"));
  const auto e = expected(c);
  const auto b = chain_bounds(c, p, basis);
  const bool dec = !decays.empty();
  const auto x = c.chain(1);
  check_against("the steps' backward against the reference", x, e, b, dec);
  const auto y = c.full(peal::LinearForm::recurrent);
  const Bounds<Fam> f{2 * (b.rel + b.rel), 2 * (b.position + b.position)};
  check_close("dq against linear_attention_backward", x.dq, y.dq, e.r.mq, f.rel);
  check_close("dk against linear_attention_backward", x.dk, y.dk, e.r.mk, f.rel);
  check_close("dv against linear_attention_backward", x.dv, y.dv, e.mdv, f.rel);
  check_close("parameter against linear_attention_backward", x.gp, y.gp, e.r.mtheta, f.position);
  if (dec) check_close("decay against linear_attention_backward", x.gg, y.gg, e.r.mg, f.rel);
  const auto z = c.chain(2);
  INFO("2 threads against 1");
  CHECK(z.dq == x.dq);
  CHECK(z.dk == x.dk);
  CHECK(z.dv == x.dv);
  CHECK(z.gp == x.gp);
  CHECK(z.gg == x.gg);
}

// Two calls of linear_attention continuing a state (queries and keys at their own times), the
// second's backward giving the first its d_state, against the reference over all tokens. (The
// state between them is built by LinearState::update: the backward needs the state, not the
// first call's outputs.)
template <class Fam>
void check_two_calls(const Shape& sh, Regime regime, int p, bool basis, std::uint64_t seed,
                     int dvn, const std::vector<double>& decays) {
  StepCase<Fam> c(sh, regime, seed, dvn, decays, false);
  using State = typename StepCase<Fam>::State;
  const int nq = sh.nq, nk = sh.nk, Hq = c.Hq, Hk = c.Hk, d = c.d;
  // The cut: keys before the middle key's time go first, queries before it too.
  const double cut = c.pr.tk[std::size_t(nk / 2)];
  const int k1 = int(std::lower_bound(c.pr.tk.begin(), c.pr.tk.end(), cut) - c.pr.tk.begin());
  const int q1 = int(std::lower_bound(c.pr.tq.begin(), c.pr.tq.end(), cut) - c.pr.tq.begin());
  INFO(Fam::name << ", two calls: " << q1 << " + " << nq - q1 << " queries, " << k1 << " + "
                 << nk - k1 << " keys");
  auto o = c.opt;
  o.form = peal::LinearForm::chunkwise;
  o.chunk = 4;
  auto q = [&](int i0, int n) { return TensorView<const double>(c.pr.q.data() + i0 * Hq * d, n, Hq, d); };
  auto k = [&](int j0, int n) { return TensorView<const double>(c.pr.k.data() + j0 * Hk * d, n, Hk, d); };
  auto v = [&](int j0, int n) { return TensorView<const double>(c.v.data() + j0 * Hk * dvn, n, Hk, dvn); };
  auto dO = [&](int i0, int n) {
    return TensorView<const double>(c.dout.data() + i0 * Hq * dvn, n, Hq, dvn);
  };
  const peal::Positions tq1(c.pr.tq.data(), q1), tq2(c.pr.tq.data() + q1, nq - q1),
      tk1(c.pr.tk.data(), k1), tk2(c.pr.tk.data() + k1, nk - k1);
  State s0(c.pr.enc, Hq, Hk, dvn, c.opt);
  State st = s0;  // the state after the first call: its keys (its outputs are not needed)
  for (int j = 0; j < k1; ++j)
    st.update(token(c.pr.k, j, Hk, d), token(c.v, j, Hk, dvn), c.pr.tk[std::size_t(j)]);
  const State s1 = st;
  auto x = c.zeros();
  std::vector<double> dS(std::size_t(c.heads * d * dvn), 5.0);
  const TensorView<double> ds(dS.data(), c.heads, d, dvn);
  const peal::LinearStateGradients<double> g{&x.gp, decays.empty() ? nullptr : &x.gg};
  peal::linear_attention_backward(
      c.pr.enc, q(q1, nq - q1), tq2, k(k1, nk - k1), tk2, v(k1, nk - k1), dO(q1, nq - q1),
      TensorView<double>(x.dq.data() + q1 * Hq * d, nq - q1, Hq, d),
      TensorView<double>(x.dk.data() + k1 * Hk * d, nk - k1, Hk, d),
      TensorView<double>(x.dv.data() + k1 * Hk * dvn, nk - k1, Hk, dvn), o, s1,
      TensorView<const double>(), ds, g);
  peal::linear_attention_backward(c.pr.enc, q(0, q1), tq1, k(0, k1), tk1, v(0, k1), dO(0, q1),
                                  TensorView<double>(x.dq.data(), q1, Hq, d),
                                  TensorView<double>(x.dk.data(), k1, Hk, d),
                                  TensorView<double>(x.dv.data(), k1, Hk, dvn), o, s0,
                                  peal::detail::ro(ds), ds, g);
  CHECK(std::all_of(dS.begin(), dS.end(), [](double y) { return y == 0; }));  // empty: 0
  const auto e = expected(c);
  auto b = chain_bounds(c, p, basis);  // (the chunks' sums: as the chain's states)
  const LD chunks = Tol<double>::roundings(2 * (int(o.chunk) + d + dvn));
  b.rel += chunks, b.position += chunks;
  check_against("two calls against the reference", x, e, b, !decays.empty());
}

// Σ over the state's entries; every factor replaced by its absolute value when `abs`.
struct StepInputs {
  std::vector<LD> theta, gamma, q, k, v, M, dS;
};

// L = Σ_h dO_h · out_h + Σ_σ ⟨D_σ, M'_σ⟩ for step j, M'_σ = γ_σ^Δ A(Δ) M_σ + k vᵀ,
// out_h = scale q_hᵀ M'_σ(h), in long double.
template <class Fam>
LD step_loss(const StepCase<Fam>& c, int j, const StepInputs& in, bool abs) {
  const auto tw = peal::with_parameters(c.pr.twin, in.theta);
  const auto& st = c.before[std::size_t(j)];
  const LD delta = st.empty() ? LD(0) : LD(c.pr.tk[std::size_t(j)]) - LD(st.time());
  MLD A = tw.A(delta);
  if (abs) A = A.cwiseAbs();
  const int d = c.d, dv = c.dvn;
  auto a = [&](LD x) { return abs ? std::abs(x) : x; };
  LD L = 0;
  for (int s = 0; s < c.heads; ++s) {
    const int kh = c.heads == c.Hq ? s / c.G : s;
    const LD g = c.opt.decay.empty() ? 1 : std::pow(in.gamma[std::size_t(s)], delta);
    MLD M(d, dv), Mo(d, dv);
    for (int i = 0; i < d; ++i)
      for (int e = 0; e < dv; ++e) M(i, e) = a(in.M[std::size_t((s * d + i) * dv + e)]);
    Mo = g * (A * M);
    for (int i = 0; i < d; ++i)
      for (int e = 0; e < dv; ++e)
        Mo(i, e) += a(in.k[std::size_t(kh * d + i)]) * a(in.v[std::size_t(kh * dv + e)]);
    for (int i = 0; i < d; ++i)
      for (int e = 0; e < dv; ++e) L += a(in.dS[std::size_t((s * d + i) * dv + e)]) * Mo(i, e);
    const int h0 = c.heads == c.Hq ? s : s * c.G, R = c.heads == c.Hq ? 1 : c.G;
    for (int h = h0; h < h0 + R; ++h)
      for (int e = 0; e < dv; ++e) {
        LD o = 0;
        for (int i = 0; i < d; ++i) o += a(in.q[std::size_t(h * d + i)]) * Mo(i, e);
        L += a(LD(*c.opt.scale)) * o * a(LD(c.dout[std::size_t((j * c.Hq + h) * dv + e)]));
      }
  }
  return L;
}

// Step j's backward (from the state before it, with a random d_state) against central
// differences of step_loss in every input.
template <class Fam>
void check_step_differences(const Shape& sh, Regime regime, bool basis, std::uint64_t seed,
                            int dvn, const std::vector<double>& decays, int j) {
  StepCase<Fam> c(sh, regime, seed, dvn, decays);
  const auto& st = c.before[std::size_t(j)];
  const int d = c.d, Hq = c.Hq, Hk = c.Hk, heads = c.heads;
  INFO(Fam::name << ", step " << j << " at " << c.pr.tk[std::size_t(j)] << " from a state at "
                 << st.time() << (st.empty() ? " (empty)" : ""));
  StepInputs in;
  in.theta = peal::parameters(c.pr.twin).values;
  in.gamma.assign(decays.begin(), decays.end());
  for (int x = 0; x < Hq * d; ++x) in.q.push_back(LD(c.pr.q[std::size_t(j * Hq * d + x)]));
  for (int x = 0; x < Hk * d; ++x) in.k.push_back(LD(c.pr.k[std::size_t(j * Hk * d + x)]));
  for (int x = 0; x < Hk * dvn; ++x) in.v.push_back(LD(c.v[std::size_t(j * Hk * dvn + x)]));
  for (int s = 0; s < heads; ++s) {
    const auto M = st.matrix(s);
    for (int i = 0; i < d; ++i)
      for (int e = 0; e < dvn; ++e) in.M.push_back(LD(M(i, e)));
  }
  std::mt19937_64 rng(seed + 7);
  std::uniform_real_distribution<double> u(-1, 1);
  std::vector<double> dS(std::size_t(heads * d * dvn)), dSin(dS.size(), 7.0);
  for (double& x : dS) x = u(rng), in.dS.push_back(LD(x));
  // The forward step against the formula: out and M' (the loss's two parts).
  {
    auto s2 = st;
    std::vector<double> out(std::size_t(Hq * dvn));
    s2.step(token(c.pr.k, j, Hk, d), token(c.v, j, Hk, dvn), token(c.pr.q, j, Hq, d),
            c.pr.tk[std::size_t(j)], TensorView<double>(out.data(), 1, Hq, dvn));
    LD fwd = 0;
    for (std::size_t x = 0; x < out.size(); ++x)
      fwd += LD(out[x]) * LD(c.dout[std::size_t(j * Hq * dvn) + x]);
    for (int s = 0; s < heads; ++s) {
      const auto M = s2.matrix(s);
      for (int i = 0; i < d; ++i)
        for (int e = 0; e < dvn; ++e) fwd += LD(M(i, e)) * LD(dS[std::size_t((s * d + i) * dvn + e)]);
    }
    const LD Labs = step_loss(c, j, in, true);
    INFO("the forward step against the formula");
    CHECK(std::abs(fwd - step_loss(c, j, in, false)) <=
          (2 * Tol<double>::matrix_chain(j + 1, d) + Tol<double>::roundings(d + dvn)) * Labs *
              kappa2(c.pr.twin));
  }
  std::vector<double> dq(std::size_t(Hq * d), 7.0), dk(std::size_t(Hk * d), 7.0),
      dv(std::size_t(Hk * dvn), 7.0), gp(std::size_t(c.P), 0.0), gg(std::size_t(Hq), 0.0);
  peal::linear_state_step_backward(st, token(c.pr.k, j, Hk, d), token(c.v, j, Hk, dvn),
                                   token(c.pr.q, j, Hq, d), c.pr.tk[std::size_t(j)],
                                   token(c.dout, j, Hq, dvn),
                                   TensorView<const double>(dS.data(), heads, d, dvn),
                                   TensorView<double>(dk.data(), 1, Hk, d),
                                   TensorView<double>(dv.data(), 1, Hk, dvn),
                                   TensorView<double>(dq.data(), 1, Hq, d),
                                   TensorView<double>(dSin.data(), heads, d, dvn),
                                   {&gp, decays.empty() ? nullptr : &gg});
  const LD Labs = step_loss(c, j, in, true);
  const LD delta = st.empty() ? LD(0) : LD(c.pr.tk[std::size_t(j)]) - LD(st.time());
  const LD xn = heads_xmax(c.pr.twin, Hq) * d, k2 = kappa2(c.pr.twin);
  const LD rel = Tol<double>::roundings(4 * (d + 8) + dvn + (basis ? 2 * (d + 1) : 0)) * k2 +
                 Tol<double>::phase(xn * std::abs(delta));
  auto stencil = [&](std::vector<LD>& at, std::size_t idx, LD h) {
    const LD x0 = at[idx];
    LD f[4];
    const LD steps[4] = {-2, -1, 1, 2};
    for (int s = 0; s < 4; ++s) {
      at[idx] = x0 + steps[s] * h;
      f[s] = step_loss(c, j, in, false);
    }
    at[idx] = x0;
    return (f[0] - 8 * f[1] + 8 * f[2] - f[3]) / (12 * h);
  };
  // linear: the loss is linear in the variable (its magnitude: the coefficient of |x| in Labs)
  auto against = [&](const char* what, std::vector<LD>& at, const std::vector<double>& got,
                     bool linear, LD mag_nonlinear) {
    REQUIRE(got.size() == at.size());
    for (std::size_t idx = 0; idx < at.size(); ++idx) {
      const LD h = std::pow(Tol<long double>::eps, 0.2L) * (1 + std::abs(at[idx])) /
                   (linear ? 1 : 1 + std::abs(delta));
      const LD D1 = stencil(at, idx, h), D2 = stencil(at, idx, 2 * h);
      LD mag = mag_nonlinear;
      if (linear) {
        const LD x0 = at[idx];
        at[idx] = std::abs(x0) + 1;
        const LD up = step_loss(c, j, in, true);
        at[idx] = std::abs(x0);
        mag = up - step_loss(c, j, in, true);
        at[idx] = x0;
      }
      const LD bound = rel * mag + 1.5L * Tol<long double>::roundings(4) * Labs / h +
                       2 * std::abs(D1 - D2) / 15;
      INFO(what << "[" << idx << "]: " << got[idx] << " vs " << double(D1) << ", bound " << double(bound));
      CHECK(std::abs(LD(got[idx]) - D1) <= bound);
    }
  };
  against("parameter", in.theta, gp, false, (1 + std::abs(delta)) * k2 * Labs);
  if (!decays.empty()) {
    LD gmin = 1;
    for (double g : decays) gmin = std::min(gmin, LD(g));
    against("decay", in.gamma, gg, false, std::abs(delta) / gmin * Labs);
  }
  against("dq", in.q, dq, true, 0);
  against("dk", in.k, dk, true, 0);
  against("dv", in.v, dv, true, 0);
  if (st.empty()) {
    CHECK(std::all_of(dSin.begin(), dSin.end(), [](double y) { return y == 0; }));
  } else {
    against("d_state_in", in.M, dSin, true, 0);
  }
}



TEST_CASE("linear state step backward: central differences of one step",
          "[linear_state_backward]") {
  // A pure rotation (RoPE's, RetNet's layout) with RetNet's per-head decays, and without; a
  // damped rotation bank (RetNet's decaying encoding); every block type with Jordan chains; its
  // basis change. Steps from a state of earlier keys, and the first (an empty state).
  const std::vector<double> retnet{1 - 1.0 / 32, 1 - 1.0 / 64};
  check_step_differences<RetNetRotationFam>({6, 6, 2, 1, 100, 112, true, false, false}, Regime::Random,
                                      false, 51, 5, retnet, 4);
  check_step_differences<RetNetRotationFam>({6, 6, 4, 2, 1e6, 1e6 + 12, true, false, false},
                                      Regime::Random, false, 52, 3, {}, 5);
  check_step_differences<RetNetFam<1>>({5, 5, 2, 2, 0, 9, true, false, false}, Regime::Random,
                                       false, 53, 4, {0.9, 0.8}, 3);
  check_step_differences<MixedFam>({5, 5, 2, 1, -3, 3, true, false, false}, Regime::Random, false,
                                   54, 3, {0.9, 0.97}, 3);
  check_step_differences<MixedFam>({5, 5, 2, 2, 0, 6, true, false, false}, Regime::Random, false,
                                   55, 2, {}, 0);
  check_step_differences<BasisChangeFam>({5, 5, 2, 1, 0, 6, true, false, false}, Regime::Random,
                                         true, 56, 2, {0.95, 0.85}, 4);
}

// LinearState::relative_rows (the backward's view of a state, without a copy of it) against
// LinearState::matrix: the same numbers read without a basis change (bit for bit: both take W
// in the relative frame, matrix() through unit queries), and with one M̂ᵀ F(0) against M to
// the rounding of a d-term product (F(0) = Pᵀ here, taken from encode_queries at 0); in the
// relative frame (a composition) and after decode steps in the absolute frame (a rotation).
template <class Fam>
void check_relative_rows(const Shape& sh, bool basis, std::uint64_t seed, const std::vector<double>& decays) {
  StepCase<Fam> c(sh, Regime::Random, seed, 3, decays);
  const int d = c.d, dvn = c.dvn;
  std::vector<double> F0(std::size_t(d * d)), unit(std::size_t(d * d), 0.0);
  for (int i = 0; i < d; ++i) unit[std::size_t(i * d + i)] = 1;
  const std::vector<double> at0(std::size_t(d), 0.0);
  peal::encode_queries(c.pr.enc, TensorView<const double>(unit.data(), d, 1, d),
                       TensorView<double>(F0.data(), d, 1, d), peal::Positions(at0));  // row i: F(0) e_i
  for (int j = 0; j < c.T; ++j) {
    const auto& st = c.before[std::size_t(j)];
    CHECK(st.original_coordinates() == !basis);
    for (int s = 0; s < c.heads; ++s) {
      INFO(Fam::name << ", state before step " << j << ", head " << s);
      const auto M = st.matrix(s);
      std::vector<double> hat(std::size_t(dvn * d), 7.0), orig(hat.size(), 7.0);
      st.relative_rows(s, hat.data(), orig.data());
      int bad = 0;
      for (int e = 0; e < dvn; ++e)
        for (int i = 0; i < d; ++i) {
          if (!basis) {
            bad += hat[std::size_t(e * d + i)] != M(i, e);
            bad += orig[std::size_t(e * d + i)] != 7.0;  // not written
            continue;
          }
          LD want = 0, mag = 0;  // Mᵀ = M̂ᵀ F(0), F(0)[r][i] = (F(0) e_i)_r
          for (int r = 0; r < d; ++r) {
            want += LD(hat[std::size_t(e * d + r)]) * LD(F0[std::size_t(i * d + r)]);
            mag += std::abs(LD(hat[std::size_t(e * d + r)]) * LD(F0[std::size_t(i * d + r)]));
          }
          const LD tol = Tol<double>::roundings(2 * d + 2) * mag;
          bad += !(std::abs(LD(orig[std::size_t(e * d + i)]) - want) <= tol);
          bad += !(std::abs(LD(M(i, e)) - want) <= tol);
        }
      CHECK(bad == 0);
    }
  }
}

TEST_CASE("linear state: relative_rows equals matrix() in both frames", "[linear_state_backward]") {
  check_relative_rows<RetNetRotationFam>({6, 6, 2, 1, 100, 112, true, false, false}, false, 91,
                                         {1 - 1.0 / 32, 1 - 1.0 / 64});
  check_relative_rows<MixedFam>({5, 5, 2, 1, -3, 3, true, false, false}, false, 92, {0.9, 0.97});
  check_relative_rows<BasisChangeFam>({5, 5, 2, 1, 0, 6, true, false, false}, true, 93, {});
}

TEST_CASE("linear state step backward: a chain of steps equals the sequence's backward",
          "[linear_state_backward]") {
  const std::vector<double> retnet{1 - 1.0 / 32, 1 - 1.0 / 64, 1 - 1.0 / 128, 1 - 1.0 / 256};
  // RoPE-like near 10^6 with RetNet's decays, grouped-query heads; without decays.
  check_chain<RetNetRotationFam>({24, 24, 4, 2, 1e6, 1e6 + 300, true, false, false}, Regime::Random, 0,
                           false, 61, 6, retnet);
  check_chain<RetNetRotationFam>({20, 20, 2, 2, 0, 40, true, false, false}, Regime::Random, 0, false, 62,
                           5, {});
  // A damped rotation bank; every block type with Jordan chains, with and without decays; its
  // basis change.
  check_chain<RetNetFam<1>>({16, 16, 2, 1, 0, 30, true, false, false}, Regime::Random, 0, false,
                            63, 4, {0.9, 0.95});
  check_chain<MixedFam>({16, 16, 4, 2, 0, 30, true, false, false}, Regime::Random, 2, false, 64, 3,
                        {0.9, 0.95, 0.97, 0.99});
  check_chain<MixedFam>({12, 12, 2, 1, -3, 3, true, false, false}, Regime::Random, 2, false, 65, 5,
                        {});
  check_chain<BasisChangeFam>({10, 10, 2, 1, 0, 20, true, false, false}, Regime::Random, 2, true,
                              66, 3, {0.95, 0.9});
}

TEST_CASE("linear state backward: two calls continuing a state", "[linear_state_backward]") {
  check_two_calls<MixedFam>({14, 17, 4, 2, 0, 30, true, false, false}, Regime::Random, 2, false,
                            71, 3, {0.9, 0.95, 0.97, 0.99});
  check_two_calls<RetNetRotationFam>({18, 15, 2, 1, 1e6, 1e6 + 100, true, false, false}, Regime::Random,
                               0, false, 72, 4, {});
}

TEST_CASE("linear state step backward: bad input", "[linear_state_backward]") {
  StepCase<MixedFam> c({3, 3, 2, 1, 0, 5, true, false, false}, Regime::Random, 81, 2, {0.9, 0.8});
  const int d = c.d, dvn = c.dvn, heads = c.heads;
  const auto& st = c.before[2];
  std::vector<double> dq(std::size_t(2 * d), 7.0), dk(std::size_t(d), 7.0), dv(2, 7.0),
      dS(std::size_t(heads * d * dvn + 1), 0.5), dSin(dS.size(), 7.0), gp(std::size_t(c.P), 0.0),
      gg(2, 0.0), short_gp(std::size_t(c.P + 1), 0.0);
  dSin.pop_back();
  const double s = c.pr.tk[2];
  auto k = token(c.pr.k, 2, 1, d);
  auto v = token(c.v, 2, 1, dvn);
  auto q = token(c.pr.q, 2, 2, d);
  auto dO = token(c.dout, 2, 2, dvn);
  const TensorView<const double> ds(dS.data(), heads, d, dvn);
  const TensorView<double> dqv(dq.data(), 1, 2, d), dkv(dk.data(), 1, 1, d), dvv(dv.data(), 1, 1, dvn),
      dsi(dSin.data(), heads, d, dvn);
  auto call = [&](auto k_, auto v_, auto q_, double s_, auto do_, auto ds_, auto dk_, auto dv_, auto dq_,
                  auto dsi_, peal::LinearStateGradients<double> g) {
    peal::linear_state_step_backward(st, k_, v_, q_, s_, do_, ds_, dk_, dv_, dq_, dsi_, g);
  };
  using Catch::Contains;
  const peal::LinearStateGradients<double> g{&gp, &gg};
  CHECK_THROWS_WITH(call(token(c.pr.k, 0, 1, d - 1), v, q, s, dO, ds, dkv, dvv, dqv, dsi, g),
                    Contains("k is"));
  CHECK_THROWS_WITH(call(k, v, token(c.pr.q, 0, 1, d), s, dO, ds, dkv, dvv, dqv, dsi, g),
                    Contains("q is"));
  CHECK_THROWS_WITH(call(k, v, q, s, token(c.dout, 0, 1, dvn), ds, dkv, dvv, dqv, dsi, g),
                    Contains("d_out is"));
  CHECK_THROWS_WITH(call(k, v, q, s, dO, TensorView<const double>(dS.data(), heads, d - 1, dvn), dkv,
                         dvv, dqv, dsi, g),
                    Contains("d_state is"));
  CHECK_THROWS_WITH(call(k, v, q, s, dO, ds, dkv, dvv, dqv,
                         TensorView<double>(dSin.data(), heads + 1, d, 1), g),
                    Contains("d_state_in is"));
  CHECK_THROWS_WITH(call(k, v, q, s, dO, ds, dkv, dvv, TensorView<double>(dk.data(), 1, 2, d / 2), dsi, g),
                    Contains("dq must have the extents of q"));
  CHECK_THROWS_WITH(call(k, v, q, s, dO, ds, TensorView<double>(dq.data(), 1, 1, d), dvv, dqv, dsi, g),
                    Contains("dk overlaps dq"));
  CHECK_THROWS_WITH(call(k, v, token(c.pr.q, 0, 2, d), s, dO, ds, dkv, dvv, dqv,
                         TensorView<double>(const_cast<double*>(c.pr.q.data()), heads, d, dvn), g),
                    Contains("d_state_in overlaps"));
  CHECK_THROWS_WITH(call(k, v, q, s, dO, ds, dkv, dvv, dqv,
                         TensorView<double>(dS.data() + 1, heads, d, dvn), g),
                    Contains("partly overlaps d_state"));
  CHECK_THROWS_WITH(call(k, v, q, std::nan(""), dO, ds, dkv, dvv, dqv, dsi, g), Contains("finite"));
  CHECK_THROWS_WITH(call(k, v, q, st.time() - 1, dO, ds, dkv, dvv, dqv, dsi, g),
                    Contains("continue in time"));
  CHECK_THROWS_WITH(call(k, v, q, s, dO, ds, dkv, dvv, dqv, dsi, {&short_gp, &gg}),
                    Contains("parameter gradient has"));
  // No decays: no decay gradient; RetNet's normalisation: not differentiated.
  peal::LinearAttentionOptions o;
  o.scale = 0.5;
  peal::LinearState<StepCase<MixedFam>::E, double> plain(c.pr.enc, 2, 1, dvn, o);
  CHECK_THROWS_WITH(peal::linear_state_step_backward(plain, k, v, q, s, dO, TensorView<const double>(),
                                                     dkv, dvv, dqv, TensorView<double>(), {&gp, &gg}),
                    Contains("decay gradient was asked for"));
  o.normalization = peal::LinearNorm::retnet;
  peal::LinearState<StepCase<MixedFam>::E, double> ret(c.pr.enc, 2, 1, dvn, o);
  CHECK_THROWS_WITH(peal::linear_state_step_backward(ret, k, v, q, s, dO, TensorView<const double>(),
                                                     dkv, dvv, dqv, TensorView<double>(), {&gp}),
                    Contains("normalization = retnet"));
  // The overload continuing a state: another encoding's state, other options.
  auto other = c.opt;
  other.decay = {0.5, 0.5};
  CHECK_THROWS_WITH(peal::linear_attention_backward(c.pr.enc, q, peal::Positions(&s, 1), k,
                                                    peal::Positions(&s, 1), v, dO, dqv, dkv, dvv,
                                                    other, st, ds, dsi, g),
                    Contains("another scale, decay or normalization"));
  auto all = [](const std::vector<double>& x, double value) {
    return std::all_of(x.begin(), x.end(), [&](double y) { return y == value; });
  };
  CHECK(all(dq, 7.0));
  CHECK(all(dk, 7.0));
  CHECK(all(dv, 7.0));
  CHECK(all(dSin, 7.0));
  CHECK(all(gp, 0.0));
  CHECK(all(gg, 0.0));
  CHECK(all(dS, 0.5));
}

}  // namespace
}  // namespace test_linear_state_backward
