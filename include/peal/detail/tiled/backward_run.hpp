// The driver of the fused backward kernels (scores_backward.hpp, attention_backward.hpp;
// docs/gradients.md §4). Both need, per query head h and key head h / G, the gradient W_ij of
// the loss with respect to the raw score q_iᵀ A(t_i − s_j) k_j; from it this driver forms
//   dq̂_i += Σ_j W_ij A_X(Δ) k̂_j,   dk̂_j += A_X(Δ)ᵀ Σ_i W_ij q̂_i,
//   ∂L/∂θ += Σ_j (Σ_i W_ij q̂_i)ᵀ ∂A_X(Δ)/∂θ k̂_j,
// per tile pair of anchors T_I, S_J (Δ = T_I − S_J; q̂_i = F(t_i − T_I) q_i, k̂_j = G(s_j − S_J) k_j;
// A_X is A, or a basis change's inner A), and turns dq̂, dk̂ into dq, dk, ∂L/∂θ, ∂L/∂t, ∂L/∂s by
// the encode backward at the relative positions (encode_backward.hpp). The tiles are the
// forward's (detail/tiled/tile_plan.hpp: ρ h ≤ 128 ln 2, (1 + 4h)^p ≤ 2^20); pure rotations take
// anchor 0 (Δ = 0, q̂ = F(t) q).
//
// What W is belongs to the caller, an epilogue Epi with
//   bool skip(double tmin, double tmax, double smin, double smax) const;   every pair masked
//   bool causal() const;   keys after t are masked (pairs stop at the last visible sorted key)
//   void weights(Part& part, Index h, Index kh, Index ib, Index ni, Index jb, Index nj,
//                const Rows<C>& qh, const Tile<C>& kt, Tile<C> W);   W for query head h, rows
//                ib.., keys jb..; kt holds the rows (A_X(Δ) k̂_j)ᵀ, so qh ktᵀ is the raw score tile
//   void reset(Part&, bool first) const (zero sums, the buffers kept; the first shard's may be
//   the totals themselves); double part_bytes() const;
//   void join(const std::vector<const Part*>& parts, int threads);
// and its own gradients (ALiBi slopes, decays, sinks, dV, the bias's share of the positions):
// those that several query tiles add to (dV, the per-head ones, the key positions) go to the
// shard's Part, and join() adds the shards' Parts to the totals, each entry in shard order.
// Arithmetic in C (float, or double when an input stores double, as the forward's); positions,
// tile anchors and parameters in double. Threads over the shards of the query tiles
// (shard_count below), deterministic: any thread count gives the bits of one thread.
#pragma once

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "../../derivatives.hpp"
#include "../../encode_backward.hpp"
#include "../../errors.hpp"
#include "../../positions.hpp"
#include "../../view.hpp"
#include "../coders/coders.hpp"
#include "../overlap.hpp"
#include "../parallel.hpp"
#include "../storage.hpp"
#include "tile_plan.hpp"

#ifdef _OPENMP
#include <omp.h>
#endif

