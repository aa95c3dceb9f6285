// The driver of the fused kernels (scores.hpp, attention.hpp): TileRun<C, E, Tq, Tk, Sink>
// cuts queries and keys into rebased tiles (detail/tile_plan.hpp), encodes the rows of each
// tile through the encoding's coder (detail/scores_coders.hpp, which reads block_traits),
// multiplies them with Eigen's GEMM (detail/eigen_gemm.hpp), adds the per-pair polynomial
// parts (detail/scores_poly.hpp), applies the epilogue (per-pair decay, ALiBi, causal mask)
// and hands each finished tile to a Sink, the one thing that differs between kernels:
//
//   ScoresOut<Out> (scores.hpp)     writes the tile into scores' out [Hq, nq, nk];
//   AttentionSink (detail/attention_sink.hpp)  folds it into an online softmax times V;
//   LinearSink (detail/linear_sink.hpp)        multiplies it into V (linear attention).
// (The in-place sinks share InPlaceSink and value_rows, detail/tile_sink.hpp.)
//
// A Sink has: value_type (what the epilogue writes), in_place, splits_keys and applies_masks
// (constexpr bools; the last: the sink masks partial tiles itself, the epilogue does not), window(), direct_row_major<C>(nk), direct_col_major<C>(), direct<C>(h, i0, j0, rm,
// ldr) (a tile written by the GEMM straight into the sink's memory), row(work, tile, h, i0,
// i, j0, n, st) (where the epilogue writes a row), masked(run, work, h, I, J) (a tile with
// every pair masked), key_block(run, work, J) (once per key tile before its heads, when a
// unit holds every key head: head_slots() > 1), key_tile(run, work, kh, J),
// tile_done(run, work, tile, h, I, J) (one head's finished tile), group_done(run, work, tile,
// kh, I, J) (every head of the group), unit_begin/unit_end(run, work, kh, I0, I1, split),
// finish(run), and a Work type (its per-thread memory, carved by work.carve(arena, run)).
// The algorithm is described at the top of scores.hpp and in docs/kernels-scores.md;
// attention in docs/kernels-attention.md.
#pragma once

#include <Eigen/Core>
#include <algorithm>
#include <cmath>
#include <cstring>
#include <exception>
#include <limits>
#include <memory>
#include <type_traits>
#include <utility>
#include <vector>

#include "../positions.hpp"
#include "../score_options.hpp"
#include "../view.hpp"
#include "arena.hpp"
#include "compiler.hpp"
#include "eigen_gemm.hpp"
#include "exp_kernel.hpp"
#include "exp_poly.hpp"
#include "scores_coders.hpp"
#include "storage.hpp"
#include "tile_plan.hpp"

#ifdef _OPENMP
#include <omp.h>
#endif

namespace peal {
namespace detail {
namespace scores_kernels {

using detail::arith_t;
using detail::is_storage;
using detail::to_arith;

/// f[j] = e^{lam (t − s[j])}, j < n: the per-pair decays of a steep γ (TileRun), with the
/// exponent formed as the reference forms it. A row whose exponents all lie outside
/// [−746, 710] (where e^x is 0, resp. inf, in double: most rows of a tile far from the
/// diagonal when γ is tiny) takes a select instead of the exp; otherwise the vectorizable
/// exp (detail/exp_kernel.hpp), in chunks of constant trip count so that it vectorizes at
/// -O2 too (the cheap loops vectorize at -O3).
inline void decay_row(double lam, double t, const double* PEAL_RESTRICT s, Index n,
                      double* PEAL_RESTRICT f) {
  for (Index j = 0; j < n; ++j) f[j] = lam * (t - s[j]);
  unsigned finite = 0;  // some e^{f[j]} neither 0 nor inf (an OR of integer flags vectorizes)
  for (Index j = 0; j < n; ++j) finite |= unsigned(f[j] > -746.0) & unsigned(f[j] < 710.0);
  if (finite == 0) {
    constexpr double inf = std::numeric_limits<double>::infinity();
    for (Index j = 0; j < n; ++j) f[j] = f[j] < 0 ? 0.0 : inf;
    return;
  }
  Index j = 0;
  for (; j + 8 <= n; j += 8)
    for (Index e = 0; e < 8; ++e) f[j + e] = exp_kernel(f[j + e]);
  for (; j < n; ++j) f[j] = exp_kernel(f[j]);
}

// The coders (coder_t<C, E>, scores_split<C, E>): detail/scores_coders.hpp.

/// scale·γ_h^τ·v − m_h τ: the options applied to a score v = q^T A(τ) k. γ^τ by mul_exp
/// (detail/exp_poly.hpp), so that past the range a zero score stays 0 (not 0·inf) and only
/// a product beyond the range is ±inf.
inline double finish_score(double v, Index h, double tau, const ScoreOptions& opt) {
  v *= opt.scale;
  if (!opt.decay.empty()) v = mul_exp(v, std::log(opt.decay[std::size_t(h)]) * tau);
  if (!opt.alibi_slopes.empty()) v -= opt.alibi_slopes[std::size_t(h)] * tau;
  return v;
}

// ---- GEMM: detail/eigen_gemm.hpp (Eigen's blocked kernel, res += alpha A B^T) --------------
using eigen_gemm::gemm_abt;

// ---- The driver ---------------------------------------------------------------------------
template <class C, class E, class Tq, class Tk, class Sink>
class TileRun {
  using Out = typename Sink::value_type;  // what the epilogue writes (the sink's tile type)
  using K = typename scores_split<C, E>::coder;  // the GEMM's share of the encoding
  using PE = typename scores_split<C, E>::poly;  // the polynomial parts, per pair
  using TQ = std::remove_cv_t<Tq>;
  using TK = std::remove_cv_t<Tk>;
  // Per-unit query cache budget: every key tile is encoded once per block of query tiles, so
  // a larger block encodes keys less often (measured: 256 KiB re-encoded every key 2-4x as
  // often and cost 3-10 % of the GEMM time at d = 128). It is working memory per thread.
  static constexpr Index kBlockBytes = Index(1) << 20;
  static constexpr double kParallelMinFlops = 1 << 23;    // ~0.1 ms of GEMM per thread
  // Per-pair decay once the decay multiplies the number of tiles by more than this: the
  // crossover measured at n = 2048, d = 128, float (per pair ~16 ms at any γ; rebased 15.3 ms
  // with 1.7x the tiles, 16.4 ms with 2.5x; docs/kernels-scores.md §4).
  static constexpr double kPairDecaySplit = 2.0;
  // Key splits (Sink::splits_keys): fewer (query block, key head) units than this and the key
  // tiles are split into ranges, so that a decode step on one head still fills the threads.
  static constexpr Index kSplitUnits = 8;
  // At most this many queries (and more than one key head): decoding, across_ below.
  static constexpr Index kAcrossQueries = 16;
  // Threads asked for (ScoreOptions::threads, 0: omp_get_max_threads()) beyond this count as
  // this many: no count overflows the products below, nor asks OpenMP for 2^31 threads.
  static constexpr int kMaxThreads = 1024;

