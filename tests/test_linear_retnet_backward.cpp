// Tests of linear_attention_backward with normalization = retnet
// (include/peal/linear_attention_backward.hpp,
// include/peal/detail/tiled/linear_retnet_backward.hpp, docs/gradients.md §4). The forward's
// three forms are torchscale's (microsoft/torchscale multiscale_retention.py parallel_forward,
// recurrent_forward, chunk_recurrent_forward; retnet.py RetNetRelPos.forward), one row of query
// head h (key head h / G):
//   o_i = Σ_{s_j ≤ t_i} w_ij v_j / D_i,   w_ij = scale γ^(t_i − s_j) σ_ij / sqrt(S_i),
//   S_i = Σ_{j ∈ J_i} γ^(t_i − s_j)   (J_i: the visible keys; chunkwise: those of i's chunk),
// σ_ij = Σ_p e^(a_p τ) (R(ω_p t_i) q_i,p) · (R(ω_p s_j) k_j,p) over the interleaved pairs p (the
// rotation of theta_shift, with the growth a_p of a RotationBlock), and D_i torchscale's divisor
// from .detach()ed tensors: clamp(Σ_j |w_ij|, 1, 5e4) (parallel), 1 (recurrent),
// max(1, Σ_{j ∈ J_i} |w_ij|, K_c) (chunkwise; K_c = max(1, max_e Σ_l |KV_c[l][e]|),
// KV_c = scale / S(B) Σ_{j < j0(c)} γ^(T' − s_j) R(ω s_j) k_j v_jᵀ, T' = s_{j0(c) − 1},
// S(B) = Σ_{l < B} γ^l). The reference below writes these per row in long double, and the loss
// L = Σ dO · o. Checked:
// (1) dq, dk, dv, ∂L/∂γ, ∂L/∂θ (ω, a) and, at real times, ∂L/∂t, ∂L/∂s against central
//     differences of L with every D_i held at its value (torchscale's .detach()) and S_i
//     differentiated, for the three forms, chunks that do not divide the keys, GQA;
// (2) the central differences with D_i recomputed at every point (a backward that did not hold
//     the normaliser) differ from peal's by many times the tolerance: (1) can fail;
// (3) the refusals left are peal::invalid_argument, thrown before anything is written.
// Tolerances (tests/tolerances.hpp): peal's rounding Tol<double>::retnet_gradient relative to each
// result's Σ |terms| (its conditioning cond from the divisors the reference takes), plus the
// difference's own Tol<long double>::difference_rounding and difference_truncation.
#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <peal/linear_attention_backward.hpp>
#include <peal/presets/retnet.hpp>
#include <random>
#include <string>
#include <vector>

#include "kernel_catalogue.hpp"
#include "tolerances.hpp"

