// The three forms of peal::linear_attention (linear_attention.hpp; docs/linear-attention.md):
//
//   parallel:  every visible pair through the tile driver (detail/tiled/tile_run.hpp) with
//              LinearSink (detail/tiled/linear_sink.hpp): O += S V per tile, rebased like scores;
//   chunkwise: keys cut into chunks of `chunk`; chunk c (keys [j0, j1), anchor T_c = s_{j0})
//              gives its queries (those with s_{j0} <= t_i < s_{j1}) the state's part
//              scale γ^(t_i − T_c) q̂_i^T M(T_c) plus the pairs within the chunk (the tile
//              driver on the chunk), then carries the state to T_{c+1} = s_{j1}:
//                M(T_{c+1}) = γ^(T_{c+1} − T_c) A(T_{c+1} − T_c) M(T_c)
//                             + Σ_{j in c} γ^(T_{c+1} − s_j) A(T_{c+1} − s_j) k_j v_j^T;
//              every lag is ≥ 0, so with decays every factor is ≤ 1 and no cumulative
//              product over a chunk is formed (the overflow of the usual chunk form);
//   recurrent: token by token through the state ops (detail/tiled/linear_ops.hpp), what
//              LinearState does.
// The state between chunks and at the end is a detail::linear::StateData (linear_state.hpp).
#pragma once

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "../../linear_options.hpp"
#include "../../linear_state.hpp"
#include "../../positions.hpp"
#include "../../score_options.hpp"
#include "../../view.hpp"
#include "../parallel.hpp"
#include "linear_ops.hpp"
#include "linear_sink.hpp"
#include "tile_run.hpp"

#ifdef _OPENMP
#include <omp.h>
#endif

namespace peal {
namespace detail {
namespace linear {

/// Rows [t0, t0 + n) and heads [h0, h0 + nh) of a view.
template <class T>
TensorView<T> sub(const TensorView<T>& v, Index t0, Index n, Index h0, Index nh) {
  if (n == 0 || nh == 0) return TensorView<T>(v.data(), n, nh, v.dim(), v.strides());
  return TensorView<T>(v.vector(t0, h0), n, nh, v.dim(), v.strides());
}

/// Keys per chunk when LinearAttentionOptions::chunk = 0 (fastest of 32..256 at n = 8192,
/// bench/README.md, "Linear attention").
inline constexpr Index kDefaultChunk = 64;

/// The most threads a run starts, whatever LinearAttentionOptions::threads asks (the tile
/// driver's own cap): every product of the count stays far inside int, and OpenMP is never
/// asked for 2^31 threads.
inline constexpr int kMaxThreads = 1024;

/// a x b values (a, b >= 0) as a buffer size: refused, never wrapped, past the index range.
inline Index cells(Index a, Index b) {
  const Index n = checked_mul(a, b);
  if (n < 0)
    fail("linear_attention: a buffer of " + std::to_string(a) + " x " + std::to_string(b) +
         " values is past the index range");
  return n;
}

template <class C, class E, class Tq, class Tk, class Tv, class To>
class LinearRun {
  using Sink = tiled::LinearSink<C, Tv, To>;

 public:
  // The automatic form: parallel up to this many keys (one or two key tiles of the driver),
  // recurrent for at most kRecurrentQueries queries against as many keys (decoding).
  static constexpr Index kParallelKeys = 256;
  static constexpr Index kRecurrentTokens = 8;