namespace peal {
namespace detail {
namespace backward_run {

// The encoding whose A the cross factor of two anchors is: F(a)ᵀ X G(b) = A(a + Δ − b) needs
// X = A(Δ), or for a basis change (F(a)ᵀ = P A_J(a), G(b) = A_J(−b) P⁻¹) X = A_J(Δ).
template <class E>
const E& cross(const E& e) {
  return e;
}
template <class I>
const auto& cross(const BasisChange<I>& e) {
  return cross(e.inner());
}

// Matrices of the arithmetic type C (float, or double when an input stores double: the
// forward's detail::arith_t).
template <class C>
using RowMatrix = Eigen::Matrix<C, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
template <class C>
using Rows = Eigen::Map<RowMatrix<C>, 0, Eigen::OuterStride<>>;
template <class C>
using Tile = Eigen::Ref<RowMatrix<C>, 0, Eigen::OuterStride<>>;

// Head h of a [tokens, heads, d] buffer, rows [b, b + n).
template <class C>
Rows<C> head_rows(C* v, Index b, Index n, Index heads, Index h, Index d) {
  return Rows<C>(v + (b * heads + h) * d, n, d, Eigen::OuterStride<>(heads * d));
}
// The kernel's row buffers, 64-byte aligned (as linear::Buffer, linear_ops.hpp, and the tile
// driver's arena): Eigen's loops peel the leading entries before an aligned address to scalar
// code, whose rounding may differ from the packet code's, so with malloc's alignment the bits
// of a thread's buffers (Workspace::local() is per thread) would depend on the heap.
template <class C>
using Buffer = std::vector<C, Eigen::aligned_allocator<C>>;

template <class C>
Rows<C> head_rows(Buffer<C>& v, Index b, Index n, Index heads, Index h, Index d) {
  return head_rows(v.data(), b, n, heads, h, d);
}

template <class T>
TensorView<T> token_range(const TensorView<T>& v, Index b, Index n) {
  if (v.empty()) return v;
  return TensorView<T>(v.vector(b, 0), n, v.heads(), v.dim(), v.strides());
}

// Rows [r0, r0 + nr) of a query tile against the first nj keys of a key tile (Run::pair).
struct RowBlock {
  Index r0, nr, nj;
};

// Working memory of a call, kept by the calling thread between calls (fresh allocations of a
// few MB per call cost more page faults than the arithmetic at n = 512): the encoded key rows
// and their gradient (nk·Hk·d doubles each), one query tile's (256·Hq·d each), the tile pair's
// matrices. It grows to the largest call made on the thread and is not released.
template <class C>
struct Workspace {
  Buffer<C> khat, dkhat, qhat, dqhat, xbuf;
  RowMatrix<C> W, kt, u;
  std::vector<RowBlock> blocks;
  static Workspace& local() {
    thread_local Workspace w;
    return w;
  }
};
template <class T, class A>
void at_least(std::vector<T, A>& v, Index n) {
  if (Index(v.size()) < n) v.resize(std::size_t(n));
}
template <class C>
void at_least(RowMatrix<C>& m, Index rows, Index cols) {
  if (m.rows() < rows || m.cols() < cols)
    m.resize(std::max(rows, Index(m.rows())), std::max(cols, Index(m.cols())));
}

// The tiles of one side: the forward's plan for growing/decaying encodings, one anchor 0 per
// tile of max_rows tokens for pure rotations.
inline tiled::TilePlan plan(const Positions& p, Index n, Index max_rows, double h,
                                     bool pure) {
  std::vector<double> t(static_cast<std::size_t>(n));
  for (Index i = 0; i < n; ++i) t[std::size_t(i)] = p[i];
  tiled::TilePlan tp = tiled::plan_tiles(
      t.data(), n, max_rows, pure ? std::numeric_limits<double>::infinity() : h);
  if (pure) std::fill(tp.anchor.begin(), tp.anchor.end(), 0.0);
  return tp;
}

// ---- Validation shared by the backward kernels (scores_backward.hpp, attention_backward.hpp)
// An output gradient view: empty (not wanted) or with the extents of its input, and touching
// none of the views it is read beside.
template <class TD, class TX, class... Read>
void check_output(const std::string& w, const TensorView<TD>& d, const char* name,
                  const TensorView<TX>& like, const char* like_name,
                  const std::pair<const Read*, const char*>&... read) {
  if (d.empty()) return;
  if (d.tokens() != like.tokens() || d.heads() != like.heads() || d.dim() != like.dim())
    fail(w + ": " + name + " must have the extents of " + like_name + ", or be empty");
  auto apart = [&](const auto& v, const char* other) {
    if (!v.empty() && may_overlap(d, v)) fail(w + ": " + name + " overlaps " + other);
  };
  (apart(*read.first, read.second), ...);
}
// Every entry of a gradient view 0 (a kernel with nothing to sum: no keys, or no queries).
template <class T>
void set_zero(const TensorView<T>& x) {
  for (Index i = 0; i < x.tokens(); ++i)
    for (Index h = 0; h < x.heads(); ++h)
      for (Index e = 0; e < x.dim(); ++e) x(i, h, e) = from_arith<std::remove_cv_t<T>>(0.0);
}
// A gradient vector: n entries when wanted.
template <class T>
void check_size(const std::string& w, const std::vector<T>* g, Index n, const char* what) {
  if (g && Index(g->size()) != n)
    fail(w + ": the " + what + " gradient has " + std::to_string(g->size()) + " entries, expected " +
         std::to_string(n));
}
// The gradient of a per-head option (ALiBi slopes, decays, sinks): only when the option is set.
inline void check_head_option(const std::string& w, const std::vector<double>* g,
                              const std::vector<double>& option, Index Hq, const char* what) {
  if (g && option.empty())
    fail(w + ": the " + std::string(what) + " gradient was asked for, but the options have none");
  check_size(w, g, Hq, what);
}

/// Where the encoding's gradients go (each may be null) and whether the keys arrive encoded
/// (attention's keys_encoded: k holds G(s) k, pure rotations only; dk is then the gradient of
/// those rows and the keys add nothing to θ or s).
template <class R>
struct Targets {
  std::vector<R>* parameters = nullptr;
  std::vector<R>* query_positions = nullptr;
  std::vector<R>* key_positions = nullptr;
  bool keys_encoded = false;
};

// The shards of the query tiles. The tiles are dealt to the shards back and forth, 0, 1, …,
// S − 1, S − 1, …, 1, 0, 0, 1, … (shard_of): under a causal mask tile I's work grows like
// I + 1/2, so each pass out and back gives every shard the same work (2S tiles: 2S of it each);
// dealt round-robin (I mod S) the last shard had S more than the first per pass, and two threads
// over 4 shards of 8 tiles finished at 18 of 32 units instead of 16. Each shard sums its own
// dk̂, parameter gradient and epilogue part (dV, the per-head and key-position gradients) over
// its tiles in order, and the shards are added in their order at the end. S depends on the
// sizes alone, never on the thread count, so any number of threads gives the bits of one
// thread: at most kMaxShards,
// one per query tile at most (under a causal staircase one per two tiles, so that the dealing
// back and forth balances them), and the shards' buffers within kShardBytes (at least one).
// Shard 0 sums straight into the totals (zero before it, as its own buffer would be): the
// others' buffers, zeroed and joined, are the whole cost of the shards on one thread (at
// n = 2048, 4 heads, d = 128: 8 MB each).
constexpr Index kMaxShards = 4;
constexpr double kShardBytes = 256.0 * 1024 * 1024;
inline Index shard_of(Index tile, Index shards) {
  const Index r = tile % (2 * shards);
  return r < shards ? r : 2 * shards - 1 - r;
}
inline Index shard_count(Index query_tiles, double bytes_per_shard, bool staircase) {
  Index n = std::min(staircase ? (query_tiles + 1) / 2 : query_tiles, kMaxShards);
  while (n > 1 && double(n) * bytes_per_shard > kShardBytes) --n;
  return std::max<Index>(1, n);
}

// Threads for a run of `shards` shards: opt.threads (0: OpenMP's maximum), one inside a
// parallel region (nested calls stay on their thread), never more than the shards.
inline int shard_threads(int threads, Index shards) {
  int nt = 1;
#ifdef _OPENMP
  if (!omp_in_parallel()) nt = threads > 0 ? threads : omp_get_max_threads();
#else
  (void)threads;
#endif
  return int(std::max<Index>(1, std::min<Index>(nt, shards)));
}

// fn(begin, end) over [0, n) rows of `width` entries each, in chunks of 64 rows on up to
// `threads` threads (0: OpenMP's maximum) once there are 2^18 entries: the row-independent
// passes around the shards (conversions, row sums), which each row writes alone, so any thread
// count gives the same bits. Below that a pass takes less than waking a team costs.
template <class Fn>
void row_chunks(Index n, Index width, int threads, Fn&& fn) {
  constexpr Index kRows = 64, kMinEntries = Index(1) << 18;
  const Index chunks = (n + kRows - 1) / kRows;
  parallel_each(chunks, n * width >= kMinEntries ? shard_threads(threads, chunks) : 1,
                [&](Index c) { fn(c * kRows, std::min(n, (c + 1) * kRows)); });
}

// total[x] += Σ_{s=1..S−1} shard(s)[x] (shard 0's sums are the total already), each entry
// summed in shard order: threads over the entries give the bits of one thread.
template <class C, class Shard>
void join_shards(C* total, Index n, Index S, Shard shard, int threads) {
  (void)threads;  // without OpenMP
  if (S < 2) return;
#ifdef _OPENMP
#pragma omp parallel for schedule(static) num_threads(threads) if (threads > 1 && n > 65536)
#endif
  for (Index x = 0; x < n; ++x) {
    C acc = total[x];
    for (Index s = 1; s < S; ++s) acc += shard(s)[x];
    total[x] = acc;
  }
}

template <class C, class E, class Tq, class Tk, class Tdq, class Tdk, class R, class Epi>
class Run {
 public:
  Run(const E& enc, const TensorView<Tq>& q, const Positions& tq, const TensorView<Tk>& k,
      const Positions& tk, const TensorView<Tdq>& dq, const TensorView<Tdk>& dk,
      const Targets<R>& g, Epi& epi, int threads)
      : enc_(enc), q_(q), tq_(tq), k_(k), tk_(tk), dq_(dq), dk_(dk), g_(g), epi_(epi),
        nq_(q.tokens()), nk_(k.tokens()), Hq_(q.heads()), Hk_(k.heads()), d_(q.dim()),
        G_(Hq_ / Hk_), threads_(threads) {
    const coders::coder_t<double, E> coder(enc);
    using L = tiled::rebase_limits<C>;
    const double rate = coder.rate();  // once: a fallback coder solves for its eigenvalues
    const int degree = coder.degree();
    const bool pure = g.keys_encoded || (rate == 0 && degree == 0);
    const double h = tiled::max_half_spread(rate, degree, L::exp_budget, L::poly_budget);
    bool sorted = true;
    for (Index j = 1; j < nk_ && sorted; ++j) sorted = !(tk[j] < tk[j - 1]);
    trim_causal_ = epi.causal() && sorted;
    // Query tiles of 128 rows up to 1024 queries under a causal staircase, so that two threads
    // get 2 shards of 2 tiles each to balance (shard_count) rather than 2 tiles of unequal work.
    qp_ = plan(tq, nq_, trim_causal_ && nq_ <= 1024 ? 128 : 256, h, pure);
    kp_ = plan(tk, nk_, 512, h, pure);
  }

