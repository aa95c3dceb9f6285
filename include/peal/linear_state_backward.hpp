// Backward of the recurrent state's steps (linear_state.hpp; docs/gradients.md §4, "The state's
// step backward"), for truncated backpropagation through time: one decode step
// (LinearState::step) or one call continuing a state (linear_attention(..., state)), with the
// state before it given and the gradient of the state after it coming back.
//
// With the state before the call M_σ at time T (d x dv per state head σ, in the original
// coordinates: LinearState::matrix(σ)), keys s_j ≥ T, queries t_i ≥ T, λ_σ = ln γ_σ, and
// T' = s_last (the state's time after; T without keys):
//   out_ih  = f_i q_ihᵀ A(t_i − T) M_σ(h) + (the pairs within the call),   f_i = scale e^{λ(t_i − T)},
//   M'_σ    = e^{λΔ} A(Δ) M_σ + Σ_j g_j A(T' − s_j) k_j v_jᵀ,               Δ = T' − T, g_j = e^{λ(T' − s_j)}.
// Every term is a form uᵀ A(a − b) w = (F(a − c) u)ᵀ (G(b − c) w) (F(t)ᵀ G(s) = A(t − s), any
// anchor c), so the backward is the encode backward (encode_backward.hpp) at relative lags:
//   read       û_i = F(t_i − T) q_i,  M̂ = G(0) M:  dû_i = f_i M̂ dO_i,  dM̂ += f_i û_i dO_iᵀ;
//   transport  Û = F(Δ) D (D = ∂L/∂M'):  dÛ = e^{λΔ} M̂,  dM̂ += e^{λΔ} Û;
//   new keys   D̂ = F(0) D,  k̂_j = G(s_j − T') k_j:  dk̂_j = g_j D̂ v_j,  dv_j += g_j D̂ᵀ k̂_j,
//              dD̂ += g_j k̂_j v_jᵀ;
//   ∂L/∂λ      += Σ_i (t_i − T) ρ_i + Δ e^{λΔ} ⟨Û, M̂⟩ + Σ_j (T' − s_j) r_j
//              (ρ_i = dû_i · û_i, r_j = the new-key term of key j);
// then dq (encode_queries_backward at t_i − T), dk (encode_keys_backward at s_j − T'),
// ∂L/∂M = G(0)ᵀ dM̂ (encode_keys_backward at 0) and each factor's share of ∂L/∂θ (F(0) and G(0)
// are the identity, with no parameter derivative, except for a basis change: Pᵀ and P⁻¹, whose
// P shares these passes give). The pairs within a call of several tokens are
// linear_attention_backward's (linear_attention_backward.hpp); a step's single pair has lag 0
// (A(0) = I: no parameter or decay share) and is formed directly.
// An empty state (no key yet) holds no sums: the forward does not read it, and its gradient is
// 0. Arithmetic: double for the states, their adjoints and the sums (the state's own rows, M̂ in
// the coder's coordinates: LinearState::relative_rows, without a copy of the state). Threads: over the key heads, each with its own sums,
// added in head order: any thread count gives the bits of one thread.
// Not differentiated: normalization = retnet (refused: the state's running sum of decays would
// need an adjoint; linear_attention_backward differentiates it for a call without a state) and
// the positions (the state's time would need an adjoint of its own).
#pragma once

#include <algorithm>
#include <cmath>
#include <memory>
#include <sstream>
#include <string>
#include <type_traits>
#include <vector>

#include <Eigen/Core>

#include "detail/overlap.hpp"
#include "detail/parallel.hpp"
#include "detail/storage.hpp"
#include "encode.hpp"
#include "encode_backward.hpp"
#include "errors.hpp"
#include "linear_attention.hpp"
#include "linear_attention_backward.hpp"
#include "linear_options.hpp"
#include "linear_state.hpp"
#include "parameters.hpp"
#include "positions.hpp"
#include "view.hpp"

#ifdef _OPENMP
#include <omp.h>
#endif