  LinearRun(const E& enc, const TensorView<Tq>& q, const Positions& tq, const TensorView<Tk>& k,
            const Positions& tk, const TensorView<Tv>& v, const TensorView<To>& out,
            const LinearAttentionOptions& opt, StateData<C>& st, bool keep_state)
      : enc_(&enc), ops_(enc), q_(q), k_(k), v_(v), out_(out), st_(st),
        keep_(keep_state) {
    nq_ = q.tokens(), nk_ = k.tokens(), Hq_ = q.heads(), Hk_ = k.heads(), G_ = Hq_ / Hk_;
    d_ = q.dim(), dv_ = v.dim();
    t_.resize(std::size_t(nq_));
    s_.resize(std::size_t(nk_));
    for (Index i = 0; i < nq_; ++i) t_[std::size_t(i)] = tq[i];
    for (Index j = 0; j < nk_; ++j) s_[std::size_t(j)] = tk[j];
    form_ = opt.form;
    if (form_ == LinearForm::automatic)
      form_ = nq_ <= kRecurrentTokens && nk_ <= kRecurrentTokens ? LinearForm::recurrent
              : nk_ <= kParallelKeys                             ? LinearForm::parallel
                                                                 : LinearForm::chunkwise;
    // A chunk of at least the keys is one chunk: every buffer is sized by the keys, never by
    // the option (RetNet's constant S(B) alone takes the size given, chunk_floor).
    const Index given = opt.chunk > 0 ? opt.chunk : kDefaultChunk;
    block_ = double(given);
    chunk_ = form_ == LinearForm::parallel ? std::max<Index>(nk_, 1)
                                           : std::min(given, std::max<Index>(nk_, 1));
    int nt = 1;
#ifdef _OPENMP
    if (!omp_in_parallel()) nt = opt.threads > 0 ? opt.threads : omp_get_max_threads();
#endif
    // each() uses at most one thread per work item, the tile driver one per unit.
    threads_ = std::min(std::max(nt, 1), kMaxThreads);
    if (st_.norm == LinearNorm::retnet && form_ != LinearForm::recurrent) norm_factors();
  }

  LinearForm form() const { return form_; }
  /// Threads the run may start (for tests: at most kMaxThreads) and keys per chunk.
  int threads() const { return threads_; }
  Index chunk() const { return chunk_; }

  void run() {
    if (form_ == LinearForm::recurrent) {
      each(st_.heads, [&](Index s) { recurrent_head(s); });
    } else if (form_ == LinearForm::parallel) {
      parallel();
    } else {
      each(Hk_, [&](Index kh) { chunkwise_group(kh); });
    }
    if (nk_ > 0) {
      st_.time = s_.back();
      st_.empty = false;
    }
  }

 private:
  // fn(x) for x < n on the threads (each x on one thread: results do not depend on them).
  template <class Fn>
  void each(Index n, Fn&& fn) const {
    parallel_each(n, int(std::min<Index>(threads_, n)), fn);
  }

  // Per-group working memory.
  struct Work {
    Buffer<C> coef, qrows, krows, kscaled, vrows, scratch;
    std::vector<double> rel, delta, f;
    GemmSpace<C> gemm;
  };
  void prepare(Work& w, Index rows) const {
    const Index cs = std::max<Index>(ops_.coef_size(), 1);
    w.coef.resize(std::size_t(cells(rows, cs)));
    w.qrows.resize(std::size_t(cells(rows, d_)));
    w.krows.resize(w.qrows.size());
    w.kscaled.resize(w.qrows.size());
    w.vrows.resize(std::size_t(cells(rows, dv_)));
    w.delta.resize(std::size_t(rows));
    w.f.resize(std::size_t(rows));
    w.scratch.resize(std::size_t(ops_.scratch_size()));
    w.gemm.size(std::max(rows, dv_), std::max(d_, dv_), std::max(rows, d_));
  }
  double lam(Index s) const { return st_.lam[std::size_t(s)]; }

  // ---- The state's part for queries [i0, i0 + m) of the heads of key head kh:
  // base[(i G + g) dv + e] = scale γ^(t_i − T) q̂_i^T M_σ(T).
  void read_base(Work& w, Index kh, Index i0, Index m, double T, C* base) const {
    for (Index i = 0; i < m; ++i) w.delta[std::size_t(i)] = t_[std::size_t(i0 + i)] - T;
    ops_.coefficients(w.delta.data(), m, w.coef.data(), true, w.rel);
    std::fill_n(base, m * G_ * dv_, C(0));
    for (Index g = 0; g < G_; ++g) {
      const Index h = kh * G_ + g, s = st_.state_of(h);
      for (Index i = 0; i < m; ++i)
        w.f[std::size_t(i)] = st_.scale * std::exp(lam(s) * w.delta[std::size_t(i)]);
      ops_.load_rows(q_, i0, m, h, w.coef.data(), false, true, w.f.data(), w.qrows.data(),
                     w.scratch.data());
      if (d_ > 0 && dv_ > 0)
        eigen_gemm::gemm_abt<C, Eigen::RowMajor>(m, dv_, d_, w.qrows.data(), d_, st_.w(s), d_,
                                                 base + g * dv_, G_ * dv_, C(1), w.gemm.blocking);
    }
  }

