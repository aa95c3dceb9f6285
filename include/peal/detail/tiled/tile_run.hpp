// The driver of the fused kernels (scores.hpp, attention.hpp, linear_attention.hpp):
// TileRun<C, E, Tq, Tk, Sink> runs the plan of detail/tiled/tile_plan.hpp (plan_run: rebased tiles,
// blocks of query tiles, key splits, threads), encodes the rows of each tile through the
// encoding's coder (detail/coders/coders.hpp, which reads block_traits), multiplies them with
// Eigen's GEMM (detail/eigen_gemm.hpp), adds the per-pair polynomial parts
// (detail/coders/poly_parts.hpp), applies the epilogue (detail/tiled/tile_epilogue.hpp: per-pair decay,
// ALiBi, causal mask, underflow), rescans tiles whose factors may have left the range
// (detail/tiled/tile_rescan.hpp) and hands each finished tile to a Sink, the one thing that differs
// between kernels (the protocol, checked: detail/tiled/tile_sink.hpp):
//
//   ScoresOut<Out> (detail/tiled/scores_sink.hpp)   writes the tile into scores' out [Hq, nq, nk];
//   AttentionSink (detail/tiled/attention_sink.hpp)  folds it into an online softmax times V;
//   LinearSink (detail/tiled/linear_sink.hpp)        multiplies it into V (linear attention).
//
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

#include "../../positions.hpp"
#include "../../score_options.hpp"
#include "../../view.hpp"
#include "../coders/coders.hpp"
#include "../compiler.hpp"
#include "../eigen_gemm.hpp"
#include "../half_rows.hpp"
#include "../parallel.hpp"
#include "../storage.hpp"
#include "arena.hpp"
#include "tile_epilogue.hpp"
#include "tile_plan.hpp"
#include "tile_rescan.hpp"
#include "tile_sink.hpp"

#ifdef _OPENMP
#include <omp.h>
#endif

namespace peal {
namespace detail {
namespace tiled {

// The coders (detail/coders/coders.hpp) are the driver's per-type protocol: their names,
// unqualified in the tiled layer.
using namespace coders;

using detail::arith_t;
using detail::is_storage;
using detail::load_row;
using detail::to_arith;

// The coders (coder_t<C, E>, scores_split<C, E>): detail/coders/coders.hpp.

// ---- GEMM: detail/eigen_gemm.hpp (Eigen's blocked kernel, res += alpha A B^T) --------------
using eigen_gemm::gemm_abt;

// ---- The driver ---------------------------------------------------------------------------
template <class C, class E, class Tq, class Tk, class Sink>
class TileRun {
  static_assert(is_tile_sink<Sink>::value,
                "peal: a TileRun sink answers the protocol of detail/tiled/tile_sink.hpp");
  using Out = typename Sink::value_type;  // what the epilogue writes (the sink's tile type)
  using K = typename scores_split<C, E>::coder;  // the GEMM's share of the encoding
  using PE = typename scores_split<C, E>::poly;  // the polynomial parts, per pair
  using TQ = std::remove_cv_t<Tq>;
  using TK = std::remove_cv_t<Tk>;
  // What a staged key tile holds (RunPlan::stage): half-like keys are converted to the
  // arithmetic type as they are staged, so that the staged rows are read like float keys.
  using KS = std::conditional_t<is_half_like<TK>, C, TK>;
  // The sink computes tile pairs cut by a mask along their staircase (plan_strips); not with
  // per-pair polynomial parts, which are written over whole rows.
  static constexpr bool kStrips = takes_strips<Sink>::value && !PE::active;

 public:
  TileRun(const E& enc, const TensorView<Tq>& q, const Positions& tq, const TensorView<Tk>& k,
          const Positions& tk, Sink& sink, const ScoreOptions& opt)
      : enc_(&enc),
        coder_(enc),
        poly_(enc),
        q_(q),
        k_(k),
        sink_(&sink),
        opt_(opt),
        epi_(tq, q.tokens(), tk, k.tokens(), opt, q.heads(), sink.window()) {
    d_ = q.dim();
    Hq_ = q.heads();
    Hk_ = k.heads();
    G_ = Hq_ / Hk_;
    nq_ = q.tokens();
    nk_ = k.tokens();
    identity_ = coder_.identity();
    // A pure rotation needs no anchor for its coefficients; a scalar decay on top of it is
    // rebased through row scales and the GEMM's alpha alone (no per-pair pass).
    // Asked once: a fallback coder finds its rate by an eigenvalue solve.
    rate_ = coder_.rate();
    degree_ = coder_.degree();
    rebase_ = rate_ == 0 && degree_ == 0 ? Rebase::pure : Rebase::two_step;
    // One GEMM for all heads of a group: only where nothing differs between them (a pure
    // rotation or identity, no per-head decay, ALiBi or polynomial part) and the sink takes
    // its tiles in place (attention: decoding has one query row per head).
    grouped_ = Sink::in_place && rebase_ == Rebase::pure && !epi_.has_decay() &&
               !epi_.has_alibi() && !PE::active;
    plan_ = plan_run(shape(opt));
    if (plan_.pair_decay) epi_.decay_per_pair(q, k, d_);
    rel_ = coder_.rel_size();
    coef_ = coder_.coef_size();
    shared_coefficients();

    // GEMM operands always come from the contiguous per-unit caches, even for an identity
    // encoding: reading them straight from a strided [n, H, d] view measured 2-3 % slower
    // (bench/README.md, ALiBi), and one path is simpler.
    // Per-pair decays go through the tile buffer: the epilogue scales every score anyway.
    out_rm_ = !epi_.pair_decay() && sink.template direct_row_major<C>(nk_);
    out_cm_ = !epi_.pair_decay() && !out_rm_ && sink.template direct_col_major<C>();
  }

