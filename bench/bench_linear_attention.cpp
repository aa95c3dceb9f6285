// Benchmarks of peal::linear_attention and peal::LinearState (include/peal/linear_attention.hpp,
// linear_state.hpp); results and commands: bench/README.md, "Linear attention". f32, 1 thread,
// d = dv = 128, 4 heads (Hq = Hk = 4), RoPE (Llama-style preset) with a RetNet-style scalar
// decay γ_h = 1 − 2^(−5−h) per head, positions 0..n-1.
//
//   forms/<n>/<H>   (H = 4, and H = 1 at n = 512 and 2048) contenders in one paired run: peal chunkwise (automatic chunk), peal
//       parallel (every visible pair, tiled, fused: S V per tile), the unfused parallel form
//       (peal::scores causal into an [H, n, n] buffer, masked entries set to 0, then Eigen's
//       GEMM S_h V_h; n <= 4096: the buffer is 4 n^2 H bytes), and one plain Eigen GEMM
//       [n, d] x [d, dv] per head (gemm). GFLOPS = the contender's own useful FLOPs / its
//       median time: chunkwise H n (C (d + dv) + 4 d dv) with C the chunk (pairs within a
//       chunk, half of C^2 of them, plus the state's read and update); parallel and unfused
//       2 H n^2 (d + dv) / 2 (the causal half); gemm 2 H n d dv. vs_<x> = median t_x / t_chunkwise.
//   chunk/<C>       the chunkwise form at n = 8192 with chunk C, against the same plain GEMM.
//   backward/<n>    linear_attention_backward (include/peal/linear_attention_backward.hpp) in
//       its quadratic form (form = parallel: per block of queries S, dS, scores_backward) with
//       every gradient (dq, dk, dv, the frequencies', the positions', the decays'), paired with
//       the forward in its automatic form (fwd) and in the parallel form (fwd_parallel).
//       GFLOPS counts the backward's useful work as the forward parallel form's pairs times 3
//       (S, dS = dO Vᵀ and the scores backward's two products: four causal-half products of
//       the pairs' size, against the forward's two); vs_x = x's time / the backward's, so
//       1 / vs_fwd is the backward's cost in forwards.
//   backward_chunk/<n>  the O(n) backward of the chunkwise form (form = chunkwise, chunk 64;
//       every gradient, as backward/<n>) paired with the quadratic backward (form = parallel,
//       the backward/<n> row) and with the chunkwise forward (fwd). GFLOPS counts the
//       chunkwise forward's FLOPs (chunk_flops) times 3; vs_x = x's time / the O(n) backward's.
//   step            one decode step of LinearState::step (update with k v^T at the next
//       position, then read q; RoPE + decay, 4 heads) against the bare Eigen work of the same
//       size per head: M += k v^T then o = M^T q. 64 steps per measurement.
//   step_backward   linear_state_step_backward (include/peal/linear_state_backward.hpp) of 64
//       steps at position 256 from a state of 256 steps (RoPE + decay, 4 heads): dk, dv, dq,
//       ∂L/∂M carried through each step in place, the frequencies' and the decays' gradients;
//       paired with 64 forward steps (fwd) and the bare Eigen work of the same size per head
//       (dq = M d_out, ∂L/∂M += q d_outᵀ, dk = (∂L/∂M) v, dv = (∂L/∂M)ᵀ k: 8 d dv FLOPs, what
//       GFLOPS counts per head and step); vs_x = x's time / the backward's.
#include <benchmark/benchmark.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <map>
#include <memory>
#include <peal/linear_attention.hpp>
#include <peal/linear_attention_backward.hpp>
#include <string>
#include <peal/linear_state.hpp>
#include <peal/linear_state_backward.hpp>
#include <peal/parameters.hpp>
#include <peal/presets/retnet.hpp>
#include <peal/scores.hpp>
#include <utility>
#include <vector>

#include "bench_common.hpp"

