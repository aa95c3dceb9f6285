// The trainable parameters θ of an encoding, as data (docs/gradients.md §1): one flat,
// named vector in a fixed layout, read with parameters(enc), written back with
// with_parameters(enc, values); gradients (derivatives.hpp, encode_backward.hpp) use the same
// layout.
//
// Layout, by kind of encoding (encoding_parameters<E> below states it per kind):
//   a block B           the members of block_traits<B> (n_parameters, parameter_name,
//                       parameter, with_parameters): RealBlock, JordanBlock λ; RotationBlock,
//                       RotationJordanBlock ω then a;
//   PassThrough         none;
//   Bank<B>             structure of arrays, as its storage: parameter k of block i at
//                       k·size() + i ("block[i].omega");
//   BlockDiagonal       its parts in order ("part[p]." + the part's names);
//   BasisChange<E>      the inner encoding's ("inner.") then P row-major ("P[i][j]"), all d²
//                       entries;
//   MultiAxis<E>        per axis ("axis[a]."); PerHead<E> per head ("head[h].");
//   RopeEncoding        its frequencies ("inv_freq[i]", HF's inv_freq buffer): the rotary
//                       pairs' ω; a = 0 and the pass-through tail are not parameters of RoPE.
//   MRopeEncoding       its frequencies too ("inv_freq[i]", one per rotary pair, as Qwen2-VL's
//                       buffer): pair i rotates by inv_freq[i] on its own axis (pair_axis()[i])
//                       only; its ω on the other two axes is 0, structurally, not a parameter.
//                       Its gradient is the MultiAxis gradient's ω of each pair's own axis
//                       (gather, below).
// Values are long double: ω keeps the extra bits the presets compute it with, so
// with_parameters(enc, parameters(enc).values) rebuilds enc with the same A(τ), bit for bit.
#pragma once

#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "bank.hpp"
#include "basis_change.hpp"
#include "block_diagonal.hpp"
#include "block_traits.hpp"
#include "multi_axis.hpp"
#include "pass_through.hpp"
#include "per_head.hpp"
#include "presets/mrope.hpp"
#include "presets/rope.hpp"