 public:
  TileRun(const E& enc, const TensorView<Tq>& q, const Positions& tq, const TensorView<Tk>& k,
          const Positions& tk, Sink& sink, const ScoreOptions& opt)
      : enc_(&enc), coder_(enc), poly_(enc), q_(q), k_(k), sink_(&sink), opt_(opt) {
    d_ = q.dim();
    Hq_ = q.heads();
    Hk_ = k.heads();
    G_ = Hq_ / Hk_;
    nq_ = q.tokens();
    nk_ = k.tokens();
    t_.resize(std::size_t(nq_));
    s_.resize(std::size_t(nk_));
    for (Index i = 0; i < nq_; ++i) t_[std::size_t(i)] = tq[i];
    for (Index j = 0; j < nk_; ++j) s_[std::size_t(j)] = tk[j];

    has_decay_ = !opt.decay.empty();
    lam_.assign(std::size_t(Hq_), 0.0);
    double decay_rate = 0;
    if (has_decay_)
      for (Index h = 0; h < Hq_; ++h) {
        lam_[std::size_t(h)] = std::log(opt.decay[std::size_t(h)]);
        decay_rate = std::max(decay_rate, std::abs(lam_[std::size_t(h)]));
      }
    has_alibi_ = !opt.alibi_slopes.empty();
    identity_ = coder_.identity();
    // A pure rotation needs no anchor for its coefficients; a scalar decay on top of it is
    // rebased through row scales and the GEMM's alpha alone (no per-pair pass).
    pure_ = coder_.rate() == 0 && coder_.degree() == 0;
    mode_ = pure_ ? Mode::pure : Mode::two_step;

    // The polynomial parts' e^{λτ} is rebased like any growth (their λ is in the rate); their
    // polynomial is evaluated per pair, so their chain length does not enter the degree.
    const double base_rate = std::max(coder_.rate(), poly_.rate());
    const int deg = coder_.degree();
    auto half_spread = [deg](double rate) {
      return max_half_spread(rate, deg, rebase_limits<C>::exp_budget,
                             rebase_limits<C>::poly_budget);
    };
    // Tiles whose factors reach this may have scores past the range of C (fix_tile): the
    // rebased rows carry e^θ each, and 2^64 is left for the data.
    risky_limit_ = std::ldexp(double(std::numeric_limits<C>::max()),
                              -int(2 * rebase_limits<C>::exp_budget / std::log(2.0)) - 64);
    // Default tiles (ScoreOptions::query_tile): up to 256 queries x 512 keys (fewer, larger
    // GEMM calls amortise Eigen's packing), fewer for large d so that an encoded query tile
    // stays within 128 KiB and a key tile within 256 KiB, at least 16 x 32.
    const Index cb = Index(sizeof(C)) * std::max<Index>(d_, 1);
    const Index tq_max =
        opt.query_tile > 0 ? opt.query_tile : std::clamp<Index>((Index(128) << 10) / cb, 16, 256);
    // Decoding (a few queries, several key heads): a unit takes every key head of its key
    // range (across_), so that the rows of all heads of a token, adjacent in an [nk, Hk, d]
    // cache, are read together (one contiguous copy per token into kstage when the heads are
    // packed) instead of head by head, 4 KiB apart, which the hardware prefetcher does not
    // follow (measured: 1.9x the time of a contiguous read). Key tiles are then sized so that
    // the staged rows of every head stay within 256 KiB.
    across_ = Sink::splits_keys && Hk_ > 1 && nq_ <= kAcrossQueries;
    stage_ = across_ && k.strides().elem == 1 && k.strides().head == d_ && nk_ > 1 && d_ > 0;
    const Index tk_auto = across_ ? std::clamp<Index>((Index(256) << 10) / (cb * Hk_), 16, 512)
                                  : std::clamp<Index>((Index(256) << 10) / cb, 32, 512);
    const Index tk_max = opt.key_tile > 0 ? opt.key_tile : tk_auto;
    const double h_base = half_spread(base_rate);
    qp_ = plan_tiles(t_.data(), nq_, tq_max, h_base);
    kp_ = plan_tiles(s_.data(), nk_, tk_max, h_base);
    // A scalar decay is rebased through the tiles (its rate enters h) unless that would cut
    // them down: for γ = 1e-300, |ln γ| h ≤ θ gives h = 0.016 in float, tiles of one token
    // and a 1 x 1 GEMM per pair (80x slower at n = 2048). When the decay's h makes more than
    // kPairDecaySplit times as many tiles, the tiles are planned without it and γ^(t_i − s_j)
    // = exp(ln γ (t_i − s_j)) is applied per pair in the epilogue, in double
    // (docs/kernels-scores.md §4, "decay").
    if (has_decay_ && decay_rate > 0) {
      const double h = half_spread(base_rate + decay_rate);
      TilePlan qd = plan_tiles(t_.data(), nq_, tq_max, h);
      TilePlan kd = plan_tiles(s_.data(), nk_, tk_max, h);
      if (double(qd.size() + kd.size()) <= kPairDecaySplit * double(qp_.size() + kp_.size())) {
        qp_ = std::move(qd);
        kp_ = std::move(kd);
      } else {
        pair_decay_ = true;
        has_decay_ = false;  // no row scales, no factor in alpha, no decay in the poly parts
        q_bad_ = nonfinite_rows(q, d_);
        k_bad_ = nonfinite_rows(k, d_);
        any_bad_ = std::find(q_bad_.begin(), q_bad_.end(), 1) != q_bad_.end() ||
                   std::find(k_bad_.begin(), k_bad_.end(), 1) != k_bad_.end();
      }
    }

    rel_ = coder_.rel_size();
    coef_ = coder_.coef_size();
    // Coefficients of the regular tiles relative to their own anchors (query: A(t − T)^T,
    // key: A(S − s)), shared by every thread. Reused from the previous call on this thread
    // when the encoding and the tile offsets are the same (the key compares every parameter
    // and every offset exactly), else computed through relative tables of kChunkRows rows.
    const Index nqr = Index(qp_.ref_delta.size()), nkr = Index(kp_.ref_delta.size());
    std::vector<double> key;
    bool cacheable = coder_.signature(key);
    key.push_back(double(nqr));
    key.push_back(double(nkr));
    key.insert(key.end(), qp_.ref_delta.begin(), qp_.ref_delta.end());
    key.insert(key.end(), kp_.ref_delta.begin(), kp_.ref_delta.end());
    TableCache<C>& cache = table_cache<C>();
    if (!cacheable || cache.key != key || cache.key.empty()) {
      cache.key.clear();  // invalid while being rebuilt
      cache.kcoef.resize(std::size_t(nkr * coef_));
      cache.qcoef.resize(std::size_t(nqr * coef_));
      std::vector<double> kdelta(static_cast<std::size_t>(nkr)),
          rel(std::size_t(rel_rows(std::max(nqr, nkr)) * rel_));
      for (Index r = 0; r < nkr; ++r) kdelta[std::size_t(r)] = -kp_.ref_delta[std::size_t(r)];
      coefficients(kdelta.data(), nkr, cache.kcoef.data(), false, rel.data());
      coefficients(qp_.ref_delta.data(), nqr, cache.qcoef.data(), true, rel.data());
      if (cacheable) cache.key = std::move(key);
    }
    kcoef_shared_.p = cache.kcoef.data();
    qcoef_shared_.p = cache.qcoef.data();

    // GEMM operands always come from the contiguous per-unit caches, even for an identity
    // encoding: reading them straight from a strided [n, H, d] view measured 2-3 % slower
    // (bench/README.md, ALiBi), and one path is simpler.
    // Per-pair decays go through the tile buffer: the epilogue scales every score anyway.
    out_rm_ = !pair_decay_ && sink.template direct_row_major<C>(nk_);
    out_cm_ = !pair_decay_ && !out_rm_ && sink.template direct_col_major<C>();
    window_ = sink.window();
    direct_keys_ = std::is_same<TK, C>::value && qp_.max_rows * G_ <= eigen_gemm::kSmallRows;
    // One GEMM for all heads of a group: only where nothing differs between them (a pure
    // rotation or identity, no per-head decay, ALiBi or polynomial part) and the sink takes
    // its tiles in place (attention: decoding has one query row per head).
    grouped_ = Sink::in_place && mode_ == Mode::pure && !has_decay_ && !pair_decay_ &&
               !has_alibi_ && !PE::active;

    // Units: (block of query tiles, key head, key split).
    int nt = 1;
#ifdef _OPENMP
    if (!omp_in_parallel()) nt = opt.threads > 0 ? opt.threads : omp_get_max_threads();
#endif
    nt = std::clamp(nt, 1, kMaxThreads);
    const Index nqt = qp_.size();
    Index row_bytes = G_ * d_ * Index(sizeof(C)) + (has_decay_ ? G_ * 8 : 0);
    const Index cap_tiles =
        std::max<Index>(1, kBlockBytes / std::max<Index>(1, row_bytes) / qp_.max_rows);
    const Index head_units = across_ ? 1 : Hk_;
    const Index want_blocks = nt > 1 ? (4 * Index(nt) + head_units - 1) / head_units : 1;
    tiles_per_block_ =
        std::min(cap_tiles, std::max<Index>(1, (nqt + want_blocks - 1) / want_blocks));
    blocks_ = (nqt + tiles_per_block_ - 1) / tiles_per_block_;
    // Few (block, head) units and many key tiles (decoding against a long cache): a sink that
    // can merge partial results (attention's log-sum-exp) splits the key tiles into ranges.
    // The count depends on the problem only, never on the threads, so that results do not.
    // (Query tiles, not blocks: the blocking depends on the thread count.)
    splits_ = 1;
    if (Sink::splits_keys && nqt * head_units < kSplitUnits && kp_.size() > 1)
      splits_ = std::min(kp_.size(), (kSplitUnits + nqt * head_units - 1) / (nqt * head_units));
    key_tiles_per_split_ = (kp_.size() + splits_ - 1) / splits_;
    units_ = blocks_ * head_units * splits_;
    // Threads only for work worth a parallel region (~kParallelMinFlops per thread).
    const double flops =
        2.0 * double(Hq_) * double(nq_) * double(nk_) * double(std::max<Index>(d_, 1));
    const Index by_work = std::max<Index>(1, Index(flops / kParallelMinFlops));
    threads_ = int(std::min<Index>({Index(nt), units_, by_work}));
  }

