// The kernels of one encoding family for the conformance suite (conformance_suite.hpp),
// type-erased over storage: KernelsOf<E, Full> calls encode_queries / encode_keys,
// shift_keys, scores and attention of encoding type E on the storage combinations the suite
// checks, behind the virtual interface KernelSet; with what it needs, the storage types and
// the caller memory (Storage, load / store, Geometry, Buffer, AnyView), which the suites share.
// This header holds no Catch2 and no reference, so that the kernels of a family can be
// instantiated in a TU of their own (tests/kernels/conformance_*.cpp, PEAL_CONFORMANCE_KERNELS)
// while the suite's TUs declare them extern (PEAL_CONFORMANCE_KERNELS_EXTERN) and compile test
// logic only, and the two halves of a family's compile run side by side (docs/build-cost.md §3).
#pragma once

#include <cstddef>
#include <cstring>
#include <limits>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <vector>

#include "families.hpp"
#include "kernel_catalogue.hpp"
#include "tolerances.hpp"

namespace peal_test {
namespace conformance {

using peal::Index;
using peal::Positions;
using peal::ScoreOptions;
using peal::Strides;
using peal::TensorView;
using LD = long double;
using LMatrix = peal::Matrix<LD>;
using LVector = peal::Vector<LD>;

// What the kernels accept in long double: long double ENCODINGS (encode applies them in long
// double, scores reads their parameters in double, docs/kernels-scores.md §1; both are run
// below), not long double storage.
static_assert(!peal::detail::is_storage<long double>::value,
              "the kernels store float, double, half or bfloat16, never long double");
// ---- Storage types ---------------------------------------------------------------------------
enum class Storage { f32, f64, f16, bf16 };

inline const char* storage_name(Storage s) {
  switch (s) {
    case Storage::f32:
      return "float";
    case Storage::f64:
      return "double";
    case Storage::f16:
      return "half";
    case Storage::bf16:
      return "bfloat16";
  }
  return "?";
}
inline std::size_t storage_bytes(Storage s) {
  return s == Storage::f64 ? 8 : s == Storage::f32 ? 4 : 2;
}
inline LD storage_eps(Storage s) {
  switch (s) {
    case Storage::f32:
      return Tol<float>::storage_eps<float>();
    case Storage::f64:
      return Tol<float>::storage_eps<double>();
    case Storage::f16:
      return Tol<float>::storage_eps<Eigen::half>();
    case Storage::bf16:
      return Tol<float>::storage_eps<Eigen::bfloat16>();
  }
  return 0;
}
template <class T>
LD limit_max() {
  return static_cast<LD>(static_cast<double>(static_cast<float>(std::numeric_limits<T>::max())));
}
inline LD storage_max(Storage s) {
  switch (s) {
    case Storage::f32:
      return std::numeric_limits<float>::max();
    case Storage::f64:
      return std::numeric_limits<double>::max();
    case Storage::f16:
      return limit_max<Eigen::half>();
    case Storage::bf16:
      return limit_max<Eigen::bfloat16>();
  }
  return 0;
}
// Smallest subnormal (the absolute spacing of results that land in the subnormal range).
inline LD storage_floor(Storage s) {
  switch (s) {
    case Storage::f32:
      return std::numeric_limits<float>::denorm_min();
    case Storage::f64:
      return std::numeric_limits<double>::denorm_min();
    case Storage::f16:
      return std::ldexp(1.0L, -24);
    case Storage::bf16:
      return std::ldexp(1.0L, -133);
  }
  return 0;
}
// The kernels compute in double when either side stores double, in float otherwise.
inline bool double_arithmetic(Storage a, Storage b) {
  return a == Storage::f64 || b == Storage::f64;
}

// Element i of caller memory, through the library's own conversions (detail/storage.hpp).
inline LD load(Storage s, const void* base, Index i) {
  using peal::detail::to_arith;
  switch (s) {
    case Storage::f32:
      return static_cast<const float*>(base)[i];
    case Storage::f64:
      return static_cast<const double*>(base)[i];
    case Storage::f16:
      return to_arith<double>(static_cast<const Eigen::half*>(base)[i]);
    case Storage::bf16:
      return to_arith<double>(static_cast<const Eigen::bfloat16*>(base)[i]);
  }
  return 0;
}
inline void store(Storage s, void* base, Index i, LD v) {
  using peal::detail::from_arith;
  const double x = static_cast<double>(v);
  switch (s) {
    case Storage::f32:
      static_cast<float*>(base)[i] = float(x);
      return;
    case Storage::f64:
      static_cast<double*>(base)[i] = x;
      return;
    case Storage::f16:
      static_cast<Eigen::half*>(base)[i] = from_arith<Eigen::half>(x);
      return;
    case Storage::bf16:
      static_cast<Eigen::bfloat16*>(base)[i] = from_arith<Eigen::bfloat16>(x);
      return;
  }
}

// ---- Caller memory: a [tokens, heads, dim] view inside a larger buffer ------------------------
enum class Shape { aligned, offset, padded, elem_stride2, heads_major };
inline const char* shape_name(Shape s) {
  const char* n[] = {"aligned", "offset by one", "padded strides", "element stride 2",
                     "head-major"};
  return n[int(s)];
}

struct Geometry {
  Index tokens, heads, dim;
  Strides str;
  Index offset;  // element (0, 0, 0), in elements from the 64-byte aligned start
  Index size() const {
    if (tokens == 0 || heads == 0 || dim == 0) return offset + 1;
    return offset + (tokens - 1) * str.token + (heads - 1) * str.head + (dim - 1) * str.elem + 1;
  }
  Index at(Index t, Index h, Index j) const {
    return offset + t * str.token + h * str.head + j * str.elem;
  }
};

inline Geometry make_geometry(Shape sh, Index n, Index H, Index d) {
  switch (sh) {
    case Shape::aligned:
      return {n, H, d, Strides{H * d, d, 1}, 0};
    case Shape::offset:
      return {n, H, d, Strides{H * d, d, 1}, 1};
    case Shape::padded:
      return {n, H, d, Strides{H * (d + 3) + 5, d + 3, 1}, 1};
    case Shape::elem_stride2:
      return {n, H, d, Strides{2 * H * d + 1, 2 * d, 2}, 1};
    case Shape::heads_major:
      return {n, H, d, Strides{d, n * d + 7, 1}, 1};
  }
  return {n, H, d, Strides{H * d, d, 1}, 0};
}

/// A view of one storage type and its caller memory, type-erased.
struct AnyView {
  Storage type;
  void* data;  // element (0, 0, 0)
  Index tokens, heads, dim;
  Strides str;
};
template <class T>
TensorView<T> typed(const AnyView& v) {
  using U = std::remove_const_t<T>;
  return TensorView<T>(static_cast<U*>(v.data), v.tokens, v.heads, v.dim, v.str);
}

/// 64-byte aligned memory holding a view of geometry g; every element starts as `fill` (NaN
/// in the padding of inputs poisons any read outside the view).
class Buffer {
 public:
  Buffer(Storage type, const Geometry& g, LD fill) : type_(type), g_(g) {
    mem_.assign(std::size_t(g.size()) * storage_bytes(type) + 64, 0);
    const auto p = reinterpret_cast<std::uintptr_t>(mem_.data());
    base_ = mem_.data() + ((64 - p % 64) % 64);
    const std::size_t b = storage_bytes(type);
    store(type_, base_, 0, fill);
    for (std::size_t i = 1; i < std::size_t(g.size()); ++i) std::memcpy(base_ + i * b, base_, b);
  }
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;
  Storage type() const { return type_; }
  const Geometry& geometry() const { return g_; }
  LD at(Index t, Index h, Index j) const { return load(type_, base_, g_.at(t, h, j)); }
  void set(Index t, Index h, Index j, LD v) { store(type_, base_, g_.at(t, h, j), v); }
  AnyView view() const {
    return {type_,     base_ + std::size_t(g_.offset) * storage_bytes(type_),
            g_.tokens, g_.heads,
            g_.dim,    g_.str};
  }
  std::vector<unsigned char> snapshot() const {
    return std::vector<unsigned char>(base_, base_ + std::size_t(g_.size()) * storage_bytes(type_));
  }
  /// The view's values, [t][h][j] packed.
  std::vector<LD> values() const {
    std::vector<LD> v;
    v.reserve(std::size_t(g_.tokens * g_.heads * g_.dim));
    for (Index t = 0; t < g_.tokens; ++t)
      for (Index h = 0; h < g_.heads; ++h)
        for (Index j = 0; j < g_.dim; ++j) v.push_back(at(t, h, j));
    return v;
  }
  /// Elements outside the view whose bytes differ from `before` (nothing may be written there).
  Index changed_outside(const std::vector<unsigned char>& before) const {
    std::vector<char> inside(std::size_t(g_.size()), 0);
    for (Index t = 0; t < g_.tokens; ++t)
      for (Index h = 0; h < g_.heads; ++h)
        for (Index j = 0; j < g_.dim; ++j) inside[std::size_t(g_.at(t, h, j))] = 1;
    const std::size_t b = storage_bytes(type_);
    Index changed = 0;
    for (Index i = 0; i < g_.size(); ++i)
      if (!inside[std::size_t(i)] &&
          std::memcmp(before.data() + std::size_t(i) * b, base_ + std::size_t(i) * b, b) != 0)
        ++changed;
    return changed;
  }

