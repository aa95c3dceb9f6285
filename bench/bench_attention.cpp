// Benchmarks of peal::attention (include/peal/attention.hpp), the fused online-softmax
// attention on the tile driver shared with peal::scores, against the baselines that matter
// (results and the commands: bench/README.md, "Attention"). f32, d = dv = 128.
//
//   prefill/<enc>/<n>/<threads>    4 heads (Hq = Hk = 4), n = 512, 1024, 2048, positions
//       0..n-1; <enc>: RoPE fused (rope: the peal::rope preset, half-split) or the identity
//       encoding (identity: peal::PassThrough, plain attention), non-causal or causal
//       (<enc>_causal). Contenders, run back to back in each iteration: peal::attention; the
//       unfused pipeline (peal::scores into an [H, n, n] buffer, a row softmax, then Eigen's
//       GEMM P_h V_h per head); the two plain Eigen GEMMs Q_h K_h^T and P_h V_h of the same
//       shapes (no encoding, no softmax: the speed of light); causal rows also the same
//       peal::attention call without the mask (noncausal: vs_noncausal = t_noncausal /
//       t_causal, 2 when the masked half of the pairs costs nothing). GFLOPS = useful FLOPs /
//       median time, useful FLOPs = 4 n^2 d H (non-causal) or half of it (causal), for every
//       contender alike (noncausal_GFLOPS too: read vs_noncausal).
//   threads/<enc>/<n>              peal::attention with threads = 2 against threads = 1.
//   backward/rope[_causal]/<n>/<H> attention_backward against its forward, the unfused
//       pipeline, the five GEMMs and two threads (below); backward_threads/...: two threads
//       against one alone, back to back (the other contenders' n x n buffers evict the caches
//       between the runs of backward/, which lowers its threads2 ratio).
//   decode/<mode>/<threads>        one query, 32 query heads over 8 KV heads (GQA), a
//       cache of 32768 keys: raw keys at positions 0..nk-1 rebased inside (raw) or keys
//       stored as G(s) k (encoded, AttentionOptions::keys_encoded); query at t = nk.
//       decode/<mode>_headmajor: the same cache laid out [Hk, nk, d] (a strided view): one
//       head's keys contiguous. decode/f16_<mode>, decode/bf16_<mode>: the same cache stored
//       as Eigen::half / Eigen::bfloat16 (q and out float). Contenders: peal::attention;
//       std::memcpy of a buffer of the K + V size (the cache's own bytes: half of f32's for
//       f16 and bf16) into another (the same threads, each a contiguous share); a read-only
//       sum over a buffer of that size; for f32 encoded caches, a plain loop. GBps = bytes
//       of K and V (decimal GB) / median time, for every contender.
//   scores1h/<enc>/<n>/<threads>   peal::scores on ONE head (bench_scores.cpp has 4 heads
//       only): RoPE, ALiBi (ScoreOptions::alibi_slopes), RoPE + scalar decay
//       (ScoreOptions::decay); against the plain GEMM Q K^T and the unfused pipeline
//       (encode_queries/encode_keys out of place, the same GEMM, then the bias / decay).
//   peak/fma/<threads>             independent AVX-512 (else AVX2) FMAs: the FLOP ceiling.
//
// Pairing (as paired/... in bench_scores.cpp): on this shared, noisy VM each iteration runs
// every contender once, rotating which goes first, and vs_<name> is the MEDIAN of the
// per-iteration ratios t_<name> / t_peal (> 1: peal is faster). The reported time is
// peal's (manual time). max_diff: max |peal − unfused| (or raw − encoded) once, a check
// that the contenders compute the same thing.
#include <benchmark/benchmark.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <limits>
#include <map>
#include <memory>
#include <peal/presets/alibi.hpp>
#include <peal/attention.hpp>
#include <peal/attention_backward.hpp>
#include <peal/encode.hpp>
#include <peal/peal.hpp>
#include <peal/presets/retnet.hpp>
#include <peal/presets/rope.hpp>
#include <peal/scores.hpp>
#include <random>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#if defined(__AVX512F__) || defined(__FMA__)
#include <immintrin.h>
#endif
#ifdef _OPENMP
#include <omp.h>
#endif