  /// The plan (for tests): tiles per side, and whether a scalar decay goes per pair.
  Index query_tiles() const { return qp_.size(); }
  Index key_tiles() const { return kp_.size(); }
  bool decay_per_pair() const { return pair_decay_; }
  Index key_splits() const { return splits_; }
  /// Key heads whose state a unit holds at once (every head when decoding, else 1).
  Index head_slots() const { return across_ ? Hk_ : 1; }
  const Sink& sink() const { return *sink_; }

  // What a sink reads (detail/attention_sink.hpp).
  const TilePlan& query_plan() const { return qp_; }
  const TilePlan& key_plan() const { return kp_; }
  double t(Index i) const { return t_[std::size_t(i)]; }
  double s(Index j) const { return s_[std::size_t(j)]; }
  Index group() const { return G_; }
  Index query_heads() const { return Hq_; }
  Index key_heads() const { return Hk_; }
  Index queries() const { return nq_; }
  Index tiles_per_block() const { return tiles_per_block_; }
  Index max_block_rows() const { return tiles_per_block_ * qp_.max_rows; }

  void run() {
    if (units_ == 0) return;
    std::exception_ptr err;
#ifdef _OPENMP
    if (threads_ > 1) {
      int failed = 0;
#pragma omp parallel num_threads(threads_)
      {
        std::unique_ptr<Workspace> ws;
        try {
          ws.reset(new Workspace(*this));
        } catch (...) {
#pragma omp critical(peal_scores_error)
          {
            if (!err) err = std::current_exception();
          }
        }
#pragma omp for schedule(dynamic, 1)
        for (Index u = 0; u < units_; ++u) {
          int skip;
#pragma omp atomic read
          skip = failed;
          if (skip || !ws) continue;
          try {
            unit(u, *ws);
          } catch (...) {
#pragma omp critical(peal_scores_error)
            {
              if (!err) err = std::current_exception();
            }
#pragma omp atomic write
            failed = 1;
          }
        }
      }
      if (err) std::rethrow_exception(err);
      sink_->finish(*this);
      return;
    }
#endif
    Workspace ws(*this);
    for (Index u = 0; u < units_; ++u) unit(u, ws);
    sink_->finish(*this);
  }