 private:
  Storage type_;
  Geometry g_;
  std::vector<unsigned char> mem_;
  unsigned char* base_ = nullptr;
};

// ---- The kernels of one encoding, type-erased over storage -------------------------------------
enum class Side { query, key };

struct StoragePair {
  Storage src, dst;
};
struct StorageTriple {
  Storage q, k, out;
};
// The storage combinations the suite instantiates per encoding type: the suite's compile time is
// one kernel instantiation per encoding type and combination (a scores() instantiation of a
// composition takes ~1-2 s). full: the double encodings; reduced: the long double encodings
// (encode in place in float and double, scores in double arithmetic).
// Out-of-place encode with a storage change (in place and out of place into the same type run
// for every storage type): narrowing in float arithmetic, widening into double arithmetic.
inline std::vector<StoragePair> encode_pairs(bool full) {
  using S = Storage;
  if (!full) return {};
  return {{S::f32, S::f16}, {S::f16, S::f64}};
}
// q, k, out of scores: float and double arithmetic writing their own type (the GEMM writes into
// out directly) and the other one (through the tile buffer); half and bfloat16 read; mixed
// float/double views (double arithmetic). The storage conversion of the rows does not depend on
// the encoding (it precedes the coder), so the storage types need no combination of their own.
inline std::vector<StorageTriple> score_triples(bool full) {
  using S = Storage;
  if (!full) return {{S::f64, S::f64, S::f64}};
  return {{S::f32, S::f32, S::f32},
          {S::f64, S::f64, S::f64},
          {S::f16, S::bf16, S::f64},
          {S::f32, S::f64, S::f32}};
}

// q, k, v, out of attention: the storage of one score triple with v beside k (half beside
// bfloat16 keys) and out as in scores: float and double arithmetic, half/bfloat16 reads, a
// double output of float arithmetic, double keys in float views (double arithmetic).
struct StorageQuad {
  Storage q, k, v, out;
};
inline StorageQuad attention_quad(const StorageTriple& t) {
  return {t.q, t.k, t.k == Storage::bf16 ? Storage::f16 : t.k, t.out};
}

class KernelSet {
 public:
  virtual ~KernelSet() = default;
  virtual bool full() const = 0;
  /// encode_queries / encode_keys; src.data == dst.data calls the in-place overload.
  virtual void encode(Side side, const AnyView& src, const AnyView& dst,
                      const Positions& p) const = 0;
  /// shift_keys; src.data == dst.data calls the in-place overload.
  virtual void shift(const AnyView& src, const AnyView& dst, double delta) const = 0;
  virtual void scores(const AnyView& q, const Positions& tq, const AnyView& k, const Positions& tk,
                      const AnyView& out, const ScoreOptions& opt) const = 0;
  /// attention with v and out of the storage of attention_quads (q and k as in scores).
  virtual void attention(const AnyView& q, const Positions& tq, const AnyView& k,
                         const Positions& tk, const AnyView& v, const AnyView& out,
                         const peal::AttentionOptions& opt) const = 0;
};

[[noreturn]] inline void unsupported(const char* what, Storage a, Storage b) {
  throw std::logic_error(std::string("conformance suite: ") + what + " not instantiated for " +
                         storage_name(a) + " -> " + storage_name(b));
}

/// The kernels of encoding type E, for the storage combinations of encode_pairs(Full) and
/// score_triples(Full) (and every storage type in place and into itself).
template <class E, bool Full>
class KernelsOf final : public KernelSet {
 public:
  explicit KernelsOf(const E& e) : e_(e) {}
  bool full() const override { return Full; }