  // ---- Keys [j0, j0 + n) of key head kh into the state of its heads, which moves from T
  // (empty: none yet) to T1 >= every s_j.
  void carry(Work& w, Index kh, Index j0, Index n, double T, bool empty, double T1) const {
    for (Index j = 0; j < n; ++j) w.delta[std::size_t(j)] = T1 - s_[std::size_t(j0 + j)];
    ops_.coefficients(w.delta.data(), n, w.coef.data(), false, w.rel);
    ops_.load_rows(k_, j0, n, kh, w.coef.data(), false, false, nullptr, w.krows.data(),
                   w.scratch.data());
    const Index es = v_.strides().elem;
    for (Index j = 0; j < n; ++j) {
      const auto* src = v_.vector(j0 + j, kh);
      for (Index e = 0; e < dv_; ++e) w.vrows[std::size_t(j * dv_ + e)] = detail::to_arith<C>(src[e * es]);
    }
    const bool moves = !empty && T1 != T;
    if (moves) {
      const double D = T1 - T;
      ops_.coefficients(&D, 1, w.coef.data(), false, w.rel);  // (the key rows are loaded)
    }
    const Index s0 = st_.heads == Hq_ ? kh * G_ : kh, ns = st_.heads == Hq_ ? G_ : 1;
    for (Index s = s0; s < s0 + ns; ++s) {
      C* W = st_.w(s);
      const double g = moves ? std::exp(lam(s) * (T1 - T)) : 1.0;
      if (moves) ops_.advance(W, dv_, w.coef.data(), C(g), w.scratch.data());
      double z = empty ? 0.0 : g * st_.z[std::size_t(s)];
      const C* kr = w.krows.data();
      if (lam(s) != 0) {  // γ^(T1 − s_j) ≤ 1 on the key rows
        for (Index j = 0; j < n; ++j) {
          const double f = std::exp(lam(s) * w.delta[std::size_t(j)]);
          z += f;
          for (Index e = 0; e < d_; ++e)
            w.kscaled[std::size_t(j * d_ + e)] = C(f) * w.krows[std::size_t(j * d_ + e)];
        }
        kr = w.kscaled.data();
      } else {
        z += double(n);
      }
      st_.z[std::size_t(s)] = z;
      if (n > 0 && d_ > 0 && dv_ > 0)
        eigen_gemm::gemm_atb<C>(dv_, d_, n, w.vrows.data(), dv_, kr, d_, W, d_, C(1),
                                w.gemm.blocking);
    }
  }

  // ---- The pairs of queries [i0, i0 + m) and keys [j0, j0 + n) of the heads of key heads
  // [kh, kh + nkh), written to out with the state's part `base` (or none).
  void pairs(Index i0, Index m, Index j0, Index n, Index kh, Index nkh, const C* base,
             int threads, const double* floor = nullptr) const {
    const Index h0 = kh * G_, nh = nkh * G_;
    tiled::LinearRows<C> rows;
    rows.base = base;
    std::vector<double> f;
    if (!norm_.empty()) {
      f.resize(std::size_t(cells(m, nh)));
      for (Index i = 0; i < m; ++i)
        for (Index g = 0; g < nh; ++g)
          f[std::size_t(i * nh + g)] = norm_[std::size_t((i0 + i) * Hq_ + h0 + g)];
      rows.f = f.data();
      // torchscale: parallel .clamp(min=1, max=5e4); chunkwise max(inner_scale, K_c)
      rows.clamp = true;
      rows.lo = 1;
      rows.hi = form_ == LinearForm::parallel ? 5e4 : std::numeric_limits<double>::infinity();
      rows.lo_head = floor;
    }
    const TensorView<To> o = sub(out_, i0, m, h0, nh);
    if (n == 0) {  // no keys: the state's part alone
      write_rows(o, m, nh, base, rows.f);
      return;
    }
    ScoreOptions so;
    so.causal = true;
    so.scale = st_.scale;
    so.threads = threads;
    if (!st_.decay.empty()) so.decay.assign(st_.decay.begin() + h0, st_.decay.begin() + h0 + nh);
    const TensorView<Tv> vv = sub(v_, j0, n, kh, nkh);
    Sink sink(vv, o, rows);
    tiled::TileRun<C, E, Tq, Tk, Sink> run(
        *enc_, sub(q_, i0, m, h0, nh), Positions(t_.data() + i0, m), sub(k_, j0, n, kh, nkh),
        Positions(s_.data() + j0, n), sink, so);
    run.run();
  }
  void write_rows(const TensorView<To>& o, Index m, Index nh, const C* base, const double* f) const {
    const Index es = o.strides().elem;
    for (Index i = 0; i < m; ++i)
      for (Index h = 0; h < nh; ++h) {
        To* dst = o.vector(i, h);
        const double fi = f ? f[i * nh + h] : 1.0;
        for (Index e = 0; e < dv_; ++e)
          dst[e * es] = detail::from_arith<To>(
              base ? C(double(base[(i * nh + h) * dv_ + e]) * fi) : C(0));
      }
  }

