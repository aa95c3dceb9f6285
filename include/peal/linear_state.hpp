// peal::LinearState: the recurrent state of linear attention (docs/linear-attention.md §3),
//
//     M(T) = Σ_{s_j ≤ T} γ^(T − s_j) A(T − s_j) k_j v_j^T        (d x dv per state head),
//     M(T') = γ^(T' − T) A(T' − T) M(T) + (keys in (T, T']),      o = scale γ^(t − T) q^T A(t − T) M(T).
//
// The group law A(a)A(b) = A(a + b) is what lets the state advance by whatever gap comes, for
// any generator, at real times. The state is held relative to its own time T (never F(t) or
// G(s) at an absolute time), so gaps of 10^6 and times near 1.7e9 cost only the rounding of
// the differences; with decays every factor is ≤ 1. Storage and coordinates:
// detail/tiled/linear_ops.hpp. One state per key head, or per query head when per-head decays are
// given (the heads of a group then decay differently).
//
// Decoding a pure rotation (RoPE-style; a scalar decay allowed): step() switches the state to
// the absolute frame, N = γ^(T0 − T) A(−T) M(T) with a reference time T0 per head, so that a
// token costs what the bare rank-1 update and read cost: N += γ^(T0 − s) (G(s) k) v^T,
// o = scale γ^(t − T0) (F(t) q)^T N, with no pass rotating the state (A(−T) is bounded for a
// rotation). γ^(T0 − s) grows as s moves on: past 2^32 the state is rescaled and T0 moved
// (once per ~22 / |ln γ| time units). Any other use converts back to the relative frame.
//
// Threads: the const members (read, matrix, time, empty and the other accessors) change
// nothing, whatever the frame, and may run at once on one state from several threads.
// update, step, advance, storage() and linear_attention(..., state) change it (step and
// storage() also switch its frame) and need it to themselves: no other call on the same state
// meanwhile, const or not. Distinct states share nothing but an immutable copy of the encoding.
#pragma once

#include <cmath>
#include <limits>
#include <memory>
#include <sstream>
#include <string>
#include <type_traits>
#include <vector>

#include "detail/overlap.hpp"
#include "detail/tiled/linear_ops.hpp"
#include "errors.hpp"
#include "linear_options.hpp"
#include "view.hpp"

namespace peal {
namespace detail {
namespace linear {

/// The numbers of a state (what linear_attention reads and leaves).
template <class C>
struct StateData {
  Index Hq = 0, Hk = 0, heads = 0, d = 0, dv = 0;
  double time = std::numeric_limits<double>::quiet_NaN();  // NaN: never advanced
  bool empty = true;                                         // no key yet
  Buffer<C> W;             // heads x dv x d: W_σ = M_σ^T in the coder's coordinates
  std::vector<double> z;   // per state head Σ_j γ^(time − s_j): RetNet's running scale
  std::vector<double> lam; // per state head ln γ (0: no decay)
  double scale = 1;
  std::vector<double> decay;
  LinearNorm norm = LinearNorm::none;

