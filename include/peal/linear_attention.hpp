// Linear attention over any peal encoding (docs/linear-attention.md): no softmax, causal by
// time,
//
//   out[i,h,:] = scale Σ_{s_j ≤ t_i} γ_h^(t_i − s_j) (q_{i,h}^T A(t_i − s_j) k_{j,h/G}) v[j,h/G,:]
//              = scale γ_h^(t_i − T) q_{i,h}^T A(t_i − T) M_h(T) + (keys in (T, t_i]),
//
// M(T) = Σ_{s_j ≤ T} γ^(T − s_j) A(T − s_j) k_j v_j^T the d x dv state (linear_state.hpp).
// RetNet's retention is this with the rotation retnet_rotation(d) and decay = retnet_decays(H)
// (retnet.hpp); GLA-style or state-space decays are RealBlock / RealBank parts; any generator
// works, at real, irregular times. Three forms give the same result (detail/tiled/linear_run.hpp):
// parallel (tiled like scores), chunkwise (pairs within chunks plus a state carried between
// them, every factor relative to a chunk anchor: overflow-free with strong decays), recurrent
// (token by token; LinearState). q [nq, Hq, d], k [nk, Hk, d], v [nk, Hk, dv], out [nq, Hq, dv];
// keys and queries each sorted by time.
#pragma once

#include <cmath>
#include <sstream>
#include <string>
#include <type_traits>

#include "detail/overlap.hpp"
#include "detail/storage.hpp"
#include "detail/tiled/linear_run.hpp"
#include "errors.hpp"
#include "linear_options.hpp"
#include "linear_state.hpp"
#include "positions.hpp"
#include "scores.hpp"
#include "view.hpp"