  // Per-thread working memory, carved from the thread's arena (uninitialised, reused
  // across calls so that small problems do not pay for page faults and zero-filling).
  struct Workspace {
    explicit Workspace(const TileRun& r) {
      const Index TQm = r.qp_.max_rows, TKm = r.kp_.max_rows, d = r.d_, G = r.G_;
      const Index brows = r.tiles_per_block_ * TQm;
      const Index kd = std::max<Index>(d, 1);
      const bool direct = r.out_rm_ || r.out_cm_;
      const Index pl = PE::active ? std::max(TQm, TKm) : 0;  // vector side of the poly parts
      // Eigen's packing buffers: sizes from its own blocking heuristic, for the orientation
      // used (a row-major result is computed as the transposed column-major product).
      Index kc = kd, mc = r.out_cm_ ? TQm : TKm, nc = r.out_cm_ ? TKm : TQm;
      eigen_gemm::product_blocking_sizes<C>(kc, mc, nc);
      Arena& a = thread_arena();
      a.reset();
      for (int pass = 0; pass < 2; ++pass) {  // pass 0 sizes, pass 1 carves
        a.begin(pass);
        qcache = a.take<C>(brows * G * d * r.head_slots());
        kstage = a.take<TK>(r.stage_ ? TKm * r.Hk_ * d : 0);
        qscale = a.take<double>(r.has_decay_ ? brows * G : 0);
        rel = a.take<double>(rel_rows(std::max(TQm, TKm)) * r.rel_);
        qtile = a.take<C>(TQm * d);
        qcoef = a.take<C>(TQm * r.coef_);
        kcoef = a.take<C>(TKm * r.coef_);
        ktile = a.take<C>(TKm * d);
        kdecay = a.take<C>(r.has_decay_ && G > 1 ? TKm * d : 0);
        tile = a.take<C>(direct ? 0 : TQm * TKm * (Sink::in_place ? G : 1));
        rbias = a.take<Out>(TQm);
        cbias = a.take<Out>(TKm);
        kscale = a.take<double>(TKm);
        pfac = a.take<double>(r.pair_decay_ ? TKm : 0);
        delta = a.take<double>(std::max(TQm, TKm));
        cross = a.take<double>(std::max(r.rel_, 1));
        xcoef = a.take<C>(std::max(r.coef_, 1));
        scratch = a.take<C>(4 * kd + 4);
        row0 = a.take<Index>(r.tiles_per_block_ + 1);
        blockA = a.take<C>(kc * mc);
        blockB = a.take<C>(kc * nc);
        psoa = a.take<C>(r.poly_.width() * pl);
        pbeta = a.take<C>(pl);
        ptau = a.take<C>(pl);
        ppos = a.take<double>(pl);
        pw = a.take<double>(pl);
        sink.carve(a, r);
      }
      blocking = Blocking(mc, nc, kc, blockA.data(), blockB.data());
      poly.soa = psoa.data(), poly.beta = pbeta.data(), poly.tau = ptau.data();
      poly.pos = ppos.data(), poly.w = pw.data(), poly.ld = pl;
    }
    using Blocking = eigen_gemm::GemmBlocking<C>;
    Blocking blocking;
    Buf<TK> kstage;  // the key rows of every head of a key tile (across_ with packed heads)
    Buf<C> qcache, qtile, qcoef, kcoef, ktile, kdecay, tile, scratch, blockA, blockB, xcoef;
    Buf<C> psoa, pbeta, ptau;
    Buf<double> qscale, rel, kscale, pfac, delta, cross, ppos, pw;
    PolyWork<C> poly;
    Buf<Out> rbias, cbias;
    Buf<Index> row0;
    typename Sink::Work sink;  // the sink's own per-thread memory
  };

 private:
  // Rows [b, b + n) of head h of a view, encoded into dst (ld = d) in the arithmetic type:
  // with the coefficient rows `coef` (nullptr: identity), then with the single coefficient
  // row `coefx` (a factor common to all rows; nullptr: none), then scaled by scale[r].
  template <class T>
  void encode_rows(const TensorView<T>& v, Index b, Index n, Index h, const C* coef, const C* coefx,
                   bool transpose, const double* scale, C* dst, C* scratch) const {
    using TS = std::remove_cv_t<T>;
    const Index es = v.strides().elem;
    constexpr Index kAhead = 16;  // rows prefetched ahead: one row alone has little MLP
    const Index row_bytes = d_ * Index(sizeof(TS)) * std::max<Index>(es, 1);
    for (Index r = 0; r < n; ++r) {
      const auto* src = v.vector(b + r, h);
      C* o = dst + r * d_;
      bool fx = coefx != nullptr;  // the factor still to apply
      if (r + kAhead < n) eigen_gemm::prefetch_row(v.vector(b + r + kAhead, h), row_bytes);
      if (es == 1 && std::is_same<TS, C>::value) {
        const C* x = reinterpret_cast<const C*>(src);
        if (coef && coefx) {
          apply_both(coder_, coef + r * coef_, coefx, x, o, transpose, scratch);
          fx = false;
        } else if (coef) {
          coder_.apply(coef + r * coef_, x, o, transpose, scratch);
        } else if (d_ > 0) {  // (memcpy of a null row is undefined even for 0 bytes)
          std::memcpy(o, x, sizeof(C) * std::size_t(d_));
        }
      } else {
        if (es == 1)
          Eigen::Map<Vector<C>>(o, d_) =
              Eigen::Map<const Eigen::Matrix<TS, Eigen::Dynamic, 1>>(src, d_).template cast<C>();
        else
          for (Index e = 0; e < d_; ++e) o[e] = to_arith<C>(src[e * es]);
        if (coef) coder_.apply(coef + r * coef_, o, o, transpose, scratch);
      }
      if (fx) coder_.apply_factor(coefx, o, o, transpose, scratch);
      if (scale) {
        const C f = C(scale[r]);
        for (Index e = 0; e < d_; ++e) o[e] *= f;
      }
    }
  }
  // Coefficient rows of A(delta[r]) (A^T when transpose), through a relative table of
  // kChunkRows rows at a time (rel: rel_rows(rows) * rel_ doubles). Tables are sized by the
  // rows present, never by kChunkRows alone: at d = 2^20 one row of rel is 8 MiB.
  static constexpr Index kChunkRows = 64;
  static Index rel_rows(Index rows) { return std::max<Index>(1, std::min(kChunkRows, rows)); }
  void coefficients(const double* delta, Index rows, C* coef, bool transpose, double* rel) const {
    for (Index r0 = 0; r0 < rows; r0 += kChunkRows) {
      const Index m = std::min(kChunkRows, rows - r0);
      coder_.relative(delta + r0, m, rel, rel_);
      coder_.compose(nullptr, rel, rel_, m, coef + r0 * coef_, coef_, transpose);
    }
  }

  // Where the epilogue writes row i (of the query tile starting at i0) of the tile of head h
  // whose keys start at j0 (n of them): the sink's tile (in `out` for scores, the buffered
  // tile itself for attention), elements `st` apart.
  Out* out_row(Workspace& ws, Index h, Index I, Index J, Index i, Index& st) const {
    return sink_->row(ws.sink, tile_of(ws, h, I, J), h, qp_.begin[std::size_t(I)], i,
                      kp_.begin[std::size_t(J)], kp_.rows(J), st);
  }
  // The tile buffer of head h for tile pair (I, J): a sink that takes tiles in place gets
  // one slice per head of the group, consecutive (rows(I) x rows(J) each, row-major), so
  // that the heads of a group can share one GEMM on each side (grouped_).
  C* tile_of(Workspace& ws, Index h, Index I, Index J) const {
    return ws.tile.data() + (Sink::in_place ? (h % G_) * qp_.rows(I) * kp_.rows(J) : 0);
  }