  void encode(Side side, const AnyView& s, const AnyView& d, const Positions& p) const override;

  void shift(const AnyView& s, const AnyView& d, double delta) const override;

  void scores(const AnyView& q, const Positions& tq, const AnyView& k, const Positions& tk,
              const AnyView& out, const ScoreOptions& opt) const override;

  void attention(const AnyView& q, const Positions& tq, const AnyView& k, const Positions& tk,
                 const AnyView& v, const AnyView& out,
                 const peal::AttentionOptions& opt) const override;

 private:
  template <class T>
  void inplace(Side side, const AnyView& v, const Positions& p) const {
    if (side == Side::query)
      peal::encode_queries(e_, typed<T>(v), p);
    else
      peal::encode_keys(e_, typed<T>(v), p);
  }
  template <class TS, class TD>
  void copy(Side side, const AnyView& s, const AnyView& d, const Positions& p) const {
    if (side == Side::query)
      peal::encode_queries(e_, typed<TS>(s), typed<TD>(d), p);
    else
      peal::encode_keys(e_, typed<TS>(s), typed<TD>(d), p);
  }
  template <class TS, class TD>
  void shift2(const AnyView& s, const AnyView& d, double delta) const {
    peal::shift_keys(e_, typed<TS>(s), typed<TD>(d), delta);
  }
  template <class Tq, class Tk, class Out>
  void run(const AnyView& q, const Positions& tq, const AnyView& k, const Positions& tk,
           const AnyView& out, const ScoreOptions& opt) const {
    peal::scores(e_, typed<const Tq>(q), tq, typed<const Tk>(k), tk, typed<Out>(out), opt);
  }
  template <class Tq, class Tk, class Tv, class Out>
  void att(const AnyView& q, const Positions& tq, const AnyView& k, const Positions& tk,
           const AnyView& v, const AnyView& out, const peal::AttentionOptions& opt) const {
    peal::attention(e_, typed<const Tq>(q), tq, typed<const Tk>(k), tk, typed<const Tv>(v),
                    typed<Out>(out), opt);
  }