namespace retnet_backward_test {  // (a named namespace: this file may share a unity TU)

using LD = long double;
using peal::Index;
using peal::LinearForm;
using peal::Positions;
using peal::TensorView;
using peal_test::Tol;
using Enc = peal::Bank<peal::RotationBlock<double>>;

// One problem: sizes, the form, the inputs (double storage), dO, the encoding's θ (ω then a).
struct Problem {
  Index nq, nk, H, Hk, d, dv;
  LinearForm form;
  Index chunk;  // the forward's chunk (chunkwise)
  Enc enc;
  std::vector<double> t, s, q, k, v, dout, gamma;  // gamma empty: no decays (γ = 1)
  double scale;
  Index G() const { return H / Hk; }
  peal::LinearAttentionOptions options() const {
    peal::LinearAttentionOptions o;
    o.scale = scale;
    o.decay = gamma;
    o.form = form;
    o.chunk = chunk;
    o.normalization = peal::LinearNorm::retnet;
    return o;
  }
};

// Query rows of amplitude 0.05, 3, 3e5 in turn (parallel: divided by 1, by their abs sum, by 5e4;
// chunkwise: by 1 or K_c, K_c, their in-chunk sum), keys in [-1, 1], values in [-20, 20] (K_c > 1
// past the first chunk), dO in [-1, 1]. Integer times 0..n-1 (torchscale's) or irregular ones.
Problem make(Index nq, Index nk, LinearForm form, Index chunk, bool real_times, bool decays,
             bool growth, unsigned seed, Index Hk = 1) {
  const Index H = 2, d = 4, dv = 2;
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> u(-1, 1), gap(0.3, 1.7);
  Enc enc = peal::retnet_rotation<double>(int(d));
  if (growth) {  // a rotation that is not pure: RotationBlock{ω, a}
    std::vector<peal::RotationBlock<double>> blocks;
    for (long double w : peal::retnet_angles(int(d))) blocks.emplace_back(w, -0.03);
    enc = Enc(blocks, peal::Layout::Interleaved);
  }
  Problem p{nq, nk, H, Hk, d, dv, form, chunk, enc, {}, {}, {}, {}, {}, {}, {}, 0.5};
  double a = 0.4, b = 0.1;
  for (Index i = 0; i < nq; ++i) p.t.push_back(real_times ? (a += gap(rng)) : double(i));
  for (Index j = 0; j < nk; ++j) p.s.push_back(real_times ? (b += gap(rng)) : double(j));
  const double amp[3] = {0.05, 3, 3e5};
  for (Index i = 0; i < nq; ++i)
    for (Index x = 0; x < H * d; ++x) p.q.push_back(amp[i % 3] * u(rng));
  for (Index x = 0; x < nk * Hk * d; ++x) p.k.push_back(u(rng));
  for (Index x = 0; x < nk * Hk * dv; ++x) p.v.push_back(20 * u(rng));
  for (Index x = 0; x < nq * H * dv; ++x) p.dout.push_back(u(rng));
  if (decays) p.gamma = peal::retnet_decays(int(H));
  return p;
}

// The variables of L in long double (the central differences move one at a time).
struct Point {
  std::vector<LD> q, k, v, gamma, theta, t, s;
};

// The divisor branches the rows took (each CHECKed to occur).
struct Branches {
  long one = 0, sum = 0, high = 0, cross = 0;
};

// torchscale's forms per row, in long double. Visibility and chunks come from the problem's
// times (masks fixed, as in peal's position gradients); every other quantity from the point.
struct Reference {
  const Problem& pr;
  Index Bc = 1, nc = 1;          // keys per chunk (chunkwise), chunks
  std::vector<Index> chunk_of;   // query i's chunk
  explicit Reference(const Problem& p) : pr(p), chunk_of(std::size_t(p.nq), 0) {
    if (pr.form != LinearForm::chunkwise) return;
    Bc = std::min(pr.chunk, pr.nk);
    nc = 1 + (pr.nk - 1) / Bc;
    for (Index i = 0; i < pr.nq; ++i)
      for (Index c = 1; c < nc; ++c)
        if (pr.s[std::size_t(c * Bc)] <= pr.t[std::size_t(i)]) chunk_of[std::size_t(i)] = c;
  }
  bool visible(Index i, Index j) const { return pr.s[std::size_t(j)] <= pr.t[std::size_t(i)]; }
  Index first(Index i) const {  // the first key of J_i
    return pr.form == LinearForm::chunkwise ? chunk_of[std::size_t(i)] * Bc : 0;
  }
  Point point() const {
    Point x;
    x.q.assign(pr.q.begin(), pr.q.end());
    x.k.assign(pr.k.begin(), pr.k.end());
    x.v.assign(pr.v.begin(), pr.v.end());
    x.gamma.assign(pr.gamma.begin(), pr.gamma.end());
    x.theta = peal::parameters(pr.enc).values;
    x.t.assign(pr.t.begin(), pr.t.end());
    x.s.assign(pr.s.begin(), pr.s.end());
    return x;
  }