namespace peal {
namespace detail {
namespace linear {

inline void require_sorted(const Positions& p, Index n, const std::string& what) {
  for (Index i = 1; i < n; ++i)
    if (p[i] < p[i - 1]) {
      std::ostringstream os;
      os.precision(17);
      os << what << " must be non-decreasing (sorted by time): position " << i << " is " << p[i]
         << " after " << p[i - 1];
      fail(os.str());
    }
}

template <class E, class Tq, class Tk, class Tv, class To>
void check_linear(const E& enc, const TensorView<Tq>& q, const Positions& tq,
                  const TensorView<Tk>& k, const Positions& tk, const TensorView<Tv>& v,
                  const TensorView<To>& out, const LinearAttentionOptions& opt) {
  namespace sk = tiled;
  const std::string w = "linear_attention";
  const Index d = Index(enc.dim()), Hq = q.heads(), Hk = k.heads();
  if (q.dim() != d || k.dim() != d)
    fail(w + ": queries " + sk::extents(q.tokens(), q.heads(), q.dim()) + " and keys " +
         sk::extents(k.tokens(), k.heads(), k.dim()) + " must have dim " + std::to_string(d) +
         " (the encoding's dim())");
  if (Hq <= 0 || Hk <= 0 || Hq % Hk != 0)
    fail(w + ": the number of query heads (" + std::to_string(Hq) +
         ") must be a positive multiple of the number of key heads (" + std::to_string(Hk) + ")");
  if (v.tokens() != k.tokens() || v.heads() != Hk)
    fail(w + ": values " + sk::extents(v.tokens(), v.heads(), v.dim()) +
         " must have the keys' tokens and heads " + sk::extents(k.tokens(), Hk, v.dim()));
  if (out.tokens() != q.tokens() || out.heads() != Hq || out.dim() != v.dim())
    fail(w + ": out is " + sk::extents(out.tokens(), out.heads(), out.dim()) +
         ", expected [nq, Hq, dv] = " + sk::extents(q.tokens(), Hq, v.dim()));
  if (may_overlap(out, q)) fail(w + ": out overlaps q (the output must not share memory)");
  if (may_overlap(out, k)) fail(w + ": out overlaps k (the output must not share memory)");
  if (may_overlap(out, v)) fail(w + ": out overlaps v (the output must not share memory)");
  tq.check(q.tokens(), "linear_attention (query positions)");
  tk.check(k.tokens(), "linear_attention (key positions)");
  require_sorted(tq, q.tokens(), w + ": query positions");
  require_sorted(tk, k.tokens(), w + ": key positions");
  check_linear_options(opt, Hq, "linear_attention");
  sk::check_position_span(tq, q.tokens(), tk, k.tokens(), w);
}

template <class C, class E, class Tq, class Tk, class Tv, class To>
void run_linear(const E& enc, const TensorView<Tq>& q, const Positions& tq, const TensorView<Tk>& k,
                const Positions& tk, const TensorView<Tv>& v, const TensorView<To>& out,
                const LinearAttentionOptions& opt, StateData<C>& st, bool keep) {
  if (opt.normalization == LinearNorm::retnet) {
    // torchscale's three forms normalise differently (they agree only after the group norm).
    if (opt.form == LinearForm::automatic)
      fail("linear_attention: with normalization = retnet the output depends on the form "
           "(torchscale normalises its parallel, recurrent and chunkwise forms differently): "
           "give form = parallel, chunkwise or recurrent");
    if (opt.form == LinearForm::chunkwise && opt.chunk == 0)
      fail("linear_attention: RetNet's chunkwise normalisation depends on the chunk size: give "
           "chunk (torchscale's recurrent_chunk_size)");
    if (opt.form == LinearForm::chunkwise && !coders::is_pure_rotation<C>(enc))
      fail("linear_attention: RetNet's chunkwise normalisation takes the 1-norm of the state in "
           "the absolute frame G(T) M, bounded only for a pure rotation (decays as the decay "
           "option, as retnet_rotation with retnet_decays)");
  }
  LinearRun<C, E, Tq, Tk, Tv, To> run(enc, q, tq, k, tk, v, out, opt, st, keep);
  if (opt.normalization == LinearNorm::retnet && !st.empty && run.form() == LinearForm::parallel)
    fail("linear_attention: RetNet's parallel normalisation divides each row by the sum of "
         "|score| over all its keys, which a state does not hold: continue a state with "
         "form = chunkwise or recurrent");
  run.run();
}

}  // namespace linear
}  // namespace detail

/// out[i,h,:] = scale Σ_{s_j ≤ t_i} γ_h^(t_i − s_j) (q^T A(t_i − s_j) k_j) v_j (top of this
/// file), in the form chosen by opt.form. q: [nq, Hq, d], k: [nk, Hk, d], v: [nk, Hk, dv]
/// (float, double, Eigen::half or Eigen::bfloat16, const or not), out: [nq, Hq, dv], not
/// overlapping q, k, v. tq and tk must each be non-decreasing (a key at s_j = t_i is
/// visible). Arithmetic: double if q, k or v stores double, float otherwise. Throws
/// peal::invalid_argument on inconsistent extents, unsorted or non-finite positions, bad
/// options and overlapping views.
template <class E, class Tq, class Tk, class Tv, class To>
void linear_attention(const E& enc, TensorView<Tq> q, const Positions& tq, TensorView<Tk> k,
                      const Positions& tk, TensorView<Tv> v, TensorView<To> out,
                      const LinearAttentionOptions& opt = {}) {
  namespace sk = detail::tiled;
  static_assert(sk::is_storage<std::remove_cv_t<Tq>>::value &&
                    sk::is_storage<std::remove_cv_t<Tk>>::value &&
                    sk::is_storage<std::remove_cv_t<Tv>>::value,
                "peal::linear_attention: q, k and v must store float, double, Eigen::half or "
                "Eigen::bfloat16");
  static_assert(sk::is_storage<To>::value && !std::is_const<To>::value,
                "peal::linear_attention: out must be a writable view of float, double, "
                "Eigen::half or Eigen::bfloat16");
  detail::linear::check_linear(enc, q, tq, k, tk, v, out, opt);
  using C = std::conditional_t<std::is_same<std::remove_cv_t<Tv>, double>::value, double,
                               sk::arith_t<Tq, Tk>>;
  detail::linear::StateData<C> st;
  detail::linear::init_state(st, q.heads(), k.heads(), q.dim(), v.dim(), opt);
  detail::linear::run_linear<C>(enc, detail::ro(q), tq, detail::ro(k), tk, detail::ro(v), out, opt, st,
                                false);
}

/// The same, continuing from `state` (the keys before these; empty: none) and leaving in it
/// the state after the last key: a prefill then LinearState::step per token equals one call
/// over the whole sequence. The state's encoding (exactly: LinearState::same_encoding), heads,
/// dims, scale, decay and normalization must be those of this call, and its time at most
/// tk[0] and tq[0]; otherwise it throws and the state is unchanged. Arithmetic: the state's C.
template <class E, class Tq, class Tk, class Tv, class To, class C>
void linear_attention(const E& enc, TensorView<Tq> q, const Positions& tq, TensorView<Tk> k,
                      const Positions& tk, TensorView<Tv> v, TensorView<To> out,
                      const LinearAttentionOptions& opt, LinearState<E, C>& state) {
  namespace sk = detail::tiled;
  static_assert(sk::is_storage<To>::value && !std::is_const<To>::value,
                "peal::linear_attention: out must be a writable view");
  detail::linear::check_linear(enc, q, tq, k, tk, v, out, opt);
  const auto& st = state.facts();  // checked before storage() switches its frame
  const std::string w = "linear_attention (with a state)";
  if (st.Hq != q.heads() || st.Hk != k.heads() || st.d != q.dim() || st.dv != v.dim())
    detail::fail(w + ": the state is for " + std::to_string(st.Hq) + " query heads, " +
                 std::to_string(st.Hk) + " key heads, d = " + std::to_string(st.d) +
                 ", dv = " + std::to_string(st.dv) + ", not this call's");
  if (!state.same_encoding(enc))
    detail::fail(w + ": the state was made with another encoding (its parameters, layout or "
                     "basis differ from this call's): its sums would be read as another "
                     "encoding's");
  if (st.scale != detail::linear::linear_scale(opt, q.dim()) || st.decay != opt.decay ||
      st.norm != opt.normalization)
    detail::fail(w + ": the state was made with another scale, decay or normalization than "
                     "these options");
  if (!std::isnan(st.time) && ((k.tokens() > 0 && tk[0] < st.time) ||
                               (q.tokens() > 0 && tq[0] < st.time))) {
    std::ostringstream os;
    os.precision(17);
    os << w << ": the state's time " << st.time
       << " is after the first position of this call (positions must continue in time)";
    detail::fail(os.str());
  }
  detail::linear::run_linear<C>(enc, detail::ro(q), tq, detail::ro(k), tk, detail::ro(v), out, opt,
                                state.storage(), true);
}

}  // namespace peal