namespace peal {

/// The parameters of an encoding: names[k] and values[k] in its layout (above).
struct ParameterSet {
  std::vector<std::string> names;
  std::vector<long double> values;
  std::size_t size() const { return values.size(); }
};

/// Per kind of encoding: count(e), names(e, prefix, out), values(e, out) (appending) and
/// rebuild(e, theta) -> E from count(e) values at theta. Specialised below; a block type
/// takes part through its block_traits.
template <class E, class = void>
struct encoding_parameters;

namespace detail {
template <class B, class = void>
struct has_block_parameters : std::false_type {};
template <class B>
struct has_block_parameters<B, std::void_t<decltype(block_traits<B>::n_parameters)>>
    : std::true_type {};

template <class E, class = void>
struct has_encoding_parameters : std::false_type {};
template <class E>
struct has_encoding_parameters<
    E, std::void_t<decltype(encoding_parameters<E>::count(std::declval<const E&>()))>>
    : std::true_type {};

inline std::string indexed(const std::string& prefix, const char* what, Index i) {
  return prefix + what + "[" + std::to_string(i) + "]";
}
}  // namespace detail

template <class B>
struct encoding_parameters<B, std::enable_if_t<detail::has_block_parameters<B>::value>> {
  using T = block_traits<B>;
  static int count(const B&) { return T::n_parameters; }
  static void names(const B&, const std::string& prefix, std::vector<std::string>& out) {
    for (int k = 0; k < T::n_parameters; ++k) out.push_back(prefix + T::parameter_name(k));
  }
  static void values(const B& b, std::vector<long double>& out) {
    for (int k = 0; k < T::n_parameters; ++k) out.push_back(T::parameter(b, k));
  }
  static B rebuild(const B& b, const long double* theta) { return T::with_parameters(b, theta); }
};

template <class S>
struct encoding_parameters<PassThrough<S>> {
  static int count(const PassThrough<S>&) { return 0; }
  static void names(const PassThrough<S>&, const std::string&, std::vector<std::string>&) {}
  static void values(const PassThrough<S>&, std::vector<long double>&) {}
  static PassThrough<S> rebuild(const PassThrough<S>& p, const long double*) { return p; }
};

template <class B>
struct encoding_parameters<Bank<B>, std::enable_if_t<detail::has_block_parameters<B>::value>> {
  using T = block_traits<B>;
  static int count(const Bank<B>& e) { return T::n_parameters * e.size(); }
  static void names(const Bank<B>& e, const std::string& prefix, std::vector<std::string>& out) {
    for (int k = 0; k < T::n_parameters; ++k)
      for (int i = 0; i < e.size(); ++i)
        out.push_back(detail::indexed(prefix, "block", i) + "." + T::parameter_name(k));
  }
  static void values(const Bank<B>& e, std::vector<long double>& out) {
    for (int k = 0; k < T::n_parameters; ++k)
      for (int i = 0; i < e.size(); ++i) out.push_back(T::parameter(e.block(i), k));
  }
  static Bank<B> rebuild(const Bank<B>& e, const long double* theta) {
    std::vector<B> blocks;
    blocks.reserve(std::size_t(e.size()));
    long double th[T::n_parameters > 0 ? T::n_parameters : 1];
    for (int i = 0; i < e.size(); ++i) {
      for (int k = 0; k < T::n_parameters; ++k) th[k] = theta[k * e.size() + i];
      blocks.push_back(T::with_parameters(e.block(i), th));
    }
    return Bank<B>(blocks, e.layout());
  }
};

template <class... Parts>
struct encoding_parameters<BlockDiagonal<Parts...>,
                           std::enable_if_t<(detail::has_encoding_parameters<Parts>::value && ...)>> {
  using E = BlockDiagonal<Parts...>;
  static int count(const E& e) {
    return count_impl(e, std::index_sequence_for<Parts...>{});
  }
  static void names(const E& e, const std::string& prefix, std::vector<std::string>& out) {
    names_impl(e, prefix, out, std::index_sequence_for<Parts...>{});
  }
  static void values(const E& e, std::vector<long double>& out) {
    values_impl(e, out, std::index_sequence_for<Parts...>{});
  }
  static E rebuild(const E& e, const long double* theta) {
    return rebuild_impl(e, theta, std::index_sequence_for<Parts...>{});
  }

 private:
  template <std::size_t I>
  using P = std::tuple_element_t<I, std::tuple<Parts...>>;
  template <std::size_t... I>
  static int count_impl(const E& e, std::index_sequence<I...>) {
    return (0 + ... + encoding_parameters<P<I>>::count(e.template part<I>()));
  }
  template <std::size_t... I>
  static void names_impl(const E& e, const std::string& prefix, std::vector<std::string>& out,
                         std::index_sequence<I...>) {
    (encoding_parameters<P<I>>::names(e.template part<I>(),
                                      detail::indexed(prefix, "part", Index(I)) + ".", out),
     ...);
  }
  template <std::size_t... I>
  static void values_impl(const E& e, std::vector<long double>& out, std::index_sequence<I...>) {
    (encoding_parameters<P<I>>::values(e.template part<I>(), out), ...);
  }
  template <std::size_t... I>
  static E rebuild_impl(const E& e, const long double* theta, std::index_sequence<I...>) {
    int offsets[sizeof...(Parts) + 1] = {0};
    int k = 0;
    ((offsets[k + 1] = offsets[k] + encoding_parameters<P<I>>::count(e.template part<I>()), ++k),
     ...);
    return E(encoding_parameters<P<I>>::rebuild(e.template part<I>(), theta + offsets[I])...);
  }
};

template <class Inner>
struct encoding_parameters<BasisChange<Inner>,
                           std::enable_if_t<detail::has_encoding_parameters<Inner>::value>> {
  using E = BasisChange<Inner>;
  using IP = encoding_parameters<Inner>;
  static int count(const E& e) { return IP::count(e.inner()) + e.dim() * e.dim(); }
  static void names(const E& e, const std::string& prefix, std::vector<std::string>& out) {
    IP::names(e.inner(), prefix + "inner.", out);
    for (int i = 0; i < e.dim(); ++i)
      for (int j = 0; j < e.dim(); ++j)
        out.push_back(detail::indexed(prefix, "P", i) + "[" + std::to_string(j) + "]");
  }
  static void values(const E& e, std::vector<long double>& out) {
    IP::values(e.inner(), out);
    for (int i = 0; i < e.dim(); ++i)
      for (int j = 0; j < e.dim(); ++j) out.push_back(static_cast<long double>(e.P()(i, j)));
  }
  /// P is validated (finite, invertible) again, as the constructor does.
  static E rebuild(const E& e, const long double* theta) {
    const int n = e.dim(), m = IP::count(e.inner());
    typename E::MatrixType P(n, n);
    for (int i = 0; i < n; ++i)
      for (int j = 0; j < n; ++j) P(i, j) = typename E::Scalar(theta[m + i * n + j]);
    return E(IP::rebuild(e.inner(), theta), std::move(P));
  }
};

// Encodings made of several encodings of one type (MultiAxis: per axis; PerHead: per head).
namespace detail {
template <class Outer, class E, const char* Name>
struct repeated_parameters {
  using EP = encoding_parameters<E>;
  static int count(const Outer& o) {
    int n = 0;
    for (const E& e : items(o)) n += EP::count(e);
    return n;
  }
  static void names(const Outer& o, const std::string& prefix, std::vector<std::string>& out) {
    Index i = 0;
    for (const E& e : items(o)) EP::names(e, indexed(prefix, Name, i++) + ".", out);
  }
  static void values(const Outer& o, std::vector<long double>& out) {
    for (const E& e : items(o)) EP::values(e, out);
  }
  static Outer rebuild(const Outer& o, const long double* theta) {
    std::vector<E> parts;
    for (const E& e : items(o)) {
      parts.push_back(EP::rebuild(e, theta));
      theta += EP::count(e);
    }
    return Outer(std::move(parts));
  }