  const E& e_;
};

// The kernel entries, defined outside the class so that they are not inline: an extern
// template declaration (PEAL_CONFORMANCE_KERNELS_EXTERN) then keeps them, and every kernel
// they instantiate, out of the TU that declares it.
template <class E, bool Full>
void KernelsOf<E, Full>::encode(Side side, const AnyView& s, const AnyView& d, const Positions& p) const {
  using S = Storage;
  if (s.data == d.data) {
    switch (s.type) {
      case S::f32:
        return inplace<float>(side, s, p);
      case S::f64:
        return inplace<double>(side, s, p);
      case S::f16:
        if constexpr (Full) return inplace<Eigen::half>(side, s, p);
        break;
      case S::bf16:
        if constexpr (Full) return inplace<Eigen::bfloat16>(side, s, p);
        break;
    }
  } else if (s.type == d.type) {  // a non-const source: the same instantiation as in place
    switch (s.type) {
      case S::f32:
        return copy<float, float>(side, s, d, p);
      case S::f64:
        return copy<double, double>(side, s, d, p);
      case S::f16:
        if constexpr (Full) return copy<Eigen::half, Eigen::half>(side, s, d, p);
        break;
      case S::bf16:
        if constexpr (Full) return copy<Eigen::bfloat16, Eigen::bfloat16>(side, s, d, p);
        break;
    }
  } else if constexpr (Full) {
    if (s.type == S::f32 && d.type == S::f16)
      return copy<const float, Eigen::half>(side, s, d, p);
    if (s.type == S::f16 && d.type == S::f64)
      return copy<const Eigen::half, double>(side, s, d, p);
  }
  unsupported("encode", s.type, d.type);
}

template <class E, bool Full>
void KernelsOf<E, Full>::shift(const AnyView& s, const AnyView& d, double delta) const {
  using S = Storage;
  if (s.data == d.data) {
    switch (s.type) {
      case S::f32:
        return peal::shift_keys(e_, typed<float>(s), delta);
      case S::f64:
        return peal::shift_keys(e_, typed<double>(s), delta);
      case S::f16:
        if constexpr (Full) return peal::shift_keys(e_, typed<Eigen::half>(s), delta);
        break;
      case S::bf16:
        if constexpr (Full) return peal::shift_keys(e_, typed<Eigen::bfloat16>(s), delta);
        break;
    }
  } else if (s.type == d.type) {
    switch (s.type) {
      case S::f32:
        return shift2<float, float>(s, d, delta);
      case S::f64:
        return shift2<double, double>(s, d, delta);
      case S::f16:
        if constexpr (Full) return shift2<Eigen::half, Eigen::half>(s, d, delta);
        break;
      case S::bf16:
        if constexpr (Full) return shift2<Eigen::bfloat16, Eigen::bfloat16>(s, d, delta);
        break;
    }
  } else if constexpr (Full) {
    if (s.type == S::f32 && d.type == S::f16)
      return shift2<const float, Eigen::half>(s, d, delta);
    if (s.type == S::f16 && d.type == S::f64)
      return shift2<const Eigen::half, double>(s, d, delta);
  }
  unsupported("shift_keys", s.type, d.type);
}

template <class E, bool Full>
void KernelsOf<E, Full>::scores(const AnyView& q, const Positions& tq, const AnyView& k, const Positions& tk,
            const AnyView& out, const ScoreOptions& opt) const {
  using S = Storage;
  auto is = [&](S a, S b, S c) { return q.type == a && k.type == b && out.type == c; };
  if (is(S::f64, S::f64, S::f64)) return run<double, double, double>(q, tq, k, tk, out, opt);
  if constexpr (Full) {
    if (is(S::f32, S::f32, S::f32)) return run<float, float, float>(q, tq, k, tk, out, opt);
    if (is(S::f16, S::bf16, S::f64))
      return run<Eigen::half, Eigen::bfloat16, double>(q, tq, k, tk, out, opt);
    if (is(S::f32, S::f64, S::f32)) return run<float, double, float>(q, tq, k, tk, out, opt);
  }
  unsupported("scores", q.type, out.type);
}

template <class E, bool Full>
void KernelsOf<E, Full>::attention(const AnyView& q, const Positions& tq, const AnyView& k, const Positions& tk,
               const AnyView& v, const AnyView& out,
               const peal::AttentionOptions& opt) const {
  using S = Storage;
  auto is = [&](S a, S b, S c, S e) {
    return q.type == a && k.type == b && v.type == c && out.type == e;
  };
  if (is(S::f64, S::f64, S::f64, S::f64))
    return att<double, double, double, double>(q, tq, k, tk, v, out, opt);
  if constexpr (Full) {
    if (is(S::f32, S::f32, S::f32, S::f32))
      return att<float, float, float, float>(q, tq, k, tk, v, out, opt);
    if (is(S::f16, S::bf16, S::f16, S::f64))
      return att<Eigen::half, Eigen::bfloat16, Eigen::half, double>(q, tq, k, tk, v, out, opt);
    if (is(S::f32, S::f64, S::f64, S::f32))
      return att<float, double, double, float>(q, tq, k, tk, v, out, opt);
  }
  unsupported("attention", q.type, out.type);
}

/// The encoding type a family builds for scalar S.
template <class Fam, class S>
using encoding_t = std::decay_t<decltype(Fam::template build<S>(std::declval<Draw&>()))>;

}  // namespace conformance
}  // namespace peal_test