  C* w(Index s) { return W.data() + s * dv * d; }
  const C* w(Index s) const { return W.data() + s * dv * d; }
  /// The state head query head h reads, and the key head feeding state head σ.
  Index state_of(Index h) const { return heads == Hq ? h : h / (Hq / Hk); }
  Index key_of(Index s) const { return heads == Hq ? s / (Hq / Hk) : s; }
  /// Query heads reading state head σ: [first, first + count).
  Index first_reader(Index s) const { return heads == Hq ? s : s * (Hq / Hk); }
  Index readers() const { return heads == Hq ? 1 : Hq / Hk; }
};

/// Everything a state's numbers depend on, exactly: the dim, the coder's signature (every
/// parameter of its tables, the layout, the block types; the generator's entries when the
/// coder has none: the per-row fallback), and the P of every basis change, which the
/// generator P J P^{-1} does not show (P and 2P give the same one) but the state does: its
/// sums are held in the coordinates P^{-1} k. Equal fingerprints: the same numbers.
template <class E>
void basis_facts(const E& e, std::vector<long double>& f);
template <class E>
void basis_facts(const BasisChange<E>& e, std::vector<long double>& f) {
  const auto& P = e.P();
  f.push_back(static_cast<long double>(P.rows()));
  for (Eigen::Index i = 0; i < P.size(); ++i) f.push_back(static_cast<long double>(P.data()[i]));
  basis_facts(e.inner(), f);
}
template <class E>
void basis_facts(const E& e, std::vector<long double>& f) {
  if constexpr (has_encoding_type<E>::value)  // a preset: the encoding it is
    basis_facts(static_cast<const typename E::encoding_type&>(e), f);
  else
    (void)e, (void)f;
}
template <class C, class E>
std::vector<long double> fingerprint(const StateOps<C, E>& ops, const E& e) {
  std::vector<long double> f{static_cast<long double>(e.dim())};
  std::vector<double> sig;
  if (ops.signature(sig)) {
    f.push_back(1);
    f.insert(f.end(), sig.begin(), sig.end());
  } else {
    const auto X = e.generator();
    f.push_back(0);
    for (Eigen::Index i = 0; i < X.size(); ++i) f.push_back(static_cast<long double>(X.data()[i]));
  }
  basis_facts(e, f);
  return f;
}

/// 1/sqrt(d) unless given.
inline double linear_scale(const LinearAttentionOptions& o, Index d) {
  return o.scale ? *o.scale : 1.0 / std::sqrt(double(std::max<Index>(d, 1)));
}

inline void check_linear_options(const LinearAttentionOptions& o, Index Hq, const char* where) {
  const std::string w(where);
  if (o.scale && !std::isfinite(*o.scale)) fail(w + ": scale must be finite");
  if (!o.decay.empty()) {
    if (Index(o.decay.size()) != Hq)
      fail(w + ": " + std::to_string(o.decay.size()) + " decays for " + std::to_string(Hq) +
           " query heads (give one per query head, or none)");
    for (double g : o.decay)
      if (!(g > 0 && g <= 1)) {
        std::ostringstream os;
        os << w << ": decay gamma must be in (0, 1], got " << g;
        fail(os.str());
      }
  }
  if (o.chunk < 0) fail(w + ": chunk must be >= 0 (0: automatic)");
  if (o.threads < 0) fail(w + ": threads must be >= 0");
}

template <class C>
void init_state(StateData<C>& st, Index Hq, Index Hk, Index d, Index dv,
                const LinearAttentionOptions& o) {
  st.Hq = Hq, st.Hk = Hk, st.d = d, st.dv = dv;
  st.heads = o.decay.empty() ? Hk : Hq;
  // heads x dv x d values (and their bytes) must be an index: refused, never wrapped into a
  // small allocation (LinearState and linear_attention alike).
  const Index n = checked_mul(checked_mul(st.heads, dv), d);
  if (n < 0 || checked_mul(n, Index(sizeof(C))) < 0)
    fail("linear attention: a state of " + std::to_string(st.heads) + " heads x dv = " +
         std::to_string(dv) + " x d = " + std::to_string(d) + " values is past the index range");
  st.W.assign(std::size_t(st.heads * dv * d), C(0));
  st.z.assign(std::size_t(st.heads), 0.0);
  st.lam.assign(std::size_t(st.heads), 0.0);
  for (Index s = 0; s < st.heads && !o.decay.empty(); ++s)
    st.lam[std::size_t(s)] = std::log(o.decay[std::size_t(s)]);
  st.scale = linear_scale(o, d);
  st.decay = o.decay;
  st.norm = o.normalization;
}

}  // namespace linear
}  // namespace detail

/// The recurrent state of linear attention over encoding E, in arithmetic C (float or
/// double): construct it, feed it keys in time order, read it at any later time; or let
/// linear_attention(..., state) fill it from a prefill and continue from it.
template <class E, class C = float>
class LinearState {
  static_assert(std::is_same<C, float>::value || std::is_same<C, double>::value,
                "peal::LinearState: C must be float or double");

