// PerHead<E>: one encoding per query head (docs/positions-nd.md §4). RoPE-Mixed learns its
// frequencies per head; RetNet's per-head γ (retnet.hpp returns one encoding per head) is
// then one ordinary encoding. Head h of a [tokens, heads, dim] view is encoded by head(h).
//
// The kernels take it like any encoding, each in its own header: encode_queries /
// encode_keys / shift_keys (encode.hpp) run each head's kernel on that head's slice of the
// view (so the view has exactly heads() heads), and scores / attention (scores.hpp,
// attention.hpp; N-D points: scores_nd.hpp) run the fused kernel of head h on query head h,
// its key head h / (Hq / Hk) and its slice of the output, with head h's ALiBi slope, decay
// and sink; their backwards likewise (encode_backward.hpp, scores_backward.hpp,
// attention_backward.hpp). This header is the type and the slicing those overloads share,
// without the kernels (parameters.hpp needs the type only).
#pragma once

#include <string>
#include <vector>

#include "errors.hpp"
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

}  // namespace peal
