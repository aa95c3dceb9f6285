// PerHead<E>: one encoding per query head (docs/positions-nd.md §4). RoPE-Mixed learns its
// frequencies per head; RetNet's per-head γ (retnet.hpp returns one encoding per head) is
// then one ordinary encoding. Head h of a [tokens, heads, dim] view is encoded by head(h).
//
// The kernels take it like any encoding: encode_queries / encode_keys / shift_keys (and their
// backward, in encode_backward.hpp) run each head's kernel on that head's slice
// of the view (so the view has exactly heads() heads),
// and scores / attention run the fused 1-D (or N-D) kernel of head h on query head h, its
// key head h / (Hq / Hk) and its slice of the output, with head h's ALiBi slope, decay and
// sink. Positions are 1-D (Positions) or N-D (PositionsND), as the head encodings take.
#pragma once

#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "attention.hpp"
#include "detail/overlap.hpp"
#include "encode.hpp"
#include "errors.hpp"
#include "scores.hpp"
#include "scores_nd.hpp"
#include "view.hpp"

namespace peal {

template <class E>
class PerHead {
 public:
  using HeadEncoding = E;
  using Scalar = typename E::Scalar;

  /// heads[h] encodes query head h; all act on the same size.
  explicit PerHead(std::vector<E> heads) : heads_(std::move(heads)) {
    detail::require(!heads_.empty(), "PerHead: at least one head encoding");
    for (std::size_t h = 1; h < heads_.size(); ++h)
      if (heads_[h].dim() != heads_[0].dim())
        detail::fail("PerHead: head " + std::to_string(h) + " acts on size " +
                     std::to_string(heads_[h].dim()) + ", head 0 on " +
                     std::to_string(heads_[0].dim()));
  }
  int heads() const { return int(heads_.size()); }
  int dim() const { return heads_[0].dim(); }
  const E& head(int h) const { return heads_.at(std::size_t(h)); }