  void parallel() {
    Buffer<C> base;
    if (!st_.empty && nq_ > 0) {
      base.resize(std::size_t(cells(cells(nq_, Hq_), dv_)));
      each(Hk_, [&](Index kh) {
        Work w;
        prepare(w, nq_);
        Buffer<C> b(std::size_t(cells(cells(nq_, G_), dv_)));
        read_base(w, kh, 0, nq_, st_.time, b.data());
        for (Index i = 0; i < nq_; ++i)
          std::copy_n(b.data() + i * G_ * dv_, G_ * dv_, base.data() + (i * Hq_ + kh * G_) * dv_);
      });
    }
    if (nq_ > 0) pairs(0, nq_, 0, nk_, 0, Hk_, base.empty() ? nullptr : base.data(), threads_);
    if (keep_ && nk_ > 0)
      each(Hk_, [&](Index kh) {
        Work w;
        prepare(w, nk_);
        carry(w, kh, 0, nk_, st_.time, st_.empty, s_.back());
      });
  }

  void chunkwise_group(Index kh) {
    Work w;
    prepare(w, chunk_);
    const Index nc = nk_ == 0 ? 0 : 1 + (nk_ - 1) / chunk_;  // chunk_ <= nk_
    double T = st_.time;
    bool empty = st_.empty;
    Buffer<C> base;  // the state's part of one chunk's queries (sized by them)
    std::vector<double> floor(std::size_t(G_), 1.0);
    if (nc == 0) {  // no keys: every query reads the state
      prepare(w, nq_);
      base.resize(std::size_t(cells(cells(nq_, G_), dv_)));
      if (!empty && nq_ > 0) read_base(w, kh, 0, nq_, T, base.data());
      pairs(0, nq_, 0, 0, kh, 1, empty ? nullptr : base.data(), 1);
      return;
    }
    Index i0 = 0;
    for (Index c = 0; c < nc; ++c) {
      const Index j0 = c * chunk_, j1 = std::min(nk_, j0 + chunk_);
      // Queries with s_{j0} <= t_i < s_{j1} (chunk 0: from the first; last: to the end).
      Index i1 = nq_;
      if (c + 1 < nc)
        i1 = Index(std::lower_bound(t_.begin() + i0, t_.end(), s_[std::size_t(j1)]) - t_.begin());
      const Index m = i1 - i0;
      if (m > 0) {
        if (!empty) {
          if (Index(w.qrows.size()) < cells(m, d_)) prepare(w, m);
          const Index nb = cells(cells(m, G_), dv_);
          if (Index(base.size()) < nb) base.resize(std::size_t(nb));
          read_base(w, kh, i0, m, T, base.data());
        }
        if (!norm_.empty()) chunk_floor(w, kh, c, T, empty, floor.data());
        pairs(i0, m, j0, j1 - j0, kh, 1, empty ? nullptr : base.data(), 1,
              norm_.empty() ? nullptr : floor.data());
      }
      if (c + 1 < nc || keep_) {
        const double T1 = c + 1 < nc ? s_[std::size_t(j1)] : s_.back();
        carry(w, kh, j0, j1 - j0, T, empty, T1);
        T = T1, empty = false;
      }
      i0 = i1;
    }
  }