  // out tile (h, [i0, i0+m) x [j0, j0+n)) = alpha a b^T (+ ALiBi, polynomial parts, mask).
  // a: m x d, b: n x d. Eigen's kernel accumulates into the tile, so the tile starts as the
  // ALiBi bias when it lives in `out` (zeros otherwise) plus the polynomial parts evaluated
  // per pair, one row (column) at a time while it is in L1: no separate pass over the tile.
  void product(Workspace& ws, Index h, Index I, Index J, const C* a, Index lda, const C* b,
               Index ldb, C alpha, int mask) const {
    const Index i0 = qp_.begin[std::size_t(I)], m = qp_.rows(I);
    const Index j0 = kp_.begin[std::size_t(J)], n = kp_.rows(J);
    const bool alibi = alibi_bias(ws, h, I, J);
    const bool direct = out_rm_ || out_cm_;
    C* res = tile_of(ws, h, I, J);
    Index ldr = n;
    if (direct) {
      res = sink_->template direct<C>(h, i0, j0, out_rm_, ldr);
    }
    const bool bias = alibi && direct;  // (buffered tiles get it in the epilogue)
    const C* PEAL_RESTRICT rb = reinterpret_cast<const C*>(ws.rbias.data());  // Out == C here
    const C* PEAL_RESTRICT cb = reinterpret_cast<const C*>(ws.cbias.data());
    if (out_cm_) {  // column j: queries contiguous
      if constexpr (PE::active) poly_queries(ws, h, I);
      for (Index j = 0; j < n; ++j) {
        C* PEAL_RESTRICT o = res + j * ldr;
        if (bias) {
          const C c = cb[j];
          for (Index i = 0; i < m; ++i) o[i] = rb[i] + c;
        } else {
          std::fill_n(o, m, C(0));
        }
        if constexpr (PE::active) poly_key_line(ws, h, J, j, o);
      }
    } else {  // row i: keys contiguous (in `out` or in the tile buffer)
      if constexpr (PE::active) poly_keys(ws, h, J);
      for (Index i = 0; i < m; ++i) {
        C* PEAL_RESTRICT o = res + i * ldr;
        if (bias) {
          const C r = rb[i];
          for (Index j = 0; j < n; ++j) o[j] = r + cb[j];
        } else {
          std::fill_n(o, n, C(0));
        }
        if constexpr (PE::active) poly_query_line(ws, h, I, i, o);
      }
    }
    if (d_ > 0) {
      if (out_cm_)
        gemm_abt<C, Eigen::ColMajor>(m, n, d_, a, lda, b, ldb, res, ldr, alpha, ws.blocking);
      else
        gemm_abt<C, Eigen::RowMajor>(m, n, d_, a, lda, b, ldb, res, ldr, alpha, ws.blocking);
    }
    if (direct && mask == 0) return;
    epilogue(ws, h, I, J, res, ldr, mask, alibi && !direct);
  }

  // ALiBi of head h for tile (I, J) into ws.rbias, ws.cbias (false: no bias for this head):
  // −m (t_i − s_j) = −m (t_i − T_I) − m (T_I − s_j), both small near the anchor.
  bool alibi_bias(Workspace& ws, Index h, Index I, Index J) const {
    if (!has_alibi_ || opt_.alibi_slopes[std::size_t(h)] == 0) return false;
    const Index i0 = qp_.begin[std::size_t(I)], m = qp_.rows(I);
    const Index j0 = kp_.begin[std::size_t(J)], n = kp_.rows(J);
    const double mh = opt_.alibi_slopes[std::size_t(h)], T = qp_.anchor[std::size_t(I)];
    for (Index i = 0; i < m; ++i)
      ws.rbias[std::size_t(i)] = Out(-mh * (t_[std::size_t(i0 + i)] - T));
    for (Index j = 0; j < n; ++j)
      ws.cbias[std::size_t(j)] = Out(-mh * (T - s_[std::size_t(j0 + j)]));
    return true;
  }

  // Per-pair decay: does every γ_h^(t_i − s_j) of tile (I, J) underflow to 0 in double? The
  // largest is at the smallest t_i − s_j, lo_I − hi_J, and e^x = 0 in double for x < −745.2.
  // Then every score is ±0 (the reference's score · 0) plus the ALiBi bias, and no mask
  // applies (every t_i > s_j): the tile is written without its GEMM.
  bool decay_underflows(Index h, Index I, Index J) const {
    return pair_decay_ &&
           lam_[std::size_t(h)] * (qp_.lo[std::size_t(I)] - kp_.hi[std::size_t(J)]) < -746.0;
  }
  // A NaN or infinite entry of q_i or k_j makes the pair NaN there too (the reference's
  // score · 0; docs/kernels-attention.md, "NaN and infinities"): q_bad_ / k_bad_ mark such
  // rows, found once per call.
  void fill_underflow(Workspace& ws, Index h, Index I, Index J) const {
    const Index m = qp_.rows(I), n = kp_.rows(J);
    const Index i0 = qp_.begin[std::size_t(I)], j0 = kp_.begin[std::size_t(J)], kh = h / G_;
    const bool alibi = alibi_bias(ws, h, I, J);
    for (Index i = 0; i < m; ++i) {
      Index st = 1;
      Out* o = out_row(ws, h, I, J, i, st);
      for (Index j = 0; j < n; ++j)
        o[j * st] = alibi ? Out(ws.rbias[std::size_t(i)] + ws.cbias[std::size_t(j)]) : Out(0);
    }
    if (!any_bad_) return;  // the common case: no row of the call holds a NaN or inf
    const Out nan = std::numeric_limits<Out>::quiet_NaN();
    const char* kbad = k_bad_.data() + j0 * Hk_ + kh;
    for (Index i = 0; i < m; ++i) {
      Index st = 1;
      Out* o = out_row(ws, h, I, J, i, st);
      const bool qbad = q_bad_[std::size_t((i0 + i) * Hq_ + h)] != 0;
      for (Index j = 0; j < n; ++j)
        if (qbad || kbad[j * Hk_]) o[j * st] = nan;
    }
  }
  // Per (token, head) of v: 1 where the row holds a NaN or an infinity. One pass over q and k,
  // made only for per-pair decays (fill_underflow's tiles read no row).
  template <class T>
  static std::vector<char> nonfinite_rows(const TensorView<T>& v, Index d) {
    const Index n = v.tokens(), H = v.heads();
    std::vector<char> bad(std::size_t(n * H), 0);
    for (Index i = 0; i < n; ++i)
      for (Index h = 0; h < H; ++h) {
        int b = 0;  // x - x is 0 for finite x, NaN for NaN and ±inf: a branch-free OR
        for (Index c = 0; c < d; ++c) {
          const double x = to_arith<double>(v(i, h, c));
          b |= !(x - x == 0);
        }
        bad[std::size_t(i * H + h)] = char(b);
      }
    return bad;
  }

