// The O(n) backward of peal::linear_attention (linear_attention_backward.hpp; docs/gradients.md
// §4, "Linear attention backward"): the chunkwise form's own backward, as flash-linear-attention
// runs it (the states recomputed, never kept by the forward; the adjoint state carried back).
//
// Keys in chunks of C (chunk c: keys [j0, j1), anchor T_c = s_{j0}); chunk c's queries are those
// with T_c <= t_i < T_{c+1} (the forward's, detail/tiled/linear_run.hpp), per query head h
// (λ_h = ln γ_h, 0 without decays):
//   M_0 = 0,  M_{c+1} = γ^{Δ_c} X_c M_c + Σ_{j in c} g_j k̂_j v_jᵀ,     Δ_c = T_{c+1} − T_c,
//   out_i = f_i q̂_iᵀ M_c + (the pairs within chunk c),
// with q̂_i = F(t_i − a_c) q_i, k̂_j = G(s_j − b_c) k_j, f_i = scale e^{λ(t_i − T_c)},
// g_j = e^{λ(T_{c+1} − s_j)} and X_c = A_X(Δ_c) (A, or a basis change's inner A_J: the cross
// factor of detail/tiled/backward_run.hpp). The encoding's anchors are a_c = T_c, b_c = T_{c+1}
// (every lag ≥ 0: with decays every factor ≤ 1, as in the forward), or 0 and 0 for pure
// rotations (X_c = I, the exact angle reduction at absolute time, as the scores backward).
// Backward, with D_c = ∂L/∂M_c carried from the last chunk to the first:
//   D_c = Σ_{i in c} f_i q̂_i dO_iᵀ + γ^{Δ_c} X_cᵀ D_{c+1},
//   dq̂_i = f_i M_c dO_i,   dk̂_j = g_j D_{c+1} v_j,   dv_j = g_j D_{c+1}ᵀ k̂_j (+ the pairs'),
//   ∂L/∂θ += γ^{Δ_c} Σ_e D_{c+1}[:, e]ᵀ ∂A_X(Δ_c)/∂θ M_c[:, e]     (the anchor transport),
//   ∂L/∂λ += Σ (t_i − T_c) ρ_i + Σ (T_{c+1} − s_j) r_j + Δ_c γ^{Δ_c} ⟨D_{c+1}, X_c M_c⟩,
//   ∂L/∂t_i += λ ρ_i,  ∂L/∂s_j −= λ r_j   (ρ_i = dq̂_i · q̂_i, r_j = dv_j · v_j),
// then the encode backward (encode_backward.hpp) of q̂ at t_i − a_c and k̂ at s_j − b_c gives
// dq, dk and their shares of ∂L/∂θ, ∂L/∂t, ∂L/∂s. The anchors are constants: L does not depend
// on them (they cancel in every product). The pairs within a chunk are the quadratic
// backward's on a C x C block: S by scores(), dS = dO vᵀ, scores_backward.
//
// Memory per key head (one at a time per thread): the states at every B-th chunk boundary,
// B = ceil(sqrt(chunks)), and one segment of B states recomputed from its checkpoint (the
// reverse recurrence M_c = γ^{−Δ} X⁻¹ (M_{c+1} − ...) would amplify rounding with decays):
// 2 sqrt(n / C) states of d x dv doubles per state head (one per query head with decays, one
// per key head without), plus one chunk's rows. Time O(n C d + n d dv) per head (plus the
// dense d x d transport, O(n d² dv / C), for encodings that are not pure rotations). Threads
// over the key heads, each with its own sums, added in head order: any thread count gives the
// bits of one thread.
#pragma once

#include <algorithm>
#include <cmath>
#include <type_traits>
#include <vector>

#include <Eigen/Core>

#include "../../derivatives.hpp"
#include "../../encode.hpp"
#include "../../encode_backward.hpp"
#include "../../linear_options.hpp"
#include "../../linear_state.hpp"
#include "../../positions.hpp"
#include "../../score_options.hpp"
#include "../../scores.hpp"
#include "../../scores_backward.hpp"
#include "../../view.hpp"
#include "../coders/coders.hpp"
#include "../storage.hpp"
#include "backward_run.hpp"
#include "linear_retnet_backward.hpp"
#include "linear_run.hpp"

#ifdef _OPENMP
#include <omp.h>
#endif

