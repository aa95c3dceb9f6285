// peal::linear_attention and peal::LinearState (include/peal/linear_attention.hpp,
// include/peal/linear_state.hpp) with LinearNorm::retnet against torchscale's retention, one
// head at a time (tests/reference/retnet_torchscale.hpp, written from the formulas of
// microsoft/torchscale multiscale_retention.py and retnet.py RetNetRelPos: the parallel,
// recurrent and chunkwise forms with their normalisations, before the group norm). The encoding
// is retnet_rotation (the rotation of theta_shift) with retnet_decays as the per-head decay and
// scale = 1/sqrt(d) (torchscale's k *= key_dim^-0.5), at torchscale's positions 0..n-1.
// Query amplitudes and value amplitudes are chosen so that every branch of every normalisation
// is taken: parallel rows clamped at 1, divided by their abs sum, clamped at 5e4; chunk rows
// divided by 1, by the in-chunk abs sum, by the state's 1-norm K_c (each REQUIREd to occur).
// Tolerance: Tol<C>::linear_retention (tests/tolerances.hpp, derived there), C the arithmetic
// type (float for float, Eigen::half and Eigen::bfloat16 storage, double for double), plus the
// output's rounding to its storage.
#include <catch2/catch.hpp>
#include <cmath>
#include <peal/peal.hpp>  // linear_attention.hpp, linear_state.hpp, retnet.hpp
#include <random>
#include <sstream>
#include <string>
#include <type_traits>
#include <vector>

#include "kernel_catalogue.hpp"
#include "reference/retnet_torchscale.hpp"
#include "tolerances.hpp"

namespace {

using peal::Index;
using peal::LinearAttentionOptions;
using peal::LinearForm;
using peal::LinearNorm;
using peal::Positions;
using peal::TensorView;
using LD = long double;
namespace ts = peal_ref::retnet_ts;

template <class S>
struct Problem {
  Index n, H, Hk, d, dv;
  std::vector<S> q, k, v;  // packed [n, H, d], [n, Hk, d], [n, Hk, dv]
  TensorView<const S> Q(Index i0 = 0, Index m = -1) const {
    return TensorView<const S>(q.data() + i0 * H * d, m < 0 ? n : m, H, d);
  }
  TensorView<const S> K(Index i0 = 0, Index m = -1) const {
    return TensorView<const S>(k.data() + i0 * Hk * d, m < 0 ? n : m, Hk, d);
  }
  TensorView<const S> V(Index i0 = 0, Index m = -1) const {
    return TensorView<const S>(v.data() + i0 * Hk * dv, m < 0 ? n : m, Hk, dv);
  }
};

// q uniform in [-qa, qa], k in [-1, 1], v in [-va, va], rounded to the storage type S.
template <class S>
const char* storage_name() {
  return std::is_same<S, double>::value        ? "double"
         : std::is_same<S, float>::value       ? "float"
         : std::is_same<S, Eigen::half>::value ? "half"
                                               : "bfloat16";
}

template <class S>
Problem<S> make_problem(Index n, Index H, Index Hk, Index d, Index dv, double qa, double va,
                        unsigned seed) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> u(-1, 1);
  Problem<S> p{n, H, Hk, d, dv, {}, {}, {}};
  for (Index i = 0; i < n * H * d; ++i) p.q.push_back(S(qa * u(rng)));
  for (Index i = 0; i < n * Hk * d; ++i) p.k.push_back(S(u(rng)));
  for (Index i = 0; i < n * Hk * dv; ++i) p.v.push_back(S(va * u(rng)));
  return p;
}

std::vector<double> positions(Index i0, Index m) {
  std::vector<double> t;
  for (Index i = 0; i < m; ++i) t.push_back(double(i0 + i));
  return t;
}

// Rows of head h of a packed [n, heads, width] array, in long double.
template <class S>
ts::Rows head_rows(const std::vector<S>& x, Index n, Index heads, Index width, Index h) {
  ts::Rows r(static_cast<std::size_t>(n), std::vector<LD>(static_cast<std::size_t>(width)));
  for (Index i = 0; i < n; ++i)
    for (Index e = 0; e < width; ++e)
      r[std::size_t(i)][std::size_t(e)] = LD(x[std::size_t((i * heads + h) * width + e)]);
  return r;
}

// torchscale's form on query head h (key head h / (H / Hk)).
template <class S>
ts::Result reference(const Problem<S>& p, Index h, LinearForm form, Index chunk) {
  const Index g = h / (p.H / p.Hk);
  const ts::Rows q = head_rows(p.q, p.n, p.H, p.d, h), k = head_rows(p.k, p.n, p.Hk, p.d, g),
                 v = head_rows(p.v, p.n, p.Hk, p.dv, g);
  const LD gamma = 1.0L - std::exp2(-5.0L - LD(h)), scale = 1.0L / std::sqrt(LD(p.d));
  if (form == LinearForm::parallel) return ts::parallel(q, k, v, gamma, scale);
  if (form == LinearForm::recurrent) return ts::recurrent(q, k, v, gamma, scale);
  return ts::chunkwise(q, k, v, gamma, scale, std::size_t(chunk));
}

