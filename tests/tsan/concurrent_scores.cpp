// peal::scores, peal::attention, peal::linear_attention and peal::attention_backward called
// concurrently from two std::threads on shared const inputs, each into its own output, must
// give bitwise the single-threaded result: the kernels' mutable state (the thread-local arena
// and table cache of the tile driver, include/peal/detail/tiled/tile_run.hpp and
// detail/tiled/arena.hpp; the backward's workspace and shards,
// include/peal/detail/tiled/backward_run.hpp) must not be shared between callers. Built with
// -fsanitize=thread by scripts/tsan.sh (data races halt it there) and without it as the ctest
// concurrent_scores (bitwise comparison only).
//
// Encodings: RoPE (pure rotation: no rebasing), and an xPos-like decaying rotation bank
// composed with a JordanBlock<3> and pass-through coordinates (rebased tiles, relative
// tables, the Jordan part per pair). Positions: evenly spaced (regular tiles: the shared
// table, cached per thread and reused by the second call) and irregular timestamps (tiles
// with their own tables). Options: causal, ALiBi, per-head decay, grouped-query heads;
// attention (prefill, and a decode step whose keys are split into ranges merged by
// log-sum-exp) with v = k.
// No Catch2: a plain main() that exits 1 on any mismatch.
#include <cmath>
#include <cstdio>
#include <cstring>
#include <functional>
#include <peal/peal.hpp>
#include <random>
#include <thread>
#include <vector>