  void run() {
    at_least(ws_.khat, nk_ * Hk_ * d_);  // every row written by encode_tile
    at_least(ws_.dkhat, nk_ * Hk_ * d_);
    std::fill(ws_.dkhat.begin(), ws_.dkhat.begin() + nk_ * Hk_ * d_, 0.0);
    // The key tiles before and after the shards, on the threads too (each tile its own rows):
    // on one thread they were ~4 % of the backward (n = 2048, 4 heads, d = 128), which capped
    // two threads near 1.9x.
    const int kt = shard_threads(threads_, kp_.size());
    parallel_each(kp_.size(), kt, [&](Index J) { encode_tile(/*query=*/false, J, ws_.khat); });
    const double bytes = double(nk_ * Hk_ * d_) * sizeof(C) + epi_.part_bytes() +
                         double(g_.parameters ? g_.parameters->size() : 0) * sizeof(R);
    const Index S = shard_count(qp_.size(), bytes, trim_causal_);
    std::vector<Shard>& shards = kept_shards();  // the calling thread's, seen by every thread
    if (Index(shards.size()) < S) shards.resize(std::size_t(S));
    const int nt = shard_threads(threads_, S);
    // A failure (an allocation) is rethrown after every shard ran.
    parallel_each(S, nt, [&](Index s) { run_shard(s, S, shards[std::size_t(s)]); });
    join(shards, S, nt);
    keys_backward(kt);
  }