namespace peal {

/// Where the gradients of the state's backward go (each may be null: not wanted). ADDED to.
template <class R>
struct LinearStateGradients {
  std::vector<R>* parameters = nullptr;  ///< parameter_count(enc) entries
  std::vector<double>* decay = nullptr;  ///< Hq entries (the state has decays)
};

namespace detail {
namespace linear_state_backward {

namespace br = backward_run;
using RowMatrix = Eigen::Matrix<double, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
using RowMap = Eigen::Map<RowMatrix>;

// A [heads, d, dv] state gradient view: the state's extents, or empty (d_state: 0; d_state_in:
// not wanted).
template <class T, class C, class E>
void check_state_view(const std::string& w, const TensorView<T>& x, const LinearState<E, C>& st,
                      const char* name) {
  if (x.empty()) return;
  if (x.tokens() != st.heads() || x.heads() != st.dim() || x.dim() != st.value_dim())
    fail(w + ": " + name + " is " + tiled::extents(x.tokens(), x.heads(), x.dim()) +
         ", expected the state's [heads, d, dv] = " +
         tiled::extents(st.heads(), st.dim(), st.value_dim()) + " (or an empty view)");
}

template <class E, class C, class Tq, class Tk, class Tv, class Tdo, class Tds, class Tdq,
          class Tdk, class Tdv, class Tdsi, class R>
void check(const std::string& w, const LinearState<E, C>& state, const TensorView<Tq>& q,
           const Positions& tq, const TensorView<Tk>& k, const Positions& tk,
           const TensorView<Tv>& v, const TensorView<Tdo>& dout, const TensorView<Tds>& ds,
           const TensorView<Tdq>& dq, const TensorView<Tdk>& dk, const TensorView<Tdv>& dv,
           const TensorView<Tdsi>& dsi, const LinearStateGradients<R>& g) {
  const auto& st = state.facts();
  const Index nq = q.tokens(), nk = k.tokens();
  if (q.heads() != st.Hq || q.dim() != st.d)
    fail(w + ": q is " + tiled::extents(nq, q.heads(), q.dim()) + ", the state reads [nq, " +
         std::to_string(st.Hq) + ", " + std::to_string(st.d) + "]");
  if (k.heads() != st.Hk || k.dim() != st.d)
    fail(w + ": k is " + tiled::extents(nk, k.heads(), k.dim()) + ", the state takes [nk, " +
         std::to_string(st.Hk) + ", " + std::to_string(st.d) + "]");
  if (v.tokens() != nk || v.heads() != st.Hk || v.dim() != st.dv)
    fail(w + ": v is " + tiled::extents(v.tokens(), v.heads(), v.dim()) + ", expected " +
         tiled::extents(nk, st.Hk, st.dv));
  if (dout.tokens() != nq || dout.heads() != st.Hq || dout.dim() != st.dv)
    fail(w + ": d_out is " + tiled::extents(dout.tokens(), dout.heads(), dout.dim()) +
         ", expected [nq, Hq, dv] = " + tiled::extents(nq, st.Hq, st.dv));
  if (st.norm != LinearNorm::none)
    fail(w + ": normalization = retnet is not differentiated (its recurrent normalisation reads "
             "the state's running sum of decays); give normalization = none");
  tq.check(nq, (w + " (query positions)").c_str());
  tk.check(nk, (w + " (key positions)").c_str());
  linear::require_sorted(tq, nq, w + ": query positions");
  linear::require_sorted(tk, nk, w + ": key positions");
  tiled::check_position_span(tq, nq, tk, nk, w);
  if (!std::isnan(st.time) && ((nk > 0 && !(tk[0] >= st.time)) || (nq > 0 && !(tq[0] >= st.time)) ||
                               (nk > 0 && !std::isfinite(tk[nk - 1] - st.time)) ||
                               (nq > 0 && !std::isfinite(tq[nq - 1] - st.time)))) {
    std::ostringstream os;
    os.precision(17);
    os << w << ": the state's time " << st.time
       << " is after the first position of this call, or too far from its last (positions must "
          "continue in time)";
    fail(os.str());
  }
  check_state_view(w, ds, state, "d_state");
  check_state_view(w, dsi, state, "d_state_in");
  const auto Q = std::make_pair(&q, "q");
  const auto K = std::make_pair(&k, "k");
  const auto V = std::make_pair(&v, "v");
  const auto DO = std::make_pair(&dout, "d_out");
  const auto DS = std::make_pair(&ds, "d_state");
  br::check_output(w, dq, "dq", q, "q", Q, K, V, DO, DS);
  br::check_output(w, dk, "dk", k, "k", Q, K, V, DO, DS, std::make_pair(&dq, "dq"));
  br::check_output(w, dv, "dv", v, "v", Q, K, V, DO, DS, std::make_pair(&dq, "dq"),
                   std::make_pair(&dk, "dk"));
  if (!dsi.empty()) {  // d_state_in may be d_state's very view (in place), nothing else
    auto apart = [&](const auto& x, const char* other) {
      if (!x.empty() && may_overlap(dsi, x))
        fail(w + ": d_state_in overlaps " + other);
    };
    apart(q, "q"), apart(k, "k"), apart(v, "v"), apart(dout, "d_out"), apart(dq, "dq"),
        apart(dk, "dk"), apart(dv, "dv");
    if (!same_elements(ds, dsi) && may_overlap(ds, dsi))
      fail(w + ": d_state_in partly overlaps d_state (pass the same view to work in place, or "
               "disjoint ones)");
  }
  br::check_size(w, g.parameters, Index(parameter_count(state.encoding())), "parameter");
  br::check_head_option(w, g.decay, st.decay, st.Hq, "decay");
}

// The backward of one call continuing `state` (the top of this file). run<Chunk>: the pairs
// within the call through linear_attention_backward (Chunk), or a step's one pair at lag 0
// formed directly (its instantiation then needs no tile driver).
template <class E, class C, class Tq, class Tk, class Tv, class Tdo, class Tds, class R>
class Run {
 public:
  Run(const LinearState<E, C>& state, const TensorView<Tq>& q, const Positions& tq,
      const TensorView<Tk>& k, const Positions& tk, const TensorView<Tv>& v,
      const TensorView<Tdo>& dout, const TensorView<Tds>& ds, const LinearStateGradients<R>& g,
      int threads)
      : state_(state), enc_(state.encoding()), q_(q), k_(k), v_(v), dout_(dout), ds_(ds), g_(g),
        threads_(threads) {
    const auto& st = state.facts();
    nq_ = q.tokens(), nk_ = k.tokens(), Hq_ = st.Hq, Hk_ = st.Hk, G_ = Hq_ / Hk_;
    d_ = st.d, dv_ = st.dv, heads_ = st.heads;
    for (Index i = 0; i < nq_; ++i) t_.push_back(tq[i]);
    for (Index j = 0; j < nk_; ++j) s_.push_back(tk[j]);
    empty_ = st.empty;
    T_ = st.time;
    T1_ = nk_ > 0 ? s_.back() : T_;
    scale_ = st.scale;
    lam_ = st.lam;
    DQ_.assign(std::size_t(nq_ * Hq_ * d_), 0.0);
    DK_.assign(std::size_t(nk_ * Hk_ * d_), 0.0);
    DV_.assign(std::size_t(nk_ * Hk_ * dv_), 0.0);
    // ∂L/∂M: every entry is written below unless the state is empty (the buffer is the
    // calling thread's, kept across calls: [heads, d, dv] is the size of the state itself).
    DS_.resize(std::size_t(heads_ * d_ * dv_));
    if (empty_) std::fill(DS_.begin(), DS_.end(), 0.0);
  }