 public:
  /// Query heads Hq (a multiple of the key heads Hk), value size dv; scale, decay and
  /// normalization from opt (the call that continues this state must pass the same).
  LinearState(const E& enc, Index query_heads, Index key_heads, Index dv,
              const LinearAttentionOptions& opt = {})
      : enc_(std::make_shared<const E>(enc)), ops_(*enc_) {
    const char* w = "LinearState";
    if (key_heads <= 0 || query_heads <= 0 || query_heads % key_heads != 0)
      detail::fail(std::string(w) + ": query heads (" + std::to_string(query_heads) +
                   ") must be a positive multiple of key heads (" + std::to_string(key_heads) + ")");
    if (dv < 0) detail::fail(std::string(w) + ": dv must be >= 0");
    detail::linear::check_linear_options(opt, query_heads, w);
    detail::linear::init_state(st_, query_heads, key_heads, Index(enc.dim()), dv, opt);
    const double zero = 0;
    k0_.resize(std::size_t(std::max<Index>(ops_.coef_size(), 1)));
    q0_.resize(k0_.size());
    ops_.coefficients(&zero, 1, k0_.data(), false, rel_);
    ops_.coefficients(&zero, 1, q0_.data(), true, rel_);
    unit0_ = read_frame(nullptr);
  }

  bool empty() const { return st_.empty; }
  /// Time of the last key or advance (NaN before either).
  double time() const { return st_.time; }
  Index dim() const { return st_.d; }
  Index value_dim() const { return st_.dv; }
  Index query_heads() const { return st_.Hq; }
  Index key_heads() const { return st_.Hk; }
  /// States held: key heads, or query heads when per-head decays are given.
  Index heads() const { return st_.heads; }

  /// Advance to s and add one token's keys k [1, Hk, d] and values v [1, Hk, dv]; s >= time().
  template <class Tk, class Tv>
  void update(TensorView<Tk> k, TensorView<Tv> v, double s) {
    check_token(k, st_.Hk, st_.d, "update (k)");
    check_token(v, st_.Hk, st_.dv, "update (v)");
    to_relative();
    add<Tk, Tv, const C, C>(k, v, s, nullptr, nullptr);
  }

  /// out [1, Hq, dv] = scale γ^(t − time) q^T A(t − time) M for q [1, Hq, d]; t >= time().
  /// The state is not changed (a query may lie between keys). Before any key: zeros.
  template <class Tq, class To>
  void read(TensorView<Tq> q, double t, TensorView<To> out) const {
    check_token(q, st_.Hq, st_.d, "read (q)");
    check_token(out, st_.Hq, st_.dv, "read (out)");
    check_apart(out, q, "read", "q");
    check_time(t, "read");
    const double dt = st_.empty ? 0.0 : t - st_.time;
    const std::size_t nd = std::size_t(st_.d), ndv = std::size_t(st_.dv);
    using detail::linear::Buffer;
    Buffer<C> coef(q0_.size()), qh(nd), o(ndv), scratch(std::size_t(ops_.scratch_size()));
    std::vector<double> rel;
    const double at = abs_ ? t : dt;  // absolute frame: F(t) q against N
    ops_.coefficients(&at, 1, coef.data(), true, rel);
    for (Index h = 0; h < st_.Hq; ++h) {
      const Index s = st_.state_of(h);
      const double lam = st_.lam[std::size_t(s)];
      const double g = std::exp(lam * dt);
      const double f = st_.scale * (abs_ ? std::exp(lam * (t - t0_[std::size_t(s)])) : g);
      ops_.load_rows(q, 0, 1, h, coef.data(), true, true, &f, qh.data(), scratch.data());
      ops_.step(const_cast<C*>(st_.w(s)), st_.dv, nullptr, C(1), nullptr, nullptr, qh.data(), 1,
                o.data(), scratch.data());
      write(out, h, o.data(), norm_factor(s, g));
    }
  }

  /// M <- γ^(t − time) A(t − time) M and time <- t (t >= time()).
  void advance(double t) {
    check_time(t, "advance");
    to_relative();
    if (st_.empty) {
      st_.time = t;
      return;
    }
    const double dt = t - st_.time;
    const C* coef = step_coef(dt);
    for (Index s = 0; s < st_.heads; ++s) {
      const double g = std::exp(st_.lam[std::size_t(s)] * dt);
      ops_.advance(st_.w(s), st_.dv, coef, C(g), scratch_.data());
      st_.z[std::size_t(s)] *= g;
    }
    st_.time = t;
  }