 private:
  using Part = typename Epi::Part;
  struct Shard {
    Buffer<C> own;  // shards 1..S−1: their dk̂ sums
    C* dkhat = nullptr;  // own, or for shard 0 the total
    std::vector<R> parameters;
    Part part;
  };

  // The shards' buffers, kept by the calling thread between calls (as the workspace).
  static std::vector<Shard>& kept_shards() {
    thread_local std::vector<Shard> kept;
    return kept;
  }

  void run_shard(Index s, Index S, Shard& sh) {
    if (s == 0) {
      sh.dkhat = ws_.dkhat.data();  // zero (run())
    } else {
      sh.own.assign(std::size_t(nk_ * Hk_ * d_), C(0));
      sh.dkhat = sh.own.data();
    }
    if (g_.parameters) sh.parameters.assign(g_.parameters->size(), R(0));
    epi_.reset(sh.part, /*first=*/s == 0);
    Workspace<C>& w = Workspace<C>::local();
    at_least(w.W, qp_.max_rows, kp_.max_rows);
    at_least(w.kt, kp_.max_rows, d_);
    at_least(w.u, kp_.max_rows, d_);
    for (Index I = s; I < qp_.size(); ++I)
      if (shard_of(I, S) == s) query_tile(w, sh, I);
  }