  template <bool Chunk, class Tdq, class Tdk, class Tdv, class Tdsi>
  void run(const LinearAttentionOptions& opt, const TensorView<Tdq>& dq,
           const TensorView<Tdk>& dk, const TensorView<Tdv>& dv, const TensorView<Tdsi>& dsi) {
    if (nq_ > 0 && nk_ > 0) {
      if constexpr (Chunk) {
        peal::linear_attention_backward(
            enc_, q_, Positions(t_), k_, Positions(s_), v_, dout_,
            TensorView<double>(DQ_.data(), nq_, Hq_, d_), TensorView<double>(DK_.data(), nk_, Hk_, d_),
            TensorView<double>(DV_.data(), nk_, Hk_, dv_), opt,
            LinearAttentionGradients<R>{g_.parameters, nullptr, nullptr, g_.decay});
      } else {
        step_pair();
      }
    }
    std::vector<Part> parts(static_cast<std::size_t>(Hk_));
    int nt = 1;
#ifdef _OPENMP
    if (!omp_in_parallel()) nt = threads_ > 0 ? threads_ : omp_get_max_threads();
#endif
    nt = int(std::max<Index>(1, std::min<Index>(std::min(nt, linear::kMaxThreads), Hk_)));
    detail::parallel_each(Hk_, nt, [&](Index kh) { group(kh, parts[std::size_t(kh)]); });
    for (const Part& p : parts) join(p);  // key head order: deterministic
    if (!dq.empty()) linear_backward::write(dq, DQ_.data());
    if (!dk.empty()) linear_backward::write(dk, DK_.data());
    if (!dv.empty()) linear_backward::write(dv, DV_.data());
    if (!dsi.empty()) linear_backward::write(dsi, DS_.data());
  }