  void recurrent_head(Index s) {
    const Index kh = st_.key_of(s), R = st_.readers(), h0 = st_.first_reader(s);
    const std::size_t cs = std::size_t(std::max<Index>(ops_.coef_size(), 1)), d = std::size_t(d_),
                      dv = std::size_t(dv_);
    Buffer<C> coef(cs), q0(cs), k0(cs), qc(cs), kh_row(d), vrow(dv),
        qh(std::size_t(cells(R, d_))), o(std::size_t(cells(R, dv_))),
        scratch(std::size_t(ops_.scratch_size()));
    std::vector<double> rel;
    const double zero = 0;
    ops_.coefficients(&zero, 1, k0.data(), false, rel);
    ops_.coefficients(&zero, 1, q0.data(), true, rel);
    double T = st_.time, last = std::numeric_limits<double>::quiet_NaN(), z = st_.z[std::size_t(s)];
    bool empty = st_.empty;
    C* W = st_.w(s);
    auto add_key = [&](Index j, bool read) {
      const double D = empty ? 0.0 : s_[std::size_t(j)] - T;
      if (D != 0 && !(D == last)) ops_.coefficients(&D, 1, coef.data(), false, rel), last = D;
      const double g = std::exp(lam(s) * D);
      ops_.load_rows(k_, j, 1, kh, k0.data(), true, false, nullptr, kh_row.data(), scratch.data());
      const Index es = v_.strides().elem;
      for (Index e = 0; e < dv_; ++e) vrow[std::size_t(e)] = detail::to_arith<C>(v_.vector(j, kh)[e * es]);
      ops_.step(W, dv_, D != 0 ? coef.data() : nullptr, C(g), vrow.data(), kh_row.data(), qh.data(),
                read ? R : 0, o.data(), scratch.data());
      z = (empty ? 0.0 : g * z) + 1.0;
      T = s_[std::size_t(j)], empty = false;
    };
    Index jn = 0;
    for (Index i = 0; i < nq_; ++i) {
      const double ti = t_[std::size_t(i)];
      bool done = false;
      while (jn < nk_ && s_[std::size_t(jn)] <= ti) {
        // The last key before this query, at its time: update and read in one pass.
        const bool fuse = s_[std::size_t(jn)] == ti && (jn + 1 == nk_ || s_[std::size_t(jn + 1)] > ti);
        if (fuse)
          for (Index x = 0; x < R; ++x)
            ops_.load_rows(q_, i, 1, h0 + x, q0.data(), true, true, &st_.scale,
                           qh.data() + x * d_, scratch.data());
        add_key(jn++, fuse);
        done = fuse;
      }
      double f = 1.0, g = 1.0;
      if (!done) {
        const double dt = empty ? 0.0 : ti - T;
        g = std::exp(lam(s) * dt);
        const double sc = st_.scale * g;
        ops_.coefficients(&dt, 1, qc.data(), true, rel);
        for (Index x = 0; x < R; ++x)
          ops_.load_rows(q_, i, 1, h0 + x, qc.data(), true, true, &sc, qh.data() + x * d_,
                         scratch.data());
        if (empty)
          std::fill(o.begin(), o.end(), C(0));
        else
          ops_.step(W, dv_, nullptr, C(1), nullptr, nullptr, qh.data(), R, o.data(), scratch.data());
      }
      if (st_.norm == LinearNorm::retnet) f = g * z > 0 ? 1.0 / std::sqrt(g * z) : 0.0;
      for (Index x = 0; x < R; ++x) {
        const Index es = out_.strides().elem;
        To* dst = out_.vector(i, h0 + x);
        for (Index e = 0; e < dv_; ++e)
          dst[e * es] = detail::from_arith<To>(
              f == 1.0 ? o[std::size_t(x * dv_ + e)] : C(double(o[std::size_t(x * dv_ + e)]) * f));
      }
    }
    if (keep_)
      while (jn < nk_) add_key(jn++, false);
    st_.z[std::size_t(s)] = z;
  }