namespace peal {
namespace detail {
namespace linear_backward {

using RowMatrix = Eigen::Matrix<double, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
using Rows = Eigen::Map<RowMatrix, 0, Eigen::OuterStride<>>;
using State = Eigen::MatrixXd;  // a state M or its adjoint D: d x dv

// Head h of a view as rows [tokens, dim] of `to` (ld `ld`), in double.
template <class T>
void gather(const TensorView<T>& x, Index i0, Index n, Index h, double* to, Index ld) {
  for (Index i = 0; i < n; ++i)
    for (Index e = 0; e < x.dim(); ++e) to[i * ld + e] = to_arith<double>(x(i0 + i, h, e));
}

template <class T>
void write(const TensorView<T>& x, const double* from) {  // from: [tokens, heads, dim], dense
  for (Index i = 0; i < x.tokens(); ++i)
    for (Index h = 0; h < x.heads(); ++h)
      for (Index e = 0; e < x.dim(); ++e)
        x(i, h, e) = from_arith<std::remove_cv_t<T>>(from[(i * x.heads() + h) * x.dim() + e]);
}

inline Rows rows(double* p, Index n, Index cols, Index ld) {
  return Rows(p, n, cols, Eigen::OuterStride<>(ld));
}
inline Rows rows(linear::Buffer<double>& v, Index n, Index cols, Index ld, Index off = 0) {
  return rows(v.data() + off, n, cols, ld);
}

// ---- The state algebra, independent of the encoding and the storage: templates on the state
// type St (always State), so compiled once per TU that runs a backward, whatever the
// instantiations of ChunkBackward, and not at all in a TU that does not (as inline functions
// every includer of peal.hpp instantiated their Eigen products: 1.7 s of clang's 3.7 s for
// peal.hpp alone, docs/build-cost.md §4). Rows are row-major [n, cols] with a leading
// dimension; g, f: per-row factors (nullptr: all 1).

// The state algebra's row views, dependent on the state type St (so that the functions below
// are analysed only where instantiated).
template <class St>
using RowMatrixOf =
    Eigen::Matrix<typename St::Scalar, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
template <class St>
using RowsOf = Eigen::Map<RowMatrixOf<St>, 0, Eigen::OuterStride<>>;
template <class St>
RowsOf<St> rows_of(typename St::Scalar* p, Index n, Index cols, Index ld) {
  return RowsOf<St>(p, n, cols, Eigen::OuterStride<>(ld));
}

// M <- γ X M + (diag(g) K)ᵀ V (X nullptr: the identity), K [n, d], V [n, dv].
template <class St>
void state_step(St& M, const St* X, double gamma, const double* g, double* khat, double* vrows,
                Index n, Index d, Index dv, RowMatrixOf<St>& tmp, St& XM) {
  if (X) {
    XM.noalias() = *X * M;
    M.swap(XM);
  }
  if (gamma != 1) M *= gamma;
  const RowsOf<St> K = rows_of<St>(khat, n, d, d), V = rows_of<St>(vrows, n, dv, dv);
  if (g) {
    tmp = K;
    for (Index j = 0; j < n; ++j) tmp.row(j) *= g[j];
    M.noalias() += tmp.transpose() * V;
  } else {
    M.noalias() += K.transpose() * V;
  }
}

// The keys' adjoint from D = ∂L/∂M (the state their chunk feeds): dv += diag(g) K D,
// dk̂ += diag(g) V Dᵀ, and r_j = g_j (K D)_j · v_j when r is given.
template <class St>
void keys_adjoint(const St& D, const double* g, double* khat, double* vrows, Index n, Index d,
                  Index dv, double* dvc, double* dkhat, double* r, RowMatrixOf<St>& tmp,
                  RowMatrixOf<St>& tmp2) {
  const RowsOf<St> K = rows_of<St>(khat, n, d, d), V = rows_of<St>(vrows, n, dv, dv);
  const Eigen::Map<const Eigen::Matrix<typename St::Scalar, Eigen::Dynamic, 1>> gv(g, n);
  tmp.noalias() = K * D;  // n x dv
  rows_of<St>(dvc, n, dv, dv).noalias() += gv.asDiagonal() * tmp;
  tmp2.noalias() = V * D.transpose();  // n x d
  rows_of<St>(dkhat, n, d, d).noalias() += gv.asDiagonal() * tmp2;
  if (r)
    for (Index j = 0; j < n; ++j) r[j] = g[j] * tmp.row(j).dot(V.row(j));
}

// The queries' adjoint from their state M: dQ̂ += diag(f) dO Mᵀ, Rc += Q̂ᵀ diag(f) dO, and
// ρ_i = dQ̂_i · Q̂_i when rho is given (dQ̂ held nothing before).
template <class St>
void queries_adjoint(const St& M, const double* f, double* dorows, Index lddo, double* qhat,
                     double* dqhat, Index ldq, Index m, Index d, Index dv, St& Rc, double* rho,
                     RowMatrixOf<St>& tmp) {
  const Eigen::Map<const Eigen::Matrix<typename St::Scalar, Eigen::Dynamic, 1>> fv(f, m);
  tmp.noalias() = fv.asDiagonal() * rows_of<St>(dorows, m, dv, lddo);
  RowsOf<St> dQ = rows_of<St>(dqhat, m, d, ldq);
  const RowsOf<St> Q = rows_of<St>(qhat, m, d, ldq);
  dQ.noalias() += tmp * M.transpose();
  Rc.noalias() += Q.transpose() * tmp;
  if (rho)
    for (Index i = 0; i < m; ++i) rho[i] = dQ.row(i).dot(Q.row(i));
}

// D <- γ Xᵀ D (+ Rc); with dot given, *dot = ⟨D, X M⟩ of the D given (the transport's decay
// share).
template <class St>
void transport_back(St& D, const St& M, const St* X, double gamma, const St* Rc, double* dot,
                    St& XM) {
  if (dot) {
    if (X) XM.noalias() = *X * M;
    *dot = D.cwiseProduct(X ? XM : M).sum();
  }
  if (X) {
    XM.noalias() = X->transpose() * D;
    D.swap(XM);
  }
  if (gamma != 1) D *= gamma;
  if (Rc) D += *Rc;
}

// The pairs' products of one head: dS = dO Vᵀ [m, n]; with S given, its masked entries
// (s_j > t_i, −∞ from scores()) set to 0 and dv += Sᵀ dO.
template <class St = State>
void pair_products(double* dorows, Index lddo, double* vrows, Index m, Index n, Index dv,
                   const double* t, const double* s, double* dS, double* S, double* dvc) {
  const RowsOf<St> dO = rows_of<St>(dorows, m, dv, lddo);
  rows_of<St>(dS, m, n, n).noalias() = dO * rows_of<St>(vrows, n, dv, dv).transpose();
  if (!S) return;
  RowsOf<St> Sg = rows_of<St>(S, m, n, n);
  for (Index i = 0, j = 0; i < m; ++i) {
    while (j < n && !(s[j] > t[i])) ++j;
    Sg.row(i).tail(n - j).setZero();
  }
  rows_of<St>(dvc, n, dv, dv).noalias() += Sg.transpose() * dO;
}

// PerHead encodings (one per query head) have no forward chunkwise form (linear_attention
// takes one encoding): they keep the quadratic backward.
template <class E>
struct per_head_encoding : std::false_type {};
template <class E>
struct per_head_encoding<PerHead<E>> : std::true_type {};

/// The chunkwise O(n) backward runs for form = chunkwise or recurrent, and for automatic when
/// the forward's automatic choice is chunkwise (more than LinearRun::kParallelKeys = 256 keys);
/// the quadratic one otherwise (and for no keys or no queries).
inline bool chunked(const LinearAttentionOptions& opt, Index nq, Index nk) {
  if (nq == 0 || nk == 0) return false;
  if (opt.form == LinearForm::chunkwise || opt.form == LinearForm::recurrent) return true;
  return opt.form == LinearForm::automatic && nk > 256;
}

template <class E, class Tq, class Tk, class Tv, class Tdo, class R>
class ChunkBackward {
 public:
  ChunkBackward(const E& enc, const TensorView<Tq>& q, const Positions& tq,
                const TensorView<Tk>& k, const Positions& tk, const TensorView<Tv>& v,
                const TensorView<Tdo>& dout, const LinearAttentionOptions& opt,
                std::vector<R>* parameters, std::vector<R>* query_positions,
                std::vector<R>* key_positions, std::vector<double>* decay,
                RetNetRows* retnet = nullptr)
      : enc_(enc), q_(q), k_(k), v_(v), dout_(dout), params_(parameters),
        qpos_(query_positions), kpos_(key_positions), decay_(decay), rn_(retnet),
        nq_(q.tokens()), nk_(k.tokens()), Hq_(q.heads()), Hk_(k.heads()), G_(Hq_ / Hk_),
        d_(q.dim()), dv_(v.dim()), opt_(opt) {
    t_.resize(std::size_t(nq_));
    s_.resize(std::size_t(nk_));
    for (Index i = 0; i < nq_; ++i) t_[std::size_t(i)] = tq[i];
    for (Index j = 0; j < nk_; ++j) s_[std::size_t(j)] = tk[j];
    scale_ = linear::linear_scale(opt, d_);
    for (double g : opt.decay) lam_.push_back(std::log(g));
    ns_ = opt.decay.empty() ? 1 : G_;  // (G_ may be 1 with decays: test lam_, not ns_)
    const Index given = opt.chunk > 0 ? opt.chunk : linear::kDefaultChunk;
    chunk_ = std::min(given, nk_);
    nc_ = 1 + (nk_ - 1) / chunk_;
    qb_.assign(std::size_t(nc_ + 1), nq_);  // chunk c's queries: [qb_[c], qb_[c + 1])
    qb_[0] = 0;
    for (Index c = 1; c < nc_; ++c)
      qb_[std::size_t(c)] = Index(std::lower_bound(t_.begin(), t_.end(), T(c)) - t_.begin());
    const coders::coder_t<double, E> coder(enc);
    pure_ = coder.rate() == 0 && coder.degree() == 0;
  }