// torchscale's options: scale = key_dim^-1/2, gamma_h = 1 - 2^(-5-h), its normalisations.
LinearAttentionOptions retnet_options(Index d, Index H, LinearForm form, Index chunk) {
  LinearAttentionOptions opt;
  opt.scale = 1.0 / std::sqrt(double(d));
  opt.decay = peal::retnet_decays(int(H));
  opt.normalization = LinearNorm::retnet;
  opt.form = form;
  opt.chunk = chunk;
  return opt;
}

const char* name(LinearForm f) {
  return f == LinearForm::parallel    ? "parallel"
         : f == LinearForm::recurrent ? "recurrent"
                                      : "chunkwise";
}

// Which branch of the normalisation each reference row took (the test that every one occurs).
struct Branches {
  long par_low = 0, par_sum = 0, par_high = 0, chunk_one = 0, chunk_inner = 0, chunk_cross = 0;
  void count(const ts::Result& r, LinearForm form) {
    for (std::size_t i = 0; i < r.divisor.size(); ++i) {
      const LD D = r.divisor[i];
      if (form == LinearForm::parallel) {
        par_low += D == 1;
        par_high += D == 5e4L;
        par_sum += D > 1 && D < 5e4L;
      } else if (form == LinearForm::chunkwise) {
        chunk_one += D == 1;
        chunk_cross += D > 1 && D == r.cross[i] && D > r.abs_sum[i];
        chunk_inner += D > 1 && D == r.abs_sum[i] && D > r.cross[i];
      }
    }
  }
};

// max over the elements of rows [i0, i0 + m) of |out - ref| / tol (<= 1 passes); the worst
// element is described in `where`.
template <class S>
LD worst_ratio(const Problem<S>& p, const std::vector<S>& out, Index i0, Index m,
               const std::vector<ts::Result>& ref, long n_terms, std::string& where) {
  // Arithmetic type: float for float and the half-like storages, double for double; the
  // output's own rounding to S is eps_t |want|.
  using C = peal::detail::arith_t<S, S>;
  const LD T = peal_test::Tol<C>::linear_retention(int(p.d), n_terms);
  const LD eps_t = peal_test::Tol<S>::stored(), floor_t = peal_test::Tol<S>::underflow();
  LD worst = 0;
  for (Index i = 0; i < m; ++i)
    for (Index h = 0; h < p.H; ++h)
      for (Index e = 0; e < p.dv; ++e) {
        const ts::Result& r = ref[std::size_t(h)];
        const std::size_t row = std::size_t(i0 + i);
        const LD want = r.out[row][std::size_t(e)];
        const LD got = LD(out[std::size_t((i * p.H + h) * p.dv + e)]);
        const LD tol = T * (r.bound[row][std::size_t(e)] + r.cond[row] * std::fabs(want)) +
                       eps_t * std::fabs(want) + floor_t;
        const LD ratio = std::isfinite(got) ? std::fabs(got - want) / tol : LD(INFINITY);
        if (!(ratio <= worst)) {
          worst = ratio;
          std::ostringstream os;
          os.precision(10);
          os << "row " << row << " head " << h << " elem " << e << ": peal " << got << " reference "
             << want << " |diff| " << std::fabs(got - want) << " tol " << tol << " (divisor "
             << r.divisor[row] << ", K_c " << r.cross[row] << ")";
          where = os.str();
        }
      }
  return worst;
}

template <class S>
std::vector<S> run(const Problem<S>& p, LinearForm form, Index chunk) {
  const auto enc = peal::retnet_rotation<double>(int(p.d));
  const LinearAttentionOptions opt = retnet_options(p.d, p.H, form, chunk);
  std::vector<S> out(std::size_t(p.n * p.H * p.dv), S(NAN));
  const std::vector<double> t = positions(0, p.n);
  peal::linear_attention(enc, p.Q(), Positions(t), p.K(), Positions(t), p.V(),
                         TensorView<S>(out.data(), p.n, p.H, p.dv), opt);
  return out;
}

struct Amplitude {
  double q, v;
};
// 1: abs sums < 1 and around 1; 30: every parallel row divided by its sum; 1e6: clamped at 5e4;
// small q with large v: the chunk state's K_c dominates.
const Amplitude amplitudes[] = {{1, 1}, {0.05, 1}, {30, 1}, {1e6, 1}, {0.02, 50}};