  // RetNet's chunk form (torchscale chunk_recurrent_forward): rows of chunk c are divided by
  // max(inner_scale, K_c), K_c = max(1, ||KV_c||_1) the largest column abs-sum of the state
  // in torchscale's absolute frame, KV_c = scale / S(B) · A(−T') M(T'), T' the previous chunk's
  // last key (M(T_c) = γ^(T_c − T') A(T_c − T') M(T'), and A(−T_c) A(T_c − T') = A(−T')),
  // S(B) = (1 − γ^B)/(1 − γ). Bounded only for a pure rotation (checked by the caller).
  void chunk_floor(Work& w, Index kh, Index c, double T, bool empty, double* floor) const {
    const Index j0 = c * chunk_;
    const double back = j0 > 0 ? T - s_[std::size_t(j0 - 1)] : 0.0;
    const double minus_t = -T;
    ops_.coefficients(&minus_t, 1, w.coef.data(), false, w.rel);
    Buffer<C> col(static_cast<std::size_t>(d_));
    for (Index g = 0; g < G_; ++g) {
      const Index s = st_.state_of(kh * G_ + g);
      double K = 0;
      if (!empty) {
        const C* W = st_.w(s);
        for (Index r = 0; r < dv_; ++r) {
          std::copy_n(W + r * d_, d_, col.data());
          ops_.advance(col.data(), 1, w.coef.data(), C(1), w.scratch.data());
          double a = 0;
          for (Index e = 0; e < d_; ++e) a += std::abs(double(col[std::size_t(e)]));
          K = std::max(K, a);
        }
        const double gam = std::exp(lam(s)), B = block_;
        const double SB = gam == 1.0 ? B : -std::expm1(B * lam(s)) / (1.0 - gam);
        K *= st_.scale / SB / std::exp(lam(s) * back);
      }
      floor[g] = std::max(1.0, K);
    }
  }

  // RetNet's row factors 1/sqrt(Σ_{s_j ≤ t_i} γ^(t_i − s_j)) (parallel: with the state's
  // keys; chunkwise: over the keys of the query's chunk, torchscale's sqrt(S(a + 1)) with
  // the local row a), norm_[i Hq + h].
  void norm_factors() {
    norm_.assign(std::size_t(cells(nq_, Hq_)), 0.0);
    for (Index h = 0; h < Hq_; ++h) {
      const Index s = st_.state_of(h);
      double Z = st_.empty ? 0.0 : st_.z[std::size_t(s)], Tz = st_.time;
      bool any = !st_.empty;
      Index j = 0;
      for (Index i = 0; i < nq_; ++i) {
        const double ti = t_[std::size_t(i)];
        for (; j < nk_ && s_[std::size_t(j)] <= ti; ++j) {
          const double sj = s_[std::size_t(j)];
          if (form_ == LinearForm::chunkwise && j % chunk_ == 0) any = false;  // local sums
          Z = (any ? Z * std::exp(lam(s) * (sj - Tz)) : 0.0) + 1.0;
          Tz = sj, any = true;
        }
        const double zi = any ? Z * std::exp(lam(s) * (ti - Tz)) : 0.0;
        norm_[std::size_t(i * Hq_ + h)] = zi > 0 ? 1.0 / std::sqrt(zi) : 0.0;
      }
    }
  }

  const E* enc_;
  StateOps<C, E> ops_;
  TensorView<Tq> q_;
  TensorView<Tk> k_;
  TensorView<Tv> v_;
  TensorView<To> out_;
  StateData<C>& st_;
  bool keep_;
  Index nq_ = 0, nk_ = 0, Hq_ = 0, Hk_ = 0, G_ = 1, d_ = 0, dv_ = 0, chunk_ = 64;
  double block_ = 64;  // the chunk size given: RetNet's S(B)
  LinearForm form_ = LinearForm::automatic;
  int threads_ = 1;
  std::vector<double> t_, s_, norm_;
};

}  // namespace linear
}  // namespace detail
}  // namespace peal