 private:
  struct Part {
    std::vector<R> parameters;
    std::vector<double> dlam;  // ∂L/∂λ per query head
  };

  double lam(Index sigma) const { return lam_[std::size_t(sigma)]; }

  // The single pair of a step (q at s, k at s: A(0) = I, γ^0 = 1): S_h = scale q_h · k,
  // dq_h += scale (dO_h · v) k, dk += scale (dO_h · v) q_h, dv += scale S_h dO_h.
  void step_pair() {
    for (Index h = 0; h < Hq_; ++h) {
      const Index kh = h / G_;
      double dov = 0, qk = 0;
      for (Index e = 0; e < dv_; ++e) dov += to_arith<double>(dout_(0, h, e)) * to_arith<double>(v_(0, kh, e));
      for (Index e = 0; e < d_; ++e) qk += to_arith<double>(q_(0, h, e)) * to_arith<double>(k_(0, kh, e));
      for (Index e = 0; e < d_; ++e) {
        DQ_[std::size_t(h * d_ + e)] += scale_ * dov * to_arith<double>(k_(0, kh, e));
        DK_[std::size_t(kh * d_ + e)] += scale_ * dov * to_arith<double>(q_(0, h, e));
      }
      for (Index e = 0; e < dv_; ++e)
        DV_[std::size_t(kh * dv_ + e)] += scale_ * qk * to_arith<double>(dout_(0, h, e));
    }
  }

  void join(const Part& p) {
    if (g_.parameters)
      for (std::size_t x = 0; x < p.parameters.size(); ++x) (*g_.parameters)[x] += p.parameters[x];
    if (g_.decay)
      for (Index h = 0; h < Hq_; ++h)
        (*g_.decay)[std::size_t(h)] += p.dlam[std::size_t(h)] / state_.facts().decay[std::size_t(h)];
  }

  // The working matrices of group(), kept by each thread across calls (resized, not
  // reallocated, while the shapes repeat): a truncated-BPTT loop calls the step backward once
  // per token, and fresh state-sized matrices per call cost page faults and zero-filling
  // several times the arithmetic (bench/README.md, "State step backward").
  struct Work {
    RowMatrix Kx, Khat, Vr, dKhat, dKx, U, Mhat, dMhat, Mrows, dMrows, Uhat, dUhat, Dhat, dDhat, GV,
        KD;
    std::vector<double> relk, g;
  };
  static Work& work() {
    thread_local Work w;
    return w;
  }

  // f(i, e) for i < m, e < n, in square blocks: a transpose between [d, dv] and rows of d
  // walks one side with a stride of dv elements (1 KiB for dv = 128 doubles, which maps a
  // column onto a few cache sets); blocks keep both sides in L1.
  template <class F>
  static void transposed(Index m, Index n, F&& f) {
    constexpr Index kB = 16;
    for (Index i0 = 0; i0 < m; i0 += kB)
      for (Index e0 = 0; e0 < n; e0 += kB)
        for (Index i = i0; i < std::min(m, i0 + kB); ++i)
          for (Index e = e0; e < std::min(n, e0 + kB); ++e) f(i, e);
  }