  /// Writes dq, dk, dv (each may be empty) and adds the gradients given to the constructor.
  template <class Tdq, class Tdk, class Tdv>
  void run(const TensorView<Tdq>& dq, const TensorView<Tdk>& dk, const TensorView<Tdv>& dv) {
    std::vector<Part> parts(static_cast<std::size_t>(Hk_));
    int nt = 1;
#ifdef _OPENMP
    if (!omp_in_parallel()) nt = opt_.threads > 0 ? opt_.threads : omp_get_max_threads();
#endif
    nt = int(std::min<Index>(std::min(nt, linear::kMaxThreads), Hk_));
    parallel_each(Hk_, nt, [&](Index kh) {
      Work w;
      w.kh = kh;
      w.part = &parts[std::size_t(kh)];
      group(w, dq, dk, dv);
    });
    for (const Part& p : parts) join(p);  // in key head order: deterministic
  }

 private:
  // A key head's sums (added to the totals in head order).
  struct Part {
    std::vector<R> parameters, query_positions, key_positions;
    std::vector<double> decay, dlam;  // ∂L/∂γ (the pairs') and ∂L/∂λ (the states'), Hq
  };
  // A key head's working memory: one chunk's rows (keys [n, 1, d], queries [m, G, d]), 64-byte
  // aligned (linear::Buffer, linear_ops.hpp): with malloc's alignment Eigen's loops peeled a
  // heap-dependent number of leading entries to scalar code, and at -O3 dq differed by one ulp
  // between one thread and two (python/tests/test_linear_attention.py).
  struct Work {
    using Buf = linear::Buffer<double>;
    Index kh = 0;
    Part* part = nullptr;
    Buf kx, khat, vrows, dkhat, dvc, dkout, dki;
    Buf qx, qhat, dorows, dqhat, dqout, dqi;
    Buf S, dS, f, g, rho;
    std::vector<double> relk, relq, dec;  // positions and decays: read, never an Eigen loop's
    std::vector<R> pos;
    std::vector<State> checkpoints, segment, D;
    State X, Rc, XM;
    RowMatrix tmp, tmp2;
  };