  /// update(k, v, s) then read(q, s, out), in one pass over each state (the decode step).
  template <class Tk, class Tv, class Tq, class To>
  void step(TensorView<Tk> k, TensorView<Tv> v, TensorView<Tq> q, double s, TensorView<To> out) {
    check_token(k, st_.Hk, st_.d, "step (k)");
    check_token(v, st_.Hk, st_.dv, "step (v)");
    check_token(q, st_.Hq, st_.d, "step (q)");
    check_token(out, st_.Hq, st_.dv, "step (out)");
    check_apart(out, q, "step", "q");
    check_apart(out, k, "step", "k");
    check_apart(out, v, "step", "v");
    if (ops_.bounded() && !st_.empty && st_.d > 0 && st_.dv > 0) {
      check_time(s, "step");
      step_absolute(k, v, q, s, out);
      return;
    }
    to_relative();
    add(k, v, s, &q, &out);
  }

  /// M of state head σ in the original coordinates (d x dv, double; for inspection and
  /// tests): read back through unit queries, so it is exactly what read() sees.
  Matrix<double> matrix(Index sigma) const {
    if (abs_) {
      LinearState c = *this;
      c.to_relative();
      return c.matrix(sigma);
    }
    const Index d = st_.d, dv = st_.dv;
    Matrix<double> M = Matrix<double>::Zero(d, dv);
    if (st_.empty) return M;
    const std::size_t nd = std::size_t(d), ndv = std::size_t(dv);
    using detail::linear::Buffer;
    Buffer<C> qh(nd), o(ndv), scratch(std::size_t(ops_.scratch_size())), e(nd);
    for (Index i = 0; i < d; ++i) {
      std::fill(e.begin(), e.end(), C(0));
      e[std::size_t(i)] = 1;
      const TensorView<const C> ev(e.data(), 1, 1, d);
      ops_.load_rows(ev, 0, 1, 0, q0_.data(), true, true, nullptr, qh.data(), scratch.data());
      ops_.step(const_cast<C*>(st_.w(sigma)), dv, nullptr, C(1), nullptr, nullptr, qh.data(), 1,
                o.data(), scratch.data());
      for (Index c = 0; c < dv; ++c) M(i, c) = double(o[std::size_t(c)]);
    }
    return M;
  }

  /// State head σ in the relative frame without a copy of the state (for
  /// linear_state_backward.hpp; not part of the user API): `hat` (dv rows of d doubles,
  /// row-major) gets W = M̂ᵀ, the state in the coder's coordinates (M̂ = G(0) M: a key enters
  /// as G(s) k), advanced in a buffer when the state is held in the absolute frame (what
  /// to_relative() does); `orig`, when given, gets Mᵀ = M̂ᵀ F(0) in the original coordinates
  /// (matrix(σ) transposed, up to rounding), F(0) loaded as a read loads the unit queries.
  /// Where original_coordinates() (no BasisChange), M = M̂ and `orig` is not written. O(d dv)
  /// (O(d² dv) with a basis), where matrix() reads d unit queries through W.
  void relative_rows(Index sigma, double* hat, double* orig) const {
    using RowMat = Eigen::Matrix<C, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
    using RowMatD = Eigen::Matrix<double, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
    const Index d = st_.d, dv = st_.dv;
    if (unit0_) orig = nullptr;
    Eigen::Map<RowMatD> out(hat, dv, d);
    if (st_.empty || d == 0 || dv == 0) {
      out.setZero();
      if (orig) Eigen::Map<RowMatD>(orig, dv, d).setZero();
      return;
    }
    RowMat W = Eigen::Map<const RowMat>(st_.w(sigma), dv, d);
    if (abs_) {  // M(T) = γ^(T − T0) A(T) N, as to_relative()
      detail::linear::Buffer<C> coef(q0_.size()), scratch(std::size_t(ops_.scratch_size()));
      std::vector<double> rel;
      ops_.coefficients(&st_.time, 1, coef.data(), false, rel);
      advance_to_relative(sigma, W.data(), coef.data(), scratch.data());
    }
    out = W.template cast<double>();
    if (orig) {
      RowMat L(d, d);
      read_frame(L.data());
      Eigen::Map<RowMatD>(orig, dv, d) = (W * L).template cast<double>();
    }
  }
  /// Whether the coder's coordinates are the original ones: F(0) = G(0) = I, every encoding
  /// but one with a BasisChange (whose keys enter as P⁻¹ k); for linear_state_backward.hpp.
  bool original_coordinates() const { return unit0_; }