  // Key head kh: its state heads (one, or G with decays), each with its readers. M̂ = G(0) M is
  // the state's own rows (LinearState::relative_rows); where F(0) = G(0) = I (no basis change),
  // D̂ = F(0) D is D and ∂L/∂M = G(0)ᵀ dM̂ is dM̂, with no parameter share (A(0) = I for every
  // parameter value), so those passes are skipped.
  void group(Index kh, Part& p) const {
    std::vector<R>* params = nullptr;
    if (g_.parameters) {
      p.parameters.assign(g_.parameters->size(), R(0));
      params = &p.parameters;
    }
    p.dlam.assign(std::size_t(Hq_), 0.0);
    const Index ns = heads_ == Hq_ ? G_ : 1;
    const bool keys = nk_ > 0 && !ds_.empty();
    const bool unit = state_.original_coordinates();
    Work& w = work();
    std::vector<double>& relk = w.relk;
    relk.clear();
    if (keys) {  // the keys as the new-key term reads them: k̂_j = G(s_j − T') k_j
      w.Kx.resize(nk_, d_), w.Khat.resize(nk_, d_), w.Vr.resize(nk_, dv_);
      w.dKhat.setZero(nk_, d_), w.dKx.resize(nk_, d_);
      linear_backward::gather(k_, 0, nk_, kh, w.Kx.data(), d_);
      linear_backward::gather(v_, 0, nk_, kh, w.Vr.data(), dv_);
      for (Index j = 0; j < nk_; ++j) relk.push_back(s_[std::size_t(j)] - T1_);
      if (d_ > 0)
        encode_keys(enc_, TensorView<const double>(w.Kx.data(), nk_, 1, d_),
                    TensorView<double>(w.Khat.data(), nk_, 1, d_), Positions(relk));
    }
    // The dv rows of a state-sized matrix share one position (0, or Δ for the transport): they
    // go through the encode kernels as the dv heads of one token, so that the encoding's
    // coefficients (sin/cos per pair) are formed once, not once per row. (A PerHead encoding
    // would give each row a head's own encoding; LinearState takes none.)
    static_assert(!linear_backward::per_head_encoding<E>::value, "LinearState takes no PerHead");
    const double zero = 0;
    const Positions at0(&zero, 1);
    auto heads = [this](const RowMatrix& m) { return TensorView<const double>(m.data(), 1, dv_, d_); };
    auto heads_out = [this](RowMatrix& m) { return TensorView<double>(m.data(), 1, dv_, d_); };
    for (Index x = 0; x < ns; ++x) {
      const Index sigma = kh * ns + x, h0 = heads_ == Hq_ ? sigma : kh * G_, R_ = heads_ == Hq_ ? 1 : G_;
      const double l = lam(sigma);
      double* dstate = DS_.data() + sigma * d_ * dv_;  // [d, dv] of the result
      RowMatrix& U = w.U;                              // D = ∂L/∂M' as rows: Uᵀ = D (dv x d)
      if (!ds_.empty()) {
        U.resize(dv_, d_);
        transposed(d_, dv_, [&](Index i, Index e) { U(e, i) = to_arith<double>(ds_(sigma, i, e)); });
      }
      // M̂ as rows (dv x d), its adjoint, and M as rows where the coordinates differ.
      RowMatrix &Mhat = w.Mhat, &dMhat = w.dMhat, &Mrows = w.Mrows;
      Mhat.resize(dv_, d_);
      if (!unit) Mrows.resize(dv_, d_);
      state_.relative_rows(sigma, Mhat.data(), unit ? nullptr : Mrows.data());
      if (!empty_) {
        dMhat.setZero(dv_, d_);
        // The reads: queries at t_i − T against M̂.
        if (nq_ > 0 && d_ > 0)
          for (Index r = 0; r < R_; ++r) read_back(h0 + r, l, Mhat, dMhat, params, p);
        // The transport of the state to T': Û = F(Δ) D against M̂.
        if (!ds_.empty() && d_ > 0 && dv_ > 0) {
          const double delta = T1_ - T_, gd = std::exp(l * delta);
          RowMatrix &Uhat = w.Uhat, &dUhat = w.dUhat;
          Uhat.resize(dv_, d_);
          const Positions at(&delta, 1);
          encode_queries(enc_, heads(U), heads_out(Uhat), at);
          dUhat = gd * Mhat;
          dMhat += gd * Uhat;
          if (l != 0) p.dlam[std::size_t(h0)] += delta * gd * Uhat.cwiseProduct(Mhat).sum();
          if (params)
            encode_queries_backward(enc_, heads(U), at, heads(dUhat), TensorView<double>(),
                                    {params});
        }
      }
      // The new keys into M': D̂ = F(0) D against k̂_j, times g_j v_j.
      if (keys && d_ > 0 && dv_ > 0) {
        RowMatrix &Dhat = w.Dhat, &GV = w.GV, &KD = w.KD;
        if (!unit) {
          Dhat.resize(dv_, d_);
          encode_queries(enc_, heads(U), heads_out(Dhat), at0);
        }
        const RowMatrix& D = unit ? U : Dhat;
        std::vector<double>& g = w.g;
        g.assign(std::size_t(nk_), 1.0);
        for (Index j = 0; l != 0 && j < nk_; ++j) g[std::size_t(j)] = std::exp(-l * relk[std::size_t(j)]);
        const Eigen::Map<const Eigen::VectorXd> gv(g.data(), nk_);
        GV.noalias() = gv.asDiagonal() * w.Vr;
        KD.noalias() = w.Khat * D.transpose();  // nk x dv: (D̂ᵀ k̂_j)ᵀ
        w.dKhat.noalias() += GV * D;
        Eigen::Map<RowMatrix, 0, Eigen::OuterStride<>> DVk(DV_.data() + kh * dv_, nk_, dv_,
                                                           Eigen::OuterStride<>(Hk_ * dv_));
        DVk.noalias() += gv.asDiagonal() * KD;
        if (l != 0)
          for (Index j = 0; j < nk_; ++j)
            p.dlam[std::size_t(h0)] += -relk[std::size_t(j)] * GV.row(j).dot(KD.row(j));
        if (params && !unit) {  // P's share through D̂ = F(0) D
          w.dDhat.noalias() = GV.transpose() * w.Khat;
          encode_queries_backward(enc_, heads(U), at0, heads(w.dDhat), TensorView<double>(),
                                  {params});
        }
      }
      // ∂L/∂M = G(0)ᵀ dM̂ (an empty state: 0).
      if (!empty_ && d_ > 0 && dv_ > 0) {
        const RowMatrix* dM = &dMhat;
        if (!unit) {
          w.dMrows.resize(dv_, d_);
          encode_keys_backward(enc_, heads(Mrows), at0, heads(dMhat), heads_out(w.dMrows),
                               {params});
          dM = &w.dMrows;
        }
        transposed(d_, dv_, [&](Index i, Index e) { dstate[i * dv_ + e] = (*dM)(e, i); });
      }
    }
    if (keys && d_ > 0) {  // dk of the new-key terms, summed over the key head's states
      encode_keys_backward(enc_, TensorView<const double>(w.Kx.data(), nk_, 1, d_),
                           Positions(relk), TensorView<const double>(w.dKhat.data(), nk_, 1, d_),
                           TensorView<double>(w.dKx.data(), nk_, 1, d_), {params});
      for (Index j = 0; j < nk_; ++j)
        for (Index e = 0; e < d_; ++e) DK_[std::size_t((j * Hk_ + kh) * d_ + e)] += w.dKx(j, e);
    }
  }

