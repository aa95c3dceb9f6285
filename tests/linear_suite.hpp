// Shared pieces of the linear-attention tests (tests/test_linear_attention.cpp,
// tests/test_linear_families.cpp): the long double reference of peal::linear_attention
// (include/peal/linear_attention.hpp),
//   o[i,h,:] = scale sum_{j : s_j <= t_i} gamma_h^(t_i - s_j) (q_ih^T A(t_i - s_j) k_j) v_j,
// evaluated as that naive double sum from the family's long double twin (its score() through the
// lag t - s, or, for encodings without Jordan chains and within the range of long double, its
// encode_query / encode_key around one anchor), on the inputs AFTER rounding to their storage
// types; the sizes the bound Tol::linear_out (tests/tolerances.hpp) is relative to; the caller
// memory (conformance_kernels.hpp's Buffer, Geometry and storage types). The kernel calls over
// those buffers (run_linear): tests/linear_kernels.hpp.
// The bound is relative to sum_j |scale| gamma^tau |q| ||A(tau)|| |k| |v_je|, not to the output,
// since the sum of the terms can cancel.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <map>
#include <peal/linear_attention.hpp>
#include <peal/linear_state.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "conformance_suite.hpp"
#include "linear_kernels.hpp"

namespace peal_test {
namespace linear {

using conformance::Buffer;
using conformance::Geometry;
using conformance::LVector;
using conformance::make_geometry;
using conformance::Oracle;
using conformance::OracleOf;
using conformance::Shape;
using conformance::Storage;
using peal::Index;
using peal::LinearAttentionOptions;
using peal::LinearForm;
using peal::Positions;
using peal::TensorView;
using LD = long double;

// ---- Growth, decided from the encoding: the largest real part of an eigenvalue of X -----------
// Every block is in real Jordan form, so its eigenvalues are its parameters: lambda (RealBlock,
// JordanBlock), a +- i omega (RotationBlock, RotationJordanBlock), 0 (PassThrough); a bank or a
// composition has the union of its parts' eigenvalues, a basis change (X = P J P^-1) those of J.
// Any other type (a user's block, tests/toy_block.hpp): from its long double generator
// (generator_facts.hpp). Declared before they are defined so that the overloads find each
// other through composites.
template <class E>
LD max_real_part(const E& e);
template <class S>
LD max_real_part(const peal::RealBlock<S>& b);
template <class S>
LD max_real_part(const peal::RotationBlock<S>& b);
template <int M, class S>
LD max_real_part(const peal::JordanBlock<M, S>& b);
template <int M, class S>
LD max_real_part(const peal::RotationJordanBlock<M, S>& b);
template <class S>
LD max_real_part(const peal::PassThrough<S>&);
template <class B>
LD max_real_part(const peal::Bank<B>& b);
template <class... P>
LD max_real_part(const peal::BlockDiagonal<P...>& b);
template <class E>
LD max_real_part(const peal::BasisChange<E>& b);

template <class E>
LD max_real_part(const E& e) {
  return generator_facts::max_real_part(conformance::LMatrix(e.generator().template cast<LD>()));
}
template <class S>
LD max_real_part(const peal::RealBlock<S>& b) {
  return LD(b.lambda());
}
template <class S>
LD max_real_part(const peal::RotationBlock<S>& b) {
  return LD(b.a());
}
template <int M, class S>
LD max_real_part(const peal::JordanBlock<M, S>& b) {
  return LD(b.lambda());
}
template <int M, class S>
LD max_real_part(const peal::RotationJordanBlock<M, S>& b) {
  return LD(b.a());
}
template <class S>
LD max_real_part(const peal::PassThrough<S>&) {
  return 0;
}
template <class B>
LD max_real_part(const peal::Bank<B>& b) {
  LD r = -std::numeric_limits<LD>::infinity();
  for (int i = 0; i < b.size(); ++i) r = std::max(r, max_real_part(b.block(i)));
  return r;
}
template <class... P, std::size_t... I>
LD max_real_part_parts(const peal::BlockDiagonal<P...>& b, std::index_sequence<I...>) {
  return std::max({-std::numeric_limits<LD>::infinity(), max_real_part(b.template part<I>())...});
}
template <class... P>
LD max_real_part(const peal::BlockDiagonal<P...>& b) {
  return max_real_part_parts(b, std::index_sequence_for<P...>{});
}
template <class E>
LD max_real_part(const peal::BasisChange<E>& b) {
  return max_real_part(b.inner());
}

/// The family's double encoding and its long double twin, drawn from consecutive seeds until the
/// generator has no eigenvalue with a positive real part (families draw real parts of either
/// sign); `regime` as in families.hpp. found = false if none of `tries` draws qualifies.
template <class Fam>
struct Twins {
  decltype(Fam::template build<double>(std::declval<Draw&>())) e;
  decltype(Fam::template build<long double>(std::declval<Draw&>())) el;
  bool found;
  int draws;
};
template <class Fam>
Twins<Fam> twins_without_growth(std::uint64_t seed, Regime regime, int tries = 4096) {
  for (int t = 0; t < tries; ++t) {
    std::mt19937_64 r1(seed + std::uint64_t(t)), r2(seed + std::uint64_t(t));
    Draw d1{r1, regime}, d2{r2, regime};
    auto e = Fam::template build<double>(d1);
    auto el = Fam::template build<long double>(d2);
    if (max_real_part(el) <= 0 && max_real_part(e) <= 0)
      return Twins<Fam>{std::move(e), std::move(el), true, t + 1};
    if (t + 1 == tries) return Twins<Fam>{std::move(e), std::move(el), false, t + 1};
  }
  throw std::logic_error("unreachable");
}

// ---- Positions ----------------------------------------------------------------------------------
inline std::vector<double> regular(Index n, double start, double step = 1) {
  std::vector<double> t;
  for (Index i = 0; i < n; ++i) t.push_back(start + step * double(i));
  return t;
}
/// Gaps log-uniform in [1e-3, 1e3] from `base` (the first position is base).
inline std::vector<double> irregular(Index n, double base, std::mt19937_64& rng) {
  std::uniform_real_distribution<double> u(-3, 3);
  std::vector<double> t;
  for (Index i = 0; i < n; ++i, base += std::pow(10.0, u(rng))) t.push_back(base);
  return t;
}
/// Largest spread of w consecutive positions.
inline LD spread(const std::vector<double>& t, Index w) {
  LD m = 0;
  const Index n = Index(t.size());
  w = std::max<Index>(w, 1);
  for (Index i = 0; i + 1 < n; ++i) {
    const Index last = std::min(n - 1, i + w - 1);
    m = std::max(m, LD(t[std::size_t(last)]) - LD(t[std::size_t(i)]));
  }
  return m;
}
/// Every difference exact in double: multiples of 1/8 below 2^48.
inline bool exact_differences(const std::vector<double>& t) {
  for (double x : t)
    if (!(std::abs(x) < 0x1p48 && std::floor(8 * x) == 8 * x)) return false;
  return true;
}

// ---- The reference ------------------------------------------------------------------------------
/// Per output element [i][h][e]: the reference, and the sizes of the bound:
///   S = sum_j m_ij |v_je|, m_ij = |scale| gamma_h^tau |q_ih| ||A(tau)|| |k_j| (sizes measured
///       where the kernels compute: Oracle::query_size / lag_norm / key_size);
///   T = sum_j m_ij |v_je| (J_i - j), J_i the last key visible to query i: the keys between
///       (a term passes through at most (J_i - j) / chunk + 1 chunk boundaries);
///   L = sum_j m_ij |v_je| |tau_ij| (the rounded-difference term, Tol::phase).
struct Reference {
  Index nq = 0, Hq = 0, dv = 0;
  std::vector<LD> out, S, T, L;
  std::vector<Index> visible;  // [i]: keys visible to query i
  LD at(const std::vector<LD>& x, Index i, Index h, Index e) const {
    return x[std::size_t((i * Hq + h) * dv + e)];
  }
};

struct Inputs {
  Index nq, nk, Hq, Hk, d, dv;
  std::vector<double> tq, tk;
  std::vector<LD> q, k, v;  // packed [n][H][dim], the values the kernels read
};

/// The naive double sum. gammas: per query head (empty: 1); scale as LinearAttentionOptions.
inline Reference reference(const Oracle& o, const Inputs& in, const std::vector<double>& gammas,
                           LD scale) {
  const Index nq = in.nq, nk = in.nk, Hq = in.Hq, Hk = in.Hk, d = in.d, dv = in.dv, G = Hq / Hk;
  Reference r;
  r.nq = nq, r.Hq = Hq, r.dv = dv;
  const std::size_t size = std::size_t(nq * Hq * dv);
  r.out.assign(size, 0), r.S.assign(size, 0), r.T.assign(size, 0), r.L.assign(size, 0);
  std::vector<LVector> keys;
  std::vector<LD> ksize;
  for (Index j = 0; j < nk; ++j)
    for (Index h = 0; h < Hk; ++h) {
      keys.push_back(conformance::segment(in.k, (j * Hk + h) * d, d));
      ksize.push_back(o.key_size(keys.back()));
    }
  // Anchored evaluation where it is exact to long double rounding: no Jordan chain and the
  // factors e^{a (t - c)} within long double's range (|a| span <= 4000, e^4000 < 1e1737).
  LD lo = std::numeric_limits<LD>::infinity(), hi = -lo;
  for (double t : in.tq) lo = std::min(lo, LD(t)), hi = std::max(hi, LD(t));
  for (double t : in.tk) lo = std::min(lo, LD(t)), hi = std::max(hi, LD(t));
  const LD c = nq + nk > 0 ? lo + (hi - lo) / 2 : 0;
  const bool anchored = o.factorable && o.rate * (hi - lo) <= 4000;
  std::vector<LVector> kenc;
  if (anchored)
    for (Index j = 0; j < nk; ++j)
      for (Index h = 0; h < Hk; ++h)
        kenc.push_back(o.encode_at(false, LD(in.tk[std::size_t(j)]) - c, keys[std::size_t(j * Hk + h)]));
  std::map<LD, LD> norms;
  auto lag_norm = [&](LD tau) {
    auto it = norms.find(tau);
    if (it == norms.end()) it = norms.emplace(tau, o.lag_norm(tau)).first;
    return it->second;
  };
  for (Index i = 0; i < nq; ++i) {
    const LD ti = in.tq[std::size_t(i)];
    const Index J = Index(std::upper_bound(in.tk.begin(), in.tk.end(), in.tq[std::size_t(i)]) -
                          in.tk.begin());  // keys 0 .. J-1 visible
    r.visible.push_back(J);
    for (Index h = 0; h < Hq; ++h) {
      const LVector q = conformance::segment(in.q, (i * Hq + h) * d, d);
      const LVector qe = anchored ? o.encode_at(true, ti - c, q) : q;
      const LD qs = o.query_size(q);
      const LD lg = gammas.empty() ? 0 : std::log(LD(gammas[std::size_t(h)]));
      LD* out = &r.out[std::size_t((i * Hq + h) * dv)];
      LD* S = &r.S[std::size_t((i * Hq + h) * dv)];
      LD* T = &r.T[std::size_t((i * Hq + h) * dv)];
      LD* L = &r.L[std::size_t((i * Hq + h) * dv)];
      for (Index j = 0; j < J; ++j) {
        const LD sj = in.tk[std::size_t(j)], tau = ti - sj;
        const LD g = std::exp(lg * tau);
        const std::size_t kj = std::size_t(j * Hk + h / G);
        const LD m = std::abs(scale) * g * qs * lag_norm(tau) * ksize[kj];
        if (m == 0) continue;  // decayed below long double's range: the term is 0
        const LD score = anchored ? qe.dot(kenc[kj]) : o.score(q, ti, keys[kj], sj);
        const LD w = scale * g * score;
        for (Index e = 0; e < dv; ++e) {
          const LD ve = in.v[std::size_t((j * Hk + h / G) * dv + e)], a = m * std::abs(ve);
          out[e] += w * ve;
          S[e] += a;
          T[e] += a * LD(J - 1 - j);
          L[e] += a * tau;
        }
      }
    }
  }
  return r;
}

/// The bound of one form on one problem (Tol<C>::linear_out plus the rounding of the output and
/// of position differences). chunk: keys per chunk (1: recurrent, nk: parallel); spread: the
/// largest time spread of a chunk of queries or keys (rebasing anchors move tau by at most 2x it);
/// rho: the scores kernel's polynomial amplification for Jordan chains (1 without).
struct Bound {
  LD eps_c, eps_out, floor_out, d, chunk, rho, lag_rate, spread;
  template <class C>
  static Bound of(LD eps_out, LD floor_out, Index d, Index chunk, LD rho, LD lag_rate, LD spread) {
    return {Tol<C>::eps, eps_out, floor_out, LD(d), LD(std::max<Index>(chunk, 1)), rho, lag_rate,
            spread};
  }
  LD operator()(LD ref, LD S, LD T, LD L, bool dbl) const {
    const LD lin = dbl ? Tol<double>::linear_out(d, chunk, rho, S, T)
                       : Tol<float>::linear_out(d, chunk, rho, S, T);
    return lin + eps_out * std::abs(ref) + floor_out +
           Tol<float>::phase(lag_rate) * (L + 2 * spread * S);
  }
};

/// Mismatches of an output against the reference (first described).
struct Check {
  Index checked = 0, bad = 0;
  LD worst = 0;  // max |err| / tol
  std::string first;
  void add(const std::string& s) {
    if (!bad++) first = s;
  }
};

/// Compares out (a Buffer [nq, Hq, dv]) with the reference under `bound`.
template <class B>
void compare(const Reference& r, const Buffer& out, const B& bound, bool dbl, Check& ck,
             const std::string& what) {
  for (Index i = 0; i < r.nq; ++i)
    for (Index h = 0; h < r.Hq; ++h)
      for (Index e = 0; e < r.dv; ++e) {
        const LD want = r.at(r.out, i, h, e), got = out.at(i, h, e);
        const LD tol = bound(want, r.at(r.S, i, h, e), r.at(r.T, i, h, e), r.at(r.L, i, h, e), dbl);
        const LD err = std::abs(got - want);
        ++ck.checked;
        if (std::isfinite(double(got)) && tol > 0) ck.worst = std::max(ck.worst, err / tol);
        if (!(err <= tol)) {
          std::ostringstream os;
          os << what << ": out[" << i << "," << h << "," << e << "] = " << double(got) << ", want "
             << double(want) << ", |err| " << double(err) << " > tol " << double(tol) << " (sum |terms| "
             << double(r.at(r.S, i, h, e)) << ")";
          ck.add(os.str());
        }
      }
}

/// The arithmetic the kernel computes in: double when q, k or v stores double.
inline bool double_arithmetic(Storage q, Storage k, Storage v) {
  return q == Storage::f64 || k == Storage::f64 || v == Storage::f64;
}

inline const char* form_name(LinearForm f) {
  switch (f) {
    case LinearForm::automatic:
      return "automatic";
    case LinearForm::parallel:
      return "parallel";
    case LinearForm::chunkwise:
      return "chunkwise";
    case LinearForm::recurrent:
      return "recurrent";
  }
  return "?";
}

/// One problem for check_forms: positions, heads, value size, storage and views of q, k, v, out,
/// the options (form and chunk are set per run) and the runs (form, chunk).
struct Setup {
  std::vector<double> tq, tk;
  bool q_sequence = false, k_sequence = false;  // pass Positions::sequence(front, 1)
  Index Hq = 2, Hk = 1, dv = 5;
  Storage sq = Storage::f32, sk = Storage::f32, sv = Storage::f32, so = Storage::f32;
  Shape shq = Shape::aligned, shk = Shape::aligned, shv = Shape::aligned, sho = Shape::aligned;
  LinearAttentionOptions opt;
  std::vector<std::pair<LinearForm, Index>> runs;  // chunk: keys per chunk (ignored unless chunkwise)
  /// The parallel form, the recurrent form and the chunkwise form with chunks {1, 7, 64, nk}.
  void every_form() {
    const Index nk = Index(tk.size());
    runs = {{LinearForm::parallel, nk}, {LinearForm::recurrent, 1}};
    for (Index ch : {Index(1), Index(7), Index(64), std::max<Index>(nk, 1)})
      runs.push_back({LinearForm::chunkwise, ch});
  }
};

struct FormsResult {
  Check check;       // every run, every element
  Index runs = 0;
  std::string worst_at;
};

inline std::string describe(const Setup& su) {
  std::ostringstream os;
  os << su.tq.size() << " queries x " << su.tk.size() << " keys";
  if (!su.tk.empty()) os << " (keys from " << su.tk.front() << (su.k_sequence ? ", sequence" : "") << ")";
  os << ", Hq " << su.Hq << ", Hk " << su.Hk << ", dv " << su.dv << ", q/k/v/out "
     << conformance::storage_name(su.sq) << "/" << conformance::storage_name(su.sk) << "/"
     << conformance::storage_name(su.sv) << "/" << conformance::storage_name(su.so) << ", views "
     << conformance::shape_name(su.shq) << "/" << conformance::shape_name(su.shk) << "/"
     << conformance::shape_name(su.shv) << "/" << conformance::shape_name(su.sho) << ", decay";
  if (su.opt.decay.empty()) os << " none";
  for (double g : su.opt.decay) os << " " << g;
  if (su.opt.scale) os << ", scale " << *su.opt.scale;
  return os.str();
}

/// Every run of `su` on the twins (enc, el) against the long double reference, with the bound of
/// that run's form; `tamper` (tests that must fail) changes the reference's options.
template <bool Full, class E, class EL>
FormsResult check_forms(const E& enc, const EL& el, const Setup& su, std::mt19937_64& rng,
                        const LinearAttentionOptions* tamper = nullptr) {
  const OracleOf<EL> o(el);
  const Index nq = Index(su.tq.size()), nk = Index(su.tk.size()), d = o.dim();
  Buffer q(su.sq, make_geometry(su.shq, nq, su.Hq, d), NAN);
  Buffer k(su.sk, make_geometry(su.shk, nk, su.Hk, d), NAN);
  Buffer v(su.sv, make_geometry(su.shv, nk, su.Hk, su.dv), NAN);
  Buffer out(su.so, make_geometry(su.sho, nq, su.Hq, su.dv), NAN);
  conformance::fill_inputs(q, rng);
  conformance::fill_inputs(k, rng);
  conformance::fill_inputs(v, rng);
  const LinearAttentionOptions& ro = tamper ? *tamper : su.opt;
  const LD scale = ro.scale ? LD(*ro.scale) : 1 / std::sqrt(LD(std::max<Index>(d, 1)));
  const Inputs in{nq, nk, su.Hq, su.Hk, d, su.dv, su.tq, su.tk, q.values(), k.values(), v.values()};
  const Reference ref = reference(o, in, ro.decay, scale);
  LD log_decay = 0;
  for (double g : su.opt.decay) log_decay = std::max(log_decay, std::abs(std::log(LD(g))));
  const bool exact = exact_differences(su.tq) && exact_differences(su.tk);
  const LD lag_rate = o.rate + log_decay + (exact ? 0 : o.xnorm);
  const Positions pq = su.q_sequence ? Positions::sequence(su.tq.front()) : Positions(su.tq);
  const Positions pk = su.k_sequence ? Positions::sequence(su.tk.front()) : Positions(su.tk);
  const bool dbl = double_arithmetic(su.sq, su.sk, su.sv);
  const LD budget = dbl ? 1048576.0L : 4096.0L;  // scores' polynomial budget (Tol::poly_half_spread)
  const LD eps_out = conformance::storage_eps(su.so), floor_out = conformance::storage_floor(su.so);
  FormsResult res;
  LinearAttentionOptions opt = su.opt;
  for (const auto& r : su.runs) {
    opt.form = r.first;
    opt.chunk = r.first == LinearForm::chunkwise ? r.second : 0;
    const Index chunk = std::max<Index>(1, std::min(r.second, std::max<Index>(nk, 1)));
    run_linear<Full>(enc, q, pq, k, pk, v, out, opt);
    auto bound_of = [&](Index ch) {
      const LD ws = std::max(spread(su.tq, ch), spread(su.tk, ch));
      const LD rh =
          o.degree > 0 ? std::min(Tol<float>::score_rho(o.degree, ws / 2, ws / 2), budget) : 1;
      return dbl ? Bound::of<double>(eps_out, floor_out, d, ch, rh, lag_rate, ws)
                 : Bound::of<float>(eps_out, floor_out, d, ch, rh, lag_rate, ws);
    };
    // The automatic form may be any of the three: the largest of their bounds.
    const bool any = r.first == LinearForm::automatic;
    const Bound b1 = bound_of(chunk), b2 = bound_of(1), b3 = bound_of(std::min<Index>(64, std::max<Index>(nk, 1))),
                b4 = bound_of(std::max<Index>(nk, 1));
    auto b = [&](LD ref_, LD S_, LD T_, LD L_, bool dbl_) {
      LD t = b1(ref_, S_, T_, L_, dbl_);
      if (any) t = std::max({t, b2(ref_, S_, T_, L_, dbl_), b3(ref_, S_, T_, L_, dbl_), b4(ref_, S_, T_, L_, dbl_)});
      return t;
    };
    std::ostringstream what;
    what << form_name(r.first) << " (chunk " << r.second << "), " << describe(su);
    const LD before = res.check.worst;
    compare(ref, out, b, dbl, res.check, what.str());
    if (res.check.worst > before) res.worst_at = what.str();
    ++res.runs;
  }
  if (std::getenv("PEAL_LINEAR_REPORT"))
    std::printf("check_forms: %lld runs, worst err/tol %.3Lg (%s)\n", (long long)res.runs,
                res.check.worst, res.worst_at.c_str());
  return res;
}

}  // namespace linear
}  // namespace peal_test

// The linear kernels of every family are compiled in tests/kernels/linear_*.cpp.
PEAL_LINEAR_EXTERN_ALL();