 private:
  std::vector<E> heads_;
};

namespace detail {
namespace per_head {

// Head h of a [tokens, heads, dim] view, as a [tokens, 1, dim] view.
template <class T>
TensorView<T> slice(const TensorView<T>& v, Index h) {
  if (v.empty()) return TensorView<T>(v.data(), v.tokens(), 1, v.dim(), v.strides());
  return TensorView<T>(v.vector(0, h), v.tokens(), 1, v.dim(), v.strides());
}
// Head h of a scores output [heads, nq, nk].
template <class T>
TensorView<T> out_slice(const TensorView<T>& o, Index h) {
  const Strides s = o.strides();
  return TensorView<T>(o.empty() ? o.data() : &o(h, 0, 0), 1, o.heads(), o.dim(), s);
}

template <class E, class T>
void require_heads(const PerHead<E>& enc, const TensorView<T>& v, const char* where,
                   const char* what) {
  if (v.heads() != Index(enc.heads()))
    fail(std::string(where) + ": the " + what + " view has " + std::to_string(v.heads()) +
         " heads, the per-head encoding " + std::to_string(enc.heads()));
}

template <class E>
Index group_size(const PerHead<E>& enc, Index hq, Index hk, const char* where) {
  if (hq != Index(enc.heads()))
    fail(std::string(where) + ": q has " + std::to_string(hq) + " heads, the per-head encoding " +
         std::to_string(enc.heads()));
  if (hk <= 0 || hq % hk != 0)
    fail(std::string(where) + ": the query heads (" + std::to_string(hq) +
         ") must be a multiple of the key heads (" + std::to_string(hk) + ")");
  return hq / hk;
}

// Entry h of a per-head option list (empty stays empty).
inline std::vector<double> pick(const std::vector<double>& v, Index h, Index heads,
                                const char* where, const char* name) {
  if (v.empty()) return {};
  if (Index(v.size()) != heads)
    fail(std::string(where) + ": " + name + " has " + std::to_string(v.size()) +
         " entries for " + std::to_string(heads) + " query heads");
  return {v[std::size_t(h)]};
}

}  // namespace per_head
}  // namespace detail

// Each public function has one overload per position type (Positions, PositionsND): a
// template parameter for it would make the calls ambiguous with the 1-D overloads.
namespace detail {
namespace per_head {

template <bool Query, class E, class TS, class TD, class Pos>
void encode(const PerHead<E>& enc, const TensorView<TS>& src, const TensorView<TD>& dst,
            const Pos& pos) {
  const char* where = Query ? "encode_queries" : "encode_keys";
  require_heads(enc, dst, where, "destination");
  require_heads(enc, src, where, "source");
  // Whole views: head h's call sees its own slices only, not dst over a later head's source.
  check_encode_aliasing(src, dst, where);
  for (int h = 0; h < enc.heads(); ++h) {
    if constexpr (Query)
      encode_queries(enc.head(h), slice(src, h), slice(dst, h), pos);
    else
      encode_keys(enc.head(h), slice(src, h), slice(dst, h), pos);
  }
}

template <class E, class T, class Delta>
void shift(const PerHead<E>& enc, const TensorView<T>& k, const Delta& delta) {
  require_heads(enc, k, "shift_keys", "key");
  for (int h = 0; h < enc.heads(); ++h) shift_keys(enc.head(h), slice(k, h), delta);
}

template <class E, class Tq, class Tk, class Out, class Pos>
void scores(const PerHead<E>& enc, const TensorView<Tq>& q, const Pos& tq, const TensorView<Tk>& k,
            const Pos& tk, const TensorView<Out>& out, const ScoreOptions& opt) {
  const Index hq = q.heads(), g = group_size(enc, hq, k.heads(), "scores");
  if (out.tokens() != hq)
    fail("scores: out has " + std::to_string(out.tokens()) + " heads, q has " +
         std::to_string(hq));
  check_scores_aliasing(q, k, out, "scores");  // whole views, before head 0 writes
  for (Index h = 0; h < hq; ++h) {
    ScoreOptions o = opt;
    o.alibi_slopes = pick(opt.alibi_slopes, h, hq, "scores", "alibi_slopes");
    o.decay = pick(opt.decay, h, hq, "scores", "decay");
    peal::scores(enc.head(int(h)), slice(q, h), tq, slice(k, h / g), tk, out_slice(out, h), o);
  }
}

template <class E, class Tq, class Tk, class Tv, class To, class Pos>
void attention(const PerHead<E>& enc, const TensorView<Tq>& q, const Pos& tq,
               const TensorView<Tk>& k, const Pos& tk, const TensorView<Tv>& v,
               const TensorView<To>& out, const AttentionOptions& opt) {
  const Index hq = q.heads(), nq = q.tokens(), g = group_size(enc, hq, k.heads(), "attention");
  if (v.heads() != k.heads() || out.heads() != hq)
    fail("attention: v must have the key heads and out the query heads");
  // Whole views (and lse, which the heads' calls do not see), before head 0 writes.
  check_attention_aliasing(q, k, v, out, opt.lse, "attention");
  std::vector<double> lse(opt.lse ? std::size_t(nq) : 0);
  for (Index h = 0; h < hq; ++h) {
    AttentionOptions o = opt;
    o.alibi_slopes = pick(opt.alibi_slopes, h, hq, "attention", "alibi_slopes");
    o.sinks = pick(opt.sinks, h, hq, "attention", "sinks");
    o.lse = opt.lse ? lse.data() : nullptr;
    peal::attention(enc.head(int(h)), slice(q, h), tq, slice(k, h / g), tk, slice(v, h / g),
                    slice(out, h), o);
    if (opt.lse)
      for (Index i = 0; i < nq; ++i) opt.lse[i * hq + h] = lse[std::size_t(i)];
  }
}

}  // namespace per_head
}  // namespace detail

#define PEAL_PER_HEAD_KERNELS(POS)                                                              \
  template <class E, class TS, class TD>                                                        \
  void encode_queries(const PerHead<E>& enc, TensorView<TS> src, TensorView<TD> dst,            \
                      const POS& pos) {                                                         \
    detail::per_head::encode<true>(enc, src, dst, pos);                                         \
  }                                                                                             \
  template <class E, class T>                                                                   \
  void encode_queries(const PerHead<E>& enc, TensorView<T> q, const POS& pos) {                 \
    detail::per_head::encode<true>(enc, q, q, pos);                                             \
  }                                                                                             \
  template <class E, class TS, class TD>                                                        \
  void encode_keys(const PerHead<E>& enc, TensorView<TS> src, TensorView<TD> dst,               \
                   const POS& pos) {                                                            \
    detail::per_head::encode<false>(enc, src, dst, pos);                                        \
  }                                                                                             \
  template <class E, class T>                                                                   \
  void encode_keys(const PerHead<E>& enc, TensorView<T> k, const POS& pos) {                    \
    detail::per_head::encode<false>(enc, k, k, pos);                                            \
  }                                                                                             \
  template <class E, class Tq, class Tk, class Out>                                             \
  void scores(const PerHead<E>& enc, TensorView<Tq> q, const POS& tq, TensorView<Tk> k,         \
              const POS& tk, TensorView<Out> out, const ScoreOptions& opt = {}) {               \
    detail::per_head::scores(enc, q, tq, k, tk, out, opt);                                      \
  }                                                                                             \
  template <class E, class Tq, class Tk, class Tv, class To>                                    \
  void attention(const PerHead<E>& enc, TensorView<Tq> q, const POS& tq, TensorView<Tk> k,      \
                 const POS& tk, TensorView<Tv> v, TensorView<To> out,                           \
                 const AttentionOptions& opt = {}) {                                            \
    detail::per_head::attention(enc, q, tq, k, tk, v, out, opt);                                \
  }

/// encode_queries, encode_keys, scores, attention with one encoding per query head, over
/// 1-D positions and over N-D points.
PEAL_PER_HEAD_KERNELS(Positions)
PEAL_PER_HEAD_KERNELS(PositionsND)
#undef PEAL_PER_HEAD_KERNELS

/// shift_keys per head: delta a scalar (1-D heads) or a vector (N-D heads).
template <class E, class T>
void shift_keys(const PerHead<E>& enc, TensorView<T> k, double delta) {
  detail::per_head::shift(enc, k, delta);
}
template <class E, class T>
void shift_keys(const PerHead<E>& enc, TensorView<T> k, const std::vector<double>& delta) {
  detail::per_head::shift(enc, k, delta);
}

}  // namespace peal