 private:
  static std::vector<E> items(const MultiAxis<E>& m) { return m.axis_encodings(); }
  static std::vector<E> items(const PerHead<E>& p) {
    std::vector<E> v;
    for (int h = 0; h < p.heads(); ++h) v.push_back(p.head(h));
    return v;
  }
};
inline constexpr char kAxisName[] = "axis";
inline constexpr char kHeadName[] = "head";
}  // namespace detail

template <class E>
struct encoding_parameters<MultiAxis<E>, std::enable_if_t<detail::has_encoding_parameters<E>::value>>
    : detail::repeated_parameters<MultiAxis<E>, E, detail::kAxisName> {};
template <class E>
struct encoding_parameters<PerHead<E>, std::enable_if_t<detail::has_encoding_parameters<E>::value>>
    : detail::repeated_parameters<PerHead<E>, E, detail::kHeadName> {};

namespace detail {
// The presets whose parameters are their frequencies, one per rotary pair ("inv_freq[i]").
template <class E>
struct inv_freq_parameters {
  static int count(const E& e) { return int(e.inv_freq().size()); }
  static void names(const E& e, const std::string& prefix, std::vector<std::string>& out) {
    for (std::size_t i = 0; i < e.inv_freq().size(); ++i)
      out.push_back(indexed(prefix, "inv_freq", Index(i)));
  }
  static void values(const E& e, std::vector<long double>& out) {
    out.insert(out.end(), e.inv_freq().begin(), e.inv_freq().end());
  }
};
}  // namespace detail

template <class S>
struct encoding_parameters<RopeEncoding<S>> : detail::inv_freq_parameters<RopeEncoding<S>> {
  using E = RopeEncoding<S>;
  /// The frequencies are validated as RopeEncoding's constructor does (each in the preset
  /// range); the attention factor, layout, type and head size are kept.
  static E rebuild(const E& e, const long double* theta) {
    RopeFrequencies f;
    f.inv_freq.assign(theta, theta + e.inv_freq().size());
    f.attention_factor = e.attention_factor_long();
    f.rotary_dim = e.rotary_dim();
    return E(f, e.head_dim(), e.layout(), e.type());
  }
};

template <class S>
struct encoding_parameters<MRopeEncoding<S>> : detail::inv_freq_parameters<MRopeEncoding<S>> {
  using E = MRopeEncoding<S>;
  /// Validated as MRopeEncoding's constructor does; sections, layout and factor are kept.
  static E rebuild(const E& e, const long double* theta) {
    RopeFrequencies f;
    f.inv_freq.assign(theta, theta + e.inv_freq().size());
    f.attention_factor = e.attention_factor_long();
    f.rotary_dim = e.rotary_dim();
    return E(f, e.head_dim(), e.layout(), e.sections(), e.interleaved());
  }
  /// Adds to g (count(e) entries) the gradient in this layout of one in the layout of the
  /// MultiAxis e.encoding(), g_axes: pair i's ω on axis pair_axis()[i], the bank being part 0
  /// of each axis with ω before a (Bank's structure of arrays).
  template <class R>
  static void gather(const E& e, const R* g_axes, R* g) {
    const int per_axis = encoding_parameters<typename E::Axis>::count(e.encoding().axis(0));
    for (std::size_t i = 0; i < e.inv_freq().size(); ++i)
      g[i] += g_axes[std::size_t(e.pair_axis()[i] * per_axis) + i];
  }
};

/// The number of trainable parameters of enc.
template <class E>
int parameter_count(const E& enc) {
  static_assert(detail::has_encoding_parameters<E>::value,
                "peal: this encoding type states no parameters (a block type needs the "
                "parameter members of block_traits, block_traits.hpp)");
  return encoding_parameters<E>::count(enc);
}

/// Names and values of the parameters of enc, in its layout (above).
template <class E>
ParameterSet parameters(const E& enc) {
  ParameterSet p;
  const std::size_t n = std::size_t(parameter_count(enc));
  p.names.reserve(n), p.values.reserve(n);
  encoding_parameters<E>::names(enc, "", p.names);
  encoding_parameters<E>::values(enc, p.values);
  return p;
}

/// enc with its parameters replaced by theta (parameter_count(enc) values, in its layout).
/// Throws invalid_argument on a wrong count or on a value the encoding's constructor
/// rejects (non-finite, a singular P, a RoPE frequency out of range).
template <class E>
E with_parameters(const E& enc, const std::vector<long double>& theta) {
  const int n = parameter_count(enc);
  if (theta.size() != std::size_t(n))
    detail::fail("with_parameters: " + std::to_string(theta.size()) + " values for " +
                 std::to_string(n) + " parameters");
  return encoding_parameters<E>::rebuild(enc, theta.data());
}

}  // namespace peal