// The two kernel sets run_kernel_conformance<Fam> uses (the double encoding on every storage,
// the long double one on the reduced set), for the encoding TYPE of family Fam (several
// families share a type: every RoPE family is a RopeEncoding, xPos and RetNet are rotation
// banks). Defined once per type in a TU of tests/kernels/; declared extern for every type by
// conformance_suite.hpp (PEAL_CONFORMANCE_EXTERN_ALL), so that the suite's TUs compile test
// logic only. A family whose type is not in that list instantiates its kernels in its own TU
// (correct, only slower); a listed type that no kernel TU defines fails at link time.
#define PEAL_CONFORMANCE_KERNELS(...) PEAL_CONFORMANCE_KERNELS_WITH(, __VA_ARGS__)
#define PEAL_CONFORMANCE_KERNELS_EXTERN(...) PEAL_CONFORMANCE_KERNELS_WITH(extern, __VA_ARGS__)
#define PEAL_CONFORMANCE_KERNELS_WITH(EXTERN, ...)                                    \
  EXTERN template class peal_test::conformance::KernelsOf<                           \
      peal_test::conformance::encoding_t<__VA_ARGS__, double>, true>;                \
  EXTERN template class peal_test::conformance::KernelsOf<                           \
      peal_test::conformance::encoding_t<__VA_ARGS__, long double>, false>