  double T(Index c) const { return s_[std::size_t(c * chunk_)]; }
  double lam(Index h) const { return lam_.empty() ? 0.0 : lam_[std::size_t(h)]; }
  // λ of state x of key head kh: one state per query head with decays, one shared without.
  double state_lam(Index kh, Index x) const { return lam_.empty() ? 0.0 : lam(kh * G_ + x); }
  Index key_end(Index c) const { return std::min(nk_, (c + 1) * chunk_); }

  void join(const Part& p) {
    auto add = [](std::vector<R>* to, const std::vector<R>& from) {
      if (to)
        for (std::size_t x = 0; x < from.size(); ++x) (*to)[x] += from[x];
    };
    add(params_, p.parameters);
    add(qpos_, p.query_positions);
    add(kpos_, p.key_positions);
    if (decay_)
      for (Index h = 0; h < Hq_; ++h)
        (*decay_)[std::size_t(h)] +=
            p.decay[std::size_t(h)] + p.dlam[std::size_t(h)] / opt_.decay[std::size_t(h)];
  }

  // Chunk c's keys of key head kh: rows in double, k̂ = G(s − b_c) k, values.
  void load_keys(Work& w, Index c) const {
    const Index j0 = c * chunk_, n = key_end(c) - j0;
    w.kx.resize(std::size_t(n * d_));
    w.khat.resize(w.kx.size());
    w.vrows.resize(std::size_t(n * dv_));
    w.relk.resize(std::size_t(n));
    gather(k_, j0, n, w.kh, w.kx.data(), d_);
    gather(v_, j0, n, w.kh, w.vrows.data(), dv_);
    const double b = pure_ || c + 1 >= nc_ ? 0.0 : T(c + 1);
    for (Index j = 0; j < n; ++j) w.relk[std::size_t(j)] = s_[std::size_t(j0 + j)] - b;
    if (d_ > 0)
      encode_keys(enc_, TensorView<const double>(w.kx.data(), n, 1, d_),
                  TensorView<double>(w.khat.data(), n, 1, d_), Positions(w.relk));
  }

  // X_c = A_X(Δ_c), the transport from T_c to T_{c+1} (identity for pure rotations: unused).
  void transport(Work& w, Index c) const {
    if (pure_) return;
    using S = typename E::Scalar;
    w.X = backward_run::cross(enc_).A(S(T(c + 1) - T(c))).template cast<double>();
  }