  // Mask (direct tiles) or conversion to `out` with the per-pair decay, bias and mask
  // (buffered tiles).
  void epilogue(Workspace& ws, Index h, Index I, Index J, const C* res, Index ldr, int mask,
                bool alibi) const {
    const Index i0 = qp_.begin[std::size_t(I)], m = qp_.rows(I);
    const Index j0 = kp_.begin[std::size_t(J)], n = kp_.rows(J);
    const Out* PEAL_RESTRICT rb = ws.rbias.data();
    const Out* PEAL_RESTRICT cb = ws.cbias.data();
    const double* PEAL_RESTRICT sj = s_.data() + j0;
    const Out ninf = -std::numeric_limits<Out>::infinity();
    // A sink that takes the tile in place needs no pass when nothing is to be applied.
    if (Sink::in_place && !out_rm_ && !out_cm_ && !pair_decay_ && !alibi && mask == 0) return;
    for (Index i = 0; i < m; ++i) {
      const double ti = t_[std::size_t(i0 + i)];
      if (out_rm_) {
        Out* PEAL_RESTRICT o = reinterpret_cast<Out*>(const_cast<C*>(res)) + i * ldr;
        for (Index j = 0; j < n; ++j) o[j] = sj[j] > ti ? ninf : o[j];
      } else if (out_cm_) {
        Out* o = reinterpret_cast<Out*>(const_cast<C*>(res)) + i;
        for (Index j = 0; j < n; ++j)
          if (sj[j] > ti) o[j * ldr] = ninf;
      } else {
        const C* src = res + i * ldr;  // not restrict: a sink may take the tile in place
        Index st = 1;
        Out* o = out_row(ws, h, I, J, i, st);
        if (pair_decay_) {  // γ^(t_i − s_j) = exp(ln γ (t_i − s_j)), as the reference forms it
          double* PEAL_RESTRICT f = ws.pfac.data();
          decay_row(lam_[std::size_t(h)], ti, sj, n, f);
          for (Index j = 0; j < n; ++j) {
            Out v = Out(double(src[j]) * f[j]);
            if (alibi) v += rb[i] + cb[j];
            if (mask && sj[j] > ti) v = ninf;
            o[j * st] = v;
          }
          continue;
        }
        for (Index j = 0; j < n; ++j) {
          Out v = Out(src[j]);
          if (alibi) v += rb[i] + cb[j];
          if (mask && sj[j] > ti) v = ninf;
          o[j * st] = v;
        }
      }
    }
  }

  // ---- Polynomial parts per pair (detail/scores_poly.hpp). Row-major tiles take the key tile
  // as the vector side (built once per key tile and unit; again only for a head of the group
  // with another decay) and broadcast one query row at a time; column-major tiles transpose.
  double poly_lng(Index h) const { return has_decay_ ? lam_[std::size_t(h)] : 0.0; }
  void poly_keys(Workspace& ws, Index h, Index J) const {
    const double lng = poly_lng(h);
    if (ws.poly.tag == J && ws.poly.lng == lng) return;
    const Index jb = kp_.begin[std::size_t(J)], kh = h / G_;
    poly_.vectors([&](Index x, int c) { return to_arith<double>(k_(jb + x, kh, c)); }, kp_.rows(J),
                  s_.data() + jb, -1.0, kp_.anchor[std::size_t(J)], lng, false, ws.poly);
    ws.poly.tag = J;
  }
  void poly_query_line(Workspace& ws, Index h, Index I, Index i, C* o) const {
    const Index r = qp_.begin[std::size_t(I)] + i;
    poly_.line([&](int c) { return to_arith<double>(q_(r, h, c)); }, t_[std::size_t(r)], opt_.scale,
               false, ws.poly, o);
  }
  void poly_queries(Workspace& ws, Index h, Index I) const {
    const Index ib = qp_.begin[std::size_t(I)];
    poly_.vectors([&](Index x, int c) { return to_arith<double>(q_(ib + x, h, c)); }, qp_.rows(I),
                  t_.data() + ib, 1.0, -qp_.anchor[std::size_t(I)], poly_lng(h), true, ws.poly);
    ws.poly.tag = -1;
  }
  void poly_key_line(Workspace& ws, Index h, Index J, Index j, C* o) const {
    const Index r = kp_.begin[std::size_t(J)] + j;
    poly_.line([&](int c) { return to_arith<double>(k_(r, h / G_, c)); }, -s_[std::size_t(r)],
               opt_.scale, true, ws.poly, o);
  }

  // 0: no causal mask needed, 1: partial, 2: every pair masked (by the causal mask or, for
  // a sink with a window W, because every t_i − s_j ≥ W; a partial window is the sink's).
  int mask_state(Index I, Index J) const {
    if (qp_.lo[std::size_t(I)] - kp_.hi[std::size_t(J)] >= window_) return 2;
    if (!opt_.causal) return 0;
    if (kp_.lo[std::size_t(J)] > qp_.hi[std::size_t(I)]) return 2;
    if (kp_.hi[std::size_t(J)] <= qp_.lo[std::size_t(I)]) return 0;
    return 1;
  }

  // How the query side is rebased (see the top of the file):
  //   pure:     anchor 0; q̃ = A(t_i)^T q encoded once per unit, keys once per key tile, both
  //             as the tile's relative table A(t − T) times the tile's constant A(T) (they
  //             commute: A(a)A(b) = A(a + b)); a scalar decay is still rebased: γ^(t_i − T_I)
  //             in the query rows, γ^(S_J − s_j) in the key rows, γ^(T_I − S_J) in alpha;
  //   two_step: q̂ = A(t_i − T_I)^T q once per unit, k̃ = A(S_J − s_j) k once per key tile,
  //             and per tile pair q̃ = A(T_I − S_J)^T q̂, one constant factor per block.
  enum class Mode { pure, two_step };

  // First cached row of query tile I (of the block starting at tile I0), head kh*G + g.
  C* query_rows(Workspace& ws, Index kh, Index I0, Index I, Index g) const {
    const Index slot = across_ ? kh * tiles_per_block_ * qp_.max_rows * G_ : 0;
    return ws.qcache.data() + (slot + ws.row0[std::size_t(I - I0)] * G_ + g * qp_.rows(I)) * d_;
  }

