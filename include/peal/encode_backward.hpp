// Gradients of encode_queries and encode_keys (docs/gradients.md §3): given the gradient G of
// a loss with respect to the encoded rows,
//   queries  q~ = F(t) q = A(t)ᵀ q:   dq = A(t) G,       ∂L/∂θ_k += Σ_h q_hᵀ ∂A(t)/∂θ_k g_h,
//                                     ∂L/∂t += Σ_h q_hᵀ X A(t) g_h;
//   keys     k~ = G(s) k = A(−s) k:   dk = A(−s)ᵀ G,     ∂L/∂θ_k += Σ_h g_hᵀ ∂A(−s)/∂θ_k k_h,
//                                     ∂L/∂s += −Σ_h g_hᵀ X A(−s) k_h.
// dq is the forward key kernel at −t (A(t) = G(−t)) and dk the forward query kernel at −s
// (A(−s)ᵀ = F(−s)), so they run the tuned encode kernels (encode.hpp) with their accuracy
// and speed. The parameter and position gradients are the bilinear forms of derivatives.hpp,
// summed over heads and then over tokens in token order (deterministic, one thread). A
// rotation bank (RoPE, xPos, RetNet) over contiguous rows does both in one pass (rotation_pass
// below): per token one sincos, per head one load of the rows, dq bitwise the forward kernel's.
// A basis change factors A(t − s) as F(t)ᵀ G(s) with F(t) ≠ A(t)ᵀ, and has its own rule
// (below); a PerHead runs each head's backward on that head's slices, and a MultiAxis (N-D
// points) each axis's rule on the rows encoded by the other axes (at the end).
#pragma once

#include <algorithm>
#include <string>
#include <type_traits>
#include <vector>

#include "derivatives.hpp"
#include "detail/compiler.hpp"
#include "detail/parallel.hpp"
#include "encode.hpp"
#include "multi_axis.hpp"
#include "parameters.hpp"
#include "per_head.hpp"
#include "positions_nd.hpp"
#include "presets/mrope.hpp"