  // M_c -> M_{c+1} for each state head (ms: ns_ states).
  void step(Work& w, Index c, State* ms) const {
    load_keys(w, c);
    transport(w, c);
    const Index j0 = c * chunk_, n = key_end(c) - j0;
    const double T1 = T(c + 1), delta = T1 - T(c);
    w.g.resize(std::size_t(n));
    for (Index x = 0; x < ns_; ++x) {
      const double l = state_lam(w.kh, x);
      for (Index j = 0; l != 0 && j < n; ++j)
        w.g[std::size_t(j)] = std::exp(l * (T1 - s_[std::size_t(j0 + j)]));
      state_step(ms[x], pure_ ? nullptr : &w.X, l == 0 ? 1.0 : std::exp(l * delta),
                 l == 0 ? nullptr : w.g.data(), w.khat.data(), w.vrows.data(), n, d_, dv_, w.tmp,
                 w.XM);
    }
  }

  // The keys' part of chunk c (their keys enter M_{c+1}, whose adjoint is D): dk̂, dv, and
  // the decay's and key positions' shares.
  void keys_part(Work& w, Index c, const State& D, Index x) const {
    const Index j0 = c * chunk_, n = key_end(c) - j0, h = w.kh * G_ + x;
    const double l = state_lam(w.kh, x), T1 = T(c + 1);
    w.g.resize(std::size_t(n));
    w.rho.resize(std::size_t(n));
    for (Index j = 0; j < n; ++j)
      w.g[std::size_t(j)] = l == 0 ? 1.0 : std::exp(l * (T1 - s_[std::size_t(j0 + j)]));
    keys_adjoint(D, w.g.data(), w.khat.data(), w.vrows.data(), n, d_, dv_, w.dvc.data(),
                 w.dkhat.data(), l == 0 ? nullptr : w.rho.data(), w.tmp, w.tmp2);
    if (l == 0) return;
    for (Index j = 0; j < n; ++j) {
      const double r = w.rho[std::size_t(j)];
      w.part->dlam[std::size_t(h)] += (T1 - s_[std::size_t(j0 + j)]) * r;
      if (kpos_) w.part->key_positions[std::size_t(j0 + j)] -= R(l * r);
    }
  }

  // The queries' part of chunk c for the heads reading state x (M = M_c): dq̂, the decay's and
  // query positions' shares, and their sum Rc = Σ_i f_i q̂_i dO_iᵀ into the adjoint.
  void queries_part(Work& w, Index c, const State& M, Index x) const {
    const Index i0 = qb_[std::size_t(c)], m = qb_[std::size_t(c + 1)] - i0;
    const Index g0 = ns_ == G_ ? x : 0, g1 = ns_ == G_ ? x + 1 : G_;
    w.Rc.setZero(d_, dv_);
    w.f.resize(std::size_t(m));
    for (Index gi = g0; gi < g1; ++gi) {
      const Index h = w.kh * G_ + gi;
      const double l = lam(h);
      for (Index i = 0; i < m; ++i)
        w.f[std::size_t(i)] = l == 0 ? scale_ : scale_ * std::exp(l * (t_[std::size_t(i0 + i)] - T(c)));
      w.rho.resize(std::size_t(m));
      queries_adjoint(M, w.f.data(), w.dorows.data() + gi * dv_, G_ * dv_, w.qhat.data() + gi * d_,
                      w.dqhat.data() + gi * d_, G_ * d_, m, d_, dv_, w.Rc,
                      l == 0 && !rn_ ? nullptr : w.rho.data(), w.tmp);
      if (rn_)  // ρ_i = dO′_i · (the state's part of u_i): RetNet's a_i
        for (Index i = 0; i < m; ++i)
          rn_->row_dot[std::size_t((i0 + i) * Hq_ + h)] += w.rho[std::size_t(i)];
      if (l == 0) continue;
      for (Index i = 0; i < m; ++i) {
        const double rho = w.rho[std::size_t(i)];
        w.part->dlam[std::size_t(h)] += (t_[std::size_t(i0 + i)] - T(c)) * rho;
        if (qpos_) w.part->query_positions[std::size_t(i0 + i)] += R(l * rho);
      }
    }
  }

  // D_{c+1} -> D_c for state x: the transport's parameter and decay shares, then
  // D_c = Rc + γ^Δ X_cᵀ D_{c+1} (Rc: 0 when chunk c has no queries).
  void carry_back(Work& w, Index c, const State& M, State& D, Index x, bool reads) const {
    const Index h = w.kh * G_ + x;
    const double l = state_lam(w.kh, x), delta = T(c + 1) - T(c);
    const double gd = l == 0 ? 1.0 : std::exp(l * delta);
    if (!pure_ && params_) {
      using M2 = Eigen::Matrix<R, Eigen::Dynamic, Eigen::Dynamic>;
      const M2 U = (gd * D).template cast<R>(), Vm = M.template cast<R>();
      using X2 = std::decay_t<decltype(backward_run::cross(enc_))>;
      encoding_derivatives<X2>::bilinear(backward_run::cross(enc_), R(delta), U, Vm,
                                         w.part->parameters.data(), 1);
    }
    double dot = 0;
    transport_back(D, M, pure_ ? nullptr : &w.X, gd, reads ? &w.Rc : nullptr,
                   l == 0 ? nullptr : &dot, w.XM);
    if (l != 0) w.part->dlam[std::size_t(h)] += delta * gd * dot;
  }