namespace {

using namespace peal_bench;
using peal::LinearAttentionOptions;
using peal::LinearForm;
using peal::Positions;
using peal::TensorView;

constexpr Index kHeads = 4;
constexpr Index kChunk = peal::detail::linear::kDefaultChunk;  // the automatic chunk

struct Data {
  std::vector<float> q, k, v, out, out2, s;
};
Data& data(Index n, Index H, bool unfused) {
  static std::map<std::pair<Index, Index>, std::unique_ptr<Data>> cache;
  auto& p = cache[{n, H}];
  if (!p) {
    const std::size_t sz = std::size_t(n * H * kDim);
    p.reset(new Data{random_floats(sz, 1), random_floats(sz, 2), random_floats(sz, 3),
                     std::vector<float>(sz), std::vector<float>(sz), {}});
  }
  if (unfused && p->s.empty()) p->s.resize(std::size_t(H * n * n));
  return *p;
}

LinearAttentionOptions options(LinearForm form, Index chunk, Index H = kHeads) {
  LinearAttentionOptions o;
  o.decay = peal::retnet_decays(int(H));
  o.form = form;
  o.chunk = chunk;
  o.threads = 1;
  return o;
}

/// Useful FLOPs of the chunkwise form with chunk C (see the top of the file).
double chunk_flops(Index n, Index C, Index H = kHeads) {
  const double d = double(kDim);
  return double(H) * double(n) * (double(C) * (d + d) + 4.0 * d * d);
}

/// paired_run counts every contender's rate in the first one's work units; give contender
/// `name` its own FLOPs (median and fastest rate alike).
void own_flops(benchmark::State& state, const std::string& name, double flops, double work) {
  state.counters[name + "_GFLOPS"] = state.counters[name + "_GFLOPS"] * flops / work;
  state.counters[name + "_best_GFLOPS"] = state.counters[name + "_best_GFLOPS"] * flops / work;
}

void gemm_heads(const Data& D, std::vector<float>& W, Index n, Index H = kHeads) {
  for (Index h = 0; h < H; ++h) {
    ConstStridedMap Q(D.q.data() + h * kDim, n, kDim, Eigen::OuterStride<>(H * kDim));
    Eigen::Map<const RowMat> M(W.data(), kDim, kDim);
    StridedMap O(const_cast<float*>(D.out2.data()) + h * kDim, n, kDim,
                 Eigen::OuterStride<>(H * kDim));
    O.noalias() = Q * M;
  }
}

void BM_forms(benchmark::State& state) {
  const Index n = state.range(0), H = state.range(1), d = kDim;
  const bool with_unfused = n <= 4096;
  Data& D = data(n, H, with_unfused);
  const auto enc = rope_preset();
  const auto pos = Positions::sequence(0.0);
  const TensorView<const float> q(D.q.data(), n, H, d), k(D.k.data(), n, H, d),
      v(D.v.data(), n, H, d);
  const TensorView<float> out(D.out.data(), n, H, d);
  auto run = [&](LinearForm f) { return [&, f] { peal::linear_attention(enc, q, pos, k, pos, v, out, options(f, 0, H)); }; };
  std::vector<float> W(std::size_t(d * d), 0.01f);
  peal::ScoreOptions so;
  so.causal = true;
  so.scale = 1.0 / std::sqrt(double(d));
  so.decay = peal::retnet_decays(int(H));
  so.threads = 1;
  auto unfused = [&] {
    peal::scores(enc, q, pos, k, pos, TensorView<float>(D.s.data(), H, n, n), so);
    for (float& x : D.s) x = x == -std::numeric_limits<float>::infinity() ? 0.0f : x;
    for (Index h = 0; h < H; ++h) {
      Eigen::Map<const RowMat> S(D.s.data() + h * n * n, n, n);
      ConstStridedMap V(D.v.data() + h * d, n, d, Eigen::OuterStride<>(H * d));
      StridedMap O(D.out2.data() + h * d, n, d, Eigen::OuterStride<>(H * d));
      O.noalias() = S * V;
    }
  };
  std::vector<Contender> cs{{"", 1, run(LinearForm::chunkwise)},
                            {"parallel", 1, run(LinearForm::parallel)},
                            {"gemm", 1, [&] { gemm_heads(D, W, n, H); }}};
  if (with_unfused) cs.push_back({"unfused", 1, unfused});
  const double work = chunk_flops(n, kChunk, H) * 1e-9;
  paired_run(state, cs, work, "GFLOPS");
  const double causal_pairs = 2.0 * double(H) * double(n) * double(n) * double(2 * d) / 2.0 * 1e-9;
  const double gemm = 2.0 * double(H) * double(n) * double(d) * double(d) * 1e-9;
  own_flops(state, "parallel", causal_pairs, work);
  own_flops(state, "gemm", gemm, work);
  if (with_unfused) own_flops(state, "unfused", causal_pairs, work);
  state.counters["chunk_vs_gemm_rate"] = state.counters["GFLOPS"] / state.counters["gemm_GFLOPS"];
}

// The backward's inputs and outputs at n tokens (RoPE, f32; d_out reads v's numbers), shared by
// BM_backward and BM_backward_chunk: backward(form, chunk) and forward(form, chunk) run one call.
struct BackwardCase {
  Index n, H = kHeads, d = kDim;
  Data& D;
  decltype(rope_preset()) enc = rope_preset();
  Positions pos = Positions::sequence(0.0);
  std::vector<float> dq, dk, dv;
  std::vector<double> gp, gt, gs, gg;
  explicit BackwardCase(Index tokens)
      : n(tokens), D(data(tokens, kHeads, false)), dq(D.q.size()), dk(D.q.size()),
        dv(D.q.size()), gp(static_cast<std::size_t>(peal::parameter_count(enc))),
        gt(static_cast<std::size_t>(n)), gs(gt.size()), gg(static_cast<std::size_t>(H)) {}
  TensorView<const float> in(std::vector<float>& x) const { return {x.data(), n, H, d}; }
  TensorView<float> out(std::vector<float>& x) const { return {x.data(), n, H, d}; }
  std::function<void()> backward(LinearForm f, Index chunk) {
    return [this, f, chunk] {
      peal::linear_attention_backward(enc, in(D.q), pos, in(D.k), pos, in(D.v), in(D.v), out(dq),
                                      out(dk), out(dv), options(f, chunk, H), {&gp, &gt, &gs, &gg});
    };
  }
  std::function<void()> forward(LinearForm f, Index chunk) {
    return [this, f, chunk] {
      peal::linear_attention(enc, in(D.q), pos, in(D.k), pos, in(D.v), out(D.out),
                             options(f, chunk, H));
    };
  }
};

void BM_backward(benchmark::State& state) {
  BackwardCase c(state.range(0));
  const double pairs =
      2.0 * double(c.H) * double(c.n) * double(c.n) * double(2 * c.d) / 2.0 * 1e-9;
  paired_run(state, {{"", 1, c.backward(LinearForm::parallel, 0)},
                     {"fwd", 1, c.forward(LinearForm::automatic, 0)},
                     {"fwd_parallel", 1, c.forward(LinearForm::parallel, 0)}},
             3.0 * pairs, "GFLOPS");
}

void BM_backward_chunk(benchmark::State& state) {
  BackwardCase c(state.range(0));
  paired_run(state, {{"", 1, c.backward(LinearForm::chunkwise, kChunk)},
                     {"quadratic", 1, c.backward(LinearForm::parallel, kChunk)},
                     {"fwd", 1, c.forward(LinearForm::chunkwise, kChunk)}},
             3.0 * chunk_flops(c.n, kChunk, c.H) * 1e-9, "GFLOPS");
}

void BM_chunk(benchmark::State& state) {
  const Index n = 8192, C = state.range(0), H = kHeads, d = kDim;
  Data& D = data(n, H, false);
  const auto enc = rope_preset();
  const auto pos = Positions::sequence(0.0);
  const TensorView<const float> q(D.q.data(), n, H, d), k(D.k.data(), n, H, d),
      v(D.v.data(), n, H, d);
  const TensorView<float> out(D.out.data(), n, H, d);
  std::vector<float> W(std::size_t(d * d), 0.01f);
  paired_run(state,
             {{"", 1, [&] { peal::linear_attention(enc, q, pos, k, pos, v, out, options(LinearForm::chunkwise, C)); }},
              {"gemm", 1, [&] { gemm_heads(D, W, n); }}},
             chunk_flops(n, C) * 1e-9, "GFLOPS");
  own_flops(state, "gemm", 2.0 * double(H) * double(n) * double(d) * double(d) * 1e-9,
            chunk_flops(n, C) * 1e-9);
  state.counters["chunk_vs_gemm_rate"] = state.counters["GFLOPS"] / state.counters["gemm_GFLOPS"];
}

void BM_step(benchmark::State& state) {
  constexpr Index kSteps = 64;
  const Index H = kHeads, d = kDim;
  const auto enc = rope_preset();
  const auto x = random_floats(std::size_t(3 * H * d * kSteps), 7);
  std::vector<float> o(std::size_t(H * d));
  peal::LinearState<peal::RopeEncoding<double>, float> st(enc, H, H, d, options(LinearForm::recurrent, 0));
  double t = 0;
  auto ours = [&] {
    for (Index s = 0; s < kSteps; ++s) {
      const float* base = x.data() + 3 * H * d * s;
      st.step(TensorView<const float>(base, 1, H, d), TensorView<const float>(base + H * d, 1, H, d),
              TensorView<const float>(base + 2 * H * d, 1, H, d), t, TensorView<float>(o.data(), 1, H, d));
      t += 1;
    }
  };
  std::vector<Eigen::MatrixXf> M(std::size_t(H), Eigen::MatrixXf::Zero(d, d));
  auto bare = [&] {
    for (Index s = 0; s < kSteps; ++s) {
      const float* base = x.data() + 3 * H * d * s;
      for (Index h = 0; h < H; ++h) {
        Eigen::Map<const Eigen::VectorXf> k(base + h * d, d), v(base + (H + h) * d, d),
            q(base + (2 * H + h) * d, d);
        Eigen::Map<Eigen::VectorXf> oh(o.data() + h * d, d);
        M[std::size_t(h)].noalias() += k * v.transpose();
        oh.noalias() = M[std::size_t(h)].transpose() * q;
      }
    }
  };
  // FLOPs of the bare work: rank-1 update and matrix-vector product, 4 d dv per head.
  paired_run(state, {{"", 1, ours}, {"bare", 1, bare}},
             4.0 * double(H) * double(d) * double(d) * double(kSteps) * 1e-9, "GFLOPS");
  state.counters["vs_bare_inverse"] = 1.0 / state.counters["vs_bare"];  // t_peal / t_bare
}

void BM_step_backward(benchmark::State& state) {
  constexpr Index kSteps = 64, kHistory = 256;
  const Index H = kHeads, d = kDim;
  const auto enc = rope_preset();
  const auto x = random_floats(std::size_t(3 * H * d * kSteps), 7);
  const auto g = random_floats(std::size_t(H * d + H * d * d), 8);  // d_out, d_state
  peal::LinearState<peal::RopeEncoding<double>, float> st(enc, H, H, d, options(LinearForm::recurrent, 0));
  std::vector<float> o(std::size_t(H * d));
  auto view = [&](const float* p) { return TensorView<const float>(p, 1, H, d); };
  for (Index s = 0; s < kHistory; ++s) {
    const float* base = x.data() + 3 * H * d * (s % kSteps);
    st.step(view(base), view(base + H * d), view(base + 2 * H * d), double(s),
            TensorView<float>(o.data(), 1, H, d));
  }
  std::vector<float> dk(std::size_t(H * d)), dv(dk.size()), dq(dk.size()),
      dM(g.begin() + H * d, g.end());
  std::vector<double> gp(static_cast<std::size_t>(peal::parameter_count(enc))),
      gd(static_cast<std::size_t>(H));
  const TensorView<float> dMv(dM.data(), H, d, d);
  auto back = [&] {
    for (Index s = 0; s < kSteps; ++s) {
      const float* base = x.data() + 3 * H * d * s;
      peal::linear_state_step_backward(st, view(base), view(base + H * d), view(base + 2 * H * d),
                                       double(kHistory), view(g.data()), TensorView<const float>(dMv),
                                       TensorView<float>(dk.data(), 1, H, d),
                                       TensorView<float>(dv.data(), 1, H, d),
                                       TensorView<float>(dq.data(), 1, H, d), dMv, {&gp, &gd}, 1);
    }
  };
  auto fwd_state = st;
  double t = double(kHistory);
  auto fwd = [&] {
    for (Index s = 0; s < kSteps; ++s) {
      const float* base = x.data() + 3 * H * d * s;
      fwd_state.step(view(base), view(base + H * d), view(base + 2 * H * d), t,
                     TensorView<float>(o.data(), 1, H, d));
      t += 1;
    }
  };
  // The bare backward per head: dq = M' d_out (M' = M + k vᵀ), dM += q d_outᵀ, dk = dM v,
  // dv = dMᵀ k: two matrix-vector products, a rank-1 update and one more product, ~8 d dv.
  std::vector<Eigen::MatrixXf> M(std::size_t(H), Eigen::MatrixXf::Random(d, d)),
      G(std::size_t(H), Eigen::MatrixXf::Random(d, d));
  auto bare = [&] {
    for (Index s = 0; s < kSteps; ++s) {
      const float* base = x.data() + 3 * H * d * s;
      for (Index h = 0; h < H; ++h) {
        Eigen::Map<const Eigen::VectorXf> k(base + h * d, d), v(base + (H + h) * d, d),
            q(base + (2 * H + h) * d, d), go(g.data() + h * d, d);
        Eigen::Map<Eigen::VectorXf> dqh(dq.data() + h * d, d), dkh(dk.data() + h * d, d),
            dvh(dv.data() + h * d, d);
        dqh.noalias() = M[std::size_t(h)] * go;
        G[std::size_t(h)].noalias() += q * go.transpose();
        dkh.noalias() = G[std::size_t(h)] * v;
        dvh.noalias() = G[std::size_t(h)].transpose() * k;
      }
    }
  };
  paired_run(state, {{"", 1, back}, {"fwd", 1, fwd}, {"bare", 1, bare}},
             8.0 * double(H) * double(d) * double(d) * double(kSteps) * 1e-9, "GFLOPS");
}

[[maybe_unused]] const bool registered = [] {
  auto paired = [](const char* name, auto fn) {
    auto* b = benchmark::RegisterBenchmark(name, fn);
    b->UseManualTime()->Unit(benchmark::kMillisecond)->MinTime(0.5);
    return b;
  };
  auto* f = paired("forms", BM_forms);
  for (Index n : {128, 256, 512, 1024, 2048, 4096, 8192}) f->Args({n, kHeads});
  for (Index n : {512, 2048}) f->Args({n, 1});  // one head: the outputs are small
  auto* bw = paired("backward", BM_backward);
  for (Index n : {512, 2048}) bw->Arg(n);
  auto* bc = paired("backward_chunk", BM_backward_chunk);
  for (Index n : {512, 2048, 8192}) bc->Arg(n);
  auto* c = paired("chunk", BM_chunk);
  for (Index C : {32, 64, 128, 256}) c->Arg(C);
  paired("step", BM_step)->Unit(benchmark::kMicrosecond);
  paired("step_backward", BM_step_backward)->Unit(benchmark::kMicrosecond);
  return true;
}();

}  // namespace

BENCHMARK_MAIN();