  // dk through each key tile's encode backward (rows of its own), the tiles' parameter
  // gradients each summed apart and added in tile order: the bits of one thread.
  void keys_backward(int threads) {
    const std::size_t np = g_.parameters ? g_.parameters->size() : 0;
    std::vector<std::vector<R>> part(g_.parameters ? std::size_t(kp_.size()) : 0,
                                     std::vector<R>(np, R(0)));
    parallel_each(kp_.size(), threads, [&](Index J) {
      backward_tile(Workspace<C>::local(), /*query=*/false, J, ws_.dkhat,
                    g_.parameters ? &part[std::size_t(J)] : nullptr);
    });
    for (const std::vector<R>& p : part)
      for (std::size_t x = 0; x < np; ++x) (*g_.parameters)[x] += p[x];
  }

  // The shards' sums into the totals, each entry summed in shard order (shard 0's are the
  // totals already; dk̂ over threads by entries: the same sums as one thread's).
  void join(const std::vector<Shard>& shards, Index S, int nt) {
    join_shards(ws_.dkhat.data(), nk_ * Hk_ * d_, S,
                [&](Index s) -> const C* { return shards[std::size_t(s)].dkhat; }, nt);
    std::vector<const Part*> parts;
    for (Index s = 0; s < S; ++s) {
      const Shard& sh = shards[std::size_t(s)];
      if (g_.parameters)
        for (std::size_t x = 0; x < sh.parameters.size(); ++x)
          (*g_.parameters)[x] += sh.parameters[x];
      parts.push_back(&sh.part);
    }
    epi_.join(parts, nt);
  }

  std::vector<double> relative(bool query, Index I) const {
    const tiled::TilePlan& p = query ? qp_ : kp_;
    const Positions& pos = query ? tq_ : tk_;
    const Index b = p.begin[std::size_t(I)], n = p.rows(I);
    std::vector<double> rel(static_cast<std::size_t>(n));
    for (Index r = 0; r < n; ++r) rel[std::size_t(r)] = pos[b + r] - p.anchor[std::size_t(I)];
    return rel;
  }

  // q̂ (k̂) of tile I: F(t − T_I) q (G(s − S_J) k) into rows [b, b + n) of buf (the query
  // buffer holds one tile).
  void encode_tile(bool query, Index I, Buffer<C>& buf) const {
    if (d_ == 0) return;  // no coordinates: only the epilogue's gradients
    const tiled::TilePlan& p = query ? qp_ : kp_;
    const Index b = p.begin[std::size_t(I)], n = p.rows(I), H = query ? Hq_ : Hk_;
    const Index off = query ? 0 : b;
    const TensorView<C> dst(buf.data() + off * H * d_, n, H, d_);
    if (!query && g_.keys_encoded) {  // k̂ = G(s) k as given
      for (Index r = 0; r < n; ++r)
        for (Index h = 0; h < H; ++h)
          for (Index e = 0; e < d_; ++e) dst(r, h, e) = detail::to_arith<C>(k_(b + r, h, e));
      return;
    }
    const std::vector<double> rel = relative(query, I);
    if (query)
      encode_queries(enc_, token_range(q_, b, n), dst, Positions(rel));
    else
      encode_keys(enc_, token_range(k_, b, n), dst, Positions(rel));
  }