  // The query encoder: the rows of query tiles [I0, I1) of every head of key head kh's
  // group, rebased to their tile's anchor (and to anchor 0 when pure), into ws.qcache.
  void encode_query_block(Workspace& ws, Index kh, Index I0, Index I1) const {
    const Index G = G_;
    C* scratch = ws.scratch.data();
    auto qrow = [&](Index I, Index g) { return query_rows(ws, kh, I0, I, g); };
    Index* row0 = ws.row0.data();
    row0[0] = 0;
    for (Index I = I0; I < I1; ++I) row0[I - I0 + 1] = row0[I - I0] + qp_.rows(I);
    for (Index I = I0; I < I1; ++I) {
      const Index b = qp_.begin[std::size_t(I)], n = qp_.rows(I), r0 = row0[I - I0];
      const double T = qp_.anchor[std::size_t(I)];
      const bool reg = qp_.regular[std::size_t(I)] != 0;
      const C* coef = nullptr;
      const C* coefx = nullptr;
      if (!identity_) {
        if (reg) {
          coef = qcoef_shared_.data();
        } else {
          for (Index r = 0; r < n; ++r) ws.delta[std::size_t(r)] = t_[std::size_t(b + r)] - T;
          coefficients(ws.delta.data(), n, ws.qcoef.data(), true, ws.rel.data());
          coef = ws.qcoef.data();
        }
        if (mode_ == Mode::pure) {  // × A(T_I)^T: anchor 0
          coder_.relative(&T, 1, ws.cross.data(), rel_);
          coder_.compose(nullptr, ws.cross.data(), rel_, 1, ws.xcoef.data(), coef_, true);
          coefx = ws.xcoef.data();
        }
      }
      for (Index g = 0; g < G; ++g) {
        double* qs = nullptr;
        if (has_decay_) {  // two_step: γ_h^(t_i − T_I) folded into q̂
          const double lam = lam_[std::size_t(kh * G + g)];
          qs = ws.qscale.data() + r0 * G + g * n;
          for (Index r = 0; r < n; ++r) qs[r] = std::exp(lam * (t_[std::size_t(b + r)] - T));
        }
        encode_rows(q_, b, n, kh * G + g, coef, coefx, true, qs, qrow(I, g), scratch);
      }
    }

  }

  void unit(Index u, Workspace& ws) const {
    // Late query blocks first: with a causal mask they carry the most work.
    const Index head_units = across_ ? 1 : Hk_;
    const Index split = u % splits_, hu = u / splits_;
    const Index blk = blocks_ - 1 - hu / head_units;
    const Index kh0 = across_ ? 0 : hu % head_units, kh1 = across_ ? Hk_ : kh0 + 1;
    const Index J0 = split * key_tiles_per_split_;
    const Index J1 = std::min(kp_.size(), J0 + key_tiles_per_split_);
    const Index I0 = blk * tiles_per_block_, I1 = std::min(qp_.size(), I0 + tiles_per_block_);
    for (Index kh = kh0; kh < kh1; ++kh) {
      encode_query_block(ws, kh, I0, I1);
      sink_->unit_begin(*this, ws.sink, kh, I0, I1, split);
    }
    for (Index J = J0; J < J1; ++J) {
      if (!stage_) {
        for (Index kh = kh0; kh < kh1; ++kh) key_pass(ws, k_, kp_.begin[std::size_t(J)], kh, I0, I1, J);
        continue;
      }
      // Every head's rows of the tile, one contiguous copy per token (see across_).
      const Index jb = kp_.begin[std::size_t(J)], nkj = kp_.rows(J), row = Hk_ * d_;
      using TKV = std::remove_cv_t<Tk>;
      for (Index r = 0; r < nkj; ++r)
        std::memcpy(ws.kstage.data() + r * row, k_.vector(jb + r, 0), sizeof(TKV) * std::size_t(row));
      const TensorView<Tk> staged(ws.kstage.data(), nkj, Hk_, d_);
      sink_->key_block(*this, ws.sink, J);
      for (Index kh = kh0; kh < kh1; ++kh) key_pass(ws, staged, 0, kh, I0, I1, J);
    }
    for (Index kh = kh0; kh < kh1; ++kh) sink_->unit_end(*this, ws.sink, kh, I0, I1, split);
  }

  // Key tile J of key head kh against the query tiles [I0, I1) of the unit: its rows are rows
  // [kb, kb + rows(J)) of kv (k itself, or the staged copy of the tile).
  void key_pass(Workspace& ws, const TensorView<Tk>& kv, Index kb, Index kh, Index I0, Index I1,
                Index J) const {
    const Index d = d_, G = G_;
    C* scratch = ws.scratch.data();
    auto qrow = [&](Index I, Index g) { return query_rows(ws, kh, I0, I, g); };
    // Heads of the group share one decay? Then it is folded into the key encoding.
    bool shared_decay = true;
    if (has_decay_)
      for (Index g = 1; g < G; ++g)
        shared_decay &= lam_[std::size_t(kh * G + g)] == lam_[std::size_t(kh * G)];

    {
      bool any = false;
      for (Index I = I0; I < I1; ++I) any |= mask_state(I, J) != 2;
      const Index jb = kp_.begin[std::size_t(J)], nkj = kp_.rows(J);
      if (!any) {
        for (Index I = I0; I < I1; ++I)
          for (Index g = 0; g < G; ++g)
            sink_->masked(*this, ws.sink, kh * G + g, I, J);
        return;
      }
      const double S = kp_.anchor[std::size_t(J)];
      // Key coefficients: A(S_J − s_j), times the constant A(−S_J) when pure (anchor 0).
      const C* kcoef = nullptr;
      const C* kcoefx = nullptr;
      if (!identity_) {
        if (kp_.regular[std::size_t(J)]) {
          kcoef = kcoef_shared_.data();
        } else {
          for (Index r = 0; r < nkj; ++r) ws.delta[std::size_t(r)] = S - s_[std::size_t(jb + r)];
          coefficients(ws.delta.data(), nkj, ws.kcoef.data(), false, ws.rel.data());
          kcoef = ws.kcoef.data();
        }
        if (mode_ == Mode::pure) {
          const double X = -S;
          coder_.relative(&X, 1, ws.cross.data(), rel_);
          coder_.compose(nullptr, ws.cross.data(), rel_, 1, ws.xcoef.data(), coef_, false);
          kcoefx = ws.xcoef.data();
        }
      }
      // Key decay γ_h^(S_J − s_j).
      auto key_scale = [&](Index h) {
        const double lam = lam_[std::size_t(h)];
        for (Index r = 0; r < nkj; ++r)
          ws.kscale[std::size_t(r)] = std::exp(lam * (S - s_[std::size_t(jb + r)]));
      };
      const bool fold = has_decay_ && shared_decay;
      if (fold) key_scale(kh * G);
      const C* kbuf = ws.ktile.data();
      Index ldk = d;
      // An identity (keys already encoded) against a few query rows: the product reads the
      // key rows where they lie (each once, gemm_abt's small path); else they are encoded.
      if (identity_ && !fold && direct_keys_ && kv.strides().elem == 1 &&
          (nkj <= 1 || kv.strides().token >= d)) {
        kbuf = reinterpret_cast<const C*>(kv.vector(kb, kh));
        ldk = nkj > 1 ? kv.strides().token : d;
      } else {
        encode_rows(kv, kb, nkj, kh, kcoef, kcoefx, false, fold ? ws.kscale.data() : nullptr,
                    ws.ktile.data(), scratch);
      }
      if constexpr (PE::active) ws.poly.tag = -1;  // the poly parts' key side: built on demand
      sink_->key_tile(*this, ws.sink, kh, J);

      for (Index I = I0; I < I1; ++I) {
        const int mask = mask_state(I, J);
        const Index n = qp_.rows(I);
        if (mask == 2) {
          for (Index g = 0; g < G; ++g) sink_->masked(*this, ws.sink, kh * G + g, I, J);
          continue;
        }
        const double T = qp_.anchor[std::size_t(I)];
        if (grouped_) {  // every head of the group in one GEMM (tile slices are consecutive)
          C* res = tile_of(ws, kh * G, I, J);
          std::fill_n(res, G * n * nkj, C(0));
          if (d > 0)
            gemm_abt<C, Eigen::RowMajor>(G * n, nkj, d, qrow(I, 0), d, kbuf, ldk, res, nkj,
                                         C(opt_.scale), ws.blocking);
        }
        const C* qcoef = nullptr;
        if (mode_ == Mode::two_step && !identity_) {  // the cross factor A(T_I − S_J)^T
          const double D = T - S;
          coder_.relative(&D, 1, ws.cross.data(), rel_);
          coder_.compose(nullptr, ws.cross.data(), rel_, 1, ws.qcoef.data(), coef_, true);
          qcoef = ws.qcoef.data();
        }
        for (Index g = 0; g < G; ++g) {
          const Index h = kh * G + g;
          if (decay_underflows(h, I, J)) {
            fill_underflow(ws, h, I, J);
            sink_->tile_done(*this, ws.sink, tile_of(ws, h, I, J), h, I, J);
            continue;
          }
          double alpha = opt_.scale;
          const C* a;
          const Index lda = d;
          if (has_decay_) alpha *= std::exp(lam_[std::size_t(h)] * (T - S));  // γ^(T_I − S_J)
          if (mode_ == Mode::pure) {
            a = qrow(I, g);
          } else {
            if (qcoef == nullptr) {  // identity encoding: the cached rows are final
              a = qrow(I, g);
            } else {
              const C* src = qrow(I, g);
              C* dst = ws.qtile.data();
              for (Index r = 0; r < n; ++r)
                coder_.apply_factor(qcoef, src + r * d, dst + r * d, true, scratch);
              a = dst;
            }
          }
          const C* bk = kbuf;
          Index ldb = ldk;
          if (has_decay_ && !shared_decay) {
            key_scale(h);
            for (Index r = 0; r < nkj; ++r) {
              const C f = C(ws.kscale[std::size_t(r)]);
              const C* src = kbuf + r * ldk;
              C* dst = ws.kdecay.data() + r * d;
              for (Index e = 0; e < d; ++e) dst[e] = src[e] * f;
            }
            bk = ws.kdecay.data();
            ldb = d;
          }
          // A sink that masks by itself (attention: after its softcap) needs no −inf here.
          const int emask = Sink::applies_masks ? 0 : mask;
          if (!grouped_)
            product(ws, h, I, J, a, lda, bk, ldb, C(alpha), emask);
          else if (emask != 0)
            epilogue(ws, h, I, J, tile_of(ws, h, I, J), nkj, emask, false);
          if (const int r = risky(qcoef, alpha)) fix_tile(ws, h, I, J, r == 2);
          sink_->tile_done(*this, ws.sink, tile_of(ws, h, I, J), h, I, J);
        }
        sink_->group_done(*this, ws.sink, tile_of(ws, kh * G, I, J), kh, I, J);
      }
    }
  }

