// The kernel-conformance suite: every batch kernel against a long double reference, for every
// encoding family of families.hpp (after STYLE.md's "a kernel has a plain scalar reference next
// to it", as property_suite.hpp does for the algebra):
//   encode_queries / encode_keys  y = F(t) x, G(s) x per token, in place and out of place
//                                 (src and dst of different storage types);
//   shift_keys                    against the shift factor applied to the encoded key, and
//                                 against G(s + delta) x;
//   scores                        against q^T A(t - s) k per pair, with every ScoreOptions;
//   attention                     against softmax of the same long double scores times V, with
//                                 every AttentionOptions (causal, window, ALiBi, softcap, sinks,
//                                 scale, tiles, lse, GQA, dv != d, rows with no visible key),
//                                 keys_encoded for pure rotations (its throw for the others).
// The reference is the family's long double twin (families build the same encoding for any
// scalar from the same random stream), evaluated on the inputs AFTER rounding to the storage
// type, so every tolerance is about the kernel. The tolerances are the kernels' documented
// bounds (docs/kernels-encode.md "Accuracy", docs/kernels-scores.md §3) plus the terms those
// bounds leave out and the kernels need in double arithmetic (tolerances.hpp, Tol::encode and
// Tol::score: conditioning of e^{lambda t}, absolute angle error, rounded position differences).
// Where a result is outside a kernel's documented domain (encode's growth beyond the range of
// the types; scores within the rebasing headroom of overflow or underflow) it is counted, not
// checked, and every family must still check every storage type.
//
// Covered, by a covering design (dimensions rotate with the case index; not the full product):
// tokens 1, 3, 7, 17, 63, 65, 257; heads 1 and 3 (and Hq = 2 Hk); float, double, Eigen::half,
// Eigen::bfloat16 storage; packed aligned views, views offset by one element, padded token and
// head strides, element stride 2, head-major strides; regular, irregular (gaps 1e-3..1e3) and
// large (~1.7e9) positions; several tiles and irregular tiles (query_tile / key_tile 7, 16);
// threads 1 and 2 (bitwise equal results); the long double encodings themselves in the kernels.
//
// Cost: the kernels are instantiated once per ENCODING TYPE (KernelsOf, conformance_kernels.hpp,
// a small switch over the storage combinations listed in encode_pairs / score_triples), in a TU
// of tests/kernels/ and nowhere else (this header declares them extern); the reference once per
// long double encoding type (OracleOf); everything else is ordinary code shared by all families,
// compiled once in tests/conformance_checks.cpp (declared below).
// A family of a new encoding type: a line in PEAL_CONFORMANCE_EXTERN_ALL and one in a
// tests/kernels/conformance_*.cpp (without them it still runs, compiling its kernels here).
//
// Adding a kernel: a virtual entry in KernelSet and its switch in KernelsOf, and a check_X_case
// (oracle, kernels, case, ScoreInputs) beside check_scores_case and check_attention_case
// (tests/conformance_checks.cpp, declared here), called
// from run_kernel_conformance (one function per kernel family, taking the family's reference,
// its kernels and the shared inputs).
#pragma once

#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <map>
#include <memory>
#include <random>
#include <sstream>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "conformance_kernels.hpp"
#include "families.hpp"
#include "generator_facts.hpp"
#include "tolerances.hpp"

#ifdef _OPENMP
#include <omp.h>
#endif