  /// The facts (heads, dims, time, scale, decay, normalization; W in whichever frame it is):
  /// what linear_attention checks before it touches the state (not part of the user API).
  const detail::linear::StateData<C>& facts() const { return st_; }
  /// The numbers, in the relative frame (for linear_attention; not part of the user API).
  detail::linear::StateData<C>& storage() {
    to_relative();
    return st_;
  }
  const E& encoding() const { return *enc_; }
  /// True when enc is this state's encoding exactly (detail::linear::fingerprint: its
  /// parameters, layout and basis); linear_attention(..., state) refuses any other.
  bool same_encoding(const E& enc) const {
    return detail::linear::fingerprint(ops_, *enc_) ==
           detail::linear::fingerprint(detail::linear::StateOps<C, E>(enc), enc);
  }

 private:
  template <class T>
  static void check_token(const TensorView<T>& x, Index heads, Index dim, const char* what) {
    if (x.tokens() != 1 || x.heads() != heads || x.dim() != dim) {
      std::ostringstream os;
      os << "LinearState::" << what << ": expected [1, " << heads << ", " << dim << "], got ["
         << x.tokens() << ", " << x.heads() << ", " << x.dim() << "]";
      detail::fail(os.str());
    }
  }
  // out is written head by head while the inputs are still read (detail/overlap.hpp).
  template <class To, class T>
  static void check_apart(const TensorView<To>& out, const TensorView<T>& x, const char* what,
                          const char* name) {
    if (detail::may_overlap(out, x))
      detail::fail(std::string("LinearState::") + what + ": out overlaps " + name +
                   " (the output must not share memory with the inputs)");
  }
  void check_time(double t, const char* what) const {
    detail::require_finite(t, what, "time");
    if (!std::isnan(st_.time) && t < st_.time) {
      std::ostringstream os;
      os.precision(17);
      os << "LinearState::" << what << ": time " << t << " is before the state's time "
         << st_.time << " (keys and queries must come in non-decreasing time)";
      detail::fail(os.str());
    }
  }
  // RetNet's recurrent normalisation of a read at γ^(t − time) = g: 1/sqrt(g z).
  double norm_factor(Index s, double g) const {
    if (st_.norm != LinearNorm::retnet) return 1.0;
    const double z = g * st_.z[std::size_t(s)];
    return z > 0 ? 1.0 / std::sqrt(z) : 0.0;
  }
  template <class To>
  void write(TensorView<To>& out, Index h, const C* o, double f) const {
    const Index es = out.strides().elem;
    To* dst = out.vector(0, h);
    for (Index e = 0; e < st_.dv; ++e)
      dst[e * es] = detail::from_arith<To>(f == 1.0 ? o[e] : C(double(o[e]) * f));
  }
  // The table of A(Δ) for advancing, kept while Δ repeats (regular steps).
  const C* step_coef(double dt) {
    if (!(dt == last_dt_)) {
      step_.resize(q0_.size());
      ops_.coefficients(&dt, 1, step_.data(), false, rel_);
      last_dt_ = dt;
    }
    scratch_.resize(std::size_t(ops_.scratch_size()));
    return step_.data();
  }
  template <class Tk, class Tv, class Tq, class To>
  void add(const TensorView<Tk>& k, const TensorView<Tv>& v, double s, const TensorView<Tq>* q,
           TensorView<To>* out) {
    check_time(s, q ? "step" : "update");
    const Index d = st_.d, dv = st_.dv, R = st_.readers();
    const double dt = st_.empty ? 0.0 : s - st_.time;
    const C* coef = dt != 0 ? step_coef(dt) : nullptr;
    scratch_.resize(std::size_t(ops_.scratch_size()));
    kh_.resize(std::size_t(d));
    vc_.resize(std::size_t(dv));
    qh_.resize(std::size_t(R * d));
    o_.resize(std::size_t(R * dv));
    Index loaded = -1;
    for (Index sg = 0; sg < st_.heads; ++sg) {
      const Index kh = st_.key_of(sg);
      if (kh != loaded) {
        ops_.load_rows(k, 0, 1, kh, k0_.data(), true, false, nullptr, kh_.data(), scratch_.data());
        const Index es = v.strides().elem;
        for (Index e = 0; e < dv; ++e) vc_[std::size_t(e)] = detail::to_arith<C>(v.vector(0, kh)[e * es]);
        loaded = kh;
      }
      const double g = std::exp(st_.lam[std::size_t(sg)] * dt);
      const Index h0 = st_.first_reader(sg);
      if (q)
        for (Index x = 0; x < R; ++x)
          ops_.load_rows(*q, 0, 1, h0 + x, q0_.data(), true, true, &st_.scale, qh_.data() + x * d,
                         scratch_.data());
      ops_.step(st_.w(sg), dv, coef, C(g), vc_.data(), kh_.data(), qh_.data(), q ? R : 0, o_.data(),
                scratch_.data());
      st_.z[std::size_t(sg)] = g * st_.z[std::size_t(sg)] + 1.0;
      if (q)
        for (Index x = 0; x < R; ++x) write(*out, h0 + x, o_.data() + x * dv, norm_factor(sg, 1.0));
    }
    st_.time = s;
    st_.empty = false;
  }