  // Chunk c, from its state M_c (ms) and the adjoint D_{c+1} (ds, left as D_c).
  template <class Tdq, class Tdk, class Tdv>
  void reverse(Work& w, Index c, State* ms, State* ds, const TensorView<Tdq>& dq,
               const TensorView<Tdk>& dk, const TensorView<Tdv>& dv) const {
    const Index j0 = c * chunk_, n = key_end(c) - j0, h0 = w.kh * G_;
    const Index i0 = qb_[std::size_t(c)], m = qb_[std::size_t(c + 1)] - i0;
    const bool feeds = c + 1 < nc_, reads = c > 0 && m > 0;
    w.dkhat.assign(std::size_t(n * d_), 0.0);
    w.dvc.assign(std::size_t(n * dv_), 0.0);
    w.dorows.resize(std::size_t(m * G_ * dv_));
    if (m > 0)  // (no rows: no pointer arithmetic on the empty buffer's null data either)
      for (Index gi = 0; gi < G_; ++gi)
        gather(dout_, i0, m, h0 + gi, w.dorows.data() + gi * dv_, G_ * dv_);
    if (rn_ && m > 0) normalise(w, c, ms);
    if (feeds) {
      load_keys(w, c);
      transport(w, c);
    } else {  // the last chunk: its keys feed no state, its values meet its queries
      w.vrows.resize(std::size_t(n * dv_));
      gather(v_, j0, n, w.kh, w.vrows.data(), dv_);
    }
    if (reads) {
      w.qx.resize(std::size_t(m * G_ * d_));
      w.qhat.resize(w.qx.size());
      w.dqhat.assign(w.qx.size(), 0.0);
      w.relq.resize(std::size_t(m));
      for (Index gi = 0; gi < G_; ++gi) gather(q_, i0, m, h0 + gi, w.qx.data() + gi * d_, G_ * d_);
      for (Index i = 0; i < m; ++i)
        w.relq[std::size_t(i)] = t_[std::size_t(i0 + i)] - (pure_ ? 0.0 : T(c));
      if (d_ > 0)
        encode_queries(enc_, TensorView<const double>(w.qx.data(), m, G_, d_),
                       TensorView<double>(w.qhat.data(), m, G_, d_), Positions(w.relq));
    }
    for (Index x = 0; x < ns_; ++x) {
      if (feeds) keys_part(w, c, ds[x], x);
      if (reads) queries_part(w, c, ms[x], x);
      if (c == 0) continue;  // M_0 = 0: no transport, D_0 unused
      if (feeds)
        carry_back(w, c, ms[x], ds[x], x, reads);
      else
        ds[x] = reads ? w.Rc : State::Zero(d_, dv_);
    }
    encode_back(w, c, feeds, reads);
    pairs(w, c, !dv.empty());
    // The chunk's rows: the pairs' plus the states'.
    if (!dq.empty() && m > 0) {
      if (reads)
        for (std::size_t e = 0; e < w.dqi.size(); ++e) w.dqi[e] += w.dqout[e];
      write(linear::sub(dq, i0, m, h0, G_), w.dqi.data());
    }
    if (!dk.empty()) {
      if (m == 0) w.dki.assign(std::size_t(n * d_), 0.0);
      if (feeds)
        for (std::size_t e = 0; e < w.dki.size(); ++e) w.dki[e] += w.dkout[e];
      write(linear::sub(dk, j0, n, w.kh, 1), w.dki.data());
    }
    if (!dv.empty()) write(linear::sub(dv, j0, n, w.kh, 1), w.dvc.data());
  }

  // dk̂ and dq̂ of chunk c through the encode backward at the relative positions.
  void encode_back(Work& w, Index c, bool feeds, bool reads) const {
    const Index j0 = c * chunk_, n = key_end(c) - j0;
    const Index i0 = qb_[std::size_t(c)], m = qb_[std::size_t(c + 1)] - i0;
    if (d_ == 0) return;
    Part& p = *w.part;
    std::vector<R>* params = params_ ? &p.parameters : nullptr;
    if (feeds) {
      w.dkout.resize(std::size_t(n * d_));
      w.pos.assign(kpos_ ? std::size_t(n) : 0, R(0));
      encode_keys_backward(enc_, TensorView<const double>(w.kx.data(), n, 1, d_),
                           Positions(w.relk), TensorView<const double>(w.dkhat.data(), n, 1, d_),
                           TensorView<double>(w.dkout.data(), n, 1, d_),
                           {params, kpos_ ? &w.pos : nullptr});
      for (Index j = 0; j < Index(w.pos.size()); ++j)
        p.key_positions[std::size_t(j0 + j)] += w.pos[std::size_t(j)];
    }
    if (reads) {
      w.dqout.resize(std::size_t(m * G_ * d_));
      w.pos.assign(qpos_ ? std::size_t(m) : 0, R(0));
      encode_queries_backward(enc_, TensorView<const double>(w.qx.data(), m, G_, d_),
                              Positions(w.relq),
                              TensorView<const double>(w.dqhat.data(), m, G_, d_),
                              TensorView<double>(w.dqout.data(), m, G_, d_),
                              {params, qpos_ ? &w.pos : nullptr});
      for (Index i = 0; i < Index(w.pos.size()); ++i)
        p.query_positions[std::size_t(i0 + i)] += w.pos[std::size_t(i)];
    }
  }