  // Query head h's reads of M̂: û_i = F(t_i − T) q_i, out_i = f_i M̂ û_i.
  void read_back(Index h, double l, const RowMatrix& Mhat, RowMatrix& dMhat, std::vector<R>* params,
                 Part& p) const {
    RowMatrix Qx(nq_, d_), Qhat(nq_, d_), dQhat(nq_, d_), dQx(nq_, d_), DO(nq_, dv_);
    std::vector<double> rel(static_cast<std::size_t>(nq_)), f(static_cast<std::size_t>(nq_));
    linear_backward::gather(q_, 0, nq_, h, Qx.data(), d_);
    linear_backward::gather(dout_, 0, nq_, h, DO.data(), dv_);
    for (Index i = 0; i < nq_; ++i) {
      rel[std::size_t(i)] = t_[std::size_t(i)] - T_;
      f[std::size_t(i)] = scale_ * (l == 0 ? 1.0 : std::exp(l * rel[std::size_t(i)]));
    }
    encode_queries(enc_, TensorView<const double>(Qx.data(), nq_, 1, d_),
                   TensorView<double>(Qhat.data(), nq_, 1, d_), Positions(rel));
    const Eigen::Map<const Eigen::VectorXd> fv(f.data(), nq_);
    const RowMatrix FDO = fv.asDiagonal() * DO;  // nq x dv
    dQhat.noalias() = FDO * Mhat;                 // f_i M̂ dO_i, as rows
    dMhat.noalias() += FDO.transpose() * Qhat;
    if (l != 0)
      for (Index i = 0; i < nq_; ++i)
        p.dlam[std::size_t(h)] += rel[std::size_t(i)] * dQhat.row(i).dot(Qhat.row(i));
    encode_queries_backward(enc_, TensorView<const double>(Qx.data(), nq_, 1, d_), Positions(rel),
                            TensorView<const double>(dQhat.data(), nq_, 1, d_),
                            TensorView<double>(dQx.data(), nq_, 1, d_), {params});
    for (Index i = 0; i < nq_; ++i)
      for (Index e = 0; e < d_; ++e) DQ_[std::size_t((i * Hq_ + h) * d_ + e)] += dQx(i, e);
  }