  /// The plan of this run (detail/tiled/tile_plan.hpp).
  const RunPlan& plan() const { return plan_; }
  const Sink& sink() const { return *sink_; }

  // What a sink reads (detail/tiled/attention_sink.hpp, detail/tiled/linear_sink.hpp).
  const TilePlan& query_plan() const { return plan_.query; }
  const TilePlan& key_plan() const { return plan_.key; }
  double t(Index i) const { return epi_.t()[i]; }
  double s(Index j) const { return epi_.s()[j]; }
  Index group() const { return G_; }
  /// A key head's query rows in a query tile (G times the tile's rows) fit the small products
  /// (eigen_gemm::kSmallRows: decoding): the products read K's and V's rows where they lie.
  bool few_rows() const { return plan_.few_rows; }
  Index query_heads() const { return Hq_; }
  Index key_heads() const { return Hk_; }
  Index queries() const { return nq_; }
  Index key_splits() const { return plan_.splits; }
  /// Key heads whose state a unit holds at once (every head when decoding, else 1).
  Index head_slots() const { return plan_.head_slots(Hk_); }
  Index tiles_per_block() const { return plan_.tiles_per_block; }
  Index max_block_rows() const { return plan_.tiles_per_block * qp().max_rows; }

  void run() {
    if (plan_.units == 0) return;
    std::exception_ptr err;
#ifdef _OPENMP
    if (plan_.threads > 1) {
      int failed = 0;
#pragma omp parallel num_threads(plan_.threads)
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
        for (Index u = 0; u < plan_.units; ++u) {
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
    const SerialEigen serial;  // the coders' Eigen products on this thread (parallel.hpp)
    Workspace ws(*this);
    for (Index u = 0; u < plan_.units; ++u) unit(u, ws);
    sink_->finish(*this);
  }

  // Per-thread working memory, carved from the thread's arena (uninitialised, reused
  // across calls so that small problems do not pay for page faults and zero-filling).
  struct Workspace {
    explicit Workspace(const TileRun& r) {
      const Index TQm = r.qp().max_rows, TKm = r.kp().max_rows, d = r.d_, G = r.G_;
      const Index brows = r.plan_.tiles_per_block * TQm;
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
        kstage = a.take<KS>(r.plan_.stage ? TKm * r.Hk_ * d : 0);
        qscale = a.take<double>(r.epi_.has_decay() ? brows * G : 0);
        rel = a.take<double>(rel_rows(std::max(TQm, TKm)) * r.rel_);
        qtile = a.take<C>(TQm * d);
        qcoef = a.take<C>(TQm * r.coef_);
        kcoef = a.take<C>(TKm * r.coef_);
        ktile = a.take<C>(TKm * d);
        kdecay = a.take<C>(r.epi_.has_decay() && G > 1 ? TKm * d : 0);
        tile = a.take<C>(direct ? 0 : TQm * TKm * (Sink::in_place ? G : 1));
        rbias = a.take<Out>(TQm);
        cbias = a.take<Out>(TKm);
        kscale = a.take<double>(TKm);
        pfac = a.take<double>(r.epi_.pair_decay() ? TKm : 0);
        delta = a.take<double>(std::max(TQm, TKm));
        cross = a.take<double>(std::max(r.rel_, 1));
        xcoef = a.take<C>(std::max(r.coef_, 1));
        scratch = a.take<C>(4 * kd + 4);
        row0 = a.take<Index>(r.plan_.tiles_per_block + 1);
        strips = a.take<TileStrip>(takes_strips<Sink>::value ? r.plan_.max_strips() : 0);
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
    Buf<KS> kstage;  // the key rows of every head of a key tile (RunPlan::stage)
    Buf<C> qcache, qtile, qcoef, kcoef, ktile, kdecay, tile, scratch, blockA, blockB, xcoef;
    Buf<C> psoa, pbeta, ptau;
    Buf<double> qscale, rel, kscale, pfac, delta, cross, ppos, pw;
    PolyWork<C> poly;
    Buf<Out> rbias, cbias;
    Buf<Index> row0;
    Buf<TileStrip> strips;     // the strips of the current tile pair (kStrips)
    Index nstrips = 0;         // their count
    bool whole = true;         // the current pair is computed whole (one strip, every pair)
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
          load_row(src, o, d_);  // half-like rows: detail/half_rows.hpp
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
    return sink_->row(ws.sink, tile_of(ws, h, I, J), h, qp().begin[std::size_t(I)], i,
                      kp().begin[std::size_t(J)], kp().rows(J), st);
  }
  // The tile buffer of head h for tile pair (I, J): a sink that takes tiles in place gets
  // one slice per head of the group, consecutive (rows(I) x rows(J) each, row-major), so
  // that the heads of a group can share one GEMM on each side (grouped_).
  C* tile_of(Workspace& ws, Index h, Index I, Index J) const {
    return ws.tile.data() + (Sink::in_place ? (h % G_) * qp().rows(I) * kp().rows(J) : 0);
  }

  // out tile (h, [i0, i0+m) x [j0, j0+n)) = alpha a b^T (+ ALiBi, polynomial parts, mask).
  // a: m x d, b: n x d. Eigen's kernel accumulates into the tile, so the tile starts as the
  // ALiBi bias when it lives in `out` (zeros otherwise) plus the polynomial parts evaluated
  // per pair, one row (column) at a time while it is in L1: no separate pass over the tile.
  void product(Workspace& ws, Index h, Index I, Index J, const C* a, Index lda, const C* b,
               Index ldb, C alpha, TileMask mask) const {
    const Index i0 = qp().begin[std::size_t(I)], m = qp().rows(I);
    const Index j0 = kp().begin[std::size_t(J)], n = kp().rows(J);
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
    if (!ws.whole) {  // kStrips: a buffered row-major tile, no bias, no polynomial parts
      strip_products(ws, a, lda, b, ldb, res, ldr, alpha);
    } else if (out_cm_) {  // column j: queries contiguous
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
    if (d_ > 0 && ws.whole) {
      if (out_cm_)
        gemm_abt<C, Eigen::ColMajor>(m, n, d_, a, lda, b, ldb, res, ldr, alpha, ws.blocking);
      else
        gemm_abt<C, Eigen::RowMajor>(m, n, d_, a, lda, b, ldb, res, ldr, alpha, ws.blocking);
    }
    if (direct && mask == TileMask::none) return;
    epilogue(ws, h, I, J, res, ldr, mask, alibi && !direct);
  }

  // res (row-major, ldr) = alpha a b^T on the strips of the current pair only (ws.strips):
  // rows [r0, r1) of a times columns [c0, c1) of b, in the rectangles of for_each_strip_block.
  // b: the key rows in C, or half-precision rows in place (RunPlan::stream).
  template <class TB>
  void strip_products(Workspace& ws, const C* a, Index lda, const TB* b, Index ldb, C* res,
                      Index ldr, C alpha) const {
    for_each_strip_block(ws.strips.data(), ws.nstrips, [&](Index r0, Index r1, Index c0, Index c1) {
      C* o = res + r0 * ldr + c0;
      for (Index i = 0; i < r1 - r0; ++i) std::fill_n(o + i * ldr, c1 - c0, C(0));
      if (d_ == 0) return;
      if constexpr (std::is_same<TB, C>::value)
        gemm_abt<C, Eigen::RowMajor>(r1 - r0, c1 - c0, d_, a + r0 * lda, lda, b + c0 * ldb, ldb, o,
                                     ldr, alpha, ws.blocking);
      else
        raw_abt(r1 - r0, c1 - c0, a + r0 * lda, lda, b + c0 * ldb, ldb, o, ldr, alpha);
    });
  }

  // res (m x n, row-major, ld ldr) += alpha A B^T over half-precision key rows in place, A's m
  // <= kSmallRows rows of d_ (RunPlan::stream: the rows converted in the products' registers).
  void raw_abt(Index m, Index n, const C* a, Index lda, const TK* b, Index ldb, C* res,
               Index ldr, C alpha) const {
    // KeyRows::raw is set for half-precision keys only (encode_key_tile): nothing otherwise.
    if constexpr (raw_half_keys)
      eigen_gemm::small::abt<C, TK>(m, n, d_, a, lda, b, ldb, res, ldr, 1, alpha);
  }

  // ALiBi of head h for tile (I, J) into ws.rbias, ws.cbias (false: no bias for this head).
  bool alibi_bias(Workspace& ws, Index h, Index I, Index J) const {
    return epi_.alibi_bias(qp(), kp(), h, I, J, ws.rbias.data(), ws.cbias.data());
  }

  // The masks (direct tiles) or the conversion to the sink's rows with the per-pair decay,
  // bias and mask (buffered tiles): detail/tiled/tile_epilogue.hpp.
  void epilogue(Workspace& ws, Index h, Index I, Index J, const C* res, Index ldr, TileMask mask,
                bool alibi) const {
    const bool masked = mask != TileMask::none;
    // A sink that takes the tile in place needs no pass when nothing is to be applied.
    if (Sink::in_place && !out_rm_ && !out_cm_ && !epi_.pair_decay() && !alibi && !masked) return;
    const Index i0 = qp().begin[std::size_t(I)], m = qp().rows(I);
    const Index j0 = kp().begin[std::size_t(J)], n = kp().rows(J);
    const double* sj = epi_.s() + j0;
    for (Index i = 0; i < m; ++i) {
      const double ti = epi_.t()[i0 + i];
      Out* direct = reinterpret_cast<Out*>(const_cast<C*>(res));  // Out == C for direct tiles
      if (out_rm_) {
        epi_.mask_row(direct + i * ldr, ti, sj, n);
      } else if (out_cm_) {
        epi_.mask_row_strided(direct + i, ldr, ti, sj, n);
      } else {
        Index st = 1;
        Out* o = out_row(ws, h, I, J, i, st);
        epi_.finish_row(res + i * ldr, o, st, h, ti, sj, n, alibi, alibi ? ws.rbias[std::size_t(i)] : Out(0),
                        ws.cbias.data(), masked, ws.pfac.data());
      }
    }
  }

  // ---- Polynomial parts per pair (detail/coders/poly_parts.hpp). Row-major tiles take the key tile
  // as the vector side (built once per key tile and unit; again only for a head of the group
  // with another decay) and broadcast one query row at a time; column-major tiles transpose.
  double poly_lng(Index h) const { return epi_.has_decay() ? epi_.lam(h) : 0.0; }
  void poly_keys(Workspace& ws, Index h, Index J) const {
    const double lng = poly_lng(h);
    if (ws.poly.tag == J && ws.poly.lng == lng) return;
    const Index jb = kp().begin[std::size_t(J)], kh = h / G_;
    poly_.vectors([&](Index x, int c) { return to_arith<double>(k_(jb + x, kh, c)); }, kp().rows(J),
                  epi_.s() + jb, -1.0, kp().anchor[std::size_t(J)], lng, false, ws.poly);
    ws.poly.tag = J;
  }
  void poly_query_line(Workspace& ws, Index h, Index I, Index i, C* o) const {
    const Index r = qp().begin[std::size_t(I)] + i;
    poly_.line([&](int c) { return to_arith<double>(q_(r, h, c)); }, epi_.t()[r], opt_.scale,
               false, ws.poly, o);
  }
  void poly_queries(Workspace& ws, Index h, Index I) const {
    const Index ib = qp().begin[std::size_t(I)];
    poly_.vectors([&](Index x, int c) { return to_arith<double>(q_(ib + x, h, c)); }, qp().rows(I),
                  epi_.t() + ib, 1.0, -qp().anchor[std::size_t(I)], poly_lng(h), true, ws.poly);
    ws.poly.tag = -1;
  }
  void poly_key_line(Workspace& ws, Index h, Index J, Index j, C* o) const {
    const Index r = kp().begin[std::size_t(J)] + j;
    poly_.line([&](int c) { return to_arith<double>(k_(r, h / G_, c)); }, -epi_.s()[r],
               opt_.scale, true, ws.poly, o);
  }

  TileMask tile_mask(Index I, Index J) const { return epi_.mask(qp(), kp(), I, J); }

  // How the query side is rebased (see the top of the file):
  //   pure:     anchor 0; q̃ = A(t_i)^T q encoded once per unit, keys once per key tile, both
  //             as the tile's relative table A(t − T) times the tile's constant A(T) (they
  //             commute: A(a)A(b) = A(a + b)); a scalar decay is still rebased: γ^(t_i − T_I)
  //             in the query rows, γ^(S_J − s_j) in the key rows, γ^(T_I − S_J) in alpha;
  //   two_step: q̂ = A(t_i − T_I)^T q once per unit, k̃ = A(S_J − s_j) k once per key tile,
  //             and per tile pair q̃ = A(T_I − S_J)^T q̂, one constant factor per block.
  enum class Rebase { pure, two_step };

  // First cached row of query tile I (of the block starting at tile I0), head kh*G + g.
  C* query_rows(Workspace& ws, Index kh, Index I0, Index I, Index g) const {
    const Index slot = plan_.across ? kh * plan_.tiles_per_block * qp().max_rows * G_ : 0;
    return ws.qcache.data() + (slot + ws.row0[std::size_t(I - I0)] * G_ + g * qp().rows(I)) * d_;
  }

  // The query encoder: the rows of query tiles [I0, I1) of every head of key head kh's
  // group, rebased to their tile's anchor (and to anchor 0 when pure), into ws.qcache.
  void encode_query_block(Workspace& ws, Index kh, Index I0, Index I1) const {
    const Index G = G_;
    C* scratch = ws.scratch.data();
    auto qrow = [&](Index I, Index g) { return query_rows(ws, kh, I0, I, g); };
    Index* row0 = ws.row0.data();
    row0[0] = 0;
    for (Index I = I0; I < I1; ++I) row0[I - I0 + 1] = row0[I - I0] + qp().rows(I);
    for (Index I = I0; I < I1; ++I) {
      const Index b = qp().begin[std::size_t(I)], n = qp().rows(I), r0 = row0[I - I0];
      const double T = qp().anchor[std::size_t(I)];
      const bool reg = qp().regular[std::size_t(I)] != 0;
      const C* coef = nullptr;
      const C* coefx = nullptr;
      if (!identity_) {
        if (reg) {
          coef = qcoef_shared_.data();
        } else {
          for (Index r = 0; r < n; ++r) ws.delta[std::size_t(r)] = epi_.t()[b + r] - T;
          coefficients(ws.delta.data(), n, ws.qcoef.data(), true, ws.rel.data());
          coef = ws.qcoef.data();
        }
        if (rebase_ == Rebase::pure) {  // × A(T_I)^T: anchor 0
          coder_.relative(&T, 1, ws.cross.data(), rel_);
          coder_.compose(nullptr, ws.cross.data(), rel_, 1, ws.xcoef.data(), coef_, true);
          coefx = ws.xcoef.data();
        }
      }
      for (Index g = 0; g < G; ++g) {
        double* qs = nullptr;
        if (epi_.has_decay()) {  // two_step: γ_h^(t_i − T_I) folded into q̂
          const double lam = epi_.lam(kh * G + g);
          qs = ws.qscale.data() + r0 * G + g * n;
          for (Index r = 0; r < n; ++r) qs[r] = std::exp(lam * (epi_.t()[b + r] - T));
        }
        encode_rows(q_, b, n, kh * G + g, coef, coefx, true, qs, qrow(I, g), scratch);
      }
    }

  }

  void unit(Index u, Workspace& ws) const {
    // Late query blocks first: with a causal mask they carry the most work.
    const Index head_units = plan_.across ? 1 : Hk_;
    const Index split = u % plan_.splits, hu = u / plan_.splits;
    const Index blk = plan_.blocks - 1 - hu / head_units;
    const Index kh0 = plan_.across ? 0 : hu % head_units, kh1 = plan_.across ? Hk_ : kh0 + 1;
    const Index J0 = split * plan_.key_tiles_per_split;
    const Index J1 = std::min(kp().size(), J0 + plan_.key_tiles_per_split);
    const Index I0 = blk * plan_.tiles_per_block, I1 = std::min(qp().size(), I0 + plan_.tiles_per_block);
    for (Index kh = kh0; kh < kh1; ++kh) {
      encode_query_block(ws, kh, I0, I1);
      sink_->unit_begin(*this, ws.sink, kh, I0, I1, split);
    }
    for (Index J = J0; J < J1; ++J) {
      if (!plan_.stage) {
        for (Index kh = kh0; kh < kh1; ++kh) key_pass(ws, k_, kp().begin[std::size_t(J)], kh, I0, I1, J);
        continue;
      }
      // Every head's rows of the tile, one contiguous copy per token (RunPlan::across,
      // detail/tiled/tile_plan.hpp); half-like keys converted to C on the way (load_row).
      const Index jb = kp().begin[std::size_t(J)], nkj = kp().rows(J), row = Hk_ * d_;
      for (Index r = 0; r < nkj; ++r)
        load_row(k_.vector(jb + r, 0), ws.kstage.data() + r * row, row);
      const TensorView<const KS> staged(ws.kstage.data(), nkj, Hk_, d_);
      sink_->key_block(*this, ws.sink, J);
      for (Index kh = kh0; kh < kh1; ++kh) key_pass(ws, staged, 0, kh, I0, I1, J);
    }
    for (Index kh = kh0; kh < kh1; ++kh) sink_->unit_end(*this, ws.sink, kh, I0, I1, split);
  }

  // Key tile J of key head kh against the query tiles [I0, I1) of the unit: its rows are rows
  // [kb, kb + rows(J)) of kv (k itself, or the staged copy of the tile).
  template <class T>
  void key_pass(Workspace& ws, const TensorView<T>& kv, Index kb, Index kh, Index I0, Index I1,
                Index J) const {
    bool any = false;
    for (Index I = I0; I < I1; ++I) any |= tile_mask(I, J) != TileMask::all;
    if (!any) {
      for (Index I = I0; I < I1; ++I)
        for (Index g = 0; g < G_; ++g) sink_->masked(*this, ws.sink, kh * G_ + g, I, J);
      return;
    }
    // Heads of the group share one decay? Then it is folded into the key encoding.
    bool shared_decay = true;
    if (epi_.has_decay())
      for (Index g = 1; g < G_; ++g) shared_decay &= epi_.lam(kh * G_ + g) == epi_.lam(kh * G_);
    const KeyRows keys = encode_key_tile(ws, kv, kb, kh, J, epi_.has_decay() && shared_decay);
    if constexpr (PE::active) ws.poly.tag = -1;  // the poly parts' key side: built on demand
    sink_->key_tile(*this, ws.sink, kh, J);
    for (Index I = I0; I < I1; ++I) query_tile_pass(ws, keys, kh, I0, I, J, shared_decay);
  }

  // The encoded rows of a key tile: where they lie and their leading dimension.
  struct KeyRows {
    const C* rows;
    Index ld;
    const TK* raw = nullptr;  // or half-precision rows in place (RunPlan::stream), ld apart
  };
  // Key coefficients A(S_J − s_j) (times the constant A(−S_J) when pure: anchor 0) applied to
  // key tile J of head kh, scaled by the decay γ^(S_J − s_j) of the group when `fold`.
  template <class T>
  KeyRows encode_key_tile(Workspace& ws, const TensorView<T>& kv, Index kb, Index kh, Index J,
                          bool fold) const {
    const Index jb = kp().begin[std::size_t(J)], nkj = kp().rows(J);
    const double S = kp().anchor[std::size_t(J)];
    const C* kcoef = nullptr;
    const C* kcoefx = nullptr;
    if (!identity_) {
      if (kp().regular[std::size_t(J)]) {
        kcoef = kcoef_shared_.data();
      } else {
        for (Index r = 0; r < nkj; ++r) ws.delta[std::size_t(r)] = S - epi_.s()[jb + r];
        coefficients(ws.delta.data(), nkj, ws.kcoef.data(), false, ws.rel.data());
        kcoef = ws.kcoef.data();
      }
      if (rebase_ == Rebase::pure) {
        const double X = -S;
        coder_.relative(&X, 1, ws.cross.data(), rel_);
        coder_.compose(nullptr, ws.cross.data(), rel_, 1, ws.xcoef.data(), coef_, false);
        kcoefx = ws.xcoef.data();
      }
    }
    if (fold) key_scale(ws, kh * G_, J);
    if constexpr (std::is_same<std::remove_cv_t<T>, TK>::value && raw_half_keys)
      if (plan_.stream && identity_ && (nkj <= 1 || kv.strides().token >= d_))
        return {nullptr, nkj > 1 ? kv.strides().token : d_, kv.vector(kb, kh)};
    // An identity (keys already encoded) against a few query rows: the product reads the
    // key rows where they lie (each once, gemm_abt's small path); else they are encoded.
    if constexpr (std::is_same<std::remove_cv_t<T>, C>::value)
      if (identity_ && !fold && plan_.few_rows && kv.strides().elem == 1 &&
          (nkj <= 1 || kv.strides().token >= d_))
        return {kv.vector(kb, kh), nkj > 1 ? kv.strides().token : d_};
    encode_rows(kv, kb, nkj, kh, kcoef, kcoefx, false, fold ? ws.kscale.data() : nullptr,
                ws.ktile.data(), ws.scratch.data());
    return {ws.ktile.data(), d_};
  }
  // Key decay of head h, γ_h^(S_J − s_j), into ws.kscale.
  void key_scale(Workspace& ws, Index h, Index J) const {
    const Index jb = kp().begin[std::size_t(J)], nkj = kp().rows(J);
    const double S = kp().anchor[std::size_t(J)], lam = epi_.lam(h);
    for (Index r = 0; r < nkj; ++r)
      ws.kscale[std::size_t(r)] = std::exp(lam * (S - epi_.s()[jb + r]));
  }

  // Query tile I (of the unit's block starting at I0) against the encoded key tile J, every
  // head of key head kh's group.
  void query_tile_pass(Workspace& ws, const KeyRows& keys, Index kh, Index I0, Index I, Index J,
                       bool shared_decay) const {
    const TileMask mask = tile_mask(I, J);
    if (mask == TileMask::all) {
      for (Index g = 0; g < G_; ++g) sink_->masked(*this, ws.sink, kh * G_ + g, I, J);
      return;
    }
    const Index n = qp().rows(I), nkj = kp().rows(J);
    if constexpr (takes_strips<Sink>::value) {
      // The pair's strips: where a mask can cut it, the staircase (plan_strips); else whole.
      ws.nstrips = 1;
      if (kStrips && plan_.strip_rows > 0)
        ws.nstrips = plan_strips(qp(), I, kp(), J, epi_.t(), epi_.s(), opt_.causal, epi_.window(),
                                 plan_.strip_rows, ws.strips.data());
      else
        ws.strips[0] = TileStrip{
            0, n, 0, nkj, 0, pair_cut(qp(), I, kp(), J, opt_.causal, epi_.window()) ? nkj : 0};
      if (ws.nstrips == 0) {  // no row of the tile sees a key of it
        for (Index g = 0; g < G_; ++g) sink_->masked(*this, ws.sink, kh * G_ + g, I, J);
        return;
      }
      ws.whole = whole_pair(ws.strips.data(), ws.nstrips, n, nkj);
      sink_->strips(ws.sink, ws.strips.data(), ws.nstrips);
    }
    if (grouped_) {  // every head of the group in one GEMM (tile slices are consecutive)
      C* res = tile_of(ws, kh * G_, I, J);
      if (ws.whole) {
        std::fill_n(res, G_ * n * nkj, C(0));
        if (d_ > 0 && keys.raw)
          raw_abt(G_ * n, nkj, query_rows(ws, kh, I0, I, 0), d_, keys.raw, keys.ld, res, nkj,
                  C(opt_.scale));
        else if (d_ > 0)
          gemm_abt<C, Eigen::RowMajor>(G_ * n, nkj, d_, query_rows(ws, kh, I0, I, 0), d_, keys.rows,
                                       keys.ld, res, nkj, C(opt_.scale), ws.blocking);
      } else {  // along the staircase, head by head
        for (Index g = 0; g < G_; ++g)
          if (keys.raw)
            strip_products(ws, query_rows(ws, kh, I0, I, g), d_, keys.raw, keys.ld,
                           res + g * n * nkj, nkj, C(opt_.scale));
          else
            strip_products(ws, query_rows(ws, kh, I0, I, g), d_, keys.rows, keys.ld,
                           res + g * n * nkj, nkj, C(opt_.scale));
      }
    }
    const C* qcoef = nullptr;
    if (rebase_ == Rebase::two_step && !identity_) {  // the cross factor A(T_I − S_J)^T
      const double D = qp().anchor[std::size_t(I)] - kp().anchor[std::size_t(J)];
      coder_.relative(&D, 1, ws.cross.data(), rel_);
      coder_.compose(nullptr, ws.cross.data(), rel_, 1, ws.qcoef.data(), coef_, true);
      qcoef = ws.qcoef.data();
    }
    for (Index g = 0; g < G_; ++g)
      head_tile(ws, keys, kh * G_ + g, I0, I, J, qcoef, mask, shared_decay);
    sink_->group_done(*this, ws.sink, tile_of(ws, kh * G_, I, J), kh, I, J);
  }

  // Head h's tile (I, J): its query rows times the cross factor qcoef (two_step), the GEMM
  // with alpha = scale γ^(T_I − S_J), the epilogue, the rescan, then the sink.
  void head_tile(Workspace& ws, const KeyRows& keys, Index h, Index I0, Index I, Index J,
                 const C* qcoef, TileMask mask, bool shared_decay) const {
    const Index kh = h / G_, n = qp().rows(I), nkj = kp().rows(J);
    C* tile = tile_of(ws, h, I, J);
    if (epi_.decay_underflows(qp(), kp(), h, I, J)) {
      epi_.underflow_tile(qp(), kp(), h, G_, I, J, ws.rbias.data(), ws.cbias.data(),
                          [&](Index i, Index& st) { return out_row(ws, h, I, J, i, st); });
      sink_->tile_done(*this, ws.sink, tile, h, I, J);
      return;
    }
    double alpha = opt_.scale;
    if (epi_.has_decay())  // γ^(T_I − S_J)
      alpha *= std::exp(epi_.lam(h) * (qp().anchor[std::size_t(I)] - kp().anchor[std::size_t(J)]));
    const C* a = query_rows(ws, kh, I0, I, h - kh * G_);
    if (rebase_ == Rebase::two_step && qcoef != nullptr) {  // (identity: the rows are final)
      C* dst = ws.qtile.data();
      for (Index r = 0; r < n; ++r)
        coder_.apply_factor(qcoef, a + r * d_, dst + r * d_, true, ws.scratch.data());
      a = dst;
    }
    const C* bk = keys.rows;
    Index ldb = keys.ld;
    if (epi_.has_decay() && !shared_decay) {
      key_scale(ws, h, J);
      for (Index r = 0; r < nkj; ++r) {
        const C f = C(ws.kscale[std::size_t(r)]);
        const C* src = keys.rows + r * keys.ld;
        C* dst = ws.kdecay.data() + r * d_;
        for (Index e = 0; e < d_; ++e) dst[e] = src[e] * f;
      }
      bk = ws.kdecay.data();
      ldb = d_;
    }
    // A sink that masks by itself (attention: after its softcap) needs no −inf here.
    const TileMask emask = Sink::applies_masks ? TileMask::none : mask;
    if (!grouped_)
      product(ws, h, I, J, a, d_, bk, ldb, C(alpha), emask);
    else if (emask != TileMask::none)
      epilogue(ws, h, I, J, tile, nkj, emask, false);
    const Rescan rescan = rescan_needed(qcoef, coef_, alpha, rescan_limit_);
    if (rescan != Rescan::none)
      rescan_tile(*enc_, q_, k_, epi_, qp(), kp(), h, G_, I, J, rescan == Rescan::all,
                  [&](Index i, Index& st) { return out_row(ws, h, I, J, i, st); });
    sink_->tile_done(*this, ws.sink, tile, h, I, J);
  }

  // The shape plan_run reads.
  RunShape shape(const ScoreOptions& opt) const {
    RunShape x;
    x.t = epi_.t(), x.s = epi_.s();
    x.nq = nq_, x.nk = nk_, x.d = d_, x.Hq = Hq_, x.Hk = Hk_;
    x.arith_bytes = Index(sizeof(C));
    x.exp_budget = rebase_limits<C>::exp_budget, x.poly_budget = rebase_limits<C>::poly_budget;
    // The polynomial parts' e^{λτ} is rebased like any growth (their λ is in the rate); their
    // polynomial is evaluated per pair, so their chain length does not enter the degree.
    x.rate = std::max(rate_, poly_.rate());
    x.degree = degree_;
    x.has_decay = epi_.has_decay(), x.decay_rate = epi_.decay_rate();
    x.query_tile = opt.query_tile, x.key_tile = opt.key_tile;
    x.threads = 1;
#ifdef _OPENMP
    if (!omp_in_parallel()) x.threads = opt.threads > 0 ? opt.threads : omp_get_max_threads();
#endif
    x.splits_keys = Sink::splits_keys;
    x.packed_keys = k_.strides().elem == 1 && k_.strides().head == d_;
    x.streamable_keys = grouped_ && k_.strides().elem == 1 &&
                        (!identity_ || raw_half_keys || std::is_same<TK, C>::value);
    x.small_rows = eigen_gemm::kSmallRows;
    x.strips = kStrips;
    x.causal = opt.causal;
    x.window = epi_.window();
    return x;
  }

  // Coefficients of the regular tiles relative to their own anchors (query: A(t − T)^T,
  // key: A(S − s)), shared by every thread. Reused from the previous call on this thread
  // when the encoding and the tile offsets are the same (the key compares every parameter
  // and every offset exactly), else computed through relative tables of kChunkRows rows.
  void shared_coefficients() {
    const Index nqr = Index(qp().ref_delta.size()), nkr = Index(kp().ref_delta.size());
    std::vector<double> key;
    bool cacheable = coder_.signature(key);
    key.push_back(double(nqr));
    key.push_back(double(nkr));
    key.insert(key.end(), qp().ref_delta.begin(), qp().ref_delta.end());
    key.insert(key.end(), kp().ref_delta.begin(), kp().ref_delta.end());
    TableCache<C>& cache = table_cache<C>();
    if (!cacheable || cache.key != key || cache.key.empty()) {
      cache.key.clear();  // invalid while being rebuilt
      cache.kcoef.resize(std::size_t(nkr * coef_));
      cache.qcoef.resize(std::size_t(nqr * coef_));
      std::vector<double> kdelta(static_cast<std::size_t>(nkr)),
          rel(std::size_t(rel_rows(std::max(nqr, nkr)) * rel_));
      for (Index r = 0; r < nkr; ++r) kdelta[std::size_t(r)] = -kp().ref_delta[std::size_t(r)];
      coefficients(kdelta.data(), nkr, cache.kcoef.data(), false, rel.data());
      coefficients(qp().ref_delta.data(), nqr, cache.qcoef.data(), true, rel.data());
      if (cacheable) cache.key = std::move(key);
    }
    kcoef_shared_.p = cache.kcoef.data();
    qcoef_shared_.p = cache.qcoef.data();
  }

  const TilePlan& qp() const { return plan_.query; }
  const TilePlan& kp() const { return plan_.key; }

  const E* enc_;
  K coder_;
  PE poly_;
  TensorView<Tq> q_;
  TensorView<Tk> k_;
  Sink* sink_;
  const ScoreOptions& opt_;
  Epilogue epi_;  // positions, options, masks (detail/tiled/tile_epilogue.hpp)
  RunPlan plan_;  // tiles, units, threads (detail/tiled/tile_plan.hpp)
  double rescan_limit_ = rescan_limit<C>();
  Index d_ = 0, Hq_ = 0, Hk_ = 1, G_ = 1, nq_ = 0, nk_ = 0;
  bool identity_ = false;
  Rebase rebase_ = Rebase::pure;
  double rate_ = 0;  // the coder's growth rate and GEMM degree
  int degree_ = 0;
  int rel_ = 0, coef_ = 0;
  Buf<C> qcoef_shared_, kcoef_shared_;
  bool out_rm_ = false, out_cm_ = false;
  bool grouped_ = false;
  // Decoding for a grouped sink (RunPlan::stream): each key head's rows are read where they
  // lie: keys already encoded (an identity) go to the small products as they are, half-precision
  // ones converted in the products' registers (detail/small_products.hpp); others are encoded
  // per head (encode_rows). The same values as the staged copy, so the same result.
  static constexpr bool raw_half_keys = is_half_like<TK> && std::is_same<C, float>::value;
};

}  // namespace tiled
}  // namespace detail
}  // namespace peal