  // The scores of the pairs within chunk c (its queries against its keys, causal) of the heads of
  // key head kh: the forward's (scale, decays), one thread.
  ScoreOptions pair_options(Index kh) const {
    ScoreOptions so;
    so.causal = true;
    so.scale = scale_;
    so.threads = 1;
    if (!opt_.decay.empty())
      so.decay.assign(opt_.decay.begin() + kh * G_, opt_.decay.begin() + (kh + 1) * G_);
    return so;
  }
  // S [G, m, n] of chunk c's pairs by scores(); `zero_masked`: its masked entries (−∞) set to 0
  // (RetNet's row sums read whole rows; pair_products finds each row's visible keys itself).
  void pair_scores(Work& w, Index c, bool zero_masked) const {
    const Index j0 = c * chunk_, n = key_end(c) - j0, h0 = w.kh * G_;
    const Index i0 = qb_[std::size_t(c)], m = qb_[std::size_t(c + 1)] - i0;
    w.S.resize(std::size_t(G_ * m * n));
    peal::scores(enc_, linear::sub(q_, i0, m, h0, G_), Positions(t_.data() + i0, m),
                 linear::sub(k_, j0, n, w.kh, 1), Positions(s_.data() + j0, n),
                 TensorView<double>(w.S.data(), G_, m, n), pair_options(w.kh));
    for (Index gi = 0; zero_masked && gi < G_; ++gi) {
      Rows Sg = rows(w.S.data() + gi * m * n, m, n, n);
      for (Index i = 0, j = 0; i < m; ++i) {
        while (j < n && !(s_[std::size_t(j0 + j)] > t_[std::size_t(i0 + i)])) ++j;
        Sg.row(i).tail(n - j).setZero();
      }
    }
  }

  // RetNet (linear_retnet_backward.hpp): chunk c's pair scores (kept for pairs()) give each
  // row's abs sum, its state M_c the chunk form's K_c; the rows of dO become dO′ = c dO.
  void normalise(Work& w, Index c, const State* ms) const {
    const Index j0 = c * chunk_, n = key_end(c) - j0, h0 = w.kh * G_;
    const Index i0 = qb_[std::size_t(c)], m = qb_[std::size_t(c + 1)] - i0;
    pair_scores(w, c, /*zero_masked=*/true);
    const bool floor = rn_->form == LinearForm::chunkwise && c > 0;
    for (Index gi = 0; gi < G_; ++gi) {
      const double K = floor ? state_floor(*rn_, ms[ns_ == G_ ? gi : 0], h0 + gi,
                                           T(c) - s_[std::size_t(j0 - 1)])
                             : 1.0;
      normalise_rows(*rn_, w.S.data() + gi * m * n, m, n, i0, h0 + gi, K,
                     w.dorows.data() + gi * dv_, dv_, G_ * dv_);
    }
  }

