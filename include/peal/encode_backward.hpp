// Gradients of encode_queries and encode_keys (docs/gradients.md §3): given the gradient G of
// a loss with respect to the encoded rows,
//   queries  q~ = F(t) q = A(t)ᵀ q:   dq = A(t) G,       ∂L/∂θ_k += Σ_h q_hᵀ ∂A(t)/∂θ_k g_h,
//                                     ∂L/∂t += Σ_h q_hᵀ X A(t) g_h;
//   keys     k~ = G(s) k = A(−s) k:   dk = A(−s)ᵀ G,     ∂L/∂θ_k += Σ_h g_hᵀ ∂A(−s)/∂θ_k k_h,
//                                     ∂L/∂s += −Σ_h g_hᵀ X A(−s) k_h.
// dq is the forward key kernel at −t (A(t) = G(−t)) and dk the forward query kernel at −s
// (A(−s)ᵀ = F(−s)), so they run the tuned encode kernels (encode.hpp) with their accuracy
// and speed. The parameter and position gradients are the bilinear forms of derivatives.hpp,
// summed over heads and then over tokens in token order (deterministic, one thread). A basis
// change factors A(t − s) as F(t)ᵀ G(s) with F(t) ≠ A(t)ᵀ, and has its own rule (below); a
// PerHead runs each head's backward on that head's slices, and a MultiAxis (N-D points) each
// axis's rule on the rows encoded by the other axes (at the end).
#pragma once

#include <algorithm>
#include <string>
#include <type_traits>
#include <vector>

#include "derivatives.hpp"
#include "detail/compiler.hpp"
#include "encode.hpp"
#include "multi_axis.hpp"
#include "per_head.hpp"
#include "positions_nd.hpp"