  std::shared_ptr<const E> enc_;  // shared: a coder may point into the encoding
  detail::linear::StateOps<C, E> ops_;
  detail::linear::StateData<C> st_;
  detail::linear::Buffer<C> k0_, q0_, step_, scratch_, kh_, vc_, qh_, o_, kabs_, qabs_;
  std::vector<double> rel_;
  double last_dt_ = std::numeric_limits<double>::quiet_NaN();
  bool abs_ = false;        // W holds N (the absolute frame, see the top of the file)
  bool unit0_ = true;       // F(0) = I in the coder's coordinates (read_frame)
  std::vector<double> t0_;  // per state head: T0 of N

  // Relative -> absolute frame: N = A(−T) M(T), T0 = T.
  void to_absolute() {
    const double minus_t = -st_.time;
    step_.resize(q0_.size());
    ops_.coefficients(&minus_t, 1, step_.data(), false, rel_);
    last_dt_ = std::numeric_limits<double>::quiet_NaN();
    scratch_.resize(std::size_t(ops_.scratch_size()));
    for (Index s = 0; s < st_.heads; ++s) ops_.advance(st_.w(s), st_.dv, step_.data(), C(1), scratch_.data());
    t0_.assign(std::size_t(st_.heads), st_.time);
    abs_ = true;
  }
  // F(0) as a read loads the unit queries (column i: e_i loaded) into L (d x d, row-major; null:
  // not wanted); returns whether it is the identity.
  bool read_frame(C* L) const {
    const Index d = st_.d;
    detail::linear::Buffer<C> e(std::size_t(d), C(0)), scratch(std::size_t(ops_.scratch_size()));
    detail::linear::Buffer<C> qh(static_cast<std::size_t>(d));
    bool unit = true;
    for (Index i = 0; i < d; ++i) {
      e[std::size_t(i)] = 1;
      ops_.load_rows(TensorView<const C>(e.data(), 1, 1, d), 0, 1, 0, q0_.data(), true, true,
                     nullptr, qh.data(), scratch.data());
      e[std::size_t(i)] = 0;
      for (Index r = 0; r < d; ++r) {
        if (L) L[r * d + i] = qh[std::size_t(r)];
        unit = unit && qh[std::size_t(r)] == C(r == i ? 1 : 0);
      }
    }
    return unit;
  }
  // Head s's rows W (dv of them) from the absolute frame N to the relative one, γ^(T − T0) A(T) N,
  // coef the table of A(T) (keys' orientation).
  void advance_to_relative(Index s, C* W, const C* coef, C* scratch) const {
    ops_.advance(W, st_.dv, coef,
                 C(std::exp(st_.lam[std::size_t(s)] * (st_.time - t0_[std::size_t(s)]))), scratch);
  }
  // Absolute -> relative frame: M(T) = γ^(T − T0) A(T) N.
  void to_relative() {
    if (!abs_) return;
    const double t = st_.time;
    step_.resize(q0_.size());
    ops_.coefficients(&t, 1, step_.data(), false, rel_);
    last_dt_ = std::numeric_limits<double>::quiet_NaN();
    scratch_.resize(std::size_t(ops_.scratch_size()));
    for (Index s = 0; s < st_.heads; ++s) advance_to_relative(s, st_.w(s), step_.data(), scratch_.data());
    abs_ = false;
  }
  // The decode step in the absolute frame (see the top of the file).
  template <class Tk, class Tv, class Tq, class To>
  void step_absolute(const TensorView<Tk>& k, const TensorView<Tv>& v, const TensorView<Tq>& q,
                     double s, TensorView<To>& out) {
    if (!abs_) to_absolute();
    const Index d = st_.d, dv = st_.dv, R = st_.readers();
    const double dt = s - st_.time;
    kabs_.resize(q0_.size());
    qabs_.resize(q0_.size());
    const double minus_s = -s;
    ops_.coefficients(&minus_s, 1, kabs_.data(), false, rel_);  // G(s) = A(−s)
    ops_.coefficients(&s, 1, qabs_.data(), true, rel_);         // F(s) = A(s)^T
    scratch_.resize(std::size_t(ops_.scratch_size()));
    kh_.resize(std::size_t(d));
    vc_.resize(std::size_t(dv));
    qh_.resize(std::size_t(R * d));
    o_.resize(std::size_t(R * dv));
    using RowMat = Eigen::Matrix<C, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
    using Vec = Eigen::Matrix<C, Eigen::Dynamic, 1>;
    Index loaded = -1;
    for (Index sg = 0; sg < st_.heads; ++sg) {
      const Index kh = st_.key_of(sg), h0 = st_.first_reader(sg);
      const double lam = st_.lam[std::size_t(sg)];
      double& t0 = t0_[std::size_t(sg)];
      if (lam * (t0 - s) > 22.0) {  // γ^(T0 − s) > 2^32: rescale N to T0 = s
        Eigen::Map<RowMat>(st_.w(sg), dv, d) *= C(std::exp(lam * (s - t0)));
        t0 = s;
      }
      if (kh != loaded) {
        ops_.load_rows(k, 0, 1, kh, kabs_.data(), true, false, nullptr, kh_.data(), scratch_.data());
        const Index es = v.strides().elem;
        for (Index e = 0; e < dv; ++e) vc_[std::size_t(e)] = detail::to_arith<C>(v.vector(0, kh)[e * es]);
        loaded = kh;
      }
      Eigen::Map<RowMat> W(st_.w(sg), dv, d);
      const Eigen::Map<const Vec> kv(kh_.data(), d), vv(vc_.data(), dv);
      W.noalias() += (C(std::exp(lam * (t0 - s))) * vv) * kv.transpose();
      const double g = std::exp(lam * dt);
      st_.z[std::size_t(sg)] = g * st_.z[std::size_t(sg)] + 1.0;
      const double f = st_.scale * std::exp(lam * (s - t0));
      for (Index x = 0; x < R; ++x) {
        ops_.load_rows(q, 0, 1, h0 + x, qabs_.data(), true, true, &f, qh_.data(), scratch_.data());
        Eigen::Map<Vec>(o_.data(), dv).noalias() = W * Eigen::Map<const Vec>(qh_.data(), d);
        write(out, h0 + x, o_.data(), norm_factor(sg, 1.0));
      }
    }
    st_.time = s;
  }
};

}  // namespace peal