  // (R(ω p) x_p)_p over the pairs, x of length d.
  static void rotate(const LD* x, LD p, const std::vector<LD>& theta, LD* y, Index d) {
    for (Index r = 0; r < d / 2; ++r) {
      const LD c = std::cos(theta[std::size_t(r)] * p), s = std::sin(theta[std::size_t(r)] * p);
      y[2 * r] = x[2 * r] * c - x[2 * r + 1] * s;
      y[2 * r + 1] = x[2 * r] * s + x[2 * r + 1] * c;
    }
  }

  // K_c of query head h's chunk c from the rotated keys kr (c = 0: 1); K_abs with |.| inside.
  LD cross_scale(const Point& x, const std::vector<LD>& kr, Index h, Index c, LD* K_abs) const {
    const Index d = pr.d, dv = pr.dv, g = h / pr.G(), end = c * Bc;
    if (K_abs) *K_abs = 0;
    if (c == 0) return 1;
    const LD gam = x.gamma.empty() ? 1 : x.gamma[std::size_t(h)];
    LD SB = 0, pw = 1;
    for (Index l = 0; l < pr.chunk; ++l, pw *= gam) SB += pw;
    LD K = 0;
    for (Index e = 0; e < dv; ++e) {
      LD col = 0, col_abs = 0;
      for (Index l = 0; l < d; ++l) {
        LD m = 0, m_abs = 0;
        for (Index j = 0; j < end; ++j) {
          const LD term = std::pow(gam, x.s[std::size_t(end - 1)] - x.s[std::size_t(j)]) *
                          kr[std::size_t((j * pr.Hk + g) * d + l)] *
                          x.v[std::size_t((j * pr.Hk + g) * dv + e)];
          m += term, m_abs += std::abs(term);
        }
        col += std::abs(LD(pr.scale) * m / SB), col_abs += LD(pr.scale) * m_abs / SB;
      }
      K = std::max(K, col);
      if (K_abs) *K_abs = std::max(*K_abs, col_abs);
    }
    return std::max(K, LD(1));
  }