template <class S>
void check_forms(Index n, bool parallel_recurrent, const std::vector<Index>& chunks,
                 Branches& seen) {
  for (Index d : {16, 32})
    for (Index H : {2, 3, 4})
      for (const Amplitude& a : amplitudes) {
        // Half-like storage holds |q| <= 65504 (f16): not the 1e6 amplitude.
        if (peal::detail::is_half_like<S> && a.q > 6e4) continue;
        const Index Hk = H == 4 ? 2 : H, dv = d + 8;
        const Problem<S> p = make_problem<S>(n, H, Hk, d, dv, a.q, a.v, unsigned(n * 100 + d + H));
        std::vector<std::pair<LinearForm, Index>> forms;
        if (parallel_recurrent) forms = {{LinearForm::parallel, 0}, {LinearForm::recurrent, 0}};
        for (Index c : chunks) forms.emplace_back(LinearForm::chunkwise, c);
        for (const auto& f : forms) {
          std::vector<ts::Result> ref;
          for (Index h = 0; h < H; ++h) ref.push_back(reference(p, h, f.first, f.second));
          for (const ts::Result& r : ref) seen.count(r, f.first);
          const std::vector<S> out = run(p, f.first, f.second);
          std::string where;
          const LD worst = worst_ratio(p, out, 0, n, ref, long(n), where);
          INFO(name(f.first) << " chunk " << f.second << " n " << n << " d " << d << " H " << H
                             << " Hk " << Hk << " q amplitude " << a.q << " v amplitude " << a.v
                             << " storage " << storage_name<S>() << ": worst "
                             << where);
          CHECK(worst <= 1);
        }
      }
}

// Prefill np tokens in `form` into a LinearState, then step() to n = 100: the prefill rows are
// that form's, the decoded rows the recurrent form's.
template <class S>
void check_prefill_then_decode(S, Index np, LinearForm form, Index chunk, double qa) {
  const Index n = 100, H = 3, d = 16, dv = 24;
  const Problem<S> p = make_problem<S>(n, H, H, d, dv, qa, 1.0, unsigned(np + 7));
  const auto enc = peal::retnet_rotation<double>(int(d));
  const LinearAttentionOptions opt = retnet_options(d, H, form, chunk);
  peal::LinearState<std::decay_t<decltype(enc)>, S> state(enc, H, H, dv, opt);
  std::vector<S> pre(std::size_t(np * H * dv), S(NAN)), dec(std::size_t((n - np) * H * dv), S(NAN));
  const std::vector<double> t = positions(0, np);
  peal::linear_attention(enc, p.Q(0, np), Positions(t), p.K(0, np), Positions(t), p.V(0, np),
                         TensorView<S>(pre.data(), np, H, dv), opt, state);
  for (Index i = np; i < n; ++i)
    state.step(p.K(i, 1), p.V(i, 1), p.Q(i, 1), double(i),
               TensorView<S>(dec.data() + (i - np) * H * dv, 1, H, dv));
  std::vector<ts::Result> rp, rr;
  for (Index h = 0; h < H; ++h) {
    rp.push_back(reference(p, h, form, chunk));
    rr.push_back(reference(p, h, LinearForm::recurrent, 0));
  }
  std::string w1, w2;
  const LD e1 = worst_ratio(p, pre, 0, np, rp, long(np), w1);
  const LD e2 = worst_ratio(p, dec, np, n - np, rr, long(n), w2);
  INFO("prefill " << name(form) << " chunk " << chunk << " np " << np << " q amplitude " << qa
                  << " storage " << storage_name<S>() << ": prefill worst "
                  << w1 << "; decode worst " << w2);
  CHECK(e1 <= 1);
  CHECK(e2 <= 1);
  CHECK(state.time() == double(n - 1));
}

}  // namespace

TEST_CASE("linear retnet: parallel and recurrent forms against torchscale", "[linear][retnet]") {
  Branches seen;
  for (Index n : {1, 7, 64, 130}) {
    check_forms<double>(n, true, {}, seen);
    check_forms<float>(n, true, {}, seen);
  }
  // Every branch of parallel_forward's clamp was taken (else the comparison proves less).
  CHECK(seen.par_low > 0);
  CHECK(seen.par_sum > 0);
  CHECK(seen.par_high > 0);
}