  const LinearState<E, C>& state_;
  const E& enc_;
  const TensorView<Tq>& q_;
  const TensorView<Tk>& k_;
  const TensorView<Tv>& v_;
  const TensorView<Tdo>& dout_;
  const TensorView<Tds>& ds_;
  const LinearStateGradients<R>& g_;
  int threads_;
  Index nq_ = 0, nk_ = 0, Hq_ = 1, Hk_ = 1, G_ = 1, d_ = 0, dv_ = 0, heads_ = 1;
  std::vector<double> t_, s_, lam_;
  bool empty_ = true;
  double T_ = 0, T1_ = 0, scale_ = 1;
  // dq, dk, dv and ∂L/∂M in double ([tokens, heads, dim]; [heads, d, dv]), written once.
  mutable std::vector<double> DQ_, DK_, DV_;
  std::vector<double>& DS_ = state_sums();
  static std::vector<double>& state_sums() {
    thread_local std::vector<double> v;
    return v;
  }
};

// The checks of both public calls, then the backward (Pairs: the pairs within a call of
// several tokens, linear_attention_backward's; a step has none).
template <bool Pairs, class E, class C, class Tq, class Tk, class Tv, class Tdo, class Tds,
          class Tdq, class Tdk, class Tdv, class Tdsi, class R>
void check_and_run(const std::string& w, const LinearState<E, C>& state, const TensorView<Tq>& q,
                   const Positions& tq, const TensorView<Tk>& k, const Positions& tk,
                   const TensorView<Tv>& v, const TensorView<Tdo>& d_out,
                   const TensorView<Tds>& d_state, const TensorView<Tdq>& dq,
                   const TensorView<Tdk>& dk, const TensorView<Tdv>& dv,
                   const TensorView<Tdsi>& d_state_in, const LinearStateGradients<R>& grads,
                   const LinearAttentionOptions& opt, int threads) {
  check(w, state, q, tq, k, tk, v, d_out, d_state, dq, dk, dv, d_state_in, grads);
  const auto qr = detail::ro(q);
  const auto kr = detail::ro(k);
  const auto vr = detail::ro(v);
  const auto dor = detail::ro(d_out);
  const auto dsr = detail::ro(d_state);
  Run<E, C, const std::remove_cv_t<Tq>, const std::remove_cv_t<Tk>, const std::remove_cv_t<Tv>,
      const std::remove_cv_t<Tdo>, const std::remove_cv_t<Tds>, R>
      run(state, qr, tq, kr, tk, vr, dor, dsr, grads, threads);
  run.template run<Pairs>(opt, dq, dk, dv, d_state_in);
}

}  // namespace linear_state_backward
}  // namespace detail

/// Backward of linear_attention(enc, q, tq, k, tk, v, out, opt, state) (linear_attention.hpp):
/// `state` is the state BEFORE that call (keep a copy: the forward changes it), d_out = ∂L/∂out
/// [nq, Hq, dv], d_state = ∂L/∂M' [heads, d, dv] for the state after the call (entry (σ, i, e)
/// of LinearState::matrix(σ); an empty view: 0). Writes dq [nq, Hq, d], dk [nk, Hk, d],
/// dv [nk, Hk, dv] and d_state_in = ∂L/∂M [heads, d, dv] for the state before (each may be
/// empty: not wanted; d_state_in may be d_state's very view, in place; nothing else may
/// overlap) and ADDS the parameter and decay gradients asked for. Chaining the calls of a window
/// backwards, d_state_in of one is d_state of the one before (truncated BPTT). Throws
/// peal::invalid_argument before writing anything when the forward with this state would throw,
/// on normalization = retnet, on d_state's or d_state_in's extents, gradient sizes and
/// overlapping outputs.
template <class E, class Tq, class Tk, class Tv, class Tdo, class Tdq, class Tdk, class Tdv,
          class C, class Tds, class Tdsi>
void linear_attention_backward(const E& enc, TensorView<Tq> q, const Positions& tq,
                               TensorView<Tk> k, const Positions& tk, TensorView<Tv> v,
                               TensorView<Tdo> d_out, TensorView<Tdq> dq, TensorView<Tdk> dk,
                               TensorView<Tdv> dv, const LinearAttentionOptions& opt,
                               const LinearState<E, C>& state, TensorView<Tds> d_state,
                               TensorView<Tdsi> d_state_in,
                               LinearStateGradients<real_t<typename E::Scalar>> grads = {}) {
  namespace lsb = detail::linear_state_backward;
  detail::encode_backward::require_derivatives<E>();
  const std::string w = "linear_attention_backward (with a state)";
  detail::linear::check_linear_options(opt, q.heads(), w.c_str());
  if (q.dim() != Index(enc.dim()))
    detail::fail(w + ": q has dim " + std::to_string(q.dim()) + ", the encoding " +
                 std::to_string(enc.dim()));
  if (!state.same_encoding(enc))
    detail::fail(w + ": the state was made with another encoding (its parameters, layout or "
                     "basis differ from this call's)");
  const auto& st = state.facts();
  if (st.scale != detail::linear::linear_scale(opt, q.dim()) || st.decay != opt.decay ||
      st.norm != opt.normalization)
    detail::fail(w + ": the state was made with another scale, decay or normalization than "
                     "these options");
  lsb::check_and_run<true>(w, state, q, tq, k, tk, v, d_out, d_state, dq, dk, dv, d_state_in,
                           grads, opt, opt.threads);
}

/// Backward of state.step(k, v, q, s, out) (linear_state.hpp) for truncated backpropagation
/// through time: `state` is the state BEFORE the step (keep a copy: step changes it), d_out =
/// ∂L/∂out [1, Hq, dv], d_state = ∂L/∂M' [heads, d, dv] for the state after the step (entry
/// (σ, i, e) of LinearState::matrix(σ); an empty view: 0, the last step of a window). Writes dk
/// [1, Hk, d], dv [1, Hk, dv], dq [1, Hq, d] and d_state_in = ∂L/∂M [heads, d, dv] for the
/// state before (each may be empty: not wanted; d_state_in may be d_state's very view, in
/// place) and ADDS the encoding's parameter gradient (layout of peal::parameters) and the
/// decays' (the state's options have them). Going back through a window, d_state_in of a step
/// is d_state of the step before. threads: as LinearAttentionOptions::threads (results do not
/// depend on it). Working memory: the calling thread and each worker keep their state-sized
/// matrices (up to 9 d x dv doubles per thread, and [heads, d, dv] for ∂L/∂M in the calling thread)
/// across calls, so that a window's steps do not allocate them again. Throws
/// peal::invalid_argument before writing anything on the inputs step() refuses, on
/// normalization = retnet, on d_state's or d_state_in's extents, gradient sizes and
/// overlapping outputs.
template <class E, class C, class Tk, class Tv, class Tq, class Tdo, class Tds, class Tdk,
          class Tdv, class Tdq, class Tdsi>
void linear_state_step_backward(const LinearState<E, C>& state, TensorView<Tk> k,
                                TensorView<Tv> v, TensorView<Tq> q, double s,
                                TensorView<Tdo> d_out, TensorView<Tds> d_state,
                                TensorView<Tdk> dk, TensorView<Tdv> dv, TensorView<Tdq> dq,
                                TensorView<Tdsi> d_state_in,
                                LinearStateGradients<real_t<typename E::Scalar>> grads = {},
                                int threads = 0) {
  namespace lsb = detail::linear_state_backward;
  detail::encode_backward::require_derivatives<E>();
  const std::string w = "linear_state_step_backward";
  if (k.tokens() != 1 || q.tokens() != 1)
    detail::fail(w + ": a step takes one token: k is " +
                 detail::tiled::extents(k.tokens(), k.heads(), k.dim()) + ", q " +
                 detail::tiled::extents(q.tokens(), q.heads(), q.dim()));
  if (threads < 0) detail::fail(w + ": threads must be >= 0");
  const Positions at(&s, 1);
  lsb::check_and_run<false>(w, state, q, at, k, at, v, d_out, d_state, dq, dk, dv, d_state_in,
                            grads, LinearAttentionOptions{}, threads);
}

}  // namespace peal