namespace peal {

/// Where the parameter and position gradients go (either may be null: not wanted). Both
/// are ADDED to, so that the query and key contributions of one encoding sum in one vector.
template <class R>
struct EncodeGradients {
  std::vector<R>* parameters = nullptr;  ///< parameter_count(enc) entries (parameters.hpp)
  std::vector<R>* positions = nullptr;   ///< one entry per token
};

namespace detail {
namespace encode_backward {

enum class Side { query, key };

// Checks the positions; returns the number of position-gradient entries (one per token, or
// one per token and axis for N-D points).
template <class E>
Index check_positions(const E&, const Positions& pos, Index tokens, const char* where) {
  pos.check(tokens, where);
  return tokens;
}
template <class E>
int position_axes(const E& enc) {
  return enc.axes();
}
template <class E>
int position_axes(const PerHead<E>& enc) {
  return position_axes(enc.head(0));
}
template <class E>
Index check_positions(const E& enc, const PositionsND& pos, Index tokens, const char* where) {
  pos.check(tokens, position_axes(enc), where);
  return tokens * pos.axes();
}

template <class E, class TX, class TG, class TD, class P, class R>
void check(const E& enc, const TensorView<TX>& x, const TensorView<TG>& g, const TensorView<TD>& dx,
           const P& pos, const EncodeGradients<R>& grads, const char* where) {
  const std::string w(where);
  if (x.tokens() != g.tokens() || x.heads() != g.heads() || x.dim() != g.dim())
    fail(w + ": the input is [" + std::to_string(x.tokens()) + ", " + std::to_string(x.heads()) +
         ", " + std::to_string(x.dim()) + "] but the gradient of the encoded rows is [" +
         std::to_string(g.tokens()) + ", " + std::to_string(g.heads()) + ", " +
         std::to_string(g.dim()) + "]");
  if (x.dim() != Index(enc.dim()))
    fail(w + ": view has dim " + std::to_string(x.dim()) + ", the encoding acts on size " +
         std::to_string(enc.dim()));
  const Index coords = check_positions(enc, pos, x.tokens(), where);
  if (grads.parameters && grads.parameters->size() != std::size_t(parameter_count(enc)))
    fail(w + ": the parameter gradient has " + std::to_string(grads.parameters->size()) +
         " entries, the encoding " + std::to_string(parameter_count(enc)) + " parameters");
  if (grads.positions && grads.positions->size() != std::size_t(coords))
    fail(w + ": the position gradient has " + std::to_string(grads.positions->size()) +
         " entries for " + std::to_string(x.tokens()) + " tokens" +
         (coords == x.tokens() ? std::string() : " of " + std::to_string(coords / x.tokens()) +
                                                     " coordinates (token-major)"));
  if (dx.empty()) return;
  if (dx.tokens() != x.tokens() || dx.heads() != x.heads() || dx.dim() != x.dim())
    fail(w + ": the input gradient view must have the extents of the input");
  if (may_overlap(x, dx))
    fail(w + ": the input gradient view overlaps the input (it may be the very view of the "
             "gradient of the encoded rows, never the input's)");
  if (!same_elements(g, dx) && may_overlap(g, dx))
    fail(w + ": the input gradient view partly overlaps the gradient of the encoded rows (pass "
             "the same view to work in place, or disjoint ones)");
}

// Token i of a view as a dim x heads matrix in R (contiguous rows: a conversion loop the
// compiler vectorises).
template <class T, class R>
void load_row(const T* PEAL_RESTRICT p, R* PEAL_RESTRICT o, Index n) {
  for (Index j = 0; j < n; ++j) o[j] = R(to_arith<double>(p[j]));
}
template <class T, class M>
void load_token(const TensorView<T>& v, Index i, M& out) {
  using R = typename M::Scalar;
  const Index H = v.heads(), D = v.dim();
  for (Index h = 0; h < H; ++h) {
    if (v.strides().elem == 1) {
      load_row(v.vector(i, h), out.col(h).data(), D);
    } else {
      for (Index j = 0; j < D; ++j) out(j, h) = R(to_arith<double>(v(i, h, j)));
    }
  }
}

// Parameter and position gradients, token by token: U, V are dim x heads in R.
// Rotation banks with double parameters (RoPE, xPos, RetNet) straight from the rows: the pair
// sums of derivatives.hpp read the storage, no staging in R.
template <class E>
struct rotation_rows : std::false_type {};
template <class S>
struct rotation_rows<Bank<RotationBlock<S>>>
    : std::integral_constant<bool, std::is_same<real_t<S>, double>::value> {
  static const Bank<RotationBlock<S>>& bank(const Bank<RotationBlock<S>>& e) { return e; }
  static constexpr bool all_parameters = true;  // ω and a
};
template <class S>
struct rotation_rows<RopeEncoding<S>>
    : std::integral_constant<bool, std::is_same<real_t<S>, double>::value> {
  static const Bank<RotationBlock<S>>& bank(const RopeEncoding<S>& e) { return e.rotary(); }
  static constexpr bool all_parameters = false;  // ω only (parameters.hpp)
};

template <class E, class TX, class TG, class R>
void accumulate_rotations(const E& enc, Side side, const TensorView<TX>& x,
                          const TensorView<TG>& g, const Positions& pos,
                          const EncodeGradients<R>& grads) {
  using RR = rotation_rows<E>;
  const auto& bank = RR::bank(enc);
  using BD = encoding_derivatives<std::decay_t<decltype(bank)>>;
  const int n = bank.size();
  const bool half = bank.layout() == Layout::HalfSplit, query = side == Side::query;
  std::vector<R> both(RR::all_parameters ? 0 : std::size_t(2 * n));
  for (Index i = 0; i < x.tokens(); ++i) {
    const R tau = query ? R(pos[i]) : -R(pos[i]);
    auto sums = [&](double* s1, double* s2) {  // Σ_h uᵀ(·)v: u = q, v = G (queries); u = G, v = k
      for (Index h = 0; h < x.heads(); ++h) {
        if (query)
          BD::pair_sums(x.vector(i, h), g.vector(i, h), n, half, s1, s2);
        else
          BD::pair_sums(g.vector(i, h), x.vector(i, h), n, half, s1, s2);
      }
    };
    // One pass for the parameter and the position forms (the pair sums and sincos once).
    R* gp = !grads.parameters ? nullptr
            : RR::all_parameters ? grads.parameters->data() : both.data();
    if (grads.parameters && !RR::all_parameters) std::fill(both.begin(), both.end(), R(0));
    R dt = 0;
    BD::rotation_forms(bank, tau, sums, gp, 1, grads.positions ? &dt : nullptr);
    if (grads.parameters && !RR::all_parameters)
      for (int k = 0; k < n; ++k) (*grads.parameters)[std::size_t(k)] += both[std::size_t(k)];
    if (grads.positions) (*grads.positions)[std::size_t(i)] += query ? dt : -dt;
  }
}

template <class E, class TX, class TG, class R>
void accumulate(const E& enc, Side side, const TensorView<TX>& x, const TensorView<TG>& g,
                const Positions& pos, const EncodeGradients<R>& grads) {
  if (!grads.parameters && !grads.positions) return;
  if constexpr (rotation_rows<E>::value &&
                std::is_same<std::remove_cv_t<TX>, std::remove_cv_t<TG>>::value) {
    if (x.strides().elem == 1 && g.strides().elem == 1)
      return accumulate_rotations(enc, side, x, g, pos, grads);
  }
  const Index T = x.tokens(), H = x.heads(), D = x.dim();
  using M = Eigen::Matrix<R, Eigen::Dynamic, Eigen::Dynamic>;
  M xs(D, H), gs(D, H);
  for (Index i = 0; i < T; ++i) {
    load_token(x, i, xs), load_token(g, i, gs);
    const R tau = side == Side::query ? R(pos[i]) : -R(pos[i]);
    const M& u = side == Side::query ? xs : gs;  // Σ_h u_hᵀ A(τ) v_h is the forward's ⟨G, y⟩
    const M& v = side == Side::query ? gs : xs;
    if (grads.parameters)
      encoding_derivatives<E>::bilinear(enc, tau, u, v, grads.parameters->data(), 1);
    if (grads.positions) {
      const R dt = encoding_derivatives<E>::tau_form(enc, tau, u, v);
      (*grads.positions)[std::size_t(i)] += side == Side::query ? dt : -dt;
    }
  }
}

// A basis change is not A(t)ᵀ and A(−s) but F(t) = A_J(t)ᵀ Pᵀ and G(s) = A_J(−s) P⁻¹
// (basis_change.hpp), so its rule is its own:
//   queries  q' = Pᵀ q:   the inner rule on (q', G); dq' = A_J(t) G, dq = P dq';
//                         ∂L/∂P_ij += Σ_h q_i dq'_j;
//   keys     k' = P⁻¹ k:  the inner rule on (G, k') at −s; dk = P⁻ᵀ A_J(−s)ᵀ G;
//                         ∂L/∂P_ij −= Σ_h dk_i k'_j   (∂P⁻¹ = −P⁻¹ ∂P P⁻¹).
// dq and dk are formed here in real_t<S> and rounded once to the storage type.
template <class I, class TX, class TG, class TD, class R>
void accumulate(const BasisChange<I>& enc, Side side, const TensorView<TX>& x,
                const TensorView<TG>& g, const TensorView<TD>& dx, const Positions& pos,
                const EncodeGradients<R>& grads) {
  const Index T = x.tokens(), H = x.heads(), D = x.dim();
  using M = Eigen::Matrix<R, Eigen::Dynamic, Eigen::Dynamic>;
  const M P = enc.P().template cast<R>(), Pi = enc.P_inverse().template cast<R>();
  const M Pt = P.transpose(), PiT = Pi.transpose();  // once, not per token
  const int m = parameter_count(enc.inner());
  M xs(D, H), gs(D, H), x1(D, H), d1(D, H), out(D, H);
  for (Index i = 0; i < T; ++i) {
    load_token(x, i, xs), load_token(g, i, gs);
    const bool query = side == Side::query;
    const R tau = query ? R(pos[i]) : -R(pos[i]);
    x1.noalias() = (query ? Pt : Pi) * xs;
    d1 = gs;  // A_J(τ) G (queries) or A_J(τ)ᵀ G (keys), column by column
    for (Index h = 0; h < H; ++h) enc.inner().apply(d1.col(h), tau, /*transpose=*/!query);
    out.noalias() = (query ? P : PiT) * d1;
    const M& u = query ? x1 : gs;
    const M& v = query ? gs : x1;
    if (grads.parameters) {
      R* gp = grads.parameters->data();
      encoding_derivatives<I>::bilinear(enc.inner(), tau, u, v, gp, 1);
      const M& a = query ? xs : out;  // ∂L/∂P += xs d1ᵀ (queries), −out x1ᵀ (keys)
      const M& b = query ? d1 : x1;
      const R sign = query ? R(1) : R(-1);
      for (Index r = 0; r < D; ++r)
        for (Index c = 0; c < D; ++c) gp[m + r * D + c] += sign * a.row(r).dot(b.row(c));
    }
    if (grads.positions) {
      const R dt = encoding_derivatives<I>::tau_form(enc.inner(), tau, u, v);
      (*grads.positions)[std::size_t(i)] += query ? dt : -dt;
    }
    if (!dx.empty())
      for (Index h = 0; h < H; ++h)
        for (Index j = 0; j < D; ++j)
          dx(i, h, j) = from_arith<std::remove_cv_t<TD>>(double(out(j, h)));
  }
}

template <class E>
struct is_basis_change : std::false_type {};
template <class I>
struct is_basis_change<BasisChange<I>> : std::true_type {};

template <class E>
struct is_multi_axis : std::false_type {};
template <class E>
struct is_multi_axis<MultiAxis<E>> : std::true_type {};

// An encoding the backward can differentiate: derivatives.hpp states its forms (a basis
// change through its inner encoding). PerHead and MultiAxis have their own overloads (below);
// a MultiAxis reaching the 1-D overload was given 1-D positions.
template <class E>
constexpr void require_derivatives() {
  if constexpr (is_multi_axis<E>::value)
    static_assert(!is_multi_axis<E>::value,
                  "peal: the encode backward of a MultiAxis takes N-D points (PositionsND)");
  else if constexpr (is_basis_change<E>::value)
    require_derivatives<typename std::decay_t<decltype(std::declval<E>().inner())>>();
  else
    static_assert(has_encoding_derivatives<E>::value,
                  "peal: no encode backward for this encoding type (derivatives.hpp states its "
                  "forms for blocks with gradient traits, Bank, BlockDiagonal, BasisChange, "
                  "RopeEncoding; MultiAxis and PerHead of those)");
}

inline std::vector<double> negated(const Positions& pos, Index tokens) {
  std::vector<double> n(std::size_t(tokens > 0 ? tokens : 0));
  for (Index i = 0; i < tokens; ++i) n[std::size_t(i)] = -pos[i];
  return n;
}

// dq = F(t)ᵀ G = A(t) G = G(−t) G and dk = G(s)ᵀ G = A(−s)ᵀ G = F(−s) G: the forward
// kernels at the negated positions (−(start + i step) = −start + i (−step) exactly).
template <class E, class TG, class TD>
void input_gradient(const E& enc, Side side, const TensorView<TG>& g, const TensorView<TD>& dx,
                    const Positions& pos) {
  if (dx.empty()) return;
  const std::vector<double> neg = pos.is_sequence() ? std::vector<double>() : negated(pos, g.tokens());
  const Positions np = pos.is_sequence() ? Positions::sequence(-pos.start(), -pos.step())
                                         : Positions(neg);
  if (side == Side::query)
    encode_keys(enc, g, dx, np);
  else
    encode_queries(enc, g, dx, np);
}

template <class E, class TX, class TG, class TD, class R>
void run(const E& enc, Side side, const TensorView<TX>& x, const TensorView<TG>& g,
         const TensorView<TD>& dx, const Positions& pos, const EncodeGradients<R>& grads) {
  if constexpr (is_basis_change<E>::value) {
    accumulate(enc, side, x, g, dx, pos, grads);
  } else {
    accumulate(enc, side, x, g, pos, grads);
    input_gradient(enc, side, g, dx, pos);
  }
}

}  // namespace encode_backward
}  // namespace detail

/// Backward of encode_queries(enc, q, ·, pos): d_encoded is ∂L/∂(F(t) q) [tokens, heads, dim];
/// writes dq = F(t)ᵀ d_encoded (dq may be the very view d_encoded, or empty: not wanted; it
/// must not overlap q) and adds ∂L/∂θ and ∂L/∂t to grads. Nothing is written on bad input.
template <class E, class TX, class TG, class TD>
void encode_queries_backward(const E& enc, TensorView<TX> q, const Positions& pos,
                             TensorView<TG> d_encoded, TensorView<TD> dq,
                             EncodeGradients<real_t<typename E::Scalar>> grads = {}) {
  namespace eb = detail::encode_backward;
  eb::require_derivatives<E>();
  eb::check(enc, q, d_encoded, dq, pos, grads, "encode_queries_backward");
  eb::run(enc, eb::Side::query, detail::ro(q), detail::ro(d_encoded), dq, pos, grads);
}

/// Backward of encode_keys(enc, k, ·, pos): d_encoded is ∂L/∂(G(s) k); writes
/// dk = G(s)ᵀ d_encoded (dk may be the very view d_encoded, or empty; never overlapping k) and
/// adds ∂L/∂θ and ∂L/∂s to grads.
template <class E, class TX, class TG, class TD>
void encode_keys_backward(const E& enc, TensorView<TX> k, const Positions& pos,
                          TensorView<TG> d_encoded, TensorView<TD> dk,
                          EncodeGradients<real_t<typename E::Scalar>> grads = {}) {
  namespace eb = detail::encode_backward;
  eb::require_derivatives<E>();
  eb::check(enc, k, d_encoded, dk, pos, grads, "encode_keys_backward");
  eb::run(enc, eb::Side::key, detail::ro(k), detail::ro(d_encoded), dk, pos, grads);
}

namespace detail {
namespace multi_axis_backward {

// N-D points (multi_axis.hpp): y = F(p) x = Π_b F_b(p_b) x (queries), y = G(p) x = Π_b G_b(p_b) x
// (keys). The axes' factors commute (MultiAxis checks it), so for each axis a,
// y = F_a(p_a) z_a with z_a = Π_{b≠a} F_b(p_b) x, and axis a's parameters and coordinate get
// the 1-D rule of run() on (z_a, G) at p_a; dq = F(p)ᵀ G = G(−p) G and dk = F(−p) G as in 1-D.
// z_a is staged in the storage type of G (float for half and bfloat16: the forward's
// arithmetic, and the rotation banks' direct pair sums of run() read z and G alike) and encoded
// by the axes' own forward kernels: D (D − 1) encode passes and D parameter passes for D axes.
template <class TG>
using stage_t = std::conditional_t<std::is_same<std::remove_cv_t<TG>, double>::value, double, float>;

inline std::vector<double> axis_positions(const PositionsND& pos, Index tokens, int a) {
  std::vector<double> p(std::size_t(tokens > 0 ? tokens : 0));
  for (Index i = 0; i < tokens; ++i) p[std::size_t(i)] = pos.is_constant() ? pos(0, a) : pos(i, a);
  return p;
}

// The backward once the views, positions and gradient sizes are checked.
template <class E, class TX, class TG, class TD, class R>
void run(const MultiAxis<E>& enc, encode_backward::Side side, const TensorView<TX>& x,
         const TensorView<TG>& g, const TensorView<TD>& dx, const PositionsND& pos,
         const EncodeGradients<R>& grads) {
  namespace eb = encode_backward;
  const Index T = x.tokens(), H = x.heads(), D = x.dim();
  const int axes = enc.axes();
  const bool query = side == eb::Side::query;
  std::vector<std::vector<double>> p(static_cast<std::size_t>(axes));
  for (int a = 0; a < axes; ++a) p[std::size_t(a)] = axis_positions(pos, T, a);
  if (grads.parameters || grads.positions) {
    using Z = stage_t<TG>;
    std::vector<Z> z(std::size_t(T * H * D));
    const TensorView<Z> zv(z.data(), T, H, D);
    std::vector<R> part, dt;
    std::size_t offset = 0;
    for (int a = 0; a < axes; ++a) {
      const E& e = enc.axis(a);
      for (Index i = 0; i < T; ++i)  // z_a = Π_{b≠a} F_b(p_b) x (G_b for keys)
        for (Index h = 0; h < H; ++h)
          for (Index j = 0; j < D; ++j) zv(i, h, j) = Z(to_arith<double>(x(i, h, j)));
      for (int b = 0; b < axes; ++b) {
        if (b == a) continue;
        const Positions pb(p[std::size_t(b)]);
        if (query)
          encode_queries(enc.axis(b), zv, pb);
        else
          encode_keys(enc.axis(b), zv, pb);
      }
      const std::size_t n = std::size_t(parameter_count(e));
      EncodeGradients<R> ga;
      if (grads.parameters) part.assign(n, R(0)), ga.parameters = &part;
      if (grads.positions) dt.assign(std::size_t(T), R(0)), ga.positions = &dt;
      eb::run(e, side, ro(zv), g, TensorView<TD>(), Positions(p[std::size_t(a)]), ga);
      if (grads.parameters)
        for (std::size_t k = 0; k < n; ++k) (*grads.parameters)[offset + k] += part[k];
      if (grads.positions)
        for (Index i = 0; i < T; ++i)
          (*grads.positions)[std::size_t(i * axes + a)] += dt[std::size_t(i)];
      offset += n;
    }
  }
  if (dx.empty()) return;  // after the parameter passes: dx may be the very view g
  std::vector<double> neg(std::size_t(T * axes));
  for (Index i = 0; i < T; ++i)
    for (int a = 0; a < axes; ++a) neg[std::size_t(i * axes + a)] = -p[std::size_t(a)][std::size_t(i)];
  const PositionsND np(neg, axes);
  if (query)
    encode_keys(enc, g, dx, np);
  else
    encode_queries(enc, g, dx, np);
}

}  // namespace multi_axis_backward
}  // namespace detail

/// Backward of encode_queries(enc, q, ·, pos) for N-D points (the contract of the 1-D
/// functions above): grads.positions, if wanted, has tokens × axes entries, token-major
/// (∂L/∂p_{i,a} at i · axes + a); the parameter gradient is in the layout of parameters(enc)
/// ("axis[a].").
template <class E, class TX, class TG, class TD>
void encode_queries_backward(const MultiAxis<E>& enc, TensorView<TX> q, const PositionsND& pos,
                             TensorView<TG> d_encoded, TensorView<TD> dq,
                             EncodeGradients<real_t<typename E::Scalar>> grads = {}) {
  namespace eb = detail::encode_backward;
  eb::require_derivatives<E>();
  eb::check(enc, q, d_encoded, dq, pos, grads, "encode_queries_backward");
  detail::multi_axis_backward::run(enc, eb::Side::query, detail::ro(q), detail::ro(d_encoded), dq,
                                   pos, grads);
}
/// Backward of encode_keys(enc, k, ·, pos) for N-D points.
template <class E, class TX, class TG, class TD>
void encode_keys_backward(const MultiAxis<E>& enc, TensorView<TX> k, const PositionsND& pos,
                          TensorView<TG> d_encoded, TensorView<TD> dk,
                          EncodeGradients<real_t<typename E::Scalar>> grads = {}) {
  namespace eb = detail::encode_backward;
  eb::require_derivatives<E>();
  eb::check(enc, k, d_encoded, dk, pos, grads, "encode_keys_backward");
  detail::multi_axis_backward::run(enc, eb::Side::key, detail::ro(k), detail::ro(d_encoded), dk,
                                   pos, grads);
}

namespace detail {
namespace per_head {

// One head's backward: 1-D positions through run(), N-D points through MultiAxis's.
template <class E, class TX, class TG, class TD, class R>
void run_head(const E& e, encode_backward::Side side, const TensorView<TX>& x,
              const TensorView<TG>& g, const TensorView<TD>& dx, const Positions& pos,
              const EncodeGradients<R>& grads) {
  encode_backward::run(e, side, x, g, dx, pos, grads);
}
template <class E, class TX, class TG, class TD, class R>
void run_head(const MultiAxis<E>& e, encode_backward::Side side, const TensorView<TX>& x,
              const TensorView<TG>& g, const TensorView<TD>& dx, const PositionsND& pos,
              const EncodeGradients<R>& grads) {
  multi_axis_backward::run(e, side, x, g, dx, pos, grads);
}

// encode_*_backward per head: head h's backward on head h's slices. Its parameter gradient
// fills head h's block of the layout ("head[h].", parameters.hpp); the position gradient
// gets every head's share, head by head (deterministic).
template <bool Query, class E, class TX, class TG, class TD, class P, class R>
void backward(const PerHead<E>& enc, const TensorView<TX>& x, const P& pos,
              const TensorView<TG>& g, const TensorView<TD>& dx, const EncodeGradients<R>& grads) {
  namespace eb = encode_backward;
  const char* where = Query ? "encode_queries_backward" : "encode_keys_backward";
  require_heads(enc, x, where, "input");
  // Whole views (extents, overlaps, gradient sizes), before head 0 writes.
  eb::check(enc, x, g, dx, pos, grads, where);
  std::vector<R> part;
  std::size_t offset = 0;
  for (int h = 0; h < enc.heads(); ++h) {
    const E& e = enc.head(h);
    const std::size_t n = std::size_t(parameter_count(e));
    EncodeGradients<R> gh{nullptr, grads.positions};
    if (grads.parameters) {
      part.assign(n, R(0));
      gh.parameters = &part;
    }
    run_head(e, Query ? eb::Side::query : eb::Side::key, slice(x, h), slice(g, h),
             dx.empty() ? dx : slice(dx, h), pos, gh);
    if (grads.parameters)
      for (std::size_t k = 0; k < n; ++k) (*grads.parameters)[offset + k] += part[k];
    offset += n;
  }
}

}  // namespace per_head
}  // namespace detail

/// encode_queries_backward / encode_keys_backward per head (the contract of the functions
/// above, 1-D positions or N-D points): the parameter gradient in the layout of parameters(enc).
template <class E, class TX, class TG, class TD>
void encode_queries_backward(const PerHead<E>& enc, TensorView<TX> q, const Positions& pos,
                             TensorView<TG> d_encoded, TensorView<TD> dq,
                             EncodeGradients<real_t<typename E::Scalar>> grads = {}) {
  detail::encode_backward::require_derivatives<E>();
  detail::per_head::backward<true>(enc, detail::ro(q), pos, detail::ro(d_encoded), dq, grads);
}
template <class E, class TX, class TG, class TD>
void encode_keys_backward(const PerHead<E>& enc, TensorView<TX> k, const Positions& pos,
                          TensorView<TG> d_encoded, TensorView<TD> dk,
                          EncodeGradients<real_t<typename E::Scalar>> grads = {}) {
  detail::encode_backward::require_derivatives<E>();
  detail::per_head::backward<false>(enc, detail::ro(k), pos, detail::ro(d_encoded), dk, grads);
}
template <class E, class TX, class TG, class TD>
void encode_queries_backward(const PerHead<MultiAxis<E>>& enc, TensorView<TX> q,
                             const PositionsND& pos, TensorView<TG> d_encoded, TensorView<TD> dq,
                             EncodeGradients<real_t<typename E::Scalar>> grads = {}) {
  detail::encode_backward::require_derivatives<E>();
  detail::per_head::backward<true>(enc, detail::ro(q), pos, detail::ro(d_encoded), dq, grads);
}
template <class E, class TX, class TG, class TD>
void encode_keys_backward(const PerHead<MultiAxis<E>>& enc, TensorView<TX> k,
                          const PositionsND& pos, TensorView<TG> d_encoded, TensorView<TD> dk,
                          EncodeGradients<real_t<typename E::Scalar>> grads = {}) {
  detail::encode_backward::require_derivatives<E>();
  detail::per_head::backward<false>(enc, detail::ro(k), pos, detail::ro(d_encoded), dk, grads);
}

}  // namespace peal