// Every encoding type of the conformance families (tests/families.hpp), by one family each;
// tests/kernels/conformance_*.cpp define them, one line each.
#define PEAL_CONFORMANCE_EXTERN_ALL()                                                    \
  PEAL_CONFORMANCE_KERNELS_EXTERN(peal_test::RealFam);                                \
  PEAL_CONFORMANCE_KERNELS_EXTERN(peal_test::RotationFam);                            \
  PEAL_CONFORMANCE_KERNELS_EXTERN(peal_test::JordanFam<2>);                           \
  PEAL_CONFORMANCE_KERNELS_EXTERN(peal_test::JordanFam<3>);                           \
  PEAL_CONFORMANCE_KERNELS_EXTERN(peal_test::JordanFam<4>);                           \
  PEAL_CONFORMANCE_KERNELS_EXTERN(peal_test::RotationJordanFam<2>);                   \
  PEAL_CONFORMANCE_KERNELS_EXTERN(peal_test::RotationJordanFam<3>);                   \
  PEAL_CONFORMANCE_KERNELS_EXTERN(peal_test::MixedFam);                               \
  PEAL_CONFORMANCE_KERNELS_EXTERN(peal_test::NestedFam);                              \
  PEAL_CONFORMANCE_KERNELS_EXTERN(peal_test::BasisChangeFam);                         \
  PEAL_CONFORMANCE_KERNELS_EXTERN(peal_test::AlibiFam);                               \
  PEAL_CONFORMANCE_KERNELS_EXTERN(peal_test::BankFam<peal_test::RotationFam, peal::Layout::Interleaved>);    \
  PEAL_CONFORMANCE_KERNELS_EXTERN(peal_test::BankFam<peal_test::RealFam, peal::Layout::Interleaved>);        \
  PEAL_CONFORMANCE_KERNELS_EXTERN(peal_test::BankFam<peal_test::JordanFam<3>, peal::Layout::Interleaved>);   \
  PEAL_CONFORMANCE_KERNELS_EXTERN(peal_test::BankFam<peal_test::RotationJordanFam<2>, peal::Layout::Interleaved>); \
  PEAL_CONFORMANCE_KERNELS_EXTERN(peal_test::RopeFam<peal::RopeType::Default, peal::Layout::HalfSplit, 64>)