namespace {

using peal::Index;
using peal::Positions;
using peal::ScoreOptions;
using peal::TensorView;

using Rot = peal::RotationBlock<double>;
using RotBank = peal::Bank<Rot>;

RotBank rope(int pairs) {
  std::vector<Rot> b;
  for (int i = 0; i < pairs; ++i) b.emplace_back(std::pow(10000.0L, -2.0L * i / (2.0L * pairs)));
  return RotBank(b, peal::Layout::HalfSplit);
}
struct Problem {
  Index nq, nk, Hq, Hk, d;
  std::vector<float> q, k;
  std::vector<double> tq, tk;  // empty: Positions::sequence
  double tq0, tk0;
  ScoreOptions opt;
  Positions pq() const { return tq.empty() ? Positions::sequence(tq0, 1.0) : Positions(tq); }
  Positions pk() const { return tk.empty() ? Positions::sequence(tk0, 1.0) : Positions(tk); }
};

Problem make_problem(Index d, bool irregular, std::mt19937_64& rng) {
  Problem p{200, 300, 4, 2, d, {}, {}, {}, {}, 1000.0, 1000.0, {}};
  std::uniform_real_distribution<double> u(-1, 1), gap(0.1, 3.0);
  p.q.resize(std::size_t(p.nq * p.Hq * d));
  p.k.resize(std::size_t(p.nk * p.Hk * d));
  for (auto& x : p.q) x = float(u(rng));
  for (auto& x : p.k) x = float(u(rng));
  if (irregular) {
    double t = 1.7e4;
    for (Index i = 0; i < p.nk; ++i) p.tk.push_back(t += gap(rng));
    t = p.tk[40];
    for (Index i = 0; i < p.nq; ++i) p.tq.push_back(t += gap(rng));
  }
  // Small tiles: several query and key tiles, hence several units, table rows and anchors.
  p.opt.query_tile = 48;
  p.opt.key_tile = 64;
  p.opt.causal = true;
  p.opt.scale = 1.0 / std::sqrt(double(d));
  p.opt.alibi_slopes = {1.0 / 8, 1.0 / 16, 1.0 / 32, 1.0 / 64};
  p.opt.decay = {1.0, 0.999, 0.99, 0.97};
#ifdef _OPENMP
  p.opt.threads = 2;  // an OpenMP team inside each std::thread
#else
  p.opt.threads = 1;
#endif
  return p;
}

template <class E>
std::vector<float> run(const E& enc, const Problem& p) {
  std::vector<float> out(std::size_t(p.Hq * p.nq * p.nk), 12345.0f);
  TensorView<const float> qv(p.q.data(), p.nq, p.Hq, p.d), kv(p.k.data(), p.nk, p.Hk, p.d);
  peal::scores(enc, qv, p.pq(), kv, p.pk(), TensorView<float>(out.data(), p.Hq, p.nq, p.nk), p.opt);
  return out;
}

// Attention with v = k (out [nq, Hq, d]); `decode` keeps the last query only.
template <class E>
std::vector<float> run_attention(const E& enc, const Problem& p, bool decode) {
  const Index nq = decode ? 1 : p.nq, i0 = p.nq - nq;
  std::vector<float> out(std::size_t(nq * p.Hq * p.d), 12345.0f);
  std::vector<double> tq(static_cast<std::size_t>(nq));
  for (Index i = 0; i < nq; ++i) tq[std::size_t(i)] = p.pq()[i0 + i];
  TensorView<const float> qv(p.q.data() + i0 * p.Hq * p.d, nq, p.Hq, p.d),
      kv(p.k.data(), p.nk, p.Hk, p.d);
  peal::AttentionOptions opt;
  opt.causal = true;
  opt.alibi_slopes = p.opt.alibi_slopes;
  opt.threads = p.opt.threads;
  opt.query_tile = p.opt.query_tile;
  opt.key_tile = decode ? 16 : p.opt.key_tile;
  peal::attention(enc, qv, Positions(tq), kv, p.pk(), kv,
                  TensorView<float>(out.data(), nq, p.Hq, p.d), opt);
  return out;
}

// Linear attention with v = k: chunkwise (one key head per OpenMP thread, a tile run per
// chunk) or parallel (one tile run over everything), with per-head decays.
template <class E>
std::vector<float> run_linear(const E& enc, const Problem& p, peal::LinearForm form) {
  std::vector<float> out(std::size_t(p.nq * p.Hq * p.d), 12345.0f);
  TensorView<const float> qv(p.q.data(), p.nq, p.Hq, p.d), kv(p.k.data(), p.nk, p.Hk, p.d);
  peal::LinearAttentionOptions opt;
  opt.decay = p.opt.decay;
  opt.form = form;
  opt.chunk = 32;
  opt.threads = p.opt.threads;
  peal::linear_attention(enc, qv, p.pq(), kv, p.pk(), kv,
                         TensorView<float>(out.data(), p.nq, p.Hq, p.d), opt);
  return out;
}

// Attention backward (v = k) after its forward: dq, dk, dv and the parameter gradient (its
// double bits). 600 queries: three query tiles of the backward, hence three shards of its
// OpenMP team (include/peal/detail/tiled/backward_run.hpp).
template <class E>
std::vector<float> run_attention_backward(const E& enc, const Problem& p) {
  const Index n = p.nq * p.Hq * p.d, m = p.nk * p.Hk * p.d;
  std::vector<float> out(static_cast<std::size_t>(n)), dout(static_cast<std::size_t>(n)),
      grads(static_cast<std::size_t>(n + 2 * m));
  for (Index x = 0; x < n; ++x) dout[std::size_t(x)] = p.q[std::size_t((x * 7) % n)];
  std::vector<double> lse(static_cast<std::size_t>(p.nq * p.Hq)),
      gp(static_cast<std::size_t>(peal::parameter_count(enc)));
  TensorView<const float> qv(p.q.data(), p.nq, p.Hq, p.d), kv(p.k.data(), p.nk, p.Hk, p.d);
  peal::AttentionOptions opt;
  opt.causal = true;
  opt.alibi_slopes = p.opt.alibi_slopes;
  opt.threads = p.opt.threads;
  opt.lse = lse.data();
  peal::attention(enc, qv, p.pq(), kv, p.pk(), kv, TensorView<float>(out.data(), p.nq, p.Hq, p.d),
                  opt);
  opt.lse = nullptr;
  peal::attention_backward(enc, qv, p.pq(), kv, p.pk(), kv,
                           TensorView<const float>(out.data(), p.nq, p.Hq, p.d), lse,
                           TensorView<const float>(dout.data(), p.nq, p.Hq, p.d),
                           TensorView<float>(grads.data(), p.nq, p.Hq, p.d),
                           TensorView<float>(grads.data() + n, p.nk, p.Hk, p.d),
                           TensorView<float>(grads.data() + n + m, p.nk, p.Hk, p.d), opt, {&gp});
  const std::size_t at = grads.size();
  grads.resize(at + 2 * gp.size());
  std::memcpy(grads.data() + at, gp.data(), gp.size() * sizeof(double));
  return grads;
}

// One problem: an encoding, its inputs and the single-threaded result.
struct Job {
  const char* name;
  std::function<std::vector<float>()> run;
  std::vector<float> want;
};

// Each thread runs every job twice in a row (the second call finds its inputs in the
// thread's table cache), the two threads in opposite orders, so that tables are rebuilt on
// both threads at the same time; every result must equal the main thread's bitwise.
int check(std::vector<Job>& jobs) {
  for (auto& j : jobs) {
    j.want = j.run();
    Index finite = 0;
    for (float x : j.want) finite += std::isfinite(x);
    std::printf("%s: %ld finite scores of %zu\n", j.name, long(finite), j.want.size());
    if (finite < Index(j.want.size()) / 4) return 1;  // the causal mask hides less than 3/4
  }
  const std::size_t n = jobs.size();
  std::vector<std::vector<float>> got[2];
  auto worker = [&](int t) {
    for (std::size_t c = 0; c < 2 * n; ++c) {
      const std::size_t j = t == 0 ? c / 2 : n - 1 - c / 2;
      got[t].push_back(jobs[j].run());
    }
  };
  std::thread a(worker, 0), b(worker, 1);
  a.join();
  b.join();
  int bad = 0;
  for (int t = 0; t < 2; ++t)
    for (std::size_t c = 0; c < 2 * n; ++c) {
      const Job& j = jobs[t == 0 ? c / 2 : n - 1 - c / 2];
      const std::vector<float>& g = got[t][c];
      if (g.size() != j.want.size() ||
          std::memcmp(g.data(), j.want.data(), g.size() * sizeof(float)) != 0) {
        std::printf("%s: thread %d, call %zu differs from the single-threaded result\n", j.name, t,
                    c);
        bad = 1;
      }
    }
  return bad;
}

}  // namespace