  // The pairs within chunk c (queries of c against keys of c, causal): the quadratic backward
  // on the block (S by scores(), dS = dO vᵀ, dv += Sᵀ dO, scores_backward).
  void pairs(Work& w, Index c, bool want_dv) const {
    const Index j0 = c * chunk_, n = key_end(c) - j0, h0 = w.kh * G_;
    const Index i0 = qb_[std::size_t(c)], m = qb_[std::size_t(c + 1)] - i0;
    if (m == 0) return;
    const auto qs = linear::sub(q_, i0, m, h0, G_);
    const auto ks = linear::sub(k_, j0, n, w.kh, 1);
    const Positions tq(t_.data() + i0, m), tk(s_.data() + j0, n);
    w.dS.resize(std::size_t(G_ * m * n));
    if (want_dv && !rn_) pair_scores(w, c, /*zero_masked=*/false);  // (RetNet: normalise() has them)
    for (Index gi = 0; gi < G_; ++gi) {  // (the values: loaded by reverse())
      pair_products(w.dorows.data() + gi * dv_, G_ * dv_, w.vrows.data(), m, n, dv_,
                    t_.data() + i0, s_.data() + j0, w.dS.data() + gi * m * n,
                    want_dv ? w.S.data() + gi * m * n : nullptr, w.dvc.data());
      if (rn_)
        add_row_dots(*rn_, w.S.data() + gi * m * n, w.dS.data() + gi * m * n, m, n, i0, h0 + gi);
    }
    Part& p = *w.part;
    std::vector<R> qp(qpos_ ? std::size_t(m) : 0, R(0)), kp(kpos_ ? std::size_t(n) : 0, R(0));
    w.dec.assign(decay_ ? std::size_t(G_) : 0, 0.0);
    w.dqi.resize(std::size_t(m * G_ * d_));
    w.dki.resize(std::size_t(n * d_));
    const ScoresGradients<R> sg{params_ ? &p.parameters : nullptr, qpos_ ? &qp : nullptr,
                                kpos_ ? &kp : nullptr, nullptr, decay_ ? &w.dec : nullptr};
    peal::scores_backward(enc_, qs, tq, ks, tk, TensorView<const double>(w.dS.data(), G_, m, n),
                          TensorView<double>(w.dqi.data(), m, G_, d_),
                          TensorView<double>(w.dki.data(), n, 1, d_), pair_options(w.kh), sg);
    for (std::size_t i = 0; i < qp.size(); ++i) p.query_positions[std::size_t(i0) + i] += qp[i];
    for (std::size_t j = 0; j < kp.size(); ++j) p.key_positions[std::size_t(j0) + j] += kp[j];
    for (std::size_t gi = 0; gi < w.dec.size(); ++gi) p.decay[std::size_t(h0) + gi] += w.dec[gi];
  }

  // Key head kh: the states forward (checkpoints every B chunks), then the chunks backward,
  // segment by segment, each segment's states recomputed from its checkpoint.
  template <class Tdq, class Tdk, class Tdv>
  void group(Work& w, const TensorView<Tdq>& dq, const TensorView<Tdk>& dk,
             const TensorView<Tdv>& dv) const {
    Part& p = *w.part;
    if (params_) p.parameters.assign(params_->size(), R(0));
    if (qpos_) p.query_positions.assign(std::size_t(nq_), R(0));
    if (kpos_) p.key_positions.assign(std::size_t(nk_), R(0));
    p.decay.assign(std::size_t(Hq_), 0.0);
    p.dlam.assign(std::size_t(Hq_), 0.0);
    Index B = 1;
    while (B * B < nc_) ++B;
    const Index nb = (nc_ + B - 1) / B;
    const State zero = State::Zero(d_, dv_);
    w.checkpoints.assign(std::size_t(nb * ns_), zero);
    w.segment.assign(std::size_t(B * ns_), zero);
    w.D.assign(std::size_t(ns_), zero);
    std::vector<State> M(std::size_t(ns_), zero);
    for (Index c = 0; c + 1 <= (nb - 1) * B; ++c) {  // M_0 .. M_{(nb-1) B}
      step(w, c, M.data());
      if ((c + 1) % B == 0)  // M_{c+1} starts segment (c + 1) / B
        for (Index x = 0; x < ns_; ++x)
          w.checkpoints[std::size_t((c + 1) / B * ns_ + x)] = M[std::size_t(x)];
    }
    for (Index b = nb - 1; b >= 0; --b) {
      const Index c0 = b * B, c1 = std::min(nc_, c0 + B);
      for (Index x = 0; x < ns_; ++x)
        w.segment[std::size_t(x)] = w.checkpoints[std::size_t(b * ns_ + x)];
      for (Index c = c0; c + 1 < c1; ++c) {
        for (Index x = 0; x < ns_; ++x)
          w.segment[std::size_t((c + 1 - c0) * ns_ + x)] = w.segment[std::size_t((c - c0) * ns_ + x)];
        step(w, c, &w.segment[std::size_t((c + 1 - c0) * ns_)]);
      }
      for (Index c = c1 - 1; c >= c0; --c)
        reverse(w, c, &w.segment[std::size_t((c - c0) * ns_)], w.D.data(), dq, dk, dv);
    }
  }

  const E& enc_;
  const TensorView<Tq>& q_;
  const TensorView<Tk>& k_;
  const TensorView<Tv>& v_;
  const TensorView<Tdo>& dout_;
  std::vector<R>*params_, *qpos_, *kpos_;
  std::vector<double>* decay_;
  RetNetRows* rn_;  // normalization = retnet (linear_retnet_backward.hpp), else null
  const Index nq_, nk_, Hq_, Hk_, G_, d_, dv_;
  const LinearAttentionOptions& opt_;
  std::vector<double> t_, s_, lam_;
  std::vector<Index> qb_;
  double scale_ = 1;
  Index ns_ = 1, chunk_ = 1, nc_ = 1;
  bool pure_ = false;
};

}  // namespace linear_backward
}  // namespace detail
}  // namespace peal