namespace peal_test {
namespace conformance {

// ---- Structure of an encoding, stated independently of the kernels ------------------------------
// growth_rate: max |Re lambda| over the blocks (the exponential factors e^{a t}).
// gemm_degree: the longest Jordan chain minus one that scores() keeps in its GEMM: every chain
// except the real JordanBlock<M >= 2> parts at the top level of a composition, which it
// evaluates per pair (docs/kernels-scores.md §3, "Which encodings"). Any other type (a user's
// block, tests/toy_block.hpp) is read from its long double generator (generator_facts.hpp).
// Declared before they are defined so that the overloads find each other through the composites.
template <class E>
LD growth_rate(const E& e);
template <class S>
LD growth_rate(const peal::RealBlock<S>& b);
template <class S>
LD growth_rate(const peal::RotationBlock<S>& b);
template <int M, class S>
LD growth_rate(const peal::JordanBlock<M, S>& b);
template <int M, class S>
LD growth_rate(const peal::RotationJordanBlock<M, S>& b);
template <class S>
LD growth_rate(const peal::PassThrough<S>&);
template <class B>
LD growth_rate(const peal::Bank<B>& b);
template <class... P>
LD growth_rate(const peal::BlockDiagonal<P...>& b);
template <class E>
LD growth_rate(const peal::BasisChange<E>& b);
template <class E>
int gemm_degree(const E& e, bool);
template <class S>
int gemm_degree(const peal::RealBlock<S>&, bool);
template <class S>
int gemm_degree(const peal::RotationBlock<S>&, bool);
template <int M, class S>
int gemm_degree(const peal::JordanBlock<M, S>&, bool top_part);
template <int M, class S>
int gemm_degree(const peal::RotationJordanBlock<M, S>&, bool);
template <class S>
int gemm_degree(const peal::PassThrough<S>&, bool);
template <class B>
int gemm_degree(const peal::Bank<B>& b, bool);
template <class... P>
int gemm_degree(const peal::BlockDiagonal<P...>& b, bool);
template <class E>
int gemm_degree(const peal::BasisChange<E>& b, bool);

template <class E>
LD growth_rate(const E& e) {
  return generator_facts::growth_rate(LMatrix(e.generator().template cast<LD>()));
}
template <class S>
LD growth_rate(const peal::RealBlock<S>& b) {
  return std::abs(LD(b.lambda()));
}
template <class S>
LD growth_rate(const peal::RotationBlock<S>& b) {
  return std::abs(LD(b.a()));
}
template <int M, class S>
LD growth_rate(const peal::JordanBlock<M, S>& b) {
  return std::abs(LD(b.lambda()));
}
template <int M, class S>
LD growth_rate(const peal::RotationJordanBlock<M, S>& b) {
  return std::abs(LD(b.a()));
}
template <class S>
LD growth_rate(const peal::PassThrough<S>&) {
  return 0;
}
template <class B>
LD growth_rate(const peal::Bank<B>& b) {
  LD r = 0;
  for (int i = 0; i < b.size(); ++i) r = std::max(r, growth_rate(b.block(i)));
  return r;
}
template <class... P, std::size_t... I>
LD growth_rate_parts(const peal::BlockDiagonal<P...>& b, std::index_sequence<I...>) {
  return std::max({LD(0), growth_rate(b.template part<I>())...});
}
template <class... P>
LD growth_rate(const peal::BlockDiagonal<P...>& b) {
  return growth_rate_parts(b, std::index_sequence_for<P...>{});
}
template <class E>
LD growth_rate(const peal::BasisChange<E>& b) {
  return growth_rate(b.inner());
}

template <class E>
int gemm_degree(const E& e, bool) {
  return generator_facts::chain_degree_bound(LMatrix(e.generator().template cast<LD>()));
}
template <class S>
int gemm_degree(const peal::RealBlock<S>&, bool) {
  return 0;
}
template <class S>
int gemm_degree(const peal::RotationBlock<S>&, bool) {
  return 0;
}
template <int M, class S>
int gemm_degree(const peal::JordanBlock<M, S>&, bool top_part) {
  return top_part && M >= 2 ? 0 : M - 1;
}
template <int M, class S>
int gemm_degree(const peal::RotationJordanBlock<M, S>&, bool) {
  return M - 1;
}
template <class S>
int gemm_degree(const peal::PassThrough<S>&, bool) {
  return 0;
}
template <class B>
int gemm_degree(const peal::Bank<B>& b, bool) {
  return b.size() > 0 ? gemm_degree(b.block(0), false) : 0;
}
template <class... P, std::size_t... I>
int gemm_degree_parts(const peal::BlockDiagonal<P...>& b, bool top, std::index_sequence<I...>) {
  return std::max({0, gemm_degree(b.template part<I>(), top)...});
}
// A composition reached here is nested (in a composition or a basis change): all in the GEMM.
template <class... P>
int gemm_degree(const peal::BlockDiagonal<P...>& b, bool) {
  return gemm_degree_parts(b, false, std::index_sequence_for<P...>{});
}
template <class E>
int gemm_degree(const peal::BasisChange<E>& b, bool) {
  return gemm_degree(b.inner(), false);
}
// The encoding itself: a composition's own parts are "top-level parts".
template <class... P>
int scores_degree(const peal::BlockDiagonal<P...>& b) {
  return gemm_degree_parts(b, true, std::index_sequence_for<P...>{});
}
template <class E>
int scores_degree(const E& e) {
  return gemm_degree(e, false);
}

template <class E>
struct is_basis_change : std::false_type {};
template <class E>
struct is_basis_change<peal::BasisChange<E>> : std::true_type {};

/// An upper bound of the 2-norm: ||A||_2 <= sqrt(||A||_1 ||A||_inf).
inline LD norm2_bound(const LMatrix& A) {
  if (A.size() == 0) return 0;
  const LD n1 = A.cwiseAbs().colwise().sum().maxCoeff();
  const LD ninf = A.cwiseAbs().rowwise().sum().maxCoeff();
  return std::sqrt(n1 * ninf);
}

// ---- The reference: the family's long double twin, type-erased ---------------------------------
class Oracle {
 public:
  virtual ~Oracle() = default;
  virtual int dim() const = 0;
  virtual LMatrix F(LD t) const = 0;  // A(t)^T (a basis change: A_J(t)^T P^T)
  virtual LMatrix G(LD s) const = 0;  // A(-s)  (a basis change: A_J(-s) P^{-1})
  /// The factor shift_keys applies: A(-delta); for a basis change the inner A_J(-delta)
  /// (docs/kernels-encode.md: G_P(s + delta) = A_J(-delta) G_P(s)).
  virtual LMatrix shift_factor(LD delta) const = 0;
  virtual LD score(const LVector& q, LD t, const LVector& k, LD s) const = 0;
  /// F(p) x (query) or G(p) x (key), through the twin's own encode_query / encode_key.
  virtual LVector encode_at(bool query, LD p, const LVector& x) const = 0;
  /// Sizes of the score bound M = |q| ||A(tau)|| |k|; a basis change measures them where the
  /// kernel computes, in the inner basis: ||P^T|q| ||, ||A_J(tau)||, || |P^{-1}| |k| ||.
  virtual LD lag_norm(LD tau) const = 0;
  virtual LD query_size(const LVector& q) const = 0;
  virtual LD key_size(const LVector& k) const = 0;
  /// A basis change's inner factor A_J(p)^T (query) or A_J(-p) (key), which the kernel applies
  /// to P^T x or P^{-1} x, and those inputs bounded entrywise: |P^T||x|, |P^{-1}||x|.
  virtual LMatrix inner_factor(bool query, LD p) const = 0;
  virtual LVector basis_input(bool query, const LVector& x) const = 0;