  // L = Σ dO · o at x, with the divisors `held` (i H + h) or, when null, the point's own (out:
  // the point's, its branches and the divisors' conditioning).
  LD loss(const Point& x, const std::vector<LD>* held, std::vector<LD>* divisors = nullptr,
          Branches* br = nullptr, LD* cond = nullptr) const {
    const Index nq = pr.nq, nk = pr.nk, H = pr.H, d = pr.d, dv = pr.dv, m = d / 2;
    std::vector<LD> qr(x.q.size()), kr(x.k.size());
    for (Index i = 0; i < nq; ++i)
      for (Index h = 0; h < H; ++h)
        rotate(&x.q[std::size_t((i * H + h) * d)], x.t[std::size_t(i)], x.theta,
               &qr[std::size_t((i * H + h) * d)], d);
    for (Index j = 0; j < nk; ++j)
      for (Index g = 0; g < pr.Hk; ++g)
        rotate(&x.k[std::size_t((j * pr.Hk + g) * d)], x.s[std::size_t(j)], x.theta,
               &kr[std::size_t((j * pr.Hk + g) * d)], d);
    if (divisors) divisors->assign(std::size_t(nq * H), 0);
    LD L = 0;
    std::vector<LD> w(static_cast<std::size_t>(nk));
    for (Index h = 0; h < H; ++h) {
      const Index g = h / pr.G();
      const LD gam = x.gamma.empty() ? 1 : x.gamma[std::size_t(h)];
      std::vector<LD> K(static_cast<std::size_t>(nc)), K_abs(K.size());
      for (Index c = 0; pr.form == LinearForm::chunkwise && c < nc; ++c)
        K[std::size_t(c)] = cross_scale(x, kr, h, c, &K_abs[std::size_t(c)]);
      for (Index i = 0; i < nq; ++i) {
        LD S = 0, A = 0, bound = 0;
        for (Index j = first(i); j < nk && visible(i, j); ++j)
          S += std::pow(gam, x.t[std::size_t(i)] - x.s[std::size_t(j)]);
        if (S == 0) continue;  // no key: the row is 0
        const LD* qi = &qr[std::size_t((i * H + h) * d)];
        LD qn = 0;
        for (Index e = 0; e < d; ++e) qn += qi[e] * qi[e];
        for (Index j = 0; j < nk && visible(i, j); ++j) {
          const LD tau = x.t[std::size_t(i)] - x.s[std::size_t(j)];
          const LD* kj = &kr[std::size_t((j * pr.Hk + g) * d)];
          LD sigma = 0, kn = 0;
          for (Index r = 0; r < m; ++r)
            sigma += std::exp(x.theta[std::size_t(m + r)] * tau) *
                     (qi[2 * r] * kj[2 * r] + qi[2 * r + 1] * kj[2 * r + 1]);
          for (Index e = 0; e < d; ++e) kn += kj[e] * kj[e];
          w[std::size_t(j)] = LD(pr.scale) * std::pow(gam, tau) * sigma / std::sqrt(S);
          if (j >= first(i)) {
            A += std::abs(w[std::size_t(j)]);
            bound += LD(pr.scale) * std::pow(gam, tau) * std::sqrt(qn * kn) / std::sqrt(S);
          }
        }
        const std::size_t c = std::size_t(chunk_of[std::size_t(i)]);
        LD D = 1, cd = 0;
        if (pr.form == LinearForm::parallel) {
          D = std::min(std::max(A, LD(1)), LD(5e4));
          if (br) (D == 1 ? br->one : D == A ? br->sum : br->high)++;
          cd = D == A ? bound / A : 0;
        } else if (pr.form == LinearForm::chunkwise) {
          D = std::max(std::max(A, LD(1)), K[c]);
          if (br) (D == 1 ? br->one : D == A ? br->sum : br->cross)++;
          cd = D == 1 ? 0 : D == A ? bound / A : K_abs[c] / K[c];
        }
        if (cond) *cond = std::max(*cond, cd);
        if (held) D = (*held)[std::size_t(i * H + h)];
        if (divisors) (*divisors)[std::size_t(i * H + h)] = D;
        for (Index j = 0; j < nk && visible(i, j); ++j)
          for (Index e = 0; e < dv; ++e)
            L += LD(pr.dout[std::size_t((i * H + h) * dv + e)]) * w[std::size_t(j)] *
                 x.v[std::size_t((j * pr.Hk + g) * dv + e)] / D;
      }
    }
    return L;
  }
};

// Σ |terms| of each gradient (the tolerances' magnitudes), from the bound
// m_ij = |c_i| scale γ^τ |q_i| |k_j| e^(a τ) |dO_i · v_j| of pair (i, j) of head h,
// c_i = 1 / (sqrt(S_i) D_i).
struct Magnitudes {
  std::vector<LD> q, k, v, gamma, theta, t, s;
  LD loss = 0;
  Magnitudes(const Reference& ref, const Point& x, const std::vector<LD>& D) {
    const Problem& pr = ref.pr;
    const Index nq = pr.nq, nk = pr.nk, H = pr.H, d = pr.d, dv = pr.dv, m = d / 2;
    q.assign(x.q.size(), 0), k.assign(x.k.size(), 0), v.assign(x.v.size(), 0);
    gamma.assign(x.gamma.size(), 0), theta.assign(x.theta.size(), 0);
    t.assign(std::size_t(nq), 0), s.assign(std::size_t(nk), 0);
    LD wmax = 0, amax = 0, pmax = 0;
    for (Index r = 0; r < m; ++r)
      wmax = std::max(wmax, std::abs(x.theta[std::size_t(r)])),
      amax = std::max(amax, std::abs(x.theta[std::size_t(m + r)]));
    for (LD p : x.t) pmax = std::max(pmax, std::abs(p));
    for (LD p : x.s) pmax = std::max(pmax, std::abs(p));
    auto norm = [&](const std::vector<LD>& a, Index off) {
      LD n2 = 0;
      for (Index e = 0; e < d; ++e) n2 += a[std::size_t(off + e)] * a[std::size_t(off + e)];
      return std::sqrt(n2);
    };
    for (Index h = 0; h < H; ++h) {
      const Index g = h / pr.G();
      const LD gam = x.gamma.empty() ? 1 : x.gamma[std::size_t(h)], lam = std::abs(std::log(gam));
      for (Index i = 0; i < nq; ++i) {
        LD S = 0, U = 0;
        for (Index j = ref.first(i); j < nk && ref.visible(i, j); ++j) {
          const LD tau = x.t[std::size_t(i)] - x.s[std::size_t(j)];
          S += std::pow(gam, tau), U += tau * std::pow(gam, tau);
        }
        if (S == 0) continue;
        const LD c = 1 / (std::sqrt(S) * D[std::size_t(i * H + h)]);
        const LD qn = norm(x.q, (i * H + h) * d);
        std::vector<LD> mij(std::size_t(nk), 0);
        LD row = 0;
        for (Index j = 0; j < nk && ref.visible(i, j); ++j) {
          const LD tau = x.t[std::size_t(i)] - x.s[std::size_t(j)];
          LD dov = 0;
          for (Index e = 0; e < dv; ++e)
            dov += std::abs(LD(pr.dout[std::size_t((i * H + h) * dv + e)]) *
                            x.v[std::size_t((j * pr.Hk + g) * dv + e)]);
          const LD base = c * LD(pr.scale) * std::pow(gam, tau) * std::exp(amax * std::abs(tau));
          const LD kn = norm(x.k, (j * pr.Hk + g) * d);
          mij[std::size_t(j)] = base * qn * kn * dov;
          row += mij[std::size_t(j)];
          for (Index e = 0; e < d; ++e) {
            q[std::size_t((i * H + h) * d + e)] += base * kn * dov;
            k[std::size_t((j * pr.Hk + g) * d + e)] += base * qn * dov;
          }
          for (Index e = 0; e < dv; ++e)
            v[std::size_t((j * pr.Hk + g) * dv + e)] +=
                base * qn * kn * std::abs(LD(pr.dout[std::size_t((i * H + h) * dv + e)]));
          for (Index r = 0; r < m; ++r)  // ∂/∂ω and ∂/∂a of a pair: |τ| times its term
            theta[std::size_t(r)] += std::abs(tau) * mij[std::size_t(j)],
                theta[std::size_t(m + r)] += std::abs(tau) * mij[std::size_t(j)];
          t[std::size_t(i)] += (lam + wmax + amax) * mij[std::size_t(j)];
          s[std::size_t(j)] += (lam + wmax + amax) * mij[std::size_t(j)];
          if (!gamma.empty()) gamma[std::size_t(h)] += std::abs(tau) / gam * mij[std::size_t(j)];
        }
        loss += row;
        // the mask sum's share: |∂L/∂S_i| <= row / (2 S_i) times |∂S_i|
        if (!gamma.empty()) gamma[std::size_t(h)] += std::abs(U) / (2 * gam * S) * row;
        t[std::size_t(i)] += lam / 2 * row;
        for (Index j = ref.first(i); j < nk && ref.visible(i, j); ++j)
          s[std::size_t(j)] +=
              lam * std::pow(gam, x.t[std::size_t(i)] - x.s[std::size_t(j)]) / (2 * S) * row;
      }
    }
    x_phase = 4 * std::max(wmax + amax, LD(1)) * LD(d) * pmax;
  }
  LD x_phase = 0;  // Tol's x: |X| d times four times the largest |position| (as scores_backward)
};

// peal's gradients of one call.
struct Grads {
  std::vector<double> dq, dk, dv, theta, gamma, t, s;
};
Grads backward(const Problem& pr, const peal::LinearAttentionOptions& opt) {
  Grads g{std::vector<double>(pr.q.size(), 7.0), std::vector<double>(pr.k.size(), 7.0),
          std::vector<double>(pr.v.size(), 7.0),
          std::vector<double>(std::size_t(peal::parameter_count(pr.enc)), 0.0),
          std::vector<double>(pr.gamma.size(), 0.0), std::vector<double>(pr.t.size(), 0.0),
          std::vector<double>(pr.s.size(), 0.0)};
  const peal::LinearAttentionGradients<double> grads{&g.theta, &g.t, &g.s,
                                                     pr.gamma.empty() ? nullptr : &g.gamma};
  peal::linear_attention_backward(
      pr.enc, TensorView<const double>(pr.q.data(), pr.nq, pr.H, pr.d), Positions(pr.t),
      TensorView<const double>(pr.k.data(), pr.nk, pr.Hk, pr.d), Positions(pr.s),
      TensorView<const double>(pr.v.data(), pr.nk, pr.Hk, pr.dv),
      TensorView<const double>(pr.dout.data(), pr.nq, pr.H, pr.dv),
      TensorView<double>(g.dq.data(), pr.nq, pr.H, pr.d),
      TensorView<double>(g.dk.data(), pr.nk, pr.Hk, pr.d),
      TensorView<double>(g.dv.data(), pr.nk, pr.Hk, pr.dv), opt, grads);
  return g;
}

const char* name(LinearForm f) {
  return f == LinearForm::parallel    ? "parallel"
         : f == LinearForm::recurrent ? "recurrent"
                                      : "chunkwise";
}

// Central differences of L (held: the divisors, or null: recomputed at every point).
struct Differences {
  const Reference& ref;
  const std::vector<LD>* held;
  int k_roundings;  // roundings on the path of one term of L (its dot product, powers, sums)
  LD F;             // Σ |terms| of L
  // Two-point, for a coordinate L is affine in (q, k, v with the divisors held); returns D and
  // adds its rounding bound to err.
  LD affine(Point x, std::vector<LD> Point::*var, std::size_t idx, LD& err) const {
    const LD x0 = (x.*var)[idx], h = (std::abs(x0) + 0.0625L) / 16;
    (x.*var)[idx] = x0 + h;
    const LD up = ref.loss(x, held);
    (x.*var)[idx] = x0 - h;
    const LD down = ref.loss(x, held);
    err = Tol<LD>::difference_rounding(h, k_roundings, 2 * F);  // (F at x ± h: within 2 F)
    return (up - down) / (2 * h);
  }
  // Fourth order at steps h and 2h: returns D(h), err = its rounding and truncation bounds.
  LD fourth(Point x, std::vector<LD> Point::*var, std::size_t idx, LD h, LD& err) const {
    const LD x0 = (x.*var)[idx];
    auto D = [&](LD step) {
      LD f[4];
      const LD at[4] = {-2, -1, 1, 2};
      for (int a = 0; a < 4; ++a) {
        (x.*var)[idx] = x0 + at[a] * step;
        f[a] = ref.loss(x, held);
      }
      (x.*var)[idx] = x0;
      return (f[0] - 8 * f[1] + 8 * f[2] - f[3]) / (12 * step);
    };
    const LD d1 = D(h), d2 = D(2 * h);
    err = Tol<LD>::difference_rounding(h, k_roundings, 2 * F) +
          Tol<LD>::difference_truncation(d1, d2);
    return d1;
  }
};

// One problem: peal's gradients against the central differences of the reference with the
// divisors held, and (detach_check) against those with the divisors recomputed.
void check_problem(const Problem& pr, bool positions, bool detach_check = false) {
  INFO(name(pr.form) << " form, " << pr.nq << " queries, " << pr.nk << " keys, chunk " << pr.chunk
                     << (pr.gamma.empty() ? ", no decays" : ", decays"));
  const Reference ref(pr);
  const Point x0 = ref.point();
  std::vector<LD> D;
  Branches br;
  LD cond = 0;
  ref.loss(x0, nullptr, &D, &br, &cond);
  const Magnitudes mag(ref, x0, D);
  const Grads got = backward(pr, pr.options());
  const Index n = std::max(pr.nq, pr.nk), chunk = pr.form == LinearForm::chunkwise ? pr.chunk : n;
  const long N = long(pr.nq * pr.nk * pr.H + pr.dv + 2 * (chunk + pr.d + pr.dv));
  const LD rel = Tol<double>::retnet_gradient(int(pr.d), mag.x_phase, N, long(n), cond);
  const LD rel_position = rel + Tol<double>::derivative(int(pr.d), mag.x_phase / 2);
  const Differences held{ref, &D, int(pr.d + pr.dv + n + 16), mag.loss};
  auto against = [&](const char* what, std::vector<LD> Point::*var, const std::vector<double>& g,
                     const std::vector<LD>& m, LD r, bool affine, LD h) {
    REQUIRE(g.size() == (x0.*var).size());
    for (std::size_t idx = 0; idx < g.size(); ++idx) {
      LD err = 0;
      const LD cd = affine ? held.affine(x0, var, idx, err) : held.fourth(x0, var, idx, h, err);
      INFO(what << "[" << idx << "]: " << g[idx] << " vs " << double(cd) << ", bound "
                << double(r * m[idx] + err));
      CHECK(std::abs(LD(g[idx]) - cd) <= r * m[idx] + err);
    }
  };
  against("dq", &Point::q, got.dq, mag.q, rel, true, 0);
  against("dk", &Point::k, got.dk, mag.k, rel, true, 0);
  against("dv", &Point::v, got.dv, mag.v, rel, true, 0);
  against("decay", &Point::gamma, got.gamma, mag.gamma, rel, false, 0x1p-16L);
  against("parameter", &Point::theta, got.theta, mag.theta, rel_position, false, 0x1p-16L);
  if (positions) {
    against("query position", &Point::t, got.t, mag.t, rel_position, false, 0x1p-12L);
    against("key position", &Point::s, got.s, mag.s, rel_position, false, 0x1p-12L);
  }
  if (!detach_check) return;
  // (2): the divisors recomputed at every point (their derivative taken): on the rows divided by
  // a sum or K_c the result moves by far more than the tolerance.
  const Differences full{ref, nullptr, held.k_roundings, mag.loss};
  LD worst = 0;
  for (auto var : {&Point::q, &Point::k, &Point::v}) {
    const auto& g = var == &Point::q ? got.dq : var == &Point::k ? got.dk : got.dv;
    const auto& m = var == &Point::q ? mag.q : var == &Point::k ? mag.k : mag.v;
    for (std::size_t idx = 0; idx < g.size(); ++idx) {
      LD err = 0;
      const LD cd = full.fourth(x0, var, idx, 0x1p-20L * (1 + std::abs((x0.*var)[idx])), err);
      worst = std::max(worst, std::abs(LD(g[idx]) - cd) / (rel * m[idx] + err));
    }
  }
  INFO("largest |peal − (the normaliser differentiated)| / tolerance: " << double(worst));
  CHECK(worst > 1e3L);
}

TEST_CASE("linear_attention_backward, RetNet normalisation: torchscale's positions",
          "[linear_backward][retnet]") {
  // queries = keys at 0..n-1; chunks of 4 over 11 keys and 5 over 14 (last chunks of 3 and 4)
  Branches par, chk;
  for (LinearForm f : {LinearForm::parallel, LinearForm::recurrent}) {
    const Problem pr = make(9, 9, f, 0, false, true, false, 61);
    check_problem(pr, false, f == LinearForm::parallel);
    const Reference ref(pr);
    if (f == LinearForm::parallel) ref.loss(ref.point(), nullptr, nullptr, &par);
  }
  for (auto [n, chunk] : {std::pair<Index, Index>{11, 4}, {14, 5}}) {
    const Problem pr =
        make(n, n, LinearForm::chunkwise, chunk, false, true, false, 62 + unsigned(n));
    check_problem(pr, false, n == 11);
    const Reference ref(pr);
    ref.loss(ref.point(), nullptr, nullptr, &chk);
  }
  INFO("parallel rows divided by 1, their sum, 5e4: " << par.one << ", " << par.sum << ", "
                                                      << par.high);
  CHECK((par.one > 0 && par.sum > 0 && par.high > 0));
  INFO("chunkwise rows divided by 1, their sum, K_c: " << chk.one << ", " << chk.sum << ", "
                                                       << chk.cross);
  CHECK((chk.one > 0 && chk.sum > 0 && chk.cross > 0));
}

TEST_CASE("linear_attention_backward, RetNet normalisation: real times, growth, no decays",
          "[linear_backward][retnet]") {
  // 9 queries, 10 keys at irregular times: every gradient, positions included; chunks of 3
  // (the last of 1); a rotation with growth a = -0.03 in the parallel and recurrent forms; no
  // decays; two key heads.
  check_problem(make(9, 10, LinearForm::chunkwise, 3, true, true, false, 71), true);
  check_problem(make(9, 10, LinearForm::parallel, 0, true, true, true, 72), true);
  check_problem(make(9, 10, LinearForm::recurrent, 0, true, true, true, 73), true);
  check_problem(make(7, 7, LinearForm::recurrent, 0, true, false, false, 74), true);
  check_problem(make(7, 7, LinearForm::chunkwise, 3, true, false, false, 75), true);
  // one query head per key head (the O(n) backward's key heads on their threads)
  for (LinearForm f : {LinearForm::chunkwise, LinearForm::recurrent})
    check_problem(make(9, 10, f, 4, true, true, false, 76, 2), true);
}

TEST_CASE("linear_attention_backward, RetNet normalisation: what is still refused",
          "[linear_backward][retnet]") {
  Problem pr = make(6, 6, LinearForm::parallel, 0, false, true, false, 81);
  auto refused = [&](const peal::LinearAttentionOptions& opt, const char* says) {
    try {
      (void)backward(pr, opt);
      FAIL("no exception");
    } catch (const peal::invalid_argument& e) {
      INFO(e.what());
      CHECK(std::string(e.what()).find(says) != std::string::npos);
    }
  };
  for (LinearForm f : {LinearForm::parallel, LinearForm::recurrent, LinearForm::chunkwise}) {
    auto opt = pr.options();  // the old refusal ("is not differentiated") is gone
    opt.form = f, opt.chunk = 4;
    CHECK_NOTHROW(backward(pr, opt));
  }
  auto opt = pr.options();
  opt.form = LinearForm::automatic;
  refused(opt, "give the forward's form");
  opt.form = LinearForm::chunkwise;
  opt.chunk = 0;
  refused(opt, "chunk size");
  pr = make(6, 6, LinearForm::chunkwise, 4, false, true, true, 82);
  refused(pr.options(), "pure rotation");
  // nothing written before the throw
  std::vector<double> dq(pr.q.size(), 7.0), dk(pr.k.size(), 7.0), dv(pr.v.size(), 7.0);
  CHECK_THROWS_AS(peal::linear_attention_backward(
                      pr.enc, TensorView<const double>(pr.q.data(), pr.nq, pr.H, pr.d),
                      Positions(pr.t), TensorView<const double>(pr.k.data(), pr.nk, pr.Hk, pr.d),
                      Positions(pr.s), TensorView<const double>(pr.v.data(), pr.nk, pr.Hk, pr.dv),
                      TensorView<const double>(pr.dout.data(), pr.nq, pr.H, pr.dv),
                      TensorView<double>(dq.data(), pr.nq, pr.H, pr.d),
                      TensorView<double>(dk.data(), pr.nk, pr.Hk, pr.d),
                      TensorView<double>(dv.data(), pr.nk, pr.Hk, pr.dv), pr.options()),
                  peal::invalid_argument);
  CHECK(std::all_of(dq.begin(), dq.end(), [](double a) { return a == 7.0; }));
  CHECK(std::all_of(dk.begin(), dk.end(), [](double a) { return a == 7.0; }));
  CHECK(std::all_of(dv.begin(), dv.end(), [](double a) { return a == 7.0; }));
}

}  // namespace retnet_backward_test
