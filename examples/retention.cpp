// A RetNet-style retention layer (Sun et al. 2023, "Retentive Network") on irregular
// timestamps: peal::linear_attention over a prompt, then decoding with peal::LinearState.
//
//   o_i[h] = scale sum_{s_j <= t_i} gamma_h^(t_i - s_j) (q_i^T A(t_i - s_j) k_j) v_j
//
// with A the RetNet rotation (peal::retnet_rotation: theta_shift's angles, interleaved pairs)
// and gamma_h = 1 - 2^(-5-h) (peal::retnet_decays), 4 heads of head_dim 64, random q, k, v
// (fixed seed). Real times work because the layer only ever uses the lag t_i - s_j:
//   1. the prompt (48 tokens, gaps uniform in [0.1, 3]) in the parallel form, with a
//      LinearState that keeps the state after the last prompt key, and in the chunkwise and
//      recurrent forms (all three equal when normalization = none);
//   2. 16 generated tokens at later irregular times, one step() each;
//   3. normalization = retnet (microsoft/torchscale's), at torchscale's integer positions
//      0..n-1: its parallel and recurrent forms differ only by a per-row scale (the abs-sum
//      clamp N_i of parallel_forward), which the group norm (RMSNorm per head) removes.
// Every output is checked against the formula above summed pair by pair in long double (with
// torchscale's normalisations in part 3), from the raw q, k. The example exits non-zero if an
// error exceeds the tolerance stated below.
//
// torchscale's normalisations are defined for integer positions (peal::LinearNorm in
// include/peal/linear_options.hpp; the formulas: tests/reference/retnet_torchscale.hpp and
// docs/presets.md §10), hence normalization = none in 1-2.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <exception>
#include <limits>
#include <peal/peal.hpp>  // linear_attention.hpp, linear_state.hpp, retnet.hpp
#include <random>
#include <vector>

namespace {

using peal::Index;
using LD = long double;

constexpr Index H = 4, d = 64, dv = 64;

// Tolerance, relative to the magnitude M_i[e] = scale sum_j gamma^lag |q_i| |k_j| |v_j[e]| of
// the output element (each score a d-term dot product in float, summed over ~n terms or carried
// through ~n state updates: ~(d + n) eps_float M ~ 1.5e-5 M for n ~ 64); 1e-4 leaves a margin
// and is far below what a wrong time gives (decoding at the token's index instead of its time:
// O(1), shown in part 2).
constexpr double kTol = 1e-4;

struct Tokens {
  Index n;
  std::vector<float> q, k, v;  // [n, H, d], [n, H, d], [n, H, dv]
  std::vector<double> t;       // times, non-decreasing
  peal::TensorView<const float> Q(Index i0, Index m) const {
    return {q.data() + i0 * H * d, m, H, d};
  }
  peal::TensorView<const float> K(Index i0, Index m) const {
    return {k.data() + i0 * H * d, m, H, d};
  }
  peal::TensorView<const float> V(Index i0, Index m) const {
    return {v.data() + i0 * H * dv, m, H, dv};
  }
};

Tokens random_tokens(Index n, std::mt19937& rng) {
  std::normal_distribution<float> N;
  Tokens x{n, {}, {}, {}, {}};
  for (Index i = 0; i < n * H * d; ++i) x.q.push_back(N(rng));
  for (Index i = 0; i < n * H * d; ++i) x.k.push_back(N(rng));
  for (Index i = 0; i < n * H * dv; ++i) x.v.push_back(N(rng));
  return x;
}

// The naive sum for token i, head h, over the keys j < nk with s_j <= t_i, in long double:
// q^T A(tau) k per pair is (q0 k0 + q1 k1) cos(w tau) + (q0 k1 - q1 k0) sin(w tau) (A(tau) =
// R(-w tau), RotationBlock's convention). norm = retnet divides by sqrt(sum_j gamma^lag)
// (the row normalisation of torchscale's decay mask) and returns the row's abs sum in *abs_sum.
struct Naive {
  std::vector<LD> o, mag;
  LD abs_sum = 0;
};
Naive naive(const Tokens& x, Index i, Index h, Index nk, bool retnet_norm) {
  static const std::vector<long double> w = peal::retnet_angles(int(d));
  const LD gamma = 1.0L - std::exp2(-5.0L - LD(h)), scale = 1.0L / std::sqrt(LD(d));
  Naive r{std::vector<LD>(dv, 0.0L), std::vector<LD>(dv, 0.0L), 0};
  const float* q = x.q.data() + (i * H + h) * d;
  LD qn = 0, mask_sum = 0;
  for (Index l = 0; l < d; ++l) qn += LD(q[l]) * q[l];
  std::vector<LD> score, bound;
  for (Index j = 0; j < nk; ++j) {
    if (x.t[std::size_t(j)] > x.t[std::size_t(i)]) break;
    const LD tau = LD(x.t[std::size_t(i)]) - LD(x.t[std::size_t(j)]);
    const float* k = x.k.data() + (j * H + h) * d;
    LD s = 0, kn = 0;
    for (Index m = 0; m < d / 2; ++m) {
      const LD q0 = q[2 * m], q1 = q[2 * m + 1], k0 = k[2 * m], k1 = k[2 * m + 1];
      s += (q0 * k0 + q1 * k1) * std::cos(w[std::size_t(m)] * tau) +
           (q0 * k1 - q1 * k0) * std::sin(w[std::size_t(m)] * tau);
      kn += k0 * k0 + k1 * k1;
    }
    const LD g = std::pow(gamma, tau);
    mask_sum += g;
    score.push_back(scale * g * s);
    bound.push_back(scale * g * std::sqrt(qn * kn));
  }
  const LD norm = retnet_norm ? std::sqrt(mask_sum) : 1.0L;
  for (std::size_t j = 0; j < score.size(); ++j) {
    r.abs_sum += std::fabs(score[j] / norm);
    const float* v = x.v.data() + (Index(j) * H + h) * dv;
    for (Index e = 0; e < dv; ++e) {
      r.o[std::size_t(e)] += score[j] / norm * v[e];
      r.mag[std::size_t(e)] += bound[j] / norm * std::fabs(v[e]);
    }
  }
  return r;
}

// max over rows [i0, i0 + m) (out holds them from its row 0), heads, elements of
// |out - naive| / M, divided by `divisor(i, h)` on the peal side's behalf (1: none).
template <class Div>
double max_error(const Tokens& x, const std::vector<float>& out, Index i0, Index m,
                 Index nk_of_row0, bool retnet_norm, Div divisor) {
  double worst = 0;
  for (Index r = 0; r < m; ++r)
    for (Index h = 0; h < H; ++h) {
      const Index i = i0 + r;
      const Naive want = naive(x, i, h, std::max(nk_of_row0, i + 1), retnet_norm);
      const LD D = divisor(want);
      for (Index e = 0; e < dv; ++e) {
        const LD got = out[std::size_t((r * H + h) * dv + e)];
        const LD err = std::fabs(got - want.o[std::size_t(e)] / D) / (want.mag[std::size_t(e)] / D);
        worst = std::max(worst, std::isfinite(double(err)) ? double(err) : INFINITY);
      }
    }
  return worst;
}
LD no_divisor(const Naive&) { return 1; }
void report(const char* what, double err) { std::printf("%-48s max error %.2e\n", what, err); }
// parallel_forward's clamp of the abs row sum (torchscale multiscale_retention.py).
LD torchscale_clamp(const Naive& r) { return std::min(std::max(r.abs_sum, 1.0L), 5e4L); }

}  // namespace