  bool rotations = false;  // any rotation (a skew pair of the inner generator)
  bool basis = false;      // a basis change
  /// No Jordan chain: A(tau) is block diagonal with blocks e^{a tau} R (inner basis), so
  /// (A(t - c)^T q) . (A(c - s) k) is q^T A(t - s) k to a few long double ulps of |q| ||A|| |k|
  /// for any common anchor c (the products of the blocks' factors carry no cancellation), and
  /// ||A(tau)||_2 = max_j e^{X_jj tau}.
  bool factorable = false;
  LD rate = 0;     // max |Re lambda| of the blocks
  LD xnorm = 0;    // ||X|| (inner basis)
  int degree = 0;  // Jordan chain length - 1 in scores' GEMM
  LD extra = 0;    // extra terms of the score bound (basis change: 2 (d + 1))
};

template <class EL>
class OracleOf final : public Oracle {
  static_assert(std::is_same<typename EL::Scalar, long double>::value, "the twin is long double");

 public:
  explicit OracleOf(const EL& e) : e_(e) {
    rate = growth_rate(e);
    degree = scores_degree(e);
    const LMatrix X = LMatrix(inner().generator());
    xnorm = X.norm();
    // Factorable also needs X in real Jordan form without chains: every off-diagonal entry
    // one of a pair e^{aτ}R (X_ji = −X_ij, X_ii = X_jj), so that ‖A(τ)‖ = max_j e^{X_jj τ}.
    bool pairs = true;
    for (Index i = 0; i < X.rows(); ++i)
      for (Index j = 0; j < X.cols(); ++j) {
        if (i == j || X(i, j) == 0) continue;
        rotations |= X(i, j) == -X(j, i);
        pairs &= X(i, j) == -X(j, i) && X(i, i) == X(j, j);
      }
    factorable = pairs && gemm_degree(inner(), false) == 0;
    diag_ = X.diagonal();
    if constexpr (is_basis_change<EL>::value) {
      basis = true;
      extra = 2.0L * (e.dim() + 1);
      pt_abs_ = e.P().transpose().cwiseAbs();
      pinv_abs_ = e.P_inverse().cwiseAbs();
    }
  }
  int dim() const override { return int(e_.dim()); }
  LMatrix F(LD t) const override { return LMatrix(e_.F(t)); }
  LMatrix G(LD s) const override { return LMatrix(e_.G(s)); }
  LMatrix shift_factor(LD delta) const override { return LMatrix(inner().G(delta)); }
  LD score(const LVector& q, LD t, const LVector& k, LD s) const override {
    return e_.score(q, t, k, s);
  }
  LVector encode_at(bool query, LD p, const LVector& x) const override {
    LVector y = x;
    if (query)
      e_.encode_query(y, p);
    else
      e_.encode_key(y, p);
    return y;
  }
  LD lag_norm(LD tau) const override {
    if (factorable) {
      LD m = 0;
      for (Index j = 0; j < diag_.size(); ++j) m = std::max(m, std::exp(diag_(j) * tau));
      return m;
    }
    return norm2_bound(LMatrix(inner().A(tau)));
  }
  LD query_size(const LVector& q) const override {
    if constexpr (is_basis_change<EL>::value) return (pt_abs_ * q.cwiseAbs()).norm();
    return q.norm();
  }
  LD key_size(const LVector& k) const override {
    if constexpr (is_basis_change<EL>::value) return (pinv_abs_ * k.cwiseAbs()).norm();
    return k.norm();
  }
  LMatrix inner_factor(bool query, LD p) const override {
    return query ? LMatrix(inner().F(p)) : LMatrix(inner().G(p));
  }
  LVector basis_input(bool query, const LVector& x) const override {
    if constexpr (is_basis_change<EL>::value) return (query ? pt_abs_ : pinv_abs_) * x.cwiseAbs();
    (void)query;
    return x.cwiseAbs();
  }