TEST_CASE("linear retnet: chunkwise form against torchscale (chunks dividing n)",
          "[linear][retnet]") {
  Branches seen;
  check_forms<double>(1, false, {1}, seen);
  check_forms<double>(7, false, {1, 7}, seen);
  check_forms<double>(64, false, {16, 64}, seen);
  check_forms<double>(130, false, {13, 65}, seen);
  check_forms<float>(1, false, {1}, seen);
  check_forms<float>(7, false, {7}, seen);
  check_forms<float>(64, false, {16}, seen);
  check_forms<float>(130, false, {13}, seen);
  // Every branch of chunk_recurrent_forward's divisor max(I_i, K_c) was taken.
  CHECK(seen.chunk_one > 0);
  CHECK(seen.chunk_inner > 0);
  CHECK(seen.chunk_cross > 0);
}

TEST_CASE("linear retnet: half-precision storage (f16, bf16) against torchscale",
          "[linear][retnet][half]") {
  // q, k, v and out stored as Eigen::half or Eigen::bfloat16, float arithmetic (a KV cache's
  // storage): the reference reads the stored values, the bound is float's plus the output's
  // rounding to the storage. Every form, a partial last chunk among them.
  Branches seen;
  for (Index n : {7, 64}) {
    check_forms<Eigen::half>(n, true, {n == 7 ? Index(3) : Index(16)}, seen);
    check_forms<Eigen::bfloat16>(n, true, {n == 7 ? Index(7) : Index(5)}, seen);
  }
  CHECK(seen.par_sum > 0);
  CHECK(seen.chunk_inner > 0);
  CHECK(seen.chunk_cross > 0);
}

TEST_CASE("linear retnet: a partial last chunk equals torchscale's zero padding",
          "[linear][retnet]") {
  // torchscale pads to a multiple of the chunk size (RetNetDecoder.forward, F.pad) and drops
  // the padded rows; no factor of a kept row depends on later keys.
  Branches seen;
  check_forms<double>(7, false, {3}, seen);
  check_forms<double>(130, false, {32}, seen);
  check_forms<float>(64, false, {5}, seen);
  CHECK(seen.chunk_cross > 0);
}

TEST_CASE("linear retnet: torchscale's forms differ by a per-row scale only (reference)",
          "[linear][retnet]") {
  // recurrent = N_i parallel (the abs-sum clamp), chunkwise = parallel * sqrt(S(i+1) / S(a+1))
  // * N_i / max(I_i, K_c): the group norm removes these. Checks the reference, and that the
  // forms do differ (so a form computed with another's normalisation fails the test above).
  const Problem<double> p = make_problem<double>(64, 2, 2, 16, 8, 30, 1, 5);
  for (Index h = 0; h < 2; ++h) {
    const ts::Result par = reference(p, h, LinearForm::parallel, 0);
    const ts::Result rec = reference(p, h, LinearForm::recurrent, 0);
    const ts::Result chk = reference(p, h, LinearForm::chunkwise, 16);
    const LD gamma = 1.0L - std::exp2(-5.0L - LD(h));
    LD rel_diff = 0;
    for (std::size_t i = 0; i < 64; ++i) {
      const LD to_chunk =
          std::sqrt(ts::geometric(gamma, long(i) + 1) / ts::geometric(gamma, long(i % 16) + 1)) *
          par.divisor[i] / chk.divisor[i];
      for (std::size_t e = 0; e < 8; ++e) {
        const LD pv = par.out[i][e];
        const LD pb = par.bound[i][e];
        CHECK(std::fabs(rec.out[i][e] - par.divisor[i] * pv) <=
              1e-15L * (rec.bound[i][e] + par.divisor[i] * pb));
        CHECK(std::fabs(chk.out[i][e] - to_chunk * pv) <=
              1e-15L * (chk.bound[i][e] + to_chunk * pb));
        rel_diff = std::max(rel_diff, std::fabs(rec.out[i][e] - pv) / std::fabs(rec.out[i][e]));
      }
    }
    CHECK(rel_diff > 0.5L);
  }
}

TEST_CASE("linear retnet: LinearState continuing a prefill equals the recurrent form",
          "[linear][retnet]") {
  // torchscale decodes every token through recurrent_forward; peal may prefill with any form
  // (its output is that form's) and then step(): the state carries the running scale
  // c = S(i+1), so the decoded rows are the recurrent form's.
  for (Index np : {1, 7, 64})
    for (double qa : {1.0, 30.0})
      for (LinearForm form : {LinearForm::parallel, LinearForm::recurrent}) {
        check_prefill_then_decode(double(0), np, form, 0, qa);
        check_prefill_then_decode(float(0), np, form, 0, qa);
      }
}

TEST_CASE("linear retnet: LinearState continuing a chunkwise prefill equals the recurrent form",
          "[linear][retnet]") {
  for (Index np : {1, 7, 64})
    for (double qa : {1.0, 30.0}) {
      check_prefill_then_decode(double(0), np, LinearForm::chunkwise, 16, qa);
      check_prefill_then_decode(float(0), np, LinearForm::chunkwise, 16, qa);
    }
}