  // dq̂ (dk̂) of a tile through the encode backward at the relative positions; its parameter
  // gradient into `params` (the shard's for a query tile).
  void backward_tile(Workspace<C>& w, bool query, Index I, Buffer<C>& dbuf,
                     std::vector<R>* params) const {
    if (d_ == 0) return;
    const tiled::TilePlan& p = query ? qp_ : kp_;
    const Index b = p.begin[std::size_t(I)], n = p.rows(I), H = query ? Hq_ : Hk_;
    const Index off = query ? 0 : b;
    const TensorView<const C> dv(dbuf.data() + off * H * d_, n, H, d_);
    if (!query && g_.keys_encoded) {  // dk = dk̂
      if (!dk_.empty())
        for (Index r = 0; r < n; ++r)
          for (Index h = 0; h < H; ++h)
            for (Index e = 0; e < d_; ++e)
              dk_(b + r, h, e) = from_arith<std::remove_cv_t<Tdk>>(dv(r, h, e));
      return;
    }
    std::vector<R>* pos_out = query ? g_.query_positions : g_.key_positions;
    std::vector<R> dpos(pos_out ? std::size_t(n) : 0, R(0));
    const EncodeGradients<R> eg{params, pos_out ? &dpos : nullptr};
    // The rows in C, as dv: the rotation banks' direct pair sums need one storage type.
    at_least(w.xbuf, n * H * d_);
    const TensorView<C> xv(w.xbuf.data(), n, H, d_);
    for (Index r = 0; r < n; ++r)
      for (Index h = 0; h < H; ++h)
        for (Index e = 0; e < d_; ++e)
          xv(r, h, e) = query ? detail::to_arith<C>(q_(b + r, h, e))
                              : detail::to_arith<C>(k_(b + r, h, e));
    const std::vector<double> rel = relative(query, I);
    if (query)
      encode_queries_backward(enc_, ro(xv), Positions(rel), dv, token_range(dq_, b, n), eg);
    else
      encode_keys_backward(enc_, ro(xv), Positions(rel), dv, token_range(dk_, b, n), eg);
    if (pos_out)  // rows of this tile only: shards never share an entry
      for (Index r = 0; r < n; ++r) (*pos_out)[std::size_t(b + r)] += dpos[std::size_t(r)];
  }

  void query_tile(Workspace<C>& w, Shard& sh, Index I) {
    const Index ib = qp_.begin[std::size_t(I)], ni = qp_.rows(I);
    at_least(w.qhat, ni * Hq_ * d_);
    at_least(w.dqhat, ni * Hq_ * d_);
    std::fill(w.dqhat.begin(), w.dqhat.begin() + ni * Hq_ * d_, 0.0);
    encode_tile(/*query=*/true, I, w.qhat);
    const auto [tmin, tmax] = span(tq_, ib, ni);
    for (Index J = 0; J < kp_.size(); ++J) {
      const Index jb = kp_.begin[std::size_t(J)], nj = kp_.rows(J);
      const auto [smin, smax] = span(tk_, jb, nj);
      if (epi_.skip(tmin, tmax, smin, smax)) continue;
      pair(w, sh, I, J, nj);
    }
    backward_tile(w, /*query=*/true, I, w.dqhat, g_.parameters ? &sh.parameters : nullptr);
  }
  // The number of keys in [jb, jb + nj) with s ≤ tmax (sorted keys: a prefix).
  Index visible_keys(Index jb, Index nj, double tmax) const {
    Index lo = 0, hi = nj;
    while (lo < hi) {
      const Index mid = lo + (hi - lo) / 2;
      if (tk_[jb + mid] > tmax)
        hi = mid;
      else
        lo = mid + 1;
    }
    return lo;
  }
  // The tile's rows in blocks, each against the keys it may see. Causal with sorted keys, the
  // keys after the last s ≤ max t of a block are masked for every row of it (their W and P are
  // 0), so a block of kRowBlock rows stops before them: of a diagonal tile pair only the blocks'
  // staircase is computed, not the masked triangle (n = 512: a quarter fewer pairs than one cut
  // per tile). Otherwise one block, every row against every key.
  static constexpr Index kRowBlock = 64;
  Index row_blocks(Index ib, Index ni, Index jb, Index nj, RowBlock* out) const {
    if (!trim_causal_) {
      out[0] = {0, ni, nj};
      return 1;
    }
    Index n = 0;
    for (Index r0 = 0; r0 < ni; r0 += kRowBlock) {
      const Index nr = std::min(kRowBlock, ni - r0);
      const Index keys = visible_keys(jb, nj, span(tq_, ib + r0, nr).second);
      if (keys > 0) out[n++] = {r0, nr, keys};
    }
    return n;
  }
  static std::pair<double, double> span(const Positions& p, Index b, Index n) {
    double lo = p[b], hi = p[b];
    for (Index r = 1; r < n; ++r) lo = std::min(lo, p[b + r]), hi = std::max(hi, p[b + r]);
    return {lo, hi};
  }