int main() {
  try {
    const auto enc = peal::retnet_rotation<double>(int(d));
    std::printf("RetNet retention: %td heads, head_dim %td, decays", H, d);
    for (double g : peal::retnet_decays(int(H))) std::printf(" %.6f", g);
    std::printf("\n");

    // ---- 1. Prompt at irregular times, and the tokens generated after it.
    const Index prompt = 48, gen = 16, n = prompt + gen;
    std::mt19937 rng(2026);
    Tokens x = random_tokens(n, rng);
    std::uniform_real_distribution<double> gap(0.1, 3.0);
    double time = 0;
    for (Index i = 0; i < n; ++i) x.t.push_back(i == 0 ? 0.0 : (time += gap(rng)));
    std::printf("prompt: %td tokens at times 0 .. %.2f; %td generated at %.2f .. %.2f\n", prompt,
                x.t[prompt - 1], gen, x.t[prompt], x.t[n - 1]);

    peal::LinearAttentionOptions opt;
    opt.scale = 1.0 / std::sqrt(double(d));
    opt.decay = peal::retnet_decays(int(H));
    opt.form = peal::LinearForm::parallel;
    peal::LinearState<peal::Bank<peal::RotationBlock<double>>, float> state(enc, H, H, dv, opt);
    const peal::Positions tp(x.t.data(), prompt);
    std::vector<float> out(std::size_t(prompt * H * dv));
    peal::linear_attention(enc, x.Q(0, prompt), tp, x.K(0, prompt), tp, x.V(0, prompt),
                           peal::TensorView<float>(out.data(), prompt, H, dv), opt, state);
    double worst = max_error(x, out, 0, prompt, 0, false, no_divisor);
    report("parallel form over the prompt (state kept):", worst);
    for (auto form : {peal::LinearForm::chunkwise, peal::LinearForm::recurrent}) {
      peal::LinearAttentionOptions o = opt;
      o.form = form;
      o.chunk = 16;
      peal::linear_attention(enc, x.Q(0, prompt), tp, x.K(0, prompt), tp, x.V(0, prompt),
                             peal::TensorView<float>(out.data(), prompt, H, dv), o);
      const double e = max_error(x, out, 0, prompt, 0, false, no_divisor);
      report(form == peal::LinearForm::chunkwise ? "chunkwise form (16 keys per chunk):"
                                                 : "recurrent form:",
             e);
      worst = std::max(worst, e);
    }

    // ---- 2. Decoding: one step() per generated token, at its (irregular) time.
    std::vector<float> dec(std::size_t(gen * H * dv)), bad(dec.size());
    // The same prefill into a second state, decoded at unit steps after the prompt instead of
    // the tokens' times (what forgetting the timestamps does).
    peal::LinearState<peal::Bank<peal::RotationBlock<double>>, float> wrong_state(enc, H, H, dv,
                                                                                  opt);
    peal::linear_attention(enc, x.Q(0, prompt), tp, x.K(0, prompt), tp, x.V(0, prompt),
                           peal::TensorView<float>(out.data(), prompt, H, dv), opt, wrong_state);
    for (Index i = prompt; i < n; ++i) {
      float* o = dec.data() + (i - prompt) * H * dv;
      state.step(x.K(i, 1), x.V(i, 1), x.Q(i, 1), x.t[std::size_t(i)],
                 peal::TensorView<float>(o, 1, H, dv));
      wrong_state.step(x.K(i, 1), x.V(i, 1), x.Q(i, 1), x.t[prompt - 1] + double(i - prompt + 1),
                       peal::TensorView<float>(bad.data() + (i - prompt) * H * dv, 1, H, dv));
    }
    const double e_dec = max_error(x, dec, prompt, gen, 0, false, no_divisor);
    const double e_bad = max_error(x, bad, prompt, gen, 0, false, no_divisor);
    report("decode, one step() per generated token:", e_dec);
    report("  (decoded at unit steps instead of the times)", e_bad);
    worst = std::max(worst, e_dec);

    // ---- 3. torchscale's normalisation at integer positions 0..n-1: parallel_forward divides
    // row i by N_i = clamp(sum_j |w_ij|, 1, 5e4), recurrent_forward does not (both divide the
    // decay mask row by sqrt(sum_j gamma^(i-j))). So recurrent = N_i parallel, per row.
    const Index m = 32;
    Tokens y = x;
    for (Index i = 0; i < n; ++i) y.t[std::size_t(i)] = double(i);
    const peal::Positions ti(y.t.data(), m);
    peal::LinearAttentionOptions rn = opt;
    rn.normalization = peal::LinearNorm::retnet;
    std::vector<float> par(std::size_t(m * H * dv)), rec(par.size());
    rn.form = peal::LinearForm::parallel;
    peal::linear_attention(enc, y.Q(0, m), ti, y.K(0, m), ti, y.V(0, m),
                           peal::TensorView<float>(par.data(), m, H, dv), rn);
    rn.form = peal::LinearForm::recurrent;
    peal::linear_attention(enc, y.Q(0, m), ti, y.K(0, m), ti, y.V(0, m),
                           peal::TensorView<float>(rec.data(), m, H, dv), rn);
    const double e_par = max_error(y, par, 0, m, 0, true, torchscale_clamp);
    const double e_rec = max_error(y, rec, 0, m, 0, true, no_divisor);
    // The per-row ratio recurrent / parallel against N_i, and the group-normed rows
    // (RMSNorm without eps or weights) against each other.
    double ratio_err = 0, gn_err = 0, n_min = INFINITY, n_max = 0;
    for (Index i = 0; i < m; ++i)
      for (Index h = 0; h < H; ++h) {
        const LD N = torchscale_clamp(naive(y, i, h, i + 1, true));
        n_min = std::min(n_min, double(N));
        n_max = std::max(n_max, double(N));
        const float* p = par.data() + (i * H + h) * dv;
        const float* r = rec.data() + (i * H + h) * dv;
        LD pp = 0, rr = 0, pr = 0;
        for (Index e = 0; e < dv; ++e)
          pp += LD(p[e]) * p[e], rr += LD(r[e]) * r[e], pr += LD(p[e]) * r[e];
        ratio_err = std::max(ratio_err, double(std::fabs(pr / pp / N - 1)));  // least-squares ratio
        const LD sp = std::sqrt(pp / dv), sr = std::sqrt(rr / dv);
        for (Index e = 0; e < dv; ++e)
          gn_err = std::max(gn_err, double(std::fabs(p[e] / sp - r[e] / sr)));
      }
    std::printf("normalization = retnet at positions 0..%td:\n", m - 1);
    report("  parallel against the naive sum / N_i:", e_par);
    report("  recurrent against the naive sum:", e_rec);
    std::printf(
        "  recurrent / parallel = N_i per row (N_i in [%.3g, %.3g]): max |ratio/N_i - 1| = %.2e\n",
        n_min, n_max, ratio_err);
    std::printf("  after the group norm (RMS per head row) they agree: max |diff| = %.2e\n",
                gn_err);
    worst = std::max({worst, e_par, e_rec, ratio_err, gn_err});

    std::printf("max error %.2e (tolerance %.1e)\n", worst, kTol);
    if (!(worst <= kTol) || !(e_bad > kTol) || !(n_max > 1 + kTol)) {
      std::fprintf(stderr, "retention: error above tolerance (or a check that cannot fail)\n");
      return 1;
    }
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "retention: %s\n", e.what());
    return 1;
  }
}