 private:
  const auto& inner() const {
    if constexpr (is_basis_change<EL>::value)
      return e_.inner();
    else
      return e_;
  }
  const EL& e_;
  LMatrix pt_abs_, pinv_abs_;
  LVector diag_;
};

// ---- The cases, their positions and inputs ----------------------------------------------------
enum class PosKind { regular, irregular, large };

/// Positions of one side: a sequence, or a span owned here.
struct PositionSet {
  std::vector<double> v;  // every position (also for a sequence)
  bool sequence = false;
  double start = 0, step = 0;
  Positions positions() const { return sequence ? Positions::sequence(start, step) : Positions(v); }
  LD max_abs() const {
    LD m = 0;
    for (double x : v) m = std::max(m, std::abs(LD(x)));
    return m;
  }
};

/// Growth allowed over a span of times: e^{rate span} <= e^40 keeps every score far inside the
/// float range (docs/kernels-scores.md §3: the kernel needs 2^16 of headroom) and keeps encode
/// defined where it is checked.
constexpr LD kMaxGrowth = 40;

// ---- Running statistics of one family, for the report ------------------------------------------
struct Stats {
  explicit Stats(const char* f) : family(f) {}
  const char* family;
  Index enc_checked[4] = {0, 0, 0, 0}, enc_skipped = 0, shift_checked = 0, score_checked = 0,
        score_skipped = 0;
  LD worst_encode = 0, worst_shift = 0, worst_scores = 0;  // max |err| / tol
  std::string worst_scores_at;
  // attention: rows checked (sharp: logit error <= 0.1), rows outside the domain, rows with no
  // visible key, keys_encoded runs (or the throws checked), worst err / tol.
  Index att_checked = 0, att_sharp = 0, att_skipped = 0, att_empty = 0, att_encoded = 0,
        att_throws = 0;
  LD worst_attention = 0;
  std::string worst_attention_at;
  // With PEAL_CONFORMANCE_REPORT set: counts and worst ratios per family (2: and the worst score).
  void print() const {
    const char* report = std::getenv("PEAL_CONFORMANCE_REPORT");
    if (!report) return;
    std::printf(
        "conformance %-14s encode f/d/h/bf %lld/%lld/%lld/%lld (skipped %lld) worst %.3Lg | shift "
        "%lld worst %.3Lg | scores %lld (skipped %lld) worst %.3Lg\n",
        family, (long long)enc_checked[0], (long long)enc_checked[1], (long long)enc_checked[2],
        (long long)enc_checked[3], (long long)enc_skipped, worst_encode, (long long)shift_checked,
        worst_shift, (long long)score_checked, (long long)score_skipped, worst_scores);
    std::printf(
        "  attention rows %lld (sharp %lld, skipped %lld, empty %lld), keys_encoded runs %lld, "
        "throws %lld, worst %.3Lg\n",
        (long long)att_checked, (long long)att_sharp, (long long)att_skipped, (long long)att_empty,
        (long long)att_encoded, (long long)att_throws, worst_attention);
    if (report[0] == '2') std::printf("  worst score: %s\n", worst_scores_at.c_str());
    if (report[0] == '2') std::printf("  worst attention: %s\n", worst_attention_at.c_str());
  }
};

/// Random inputs in (-1, 1), rounded to the view's storage type (the reference reads them back).
/// shape (optional): a family's fixed coordinates (ALiBi's augmentation), per head.
using Shaper = void (*)(bool query, int head, int heads, LVector& v);

/// One case of the encode covering design.
struct EncodeCase {
  Index tokens, heads;
  PosKind pos;
  bool sequence;  // large positions as Positions::sequence (else a span)
  Storage src, dst;
  Shape src_shape, dst_shape;
  bool in_place;
  double delta;  // of shift_keys
};

/// output layout) against one reference.
struct ScoreCase {
  Index nq, nk, Hk, G;
  PosKind pos;
  bool sequence;
  StorageTriple st;
  Shape qs, ks;
  int variant[2], out_layout[2];
};

// c = 0 .. 34: storage x variant (c % 4, c % 5: all 20), storage x positions (c % 4, c % 3:
// all 12), variant x positions (all 15), sizes c % 11 (1 x 1 up to 257 x 17 and 65 x 65; the
// per-pair reference bounds them), heads Hk (c / 2) % 2 in {1, 3}, Hq = G Hk with G (c / 4) % 2

struct ScorePositions {
  PositionSet tq, tk;
  LD span = 0;  // max |t_i - s_j|
};

/// The long double reference of one problem: q^T A(t - s) k per pair and the sizes of the bound.
struct ScoreReference {
  Index Hq, nq, nk, G;
  std::vector<LD> raw;    // [h][i][j]
  std::vector<LD> qsize;  // [i][h]
  std::vector<LD> ksize;  // [j][hk]
  std::vector<LD> lag;    // [i][j]: ||A(t_i - s_j)||
};

/// What one scores case shares with every kernel built on the same problem (scores now, a later
/// attention kernel): q and k stored with their geometry, their positions, and the long double
/// reference q^T A(t - s) k per pair with the sizes of its bound.
struct ScoreInputs {
  ScoreInputs(const Oracle& o, const ScoreCase& c, const ScorePositions& positions, Shaper shape,
              std::mt19937_64& rng);
  const ScorePositions& P;
  Buffer q, k;
  ScoreReference ref;
};

// ---- The checks, defined once in tests/conformance_checks.cpp ---------------------------------
// Type-erased (an Oracle and a KernelSet, not a family), so that the nine suite TUs share one
// compiled copy instead of compiling them each (docs/build-cost.md §3).
/// Random inputs in (-1, 1), rounded to the view's storage type (the reference reads them back).
/// shape (optional): a family's fixed coordinates (ALiBi's augmentation), per head.
void fill_inputs(Buffer& b, std::mt19937_64& rng, Shaper shape = nullptr, bool query = true);
/// Entries [at, at + d) of v.
LVector segment(const std::vector<LD>& v, Index at, Index d);
EncodeCase encode_case(int c, bool full);
PositionSet encode_positions(const EncodeCase& e, std::mt19937_64& rng);
void check_encode_case(const Oracle& o, const KernelSet& ks, const EncodeCase& ec,
                       const PositionSet& ps, bool enc_long, std::mt19937_64& rng, Stats& st);
ScoreCase score_case(int c, bool full);
ScorePositions score_positions(const ScoreCase& c, std::mt19937_64& rng);
void check_scores_case(const Oracle& o, const KernelSet& ks, const ScoreCase& c,
                       const ScoreInputs& in, bool params_double, Stats& st);
void check_attention_case(const Oracle& o, const KernelSet& ks, const ScoreCase& c, int ci,
                          const ScoreInputs& in, bool params_double, std::mt19937_64& rng,
                          Stats& st);
void check_score_threads(const Oracle& o, const KernelSet& ks, Storage type, std::mt19937_64& rng);
void check_encode_threads(const Oracle& o, const KernelSet& ks, std::mt19937_64& rng);
void check_attention_threads(const Oracle& o, const KernelSet& ks, Storage type,
                             std::mt19937_64& rng);

// ---- The driver: one family
// ----------------------------------------------------------------------

constexpr int kEncodeCases = 28;  // encode_case
constexpr int kScoreCases = 35;   // score_case
constexpr int kLongEvery = 4;     // every 4th case also runs the long double encoding

template <class Fam, class = void>
struct has_shape : std::false_type {};
template <class Fam>
struct has_shape<Fam, std::void_t<decltype(&Fam::template shape<LVector>)>> : std::true_type {};
template <class Fam>
Shaper shaper_of() {
  if constexpr (has_shape<Fam>::value)
    return &Fam::template shape<LVector>;
  else
    return nullptr;
}

/// The family's encoding in double and its long double twin, from one random stream, in the
/// most random regime whose growth over `span` stays within kMaxGrowth (Random: |real| <= 0.5,
/// Large: <= 5e-4, Zero: none); families without growth keep random parameters at any time.
template <class Fam>
auto build_twins(std::uint64_t seed, LD span) {
  for (Regime regime : {Regime::Random, Regime::Large, Regime::Zero}) {
    std::mt19937_64 r1(seed), r2(seed);
    Draw d1{r1, regime}, d2{r2, regime};
    auto e = Fam::template build<double>(d1);
    auto el = Fam::template build<long double>(d2);
    if (regime == Regime::Zero || growth_rate(el) * span <= kMaxGrowth) {
      // Twins: the same generator, to the rounding of the double one.
      const LMatrix X = LMatrix(el.generator()),
                    Xd = peal::Matrix<double>(e.generator()).template cast<LD>();
      REQUIRE(double((X - Xd).norm()) <= double(4 * Tol<double>::eps * (1 + X.norm())));
      return std::make_pair(std::move(e), std::move(el));
    }
  }
  throw std::logic_error("unreachable");
}

/// Every kernel on one family: encode (queries, keys, shift) and scores over their covering
/// designs, for the double encoding with every storage type and for the long double encoding
/// with float and double, then the thread-count checks.
template <class Fam>
void run_kernel_conformance(std::uint64_t seed) {
  Stats st(Fam::name);
  std::mt19937_64 rng(seed);
  for (int c = 0; c < kEncodeCases; ++c)
    for (bool full : {true, false}) {
      if (!full && c % kLongEvery != 0) continue;
      const EncodeCase ec = encode_case(c, full);
      const PositionSet ps = encode_positions(ec, rng);
      const auto tw = build_twins<Fam>(rng(), ps.max_abs());
      const OracleOf<std::decay_t<decltype(tw.second)>> o(tw.second);
      CAPTURE(Fam::name, c, full, double(o.rate));
      if (full)
        check_encode_case(o, KernelsOf<std::decay_t<decltype(tw.first)>, true>(tw.first), ec, ps,
                          false, rng, st);
      else
        check_encode_case(o, KernelsOf<std::decay_t<decltype(tw.second)>, false>(tw.second), ec, ps,
                          true, rng, st);
    }
  for (int c = 0; c < kScoreCases; ++c)
    for (bool full : {true, false}) {
      if (!full && c % kLongEvery != 0) continue;
      const ScoreCase sc = score_case(c, full);
      const ScorePositions P = score_positions(sc, rng);
      const auto tw = build_twins<Fam>(rng(), P.span);
      const OracleOf<std::decay_t<decltype(tw.second)>> o(tw.second);
      CAPTURE(Fam::name, c, full, double(o.rate));
      const ScoreInputs in(o, sc, P, shaper_of<Fam>(), rng);
      if (full)
        check_scores_case(o, KernelsOf<std::decay_t<decltype(tw.first)>, true>(tw.first), sc, in,
                          false, st);
      else
        check_scores_case(o, KernelsOf<std::decay_t<decltype(tw.second)>, false>(tw.second), sc, in,
                          true, st);
      if (full)
        check_attention_case(o, KernelsOf<std::decay_t<decltype(tw.first)>, true>(tw.first), sc, c,
                             in, false, rng, st);
      else
        check_attention_case(o, KernelsOf<std::decay_t<decltype(tw.second)>, false>(tw.second), sc,
                             c, in, true, rng, st);
    }
  {
    const auto tw = build_twins<Fam>(rng(), 40);  // the thread checks' positions stay within 40
    const OracleOf<std::decay_t<decltype(tw.second)>> o(tw.second);
    const KernelsOf<std::decay_t<decltype(tw.first)>, true> ks(tw.first);
    CAPTURE(Fam::name);
    check_score_threads(o, ks, Storage::f32, rng);
    check_score_threads(o, ks, Storage::f64, rng);
    check_encode_threads(o, ks, rng);
    check_attention_threads(o, ks, Storage::f32, rng);
    check_attention_threads(o, ks, Storage::f64, rng);
  }
  // The suite cannot pass by skipping: every storage type, the shift and scores were checked.
  CAPTURE(Fam::name, st.enc_skipped);
  for (int s = 0; s < 4; ++s) CHECK(st.enc_checked[s] > 0);
  CHECK(st.shift_checked > 0);
  CHECK(st.score_checked > 0);
  CHECK(st.att_checked > 0);
  CHECK(st.att_empty > 0);
  CHECK(st.att_encoded + st.att_throws > 0);
  st.print();
}

}  // namespace conformance
}  // namespace peal_test

// The kernels of every family are compiled in tests/kernels/conformance_*.cpp.
PEAL_CONFORMANCE_EXTERN_ALL();