  // One query tile against one key tile of nj keys, every head, in row blocks (row_blocks).
  void pair(Workspace<C>& w, Shard& sh, Index I, Index J, Index nj) {
    const Index ib = qp_.begin[std::size_t(I)], ni = qp_.rows(I);
    const Index jb = kp_.begin[std::size_t(J)];
    w.blocks.resize(std::size_t(ni / kRowBlock + 1));
    const Index nb = row_blocks(ib, ni, jb, nj, w.blocks.data());
    if (nb == 0) return;
    nj = 0;  // the most any block sees
    for (Index b = 0; b < nb; ++b) nj = std::max(nj, w.blocks[std::size_t(b)].nj);
    const double delta = qp_.anchor[std::size_t(I)] - kp_.anchor[std::size_t(J)];
    const bool shifted = delta != 0;
    auto kt = w.kt.topLeftCorner(nj, d_);
    auto u = w.u.topLeftCorner(nj, d_);
    RowMatrix<C> ax;  // A_X(Δ), dense: applied to a tile's rows by a GEMM
    if (shifted) ax = cross(enc_).A(real_t<typename E::Scalar>(delta)).template cast<C>();
    for (Index kh = 0; kh < Hk_; ++kh) {
      const Rows<C> kh_rows = head_rows(ws_.khat, jb, nj, Hk_, kh, d_);
      if (shifted)  // rows k̃_jᵀ = k̂_jᵀ A_X(Δ)ᵀ
        kt.noalias() = kh_rows * ax.transpose();
      else
        kt = kh_rows;
      u.setZero();
      for (Index h = kh * G_; h < (kh + 1) * G_; ++h)
        for (Index b = 0; b < nb; ++b) {
          const RowBlock& rb = w.blocks[std::size_t(b)];
          const Rows<C> qh = head_rows(w.qhat, rb.r0, rb.nr, Hq_, h, d_);
          Tile<C> Wb = w.W.topLeftCorner(rb.nr, rb.nj);
          const Tile<C> ktb = w.kt.topLeftCorner(rb.nj, d_);
          epi_.weights(sh.part, h, kh, ib + rb.r0, rb.nr, jb, rb.nj, qh, ktb, Wb);
          head_rows(w.dqhat, rb.r0, rb.nr, Hq_, h, d_).noalias() += Wb * ktb;
          w.u.topLeftCorner(rb.nj, d_).noalias() += Wb.transpose() * qh;
        }
      if (shifted && g_.parameters) {  // ∂A_X(Δ)/∂θ: Σ_j u_jᵀ ∂A_X(Δ) k̂_j
        using M = Eigen::Matrix<R, Eigen::Dynamic, Eigen::Dynamic>;
        const M U = u.transpose().template cast<R>(), V = kh_rows.transpose().template cast<R>();
        encoding_derivatives<std::decay_t<decltype(cross(enc_))>>::bilinear(
            cross(enc_), R(delta), U, V, sh.parameters.data(), 1);
      }
      if (shifted)  // rows (A_X(Δ)ᵀ u_j)ᵀ = u_jᵀ A_X(Δ)
        head_rows(sh.dkhat, jb, nj, Hk_, kh, d_).noalias() += u * ax;
      else
        head_rows(sh.dkhat, jb, nj, Hk_, kh, d_) += u;
    }
  }

  const E& enc_;
  const TensorView<Tq>& q_;
  const Positions& tq_;
  const TensorView<Tk>& k_;
  const Positions& tk_;
  const TensorView<Tdq>& dq_;
  const TensorView<Tdk>& dk_;
  const Targets<R>& g_;
  Epi& epi_;
  const Index nq_, nk_, Hq_, Hk_, d_, G_;
  const int threads_;
  tiled::TilePlan qp_, kp_;
  bool trim_causal_ = false;  // a causal epilogue and sorted keys
  Workspace<C>& ws_ = Workspace<C>::local();  // the calling thread's: k̂ and the summed dk̂
};

}  // namespace backward_run
}  // namespace detail
}  // namespace peal