int main() {
  std::mt19937_64 rng(7);
  const auto rope64 = rope(32);
  const auto decaying = peal::compose(peal::xpos<double>(48), peal::JordanBlock<3, double>(-0.01),
                                      peal::PassThrough<double>(5));  // d = 56
  const Problem rope_even = make_problem(rope64.dim(), false, rng);
  const Problem rope_irr = make_problem(rope64.dim(), true, rng);
  const Problem dec_even = make_problem(decaying.dim(), false, rng);
  const Problem dec_irr = make_problem(decaying.dim(), true, rng);
  Problem rope_long = make_problem(rope64.dim(), true, rng);  // 600 queries for the backward
  for (Index i = 0; i < 400; ++i) rope_long.tq.push_back(rope_long.tq.back() + 0.5);
  rope_long.nq = 600;
  rope_long.q.resize(std::size_t(rope_long.nq * rope_long.Hq * rope_long.d));
  for (std::size_t x = 200 * std::size_t(rope_long.Hq * rope_long.d); x < rope_long.q.size(); ++x)
    rope_long.q[x] = rope_long.q[x % (200 * std::size_t(rope_long.Hq * rope_long.d))];
  std::vector<Job> jobs = {
      {"rope, evenly spaced", [&] { return run(rope64, rope_even); }, {}},
      {"xpos+jordan3, evenly spaced", [&] { return run(decaying, dec_even); }, {}},
      {"rope, irregular", [&] { return run(rope64, rope_irr); }, {}},
      {"xpos+jordan3, irregular", [&] { return run(decaying, dec_irr); }, {}},
      {"attention rope, irregular", [&] { return run_attention(rope64, rope_irr, false); }, {}},
      {"attention xpos+jordan3", [&] { return run_attention(decaying, dec_even, false); }, {}},
      {"decode rope, split keys", [&] { return run_attention(rope64, rope_even, true); }, {}},
      {"decode xpos+jordan3, irregular", [&] { return run_attention(decaying, dec_irr, true); },
       {}},
      {"linear chunkwise rope, irregular",
       [&] { return run_linear(rope64, rope_irr, peal::LinearForm::chunkwise); }, {}},
      {"linear parallel xpos+jordan3",
       [&] { return run_linear(decaying, dec_even, peal::LinearForm::parallel); }, {}},
      {"attention backward rope, 600 queries",
       [&] { return run_attention_backward(rope64, rope_long); }, {}},
  };
  const int bad = check(jobs);
  std::printf(bad ? "concurrent_scores: FAILED\n"
                  : "concurrent_scores: 2 threads x %zu calls bitwise equal to one thread\n",
              2 * jobs.size());
  return bad;
}