  // Whether a tile pair's constant factors (the cross coefficients, alpha with the decay
  // γ^(T_I − S_J)) may have taken its scores past the range of C: 0 no, 1 yes (its
  // non-finite scores are recomputed), 2 a coefficient near DBL_MAX, where the coders clamp
  // e^{aδ} to stay finite (every score of the tile is recomputed).
  int risky(const C* coef, double alpha) const {
    constexpr double clamp_zone = std::is_same<C, double>::value
                                      ? std::numeric_limits<double>::max() / 0x1p64
                                      : std::numeric_limits<double>::infinity();
    double cmax = 1;
    if (coef) {
      cmax = 0;
      for (int c = 0; c < coef_; ++c) {
        const double v = std::abs(double(coef[c]));
        if (!(v < clamp_zone)) return 2;
        cmax = std::max(cmax, v);
      }
    }
    return std::abs(alpha) * cmax <= risky_limit_ ? 0 : 1;
  }
  // The scores of a risky tile that are not finite (all of them when `all`), again per pair
  // from the encoding's own score(), which is exact past the range (±inf, 0 for an exact
  // zero, or the representable value; encoding.hpp). Not the hot path: only tiles with
  // factors beyond ~2^704 (double arithmetic) or ~2^32 (float) are scanned.
  void fix_tile(Workspace& ws, Index h, Index I, Index J, bool all) const {
    using S = typename E::Scalar;
    const Index i0 = qp_.begin[std::size_t(I)], m = qp_.rows(I);
    const Index j0 = kp_.begin[std::size_t(J)], n = kp_.rows(J);
    Vector<S> qv(d_), kv(d_);
    for (Index i = 0; i < m; ++i) {
      const double t = t_[std::size_t(i0 + i)];
      bool loaded = false;
      Index st = 1;
      Out* row = out_row(ws, h, I, J, i, st);
      for (Index j = 0; j < n; ++j) {
        const double s = s_[std::size_t(j0 + j)];
        Out& o = row[j * st];
        if ((opt_.causal && s > t) || (!all && std::isfinite(double(o)))) continue;
        if (!loaded)
          for (Index e = 0; e < d_; ++e) qv(e) = S(to_arith<double>(q_(i0 + i, h, e)));
        loaded = true;
        for (Index e = 0; e < d_; ++e) kv(e) = S(to_arith<double>(k_(j0 + j, h / G_, e)));
        o = Out(finish_score(double(enc_->score(qv, t, kv, s)), h, t - s, opt_));
      }
    }
  }

  const E* enc_;
  double risky_limit_ = 0;
  K coder_;
  PE poly_;
  TensorView<Tq> q_;
  TensorView<Tk> k_;
  Sink* sink_;
  const ScoreOptions& opt_;
  Index d_ = 0, Hq_ = 0, Hk_ = 1, G_ = 1, nq_ = 0, nk_ = 0;
  std::vector<double> t_, s_, lam_;
  bool has_decay_ = false, has_alibi_ = false, identity_ = false, pure_ = true;
  bool pair_decay_ = false;  // γ^(t_i − s_j) per pair in the epilogue (steep decays)
  std::vector<char> q_bad_, k_bad_;  // pair_decay_: rows with a NaN or inf, [token * H + head]
  bool any_bad_ = false;             // some row of q_bad_ or k_bad_ is set
  TilePlan qp_, kp_;
  int rel_ = 0, coef_ = 0;
  Buf<C> qcoef_shared_, kcoef_shared_;
  Mode mode_ = Mode::pure;
  bool out_rm_ = false, out_cm_ = false;
  Index tiles_per_block_ = 1, blocks_ = 0, units_ = 0, splits_ = 1, key_tiles_per_split_ = 0;
  bool across_ = false, stage_ = false;
  bool direct_keys_ = false;  // identity keys in C, a few query rows: read in place
  double window_ = std::numeric_limits<double>::infinity();
  bool grouped_ = false;
  int threads_ = 1;
};

}  // namespace scores_kernels
}  // namespace detail
}  // namespace peal