#include "bench_common.hpp"

namespace {

using namespace peal_bench;
using peal::AttentionOptions;
using peal::Index;
using peal::Positions;
using peal::ScoreOptions;
using peal::TensorView;


// ---- Prefill ------------------------------------------------------------------------------

constexpr Index kPrefillHeads = 4;

struct PrefillData {
  Index n;
  std::vector<float> q, k, v, out, out_unfused, p;  // [n, H, d] and p [H, n, n]
};

PrefillData& prefill_data(Index n) {
  static std::map<Index, std::unique_ptr<PrefillData>> cache;
  auto& p = cache[n];
  if (!p) {
    const std::size_t sz = std::size_t(n * kPrefillHeads * kDim);
    p.reset(new PrefillData{n, random_floats(sz, 1), random_floats(sz, 2), random_floats(sz, 3),
                            std::vector<float>(sz), std::vector<float>(sz),
                            std::vector<float>(std::size_t(kPrefillHeads * n * n))});
  }
  return *p;
}

template <class E>
void BM_prefill(benchmark::State& state, const E& enc, bool causal) {
  // H = 4 heads or the first one of them (state.range(2)): one head's output is small enough
  // that the kernels, not the stores, decide the rate.
  const Index n = state.range(0), H = state.range(2), d = kDim;
  const int threads = int(state.range(1));
  PrefillData& D = prefill_data(n);
  const auto pos = Positions::sequence(0.0);
  const TensorView<const float> q(D.q.data(), n, H, d), k(D.k.data(), n, H, d),
      v(D.v.data(), n, H, d);
  AttentionOptions ao;
  ao.causal = causal;
  ao.threads = threads;
  ScoreOptions so;
  so.causal = causal;
  so.scale = 1.0 / std::sqrt(double(d));
  so.threads = threads;
  auto fused = [&] {
    peal::attention(enc, q, pos, k, pos, v, TensorView<float>(D.out.data(), n, H, d), ao);
  };
  AttentionOptions nc = ao;
  nc.causal = false;
  auto noncausal = [&] {
    peal::attention(enc, q, pos, k, pos, v, TensorView<float>(D.out_unfused.data(), n, H, d), nc);
  };
  auto unfused = [&] {
    peal::scores(enc, q, pos, k, pos, TensorView<float>(D.p.data(), H, n, n), so);
    softmax_rows(D.p.data(), H * n, n);
    pv_heads(D.p.data(), D.v.data(), D.out_unfused.data(), n, H, d);
  };
  auto gemms = [&] {
    qk_heads(D.q.data(), D.k.data(), D.p.data(), n, n, H, d);
    pv_heads(D.p.data(), D.v.data(), D.out_unfused.data(), n, H, d);
  };
  set_threads(threads);
  fused();
  unfused();
  const double diff = max_abs_diff(D.out, D.out_unfused);
  const double flops = 4.0 * double(n) * double(n) * double(d) * double(H) * (causal ? 0.5 : 1.0);
  std::vector<Contender> cs = {
      {"", threads, fused}, {"unfused", threads, unfused}, {"gemms", threads, gemms}};
  if (causal) cs.push_back({"noncausal", threads, noncausal});
  paired_run(state, cs, flops * 1e-9, "GFLOPS");
  state.counters["max_diff"] = diff;
}

// attention_backward (include/peal/attention_backward.hpp), paired with: its forward
// (peal::attention keeping lse); the unfused pipeline of the same gradients (encode q and k,
// per head P = exp(S − lse) from a full n x n GEMM, dV = Pᵀ dO, dP = dO Vᵀ, dS = P (dP − D),
// dQ̃ = dS K̃, dK̃ = dSᵀ Q̃ by Eigen's GEMMs, then the encode backward of each side with the
// frequencies' gradient); and those five GEMMs alone; and the backward on two threads
// (threads2). All float, one thread but threads2; H = 4 heads or one (state.range(1)).
// vs_x = x's time / the backward's. GFLOPS counts the five n² d
// products (half of them causal; the unfused pipeline and the GEMMs compute all of them).
// threads_only: the one- and two-thread backward alone (backward_threads/).
void BM_backward(benchmark::State& state, bool causal, bool threads_only = false) {
  const Index n = state.range(0), H = state.range(1), d = kDim;
  PrefillData& D = prefill_data(n);
  const auto enc = rope_preset();
  const auto pos = Positions::sequence(0.0);
  const peal::Strides st{kPrefillHeads * d, d, 1};  // the first H heads of the 4-head data
  const TensorView<const float> q(D.q.data(), n, H, d, st), k(D.k.data(), n, H, d, st),
      v(D.v.data(), n, H, d, st);
  std::vector<double> lse(std::size_t(n * H));
  AttentionOptions ao;
  ao.causal = causal;
  ao.threads = 1;
  ao.lse = lse.data();
  const double scale = 1.0 / std::sqrt(double(d));
  static const std::vector<float> dout_all = random_floats(std::size_t(n * kPrefillHeads * d), 7);
  const std::vector<float> dout(dout_all.begin(), dout_all.begin() + n * H * d);
  std::vector<float> out(std::size_t(n * H * d)), dq(out.size()), dk(out.size()), dv(out.size());
  std::vector<double> gp(std::size_t(peal::parameter_count(enc)));
  auto forward = [&] {
    peal::attention(enc, q, pos, k, pos, v, TensorView<float>(out.data(), n, H, d), ao);
  };
  forward();
  AttentionOptions bo = ao;
  bo.lse = nullptr;
  const std::vector<double> lse0 = lse;
  const std::vector<float> out0 = out;
  auto backward_with = [&](int threads) {
    return [&, threads] {
      AttentionOptions o = bo;
      o.threads = threads;
      peal::attention_backward(enc, q, pos, k, pos, v,
                               TensorView<const float>(out0.data(), n, H, d), lse0,
                               TensorView<const float>(dout.data(), n, H, d),
                               TensorView<float>(dq.data(), n, H, d),
                               TensorView<float>(dk.data(), n, H, d),
                               TensorView<float>(dv.data(), n, H, d), o, {&gp});
    };
  };
  const auto backward = backward_with(1);
  std::vector<float> qe(out.size()), ke(out.size()), dqe(out.size()), dke(out.size());
  RowMat S(n, n), dP(n, n);
  auto gemms = [&](bool softmax) {
    const Eigen::OuterStride<> hs(H * d), vs(kPrefillHeads * d);
    for (Index h = 0; h < H; ++h) {
      const ConstStridedMap Q(qe.data() + h * d, n, d, hs), K(ke.data() + h * d, n, d, hs),
          V(D.v.data() + h * d, n, d, vs), dO(dout.data() + h * d, n, d, hs),
          O(out0.data() + h * d, n, d, hs);
      StridedMap dQ(dqe.data() + h * d, n, d, hs), dK(dke.data() + h * d, n, d, hs),
          dV(dv.data() + h * d, n, d, hs);
      S.noalias() = Q * K.transpose();
      if (softmax)
        for (Index i = 0; i < n; ++i) {
          const float l = float(lse0[std::size_t(i * H + h)]);
          for (Index j = 0; j < n; ++j)
            S(i, j) = causal && j > i ? 0.0f : std::exp(float(scale) * S(i, j) - l);
        }
      dV.noalias() = S.transpose() * dO;
      dP.noalias() = dO * V.transpose();
      if (softmax)
        for (Index i = 0; i < n; ++i) {
          const float Di = dO.row(i).dot(O.row(i));
          dP.row(i).array() = S.row(i).array() * (dP.row(i).array() - Di) * float(scale);
        }
      dQ.noalias() = dP * K;
      dK.noalias() = dP.transpose() * Q;
    }
  };
  auto unfused = [&] {
    peal::encode_queries(enc, q, TensorView<float>(qe.data(), n, H, d), pos);
    peal::encode_keys(enc, k, TensorView<float>(ke.data(), n, H, d), pos);
    gemms(true);
    peal::encode_queries_backward(enc, q, pos, TensorView<const float>(dqe.data(), n, H, d),
                                  TensorView<float>(dq.data(), n, H, d), {&gp});
    peal::encode_keys_backward(enc, k, pos, TensorView<const float>(dke.data(), n, H, d),
                               TensorView<float>(dk.data(), n, H, d), {&gp});
  };
  const double flops = 10.0 * double(n) * double(n) * double(d) * double(H) * (causal ? 0.5 : 1.0);
  std::vector<Contender> cs = {{"", 1, backward}, {"threads2", 2, backward_with(2)}};
  if (!threads_only) {
    cs.push_back({"forward", 1, forward});
    cs.push_back({"unfused", 1, unfused});
    cs.push_back({"gemms", 1, [&] { gemms(false); }});
  }
  paired_run(state, cs, flops * 1e-9, "GFLOPS");
}

void BM_prefill_threads(benchmark::State& state, bool causal) {
  const Index n = state.range(0), H = kPrefillHeads, d = kDim;
  PrefillData& D = prefill_data(n);
  const auto enc = rope_preset();
  const auto pos = Positions::sequence(0.0);
  const TensorView<const float> q(D.q.data(), n, H, d), k(D.k.data(), n, H, d),
      v(D.v.data(), n, H, d);
  auto with = [&](int t) {
    return [&, t] {
      AttentionOptions ao;
      ao.causal = causal;
      ao.threads = t;
      peal::attention(enc, q, pos, k, pos, v, TensorView<float>(D.out.data(), n, H, d), ao);
    };
  };
  const double flops = 4.0 * double(n) * double(n) * double(d) * double(H) * (causal ? 0.5 : 1.0);
  paired_run(state, {{"", 2, with(2)}, {"1thread", 1, with(1)}}, flops * 1e-9, "GFLOPS");
}

// ---- Decode -------------------------------------------------------------------------------

constexpr Index kDecodeKeys = 32768, kDecodeQHeads = 32, kDecodeKvHeads = 8;

struct DecodeData {
  std::vector<float> q, k, k_enc, v, out, out_enc;  // q, out [1, 32, d]; k, v [nk, 8, d]
  std::vector<float> k_enc_hm;                      // k_enc for the head-major layout
  std::vector<float> src, dst;                      // the memcpy baseline: K + V bytes each
};

/// A [nk, Hk, d] view of a cache: token-major (dense) or head-major ([Hk, nk, d] in memory).
template <class T>
TensorView<T> decode_view(T* p, bool head_major) {
  const Index nk = kDecodeKeys, Hk = kDecodeKvHeads, d = kDim;
  return head_major ? TensorView<T>(p, nk, Hk, d, peal::Strides{d, nk * d, 1})
                    : TensorView<T>(p, nk, Hk, d);
}

DecodeData& decode_data() {
  static std::unique_ptr<DecodeData> p;
  if (!p) {
    const std::size_t kv = std::size_t(kDecodeKeys * kDecodeKvHeads * kDim);
    p.reset(new DecodeData{random_floats(std::size_t(kDecodeQHeads * kDim), 4),
                           random_floats(kv, 5),
                           {},
                           random_floats(kv, 6),
                           std::vector<float>(std::size_t(kDecodeQHeads * kDim)),
                           std::vector<float>(std::size_t(kDecodeQHeads * kDim)),
                           {},
                           std::vector<float>(2 * kv, 1.0f),
                           std::vector<float>(2 * kv)});
    p->k_enc = p->k;
    p->k_enc_hm = p->k;
    peal::encode_keys(rope_preset(), decode_view(p->k_enc.data(), false), Positions::sequence(0.0));
    peal::encode_keys(rope_preset(), decode_view(p->k_enc_hm.data(), true),
                      Positions::sequence(0.0));
  }
  return *p;
}

/// memcpy of `bytes` with `threads` threads, each one contiguous share.
void copy_bytes(const char* src, char* dst, std::size_t bytes, int threads) {
#pragma omp parallel num_threads(threads)
  {
    int tid = 0, nt = 1;
#ifdef _OPENMP
    tid = omp_get_thread_num(), nt = omp_get_num_threads();
#endif
    const std::size_t b0 = bytes * std::size_t(tid) / std::size_t(nt);
    const std::size_t b1 = bytes * std::size_t(tid + 1) / std::size_t(nt);
    std::memcpy(dst + b0, src + b0, b1 - b0);
  }
}

/// Sum of n floats with `threads` threads (Eigen's vectorized reduction per share).
float read_floats(const float* x, Index n, int threads) {
  float total = 0;
#pragma omp parallel num_threads(threads) reduction(+ : total)
  {
    int tid = 0, nt = 1;
#ifdef _OPENMP
    tid = omp_get_thread_num(), nt = omp_get_num_threads();
#endif
    const Index i0 = n * tid / nt, i1 = n * (tid + 1) / nt;
    total += Eigen::Map<const Eigen::ArrayXf>(x + i0, i1 - i0).sum();
  }
  return total;
}

/// A plain decode loop over an encoded cache, no GEMM and no copies (the comparison point
/// for a streaming decode path): queries qe [Hq, d] already encoded (F(t) q); each thread
/// takes a contiguous range of tokens and every KV head of each token (adjacent rows in a
/// token-major cache); per block of kBlock tokens the logits of all query heads, each
/// head's running maximum, the vectorized exps, then O += p v; ranges merged by log-sum-exp.
void decode_loop(const float* qe, const TensorView<const float>& k,
                 const TensorView<const float>& v, float* out, int threads) {
  constexpr Index kBlock = 32, Hq = kDecodeQHeads, d = kDim;
  using Vec = Eigen::Matrix<float, kDim, 1>;
  const Index nk = k.tokens(), Hk = k.heads(), G = Hq / Hk;
  const float scale = 1.0f / std::sqrt(float(d));
  std::vector<float> O(std::size_t(threads * Hq * d), 0.0f);
  std::vector<float> M(std::size_t(threads * Hq), -std::numeric_limits<float>::infinity());
  std::vector<float> L(std::size_t(threads * Hq), 0.0f);
#pragma omp parallel num_threads(threads)
  {
    int tid = 0, nt = 1;
#ifdef _OPENMP
    tid = omp_get_thread_num(), nt = omp_get_num_threads();
#endif
    const Index j0 = nk * tid / nt, j1 = nk * (tid + 1) / nt;
    float* o = O.data() + tid * Hq * d;
    float* m = M.data() + tid * Hq;
    float* l = L.data() + tid * Hq;
    alignas(64) float x[Hq * kBlock];  // logits [h][b]
    for (Index jb = j0; jb < j1; jb += kBlock) {
      const Index nb = std::min(kBlock, j1 - jb);
      for (Index b = 0; b < nb; ++b)
        for (Index kh = 0; kh < Hk; ++kh) {
          const Eigen::Map<const Vec> kv(k.vector(jb + b, kh));
          for (Index g = 0; g < G; ++g) {
            const Index h = kh * G + g;
            x[h * kBlock + b] = scale * Eigen::Map<const Vec>(qe + h * d).dot(kv);
          }
        }
      for (Index h = 0; h < Hq; ++h) {
        Eigen::Map<Eigen::ArrayXf> xh(x + h * kBlock, nb);
        const float mnew = std::max(m[h], xh.maxCoeff());
        if (mnew > m[h]) {
          const float c = std::exp(m[h] - mnew);
          l[h] *= c;
          Eigen::Map<Vec>(o + h * d) *= c;
          m[h] = mnew;
        }
        xh = (xh - mnew).exp();
        l[h] += xh.sum();
      }
      for (Index b = 0; b < nb; ++b)
        for (Index kh = 0; kh < Hk; ++kh) {
          const Eigen::Map<const Vec> vv(v.vector(jb + b, kh));
          for (Index g = 0; g < G; ++g) {
            const Index h = kh * G + g;
            Eigen::Map<Vec>(o + h * d) += x[h * kBlock + b] * vv;
          }
        }
    }
  }
  for (Index h = 0; h < Hq; ++h) {
    float mx = -std::numeric_limits<float>::infinity(), l = 0;
    for (int t = 0; t < threads; ++t) mx = std::max(mx, M[std::size_t(t * Hq + h)]);
    Eigen::Map<Vec> oh(out + h * d);
    oh.setZero();
    for (int t = 0; t < threads; ++t) {
      const float f = std::exp(M[std::size_t(t * Hq + h)] - mx);
      l += f * L[std::size_t(t * Hq + h)];
      oh += f * Eigen::Map<const Vec>(O.data() + (t * Hq + h) * d);
    }
    oh /= l;
  }
}

/// The decode cache in storage type T: K (raw and encoded, both layouts) and V converted
/// once from the float data (float: the float data itself).
template <class T>
struct DecodeCache {
  std::vector<T> k, k_enc, k_enc_hm, v;
};

template <class T>
std::vector<T> stored_as(const std::vector<float>& x) {
  std::vector<T> y(x.size());
  for (std::size_t i = 0; i < x.size(); ++i) y[i] = T(x[i]);
  return y;
}

template <class T>
const DecodeCache<T>& decode_cache() {
  static std::unique_ptr<DecodeCache<T>> p;
  if (!p) {
    const DecodeData& D = decode_data();
    p.reset(new DecodeCache<T>{stored_as<T>(D.k), stored_as<T>(D.k_enc), stored_as<T>(D.k_enc_hm),
                               stored_as<T>(D.v)});
  }
  return *p;
}

/// decode/<type><mode>: the cache stored as T (float, Eigen::half, Eigen::bfloat16; q and
/// out stay float); GBps and the memcpy / read baselines over the cache's own bytes.
template <class T>
void BM_decode(benchmark::State& state, bool encoded, bool head_major) {
  const int threads = int(state.range(0));
  const Index nk = kDecodeKeys, Hq = kDecodeQHeads, Hk = kDecodeKvHeads, d = kDim;
  DecodeData& D = decode_data();
  const DecodeCache<T>& S = decode_cache<T>();
  const auto enc = rope_preset();
  const double tq = double(nk);
  const Positions qpos(&tq, 1), kpos = Positions::sequence(0.0);
  const TensorView<const float> q(D.q.data(), 1, Hq, d);
  const auto v = decode_view<const T>(S.v.data(), head_major);
  const auto k = decode_view<const T>(S.k.data(), head_major);
  const auto ke = decode_view<const T>((head_major ? S.k_enc_hm : S.k_enc).data(), head_major);
  auto attend = [&](bool e, float* out) {
    AttentionOptions ao;
    ao.threads = threads;
    ao.keys_encoded = e;
    peal::attention(enc, q, qpos, e ? ke : k, kpos, v, TensorView<float>(out, 1, Hq, d), ao);
  };
  const std::size_t bytes = 2 * std::size_t(nk * Hk * d) * sizeof(T);
  auto fused = [&] { attend(encoded, D.out.data()); };
  auto copy = [&] {
    copy_bytes(reinterpret_cast<const char*>(D.src.data()), reinterpret_cast<char*>(D.dst.data()),
               bytes, threads);
  };
  float sink = 0;
  auto read = [&] {
    sink += read_floats(D.src.data(), Index(bytes / sizeof(float)), threads);
    benchmark::DoNotOptimize(sink);
  };
  set_threads(threads);
  attend(false, D.out.data());
  attend(true, D.out_enc.data());
  const double diff = max_abs_diff(D.out, D.out_enc);
  std::vector<Contender> cs = {
      {"", threads, fused}, {"memcpy", threads, copy}, {"read", threads, read}};
  if constexpr (std::is_same<T, float>::value) {
    // The plain loop (encoded f32 caches only): the query encoded once, as an engine would.
    std::vector<float> qe(D.q), out_loop(D.out.size());
    peal::encode_queries(enc, TensorView<float>(qe.data(), 1, Hq, d), qpos);
    auto loop = [&, qe, out_loop]() mutable {
      decode_loop(qe.data(), ke, v, out_loop.data(), threads);
    };
    if (encoded) {
      decode_loop(qe.data(), ke, v, out_loop.data(), threads);
      state.counters["loop_max_diff"] = max_abs_diff(D.out_enc, out_loop);
      cs.push_back({"loop", threads, loop});
    }
  }
  paired_run(state, cs, double(bytes) * 1e-9, "GBps");
  state.counters["max_diff"] = diff;
}

// ---- Fused scores, one head ---------------------------------------------------------------

enum class ScoreKind { rope, alibi, decay };

struct ScoresData {
  std::vector<float> q, k, qe, ke, out;  // [n, 1, d], out [1, n, n]
};

ScoresData& scores_data(Index n) {
  static std::map<Index, std::unique_ptr<ScoresData>> cache;
  auto& p = cache[n];
  if (!p) {
    const std::size_t sz = std::size_t(n * kDim);
    p.reset(new ScoresData{random_floats(sz, 7), random_floats(sz, 8), std::vector<float>(sz),
                           std::vector<float>(sz), std::vector<float>(std::size_t(n * n))});
  }
  return *p;
}

template <class E>
void scores_one_head(benchmark::State& state, const E& enc, ScoreKind kind) {
  const Index n = state.range(0), d = kDim;
  const int threads = int(state.range(1));
  ScoresData& D = scores_data(n);
  const auto pos = Positions::sequence(0.0);
  ScoreOptions so;
  so.threads = threads;
  const double m = peal::alibi_slopes(1)[0], g = peal::retnet_decays(1)[0];
  if (kind == ScoreKind::alibi) so.alibi_slopes = {m};
  if (kind == ScoreKind::decay) so.decay = {g};
  // γ^(i − j) for i − j in [−(n−1), n−1], as an engine would cache it.
  std::vector<float> pw(std::size_t(2 * n));
  for (Index x = 0; x < 2 * n; ++x) pw[std::size_t(x)] = float(std::pow(g, double(x - n)));
  const TensorView<const float> q(D.q.data(), n, 1, d), k(D.k.data(), n, 1, d);
  auto fused = [&] {
    peal::scores(enc, q, pos, k, pos, TensorView<float>(D.out.data(), 1, n, n), so);
  };
  auto gemm = [&] { qk_heads(D.q.data(), D.k.data(), D.out.data(), n, n, 1, d); };
  auto unfused = [&] {
    peal::encode_queries(enc, q, TensorView<float>(D.qe.data(), n, 1, d), pos);
    peal::encode_keys(enc, k, TensorView<float>(D.ke.data(), n, 1, d), pos);
    qk_heads(D.qe.data(), D.ke.data(), D.out.data(), n, n, 1, d);
    if (kind == ScoreKind::rope) return;
    float* o = D.out.data();
#pragma omp parallel for schedule(static)
    for (Index i = 0; i < n; ++i) {
      float* r = o + i * n;
      if (kind == ScoreKind::alibi) {
        for (Index j = 0; j < n; ++j) r[j] -= float(m) * float(i - j);
      } else {
        const float* p = pw.data() + n + i;
        for (Index j = 0; j < n; ++j) r[j] *= p[-j];
      }
    }
  };
  paired_run(state, {{"", threads, fused}, {"gemm", threads, gemm}, {"unfused", threads, unfused}},
             2.0 * double(n) * double(n) * double(d) * 1e-9, "GFLOPS");
}

// ---- The FMA ceiling ----------------------------------------------------------------------

#if defined(__AVX512F__) || defined(__FMA__)
#ifdef __AVX512F__
using Vec = __m512;
inline Vec vfma(Vec a, Vec b, Vec c) { return _mm512_fmadd_ps(a, b, c); }
inline Vec vset(float x) { return _mm512_set1_ps(x); }
inline float vfirst(Vec a) { return _mm512_cvtss_f32(a); }
#else
using Vec = __m256;
inline Vec vfma(Vec a, Vec b, Vec c) { return _mm256_fmadd_ps(a, b, c); }
inline Vec vset(float x) { return _mm256_set1_ps(x); }
inline float vfirst(Vec a) { return _mm256_cvtss_f32(a); }
#endif
constexpr int kChains = 16;  // independent accumulators: > latency x ports

float fma_chains(long iters) {
  Vec a[kChains];
  for (int j = 0; j < kChains; ++j) a[j] = vset(float(j) * 1e-3f);
  const Vec b = vset(0.999999f), c = vset(1e-7f);
  for (long i = 0; i < iters; ++i)
    for (int j = 0; j < kChains; ++j) a[j] = vfma(a[j], b, c);
  float s = 0;
  for (int j = 0; j < kChains; ++j) s += vfirst(a[j]);
  return s;
}

void BM_fma_peak(benchmark::State& state) {
  const int threads = int(state.range(0));
  constexpr long kIters = 1 << 22;
  for (auto _ : state) {
    float s = 0;
#pragma omp parallel num_threads(threads) reduction(+ : s)
    s += fma_chains(kIters);
    benchmark::DoNotOptimize(s);
  }
  const double flops = 2.0 * double(kIters) * kChains * (sizeof(Vec) / sizeof(float)) * threads;
  state.counters["GFLOPS"] =
      benchmark::Counter(flops * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
}
#endif

// ---- Registration -------------------------------------------------------------------------

[[maybe_unused]] const bool registered = [] {
  auto paired = [](const std::string& name, auto fn) {
    auto* b = benchmark::RegisterBenchmark(name.c_str(), fn);
    b->UseManualTime()->Unit(benchmark::kMillisecond)->MinTime(1.0);
    return b;
  };
  for (bool causal : {false, true}) {
    const std::string enc = causal ? "rope_causal" : "rope";
    for (bool identity : {false, true}) {
      auto* p = paired(
          "prefill/" + std::string(identity ? "identity" : "rope") + (causal ? "_causal" : ""),
          [causal, identity](benchmark::State& s) {
            if (identity)
              BM_prefill(s, peal::PassThrough<double>(int(kDim)), causal);
            else
              BM_prefill(s, rope_preset(), causal);
          });
      for (Index n : {512, 1024, 2048})
        for (Index t : {1, 2}) p->Args({n, t, kPrefillHeads});
      for (Index n : {512, 2048}) p->Args({n, 1, 1});
    }
    paired("threads/" + enc, [causal](benchmark::State& s) { BM_prefill_threads(s, causal); })
        ->Arg(512)
        ->Arg(2048);
  }
  for (bool causal : {false, true})
    paired(std::string("backward/") + (causal ? "rope_causal" : "rope"),
           [causal](benchmark::State& s) { BM_backward(s, causal); })
        ->Args({512, 4})
        ->Args({2048, 4})
        ->Args({512, 1})
        ->Args({2048, 1});
  for (bool causal : {false, true})
    paired(std::string("backward_threads/") + (causal ? "rope_causal" : "rope"),
           [causal](benchmark::State& s) { BM_backward(s, causal, true); })
        ->Args({512, 4})
        ->Args({2048, 4})
        ->Args({512, 1})
        ->Args({2048, 1});
  // decode/<mode>: f32 cache; decode/f16_<mode>, decode/bf16_<mode>: half-precision caches.
  auto decode = [&](const std::string& type, auto tag) {
    using T = decltype(tag);
    for (bool hm : {false, true})
      for (bool encoded : {false, true})
        paired("decode/" + type + (encoded ? "encoded" : "raw") + (hm ? "_headmajor" : ""),
               [encoded, hm](benchmark::State& s) { BM_decode<T>(s, encoded, hm); })
            ->Arg(1)
            ->Arg(2);
  };
  decode("", float());
  decode("f16_", Eigen::half());
  decode("bf16_", Eigen::bfloat16());
  auto one_head = [&](const std::string& name, auto fn) {
    auto* b = paired("scores1h/" + name, fn);
    b->MinTime(0.5);
    for (Index n : {512, 2048}) b->Args({n, 1});
  };
  one_head("rope", [](benchmark::State& s) { scores_one_head(s, rope_preset(), ScoreKind::rope); });
  one_head("alibi", [](benchmark::State& s) {
    scores_one_head(s, peal::PassThrough<double>(int(kDim)), ScoreKind::alibi);
  });
  one_head("rope_decay",
           [](benchmark::State& s) { scores_one_head(s, rope_preset(), ScoreKind::decay); });
#if defined(__AVX512F__) || defined(__FMA__)
  benchmark::RegisterBenchmark("peak/fma", BM_fma_peak)
      ->UseRealTime()
      ->Unit(benchmark::kMillisecond)
      ->Arg(1)
      ->Arg(2);
#endif
  return true;
}();

}  // namespace

BENCHMARK_MAIN();