#ifdef _OPENMP
#include <omp.h>
#endif

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
void accumulate(const E& enc, Side side, const TensorView<TX>& x, const TensorView<TG>& g,
                const Positions& pos, const EncodeGradients<R>& grads) {
  if (!grads.parameters && !grads.positions) return;
  const SerialEigen serial;  // one thread, its Eigen products too (detail/parallel.hpp)
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

// ---- The fused pass of a rotation bank (RoPE, xPos, RetNet; RopeEncoding's rotary part) over
// contiguous rows of one storage type T (arithmetic A = float, double for double rows). Per
// token one row of the forward coder's table at τ = t (queries) or −s (keys): c, s = cos, sin
// of ω τ (the exact reduction of detail/math/angle.hpp) and e^{aτ}. That row is the forward's
//   dq = A(t) G = G(−t) G     the key kernel at −t (its row at −(−t) = τ, not transposed),
//   dk = A(−s)ᵀ G = F(−s) G   the query kernel at −s (its row at τ = −s, transposed),
// and the angle of the parameter forms (derivatives.hpp, forms_from_sums). Then per head and
// pair one load of x's and G's pair: dx's pair by the forward loops' arithmetic (the tables of
// row_tables, detail::mul_add as in detail/coders/row_loops.hpp: bitwise the forward kernel at
// −τ) and the pair sums in double (products of float rows are exact)
//   S1 += x₀g₀ + x₁g₁,  S2 += x₀g₁ − x₁g₀   (queries: u = q, v = G; keys: u = G, v = k, −S2).
// G's pair is loaded before dx's is written: dx may be the very view G.
namespace fused {

// Half-split pairs (j, j + n), streams lo and hi: y as rotate_halfsplit_chunk, c = cc, s = ss.
#define PEAL_FUSED_HALF(gl, gh, yl, yh)                                      \
  for (int j = 0; j < m; ++j) {                                              \
    const A g0 = to_arith<A>(gl[j]), g1 = to_arith<A>(gh[j]);                \
    const double x0 = to_arith<double>(xl[j]), x1 = to_arith<double>(xh[j]); \
    s1[j] = mul_add(x1, double(g1), mul_add(x0, double(g0), s1[j]));         \
    s2[j] = mul_add(-x1, double(g0), mul_add(x0, double(g1), s2[j]));        \
    yl[j] = from_arith<T>(mul_add(c[j], g0, -(s[j] * g1)));                  \
    yh[j] = from_arith<T>(mul_add(s[j], g0, c[j] * g1));                     \
  }
template <class T, class A>
inline void half_chunk(const T* PEAL_RESTRICT xl, const T* PEAL_RESTRICT xh,
                       const T* PEAL_RESTRICT gl, const T* PEAL_RESTRICT gh, T* PEAL_RESTRICT yl,
                       T* PEAL_RESTRICT yh, const A* PEAL_RESTRICT c, const A* PEAL_RESTRICT s,
                       double* PEAL_RESTRICT s1, double* PEAL_RESTRICT s2, int m) {
  PEAL_FUSED_HALF(gl, gh, yl, yh)
}
template <class T, class A>
inline void half_chunk(const T* PEAL_RESTRICT xl, const T* PEAL_RESTRICT xh, T* PEAL_RESTRICT yl,
                       T* PEAL_RESTRICT yh, const A* PEAL_RESTRICT c, const A* PEAL_RESTRICT s,
                       double* PEAL_RESTRICT s1, double* PEAL_RESTRICT s2, int m) {
  PEAL_FUSED_HALF(yl, yh, yl, yh)
}
#undef PEAL_FUSED_HALF

// Interleaved pairs (j, j + 1): y as rotate_interleaved_chunk; the sums per element,
// e1_j += x_j g_j and e2_j += x_j g_{j^1}, so that the loop needs no deinterleave:
// S1 = e1_{2i} + e1_{2i+1}, S2 = e2_{2i} − e2_{2i+1} at the end of the token.
#define PEAL_FUSED_INTER(g, y)                                                 \
  for (int j = 0; j < m; j += 2) {                                             \
    const A g0 = to_arith<A>(g[j]), g1 = to_arith<A>(g[j + 1]);                \
    const double x0 = to_arith<double>(x[j]), x1 = to_arith<double>(x[j + 1]); \
    e1[j] = mul_add(x0, double(g0), e1[j]);                                    \
    e1[j + 1] = mul_add(x1, double(g1), e1[j + 1]);                            \
    e2[j] = mul_add(x0, double(g1), e2[j]);                                    \
    e2[j + 1] = mul_add(x1, double(g0), e2[j + 1]);                            \
    y[j] = from_arith<T>(mul_add(g0, cc[j], g1 * ss[j]));                      \
    y[j + 1] = from_arith<T>(mul_add(g1, cc[j + 1], g0 * ss[j + 1]));          \
  }
template <class T, class A>
inline void inter_chunk(const T* PEAL_RESTRICT x, const T* PEAL_RESTRICT g, T* PEAL_RESTRICT y,
                        const A* PEAL_RESTRICT cc, const A* PEAL_RESTRICT ss,
                        double* PEAL_RESTRICT e1, double* PEAL_RESTRICT e2, int m) {
  PEAL_FUSED_INTER(g, y)
}
template <class T, class A>
inline void inter_chunk(const T* PEAL_RESTRICT x, T* PEAL_RESTRICT y, const A* PEAL_RESTRICT cc,
                        const A* PEAL_RESTRICT ss, double* PEAL_RESTRICT e1,
                        double* PEAL_RESTRICT e2, int m) {
  PEAL_FUSED_INTER(y, y)
}
#undef PEAL_FUSED_INTER

// One token: per chunk of K = 64 pairs (half-split; elements interleaved), every head in turn
// with the chunk's sums in local accumulators. Their address never escapes, so they stay in
// registers across the heads (16 zmm with AVX-512: 16 independent chains of dependent FMAs),
// not a load and a store of the sums per head and pair: with one chunk per head the rows are
// still read in order. Then chunks of 16 and the tail. In place when y == g (one view: the
// same strides). Out of line: one loop nest per call (bench_encode: 2.2x -> 1.6x the forward's
// time with 32 heads, before K = 64 was 1.8x).
template <bool Half, class T, class A>
PEAL_NOINLINE void token(const T* x, Index xs, const T* g, Index gs, T* y, Index ys, Index H,
                         const A* c, const A* s, double* s1, double* s2, int n) {
  constexpr int K = 64;
  const int len = Half ? n : 2 * n;
  for (int j = 0; j < len;) {
    const int w = len - j >= K ? K : len - j >= 16 ? 16 : len - j;
    double a1[K] = {}, a2[K] = {};
    A cj[K], sj[K];
    for (int k = 0; k < w; ++k) cj[k] = c[j + k], sj[k] = s[j + k];
    auto heads = [&](auto width) {
      constexpr int W = decltype(width)::value;
      const int m = W ? W : w;
      for (Index h = 0; h < H; ++h) {
        const T *xh = x + h * xs + j, *gh = g + h * gs + j;
        T* yh = y + h * ys + j;
        if constexpr (Half) {
          if (y == g)
            half_chunk(xh, xh + n, yh, yh + n, cj, sj, a1, a2, m);
          else
            half_chunk(xh, xh + n, gh, gh + n, yh, yh + n, cj, sj, a1, a2, m);
        } else {
          if (y == g)
            inter_chunk(xh, yh, cj, sj, a1, a2, m);
          else
            inter_chunk(xh, gh, yh, cj, sj, a1, a2, m);
        }
      }
    };
    if (w == K)
      heads(std::integral_constant<int, K>());
    else if (w == 16)
      heads(std::integral_constant<int, 16>());
    else
      heads(std::integral_constant<int, 0>());
    for (int k = 0; k < w; ++k) s1[j + k] = a1[k], s2[j + k] = a2[k];
    j += w;
  }
}

}  // namespace fused

inline void prefetch(const void* p, Index bytes, int write = 0) {
  const char* c = static_cast<const char*>(p);
  for (Index b = 0; b < bytes; b += 64)
    if (write)
      PEAL_PREFETCH(c + b, 1);
    else
      PEAL_PREFETCH(c + b, 0);
}

// Per-thread state of the fused pass, allocated before any thread starts: the forward's coder;
// rel: [cos | sin | e^{aτ}]; cc, ss: the loops' tables; sums: S1, S2 (e1, e2 of 2n entries
// each, interleaved); tmp: one head in A for a token past the range; forms: one token's forms.
template <class A, class R>
struct RotationScratch {
  template <class S>
  explicit RotationScratch(const Bank<RotationBlock<S>>& bank)
      : coder(bank),
        rel(std::size_t(3 * bank.size() + 1)),
        sums(std::size_t(4 * bank.size() + 1)),
        cc(std::size_t(2 * bank.size() + 1)),
        ss(cc.size()),
        tmp(cc.size()),
        forms(cc.size()) {}
  coders::RotationBankCoder<A> coder;
  std::vector<double> rel, sums;
  std::vector<A> cc, ss, tmp;
  std::vector<R> forms;
};

// Tokens [t0, t1) of the fused pass (above) for E = Bank<RotationBlock> or RopeEncoding, rows
// of storage T: dx written unless empty (then the pair sums alone, straight from the rows);
// the position gradient added per token; each token's parameter forms (ω, then a) into
// rows + 2n (i − row0) when rows is given, else added to grads.parameters at once (token order).
template <class E, class T, class R>
void rotation_tokens(const E& enc, Side side, const TensorView<const T>& x,
                     const TensorView<const T>& g, const TensorView<T>& dx, const Positions& pos,
                     const EncodeGradients<R>& grads, Index t0, Index t1,
                     RotationScratch<arith_t<T, T>, R>& sc, R* rows, Index row0 = 0) {
  using RR = rotation_rows<E>;
  using A = arith_t<T, T>;
  const auto& bank = RR::bank(enc);
  using BD = encoding_derivatives<std::decay_t<decltype(bank)>>;
  const int n = bank.size(), rot = 2 * n;
  const Index H = x.heads(), D = x.dim();
  const bool half = bank.layout() == Layout::HalfSplit, query = side == Side::query;
  const coders::RotationBankCoder<A>& coder = sc.coder;
  double *rel = sc.rel.data(), *s1 = sc.sums.data(), *s2 = s1 + (half ? n : rot);
  A *cc = sc.cc.data(), *ss = sc.ss.data(), *tmp = sc.tmp.data();
  const Index row_bytes =
      x.strides().head >= 0
          ? std::min<Index>(((H - 1) * x.strides().head + D) * Index(sizeof(T)), 8192)
          : 0;
  for (Index i = t0; i < t1; ++i) {
    const double tau = query ? pos[i] : -pos[i];
    // The token's first lines on their way before its sincos (as the forward kernel does).
    prefetch(x.vector(i, 0), row_bytes), prefetch(g.vector(i, 0), row_bytes);
    if (!dx.empty() && dx.data() != g.data()) prefetch(dx.vector(i, 0), row_bytes, 1);
    coder.exact_row(tau, rel);
    // Queries: dq is the key kernel's row at τ (not transposed); keys: the query kernel's,
    // transposed.
    const bool big = coder.row_tables(rel, !query, cc, ss);
    const bool fused_rows = !dx.empty() && !big;
    if (fused_rows) {  // token() writes the sums
      const T *x0 = x.vector(i, 0), *g0 = g.vector(i, 0);
      T* y0 = dx.vector(i, 0);
      const Index xs = x.strides().head, gs = g.strides().head, ys = dx.strides().head;
      if (half)
        fused::token<true>(x0, xs, g0, gs, y0, ys, H, cc, ss, s1, s2, n);
      else
        fused::token<false>(x0, xs, g0, gs, y0, ys, H, cc, ss, s1, s2, n);
      if (y0 != g0)
        for (Index h = 0; h < H; ++h)  // pass-through coordinates: dx = G
          for (Index j = rot; j < D; ++j) dx.vector(i, h)[j] = g.vector(i, h)[j];
    } else {
      std::fill(sc.sums.begin(), sc.sums.end(), 0.0);
      for (Index h = 0; h < H; ++h) {  // the sums alone (dx below, past the range)
        if (query)
          BD::pair_sums(x.vector(i, h), g.vector(i, h), n, half, s1, s2);
        else
          BD::pair_sums(g.vector(i, h), x.vector(i, h), n, half, s1, s2);
      }
    }
    // Interleaved: e1, e2 to S1, S2 in place (S_k is written after e_{2k}, e_{2k+1} are
    // read); keys: S2 = Σ g₀k₁ − g₁k₀ = −Σ x₀g₁ − x₁g₀ (pair_sums' keys already have u = G).
    if (fused_rows && !half)
      for (int k = 0; k < n; ++k)
        s1[k] = s1[2 * k] + s1[2 * k + 1], s2[k] = s2[2 * k] - s2[2 * k + 1];
    if (fused_rows && !query)
      for (int k = 0; k < n; ++k) s2[k] = -s2[k];
    // Past the range: the rotation in double, then e^{aτ} by mul_exp (the forward's apply_exact).
    if (!dx.empty() && big)
      for (Index h = 0; h < H; ++h) {
        const T* gh = g.vector(i, h);
        T* yh = dx.vector(i, h);
        for (int j = 0; j < rot; ++j) tmp[j] = to_arith<A>(gh[j]);
        coder.apply_exact(tau, rel, tmp, tmp, !query, false, tmp);
        for (int j = 0; j < rot; ++j) yh[j] = from_arith<T>(tmp[j]);
        if (yh != gh)
          for (Index j = rot; j < D; ++j) yh[j] = gh[j];
      }
    R* forms = rows ? rows + Index(2 * n) * (i - row0) : sc.forms.data();
    if (grads.parameters) std::fill(forms, forms + 2 * n, R(0));
    R dt = 0;
    BD::forms_from_sums(bank, tau, rel + n, rel, s1, s2, grads.parameters ? forms : nullptr, 1,
                        grads.positions ? &dt : nullptr);
    if (grads.parameters && !rows)  // RoPE: ω only (parameters.hpp)
      for (int k = 0; k < (RR::all_parameters ? 2 * n : n); ++k)
        (*grads.parameters)[std::size_t(k)] += forms[k];
    if (grads.positions) (*grads.positions)[std::size_t(i)] += query ? dt : -dt;
  }
}

// The fused pass over every token: with OpenMP, tokens split statically over threads as the
// forward kernel splits them (encode.hpp); each token's parameter forms are then added to
// grads in token order after the threads, so the gradients are bitwise those of one thread.
template <class E, class T, class R>
void rotation_pass(const E& enc, Side side, const TensorView<const T>& x,
                   const TensorView<const T>& g, const TensorView<T>& dx, const Positions& pos,
                   const EncodeGradients<R>& grads) {
  using Scratch = RotationScratch<arith_t<T, T>, R>;
  const Index T_ = x.tokens();
  const auto& bank = rotation_rows<E>::bank(enc);
  const int n = bank.size();
  int nthreads = 1;
#ifdef _OPENMP
  if (T_ > 1 && T_ * x.heads() * x.dim() >= encode_kernels::kParallelMinElements &&
      !omp_in_parallel())
    nthreads = int(std::min<Index>(omp_get_max_threads(), T_));
#endif
  std::vector<Scratch> scratch(std::size_t(nthreads), Scratch{bank});
  if (nthreads == 1)
    return rotation_tokens(enc, side, x, g, dx, pos, grads, 0, T_, scratch[0],
                           static_cast<R*>(nullptr));
  // Blocks of kBlock tokens, each split over the threads: the per-token forms wait for their
  // in-order sum in a buffer of kBlock · 2n values, not one of every token's (1e6 tokens of
  // 64 pairs would hold 1 GB).
  constexpr Index kBlock = 4096;
  std::vector<R> rows(grads.parameters ? std::size_t(std::min(T_, kBlock)) * std::size_t(2 * n) : 0);
  const int m = rotation_rows<E>::all_parameters ? 2 * n : n;
  for (Index b0 = 0; b0 < T_; b0 += kBlock) {
    const Index nb = std::min(kBlock, T_ - b0);
#ifdef _OPENMP
#pragma omp parallel num_threads(nthreads)
    {
      const int tid = omp_get_thread_num(), nt = omp_get_num_threads();
      rotation_tokens(enc, side, x, g, dx, pos, grads, b0 + nb * tid / nt,
                      b0 + nb * (tid + 1) / nt, scratch[std::size_t(tid)],
                      grads.parameters ? rows.data() : nullptr, b0);
    }
#endif
    if (grads.parameters)
      for (Index i = 0; i < nb; ++i)
        for (int k = 0; k < m; ++k)
          (*grads.parameters)[std::size_t(k)] += rows[std::size_t(i * 2 * n + k)];
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
  const SerialEigen serial;  // one thread, its Eigen products too (detail/parallel.hpp)
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

using detail::is_basis_change;  // basis_change.hpp

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

// The fused rotation pass where it applies: a rotation bank with double parameters, gradients
// wanted (dx alone is the forward kernel, threaded), x and G contiguous rows of one storage
// type; dx in it when also contiguous and of that type, else by the forward kernel after it.
// Returns whether it took the call.
template <class E, class TX, class TG, class TD, class R>
bool fused_rotations(const E& enc, Side side, const TensorView<TX>& x, const TensorView<TG>& g,
                     const TensorView<TD>& dx, const Positions& pos,
                     const EncodeGradients<R>& grads) {
  using T = std::remove_cv_t<TX>;
  if constexpr (rotation_rows<E>::value && std::is_same<T, std::remove_cv_t<TG>>::value) {
    if (!grads.parameters && !grads.positions) return false;
    if (x.strides().elem != 1 || g.strides().elem != 1) return false;
    bool write = false;
    if constexpr (std::is_same<TD, T>::value) write = !dx.empty() && dx.strides().elem == 1;
    TensorView<T> out;
    if constexpr (std::is_same<TD, T>::value)
      if (write) out = dx;
    rotation_pass(enc, side, TensorView<const T>(x), TensorView<const T>(g), out, pos, grads);
    if (!write) input_gradient(enc, side, g, dx, pos);
    return true;
  } else {
    return false;
  }
}

template <class E, class TX, class TG, class TD, class R>
void run(const E& enc, Side side, const TensorView<TX>& x, const TensorView<TG>& g,
         const TensorView<TD>& dx, const Positions& pos, const EncodeGradients<R>& grads) {
  if constexpr (is_basis_change<E>::value) {
    accumulate(enc, side, x, g, dx, pos, grads);
  } else if (!fused_rotations(enc, side, x, g, dx, pos, grads)) {
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
// M-RoPE's parameter layout (parameters.hpp: one inv_freq per rotary pair) around a backward
// of its MultiAxis: run(g) with g.parameters in the MultiAxis layout, then gathered into
// grads.parameters. A wrong gradient size throws before anything is written.
template <class S, class G, class Run>
void with_mrope_layout(const MRopeEncoding<S>& enc, G grads, const char* who, Run&& run) {
  using R = typename std::remove_pointer_t<decltype(grads.parameters)>::value_type;
  std::vector<R>* out = grads.parameters;
  if (!out) return run(grads);
  const int n = parameter_count(enc);
  if (out->size() != std::size_t(n))
    fail(std::string(who) + ": the parameter gradient has " + std::to_string(out->size()) +
         " entries, the M-RoPE encoding " + std::to_string(n) + " parameters (inv_freq)");
  std::vector<R> axes(std::size_t(parameter_count(enc.encoding())), R(0));
  grads.parameters = &axes;
  run(grads);
  encoding_parameters<MRopeEncoding<S>>::gather(enc, axes.data(), out->data());
}
}  // namespace detail

/// encode_queries_backward and encode_keys_backward of M-RoPE over (t, h, w) points: those of
/// its MultiAxis, with the parameter gradient in M-RoPE's own layout (parameters.hpp:
/// inv_freq[i], one per rotary pair, as Qwen2-VL's inv_freq buffer).
template <class S, class TX, class TG, class TD>
void encode_queries_backward(const MRopeEncoding<S>& enc, TensorView<TX> q, const PositionsND& pos,
                             TensorView<TG> d_encoded, TensorView<TD> dq,
                             EncodeGradients<real_t<S>> grads = {}) {
  detail::with_mrope_layout(enc, grads, "encode_queries_backward", [&](const auto& g) {
    encode_queries_backward(enc.encoding(), q, pos, d_encoded, dq, g);
  });
}
template <class S, class TX, class TG, class TD>
void encode_keys_backward(const MRopeEncoding<S>& enc, TensorView<TX> k, const PositionsND& pos,
                          TensorView<TG> d_encoded, TensorView<TD> dk,
                          EncodeGradients<real_t<S>> grads = {}) {
  detail::with_mrope_layout(enc, grads, "encode_keys_backward", [&](const auto& g) {
    encode_keys_backward(enc.encoding(), k, pos, d_encoded, dk, g);
  });
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
