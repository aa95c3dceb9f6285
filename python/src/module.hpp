// The shared half of the module _peal_torch: the encoding the kernels run, batches of NumPy
// arrays as peal views, the batch loop, the gradients' containers and the options as the
// Python side sets them. The kernels (python/src/kernels.hpp) compile once per storage type:
// float32 in module.cpp at -O3 (the op's training path: 25-35 % faster than at -O2, measured at
// n = 256, 4 heads, d = 128), float64 in float64.cpp at the tests' -O2 (gradcheck and the
// tests' references): two TUs under 60 s each that build side by side (docs/build-cost.md §4).
//
// The kernels run an encoding chosen at run time from three banks of learnable blocks, in this
// order on the coordinates of each head, and the identity on the rest:
//
//     A(τ) = diag(e^{a_i τ} R(ω_i τ)) ⊕ diag(e^{λ_r τ}) ⊕ diag(e^{μ_j τ} [[1, τ], [0, 1]]) ⊕ I,
//
// rotation pairs (ω, a) on the first 2n coordinates (RoPE: a = 0; xPos / RetNet-like: a < 0;
// half-split or interleaved), real blocks λ (decay, growth or constant) on the next m, Jordan
// blocks of size 2 with eigenvalue μ (a score linear in the distance, times e^{μτ}) on the
// next 2j: the encoding BlockDiagonal<Bank<RotationBlock>, Bank<RealBlock>,
// Bank<JordanBlock<2>>, PassThrough> (docs/design.md §1; a bank of zero blocks is empty).
// RoPE is the case m = j = 0, the encoding peal::RopeEncoding is
// (include/peal/presets/rope.hpp) with an empty real and Jordan bank.
//
// The kernels run over NumPy arrays that share memory with the torch tensors (inputs
// c-contiguous, converted when they are not; outputs allocated here), a whole batch
// [batch, tokens, heads, dim] per call (over_batch: its elements side by side on the threads).
// Bad input raises ValueError (peal::invalid_argument): each element's kernel checks its inputs
// before it writes, and the outputs are new arrays, dropped when any element throws. The GIL is
// released while the kernels run.
#pragma once

#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <algorithm>
#include <limits>
#include <optional>
#ifdef _OPENMP
#include <omp.h>
#endif
#include <peal/bank.hpp>
#include <peal/block_diagonal.hpp>
#include <peal/detail/parallel.hpp>
#include <peal/detail/tiled/tile_plan.hpp>
#include <peal/errors.hpp>
#include <peal/jordan_block.hpp>
#include <peal/linear_options.hpp>
#include <peal/multi_axis.hpp>
#include <peal/pass_through.hpp>
#include <peal/positions.hpp>
#include <peal/positions_nd.hpp>
#include <peal/real_block.hpp>
#include <peal/rotation_block.hpp>
#include <peal/view.hpp>
#include <string>
#include <utility>
#include <vector>

namespace peal_torch {

namespace py = pybind11;

using Encoding =
    peal::BlockDiagonal<peal::Bank<peal::RotationBlock<double>>, peal::Bank<peal::RealBlock<double>>,
                        peal::Bank<peal::JordanBlock<2, double>>, peal::PassThrough<double>>;
template <class T>
using In = py::array_t<T, py::array::c_style | py::array::forcecast>;
using peal::Index;
using peal::Positions;
using peal::TensorView;

[[noreturn]] inline void fail(const std::string& what) {
  throw peal::invalid_argument("peal_torch: " + what);
}

// A batch of tensors [batch, tokens, heads, dim] (c-contiguous): element b as a view.
template <class T>
struct Batch {
  T* data;
  Index batch, tokens, heads, dim;
  TensorView<T> operator[](Index b) const {
    return TensorView<T>(data + b * tokens * heads * dim, tokens, heads, dim);
  }
};

template <class T>
Batch<const T> batch(const In<T>& a, const char* name) {
  if (a.ndim() != 4) fail(std::string(name) + " must be [batch, tokens, heads, dim]");
  return {a.data(), Index(a.shape(0)), Index(a.shape(1)), Index(a.shape(2)), Index(a.shape(3))};
}

// A new [batch, tokens, heads, dim] array (tokens = 0: not wanted).
template <class T>
py::array_t<T> empty_batch(Index b, Index tokens, Index heads, Index dim) {
  return py::array_t<T>({py::ssize_t(b), py::ssize_t(tokens), py::ssize_t(heads), py::ssize_t(dim)});
}

template <class T>
Batch<T> batch(py::array_t<T>& a) {
  return {a.mutable_data(), Index(a.shape(0)), Index(a.shape(1)), Index(a.shape(2)),
          Index(a.shape(3))};
}

// Positions [batch, tokens] (float64).
struct BatchPositions {
  const double* data;
  Index batch, tokens;
  Positions operator[](Index b) const { return Positions(data + b * tokens, tokens); }
};

inline BatchPositions positions(const In<double>& t, const char* name, Index b, Index tokens) {
  if (t.ndim() != 2 || t.shape(0) != b || t.shape(1) != tokens)
    fail(std::string(name) + " must be [" + std::to_string(b) + ", " + std::to_string(tokens) + "]");
  return {t.data(), b, tokens};
}

inline void same_batch(Index a, Index b, Index c) {
  if (a != b || a != c) fail("q, k and v must have the same batch size");
}

// fn(b, threads) for every batch element b: the elements side by side, one thread each, when
// there are at least as many as threads (the kernels thread within one element over query
// tiles or key heads, which a short sequence has few of: issue 22's training shapes), else one
// after another, each with every thread. The kernels' results do not depend on their thread
// count, so neither do these. The first exception thrown is rethrown after the loop.
template <class Fn>
void over_batch(Index b, int threads, Fn&& fn) {
  if (threads < 0) fail("threads must be >= 0 (0: OpenMP's maximum)");
#ifdef _OPENMP
  // At most the kernels' own bound (detail/tiled/tile_plan.hpp): no count asks OpenMP for
  // millions of threads.
  const int t = std::min(threads > 0 ? threads : omp_get_max_threads(),
                         peal::detail::tiled::kMaxThreads);
#else
  const int t = 1;
#endif
  if (b >= t && t > 1)
    peal::detail::parallel_each(b, t, [&](std::ptrdiff_t x) { fn(Index(x), 1); });
  else
    for (Index x = 0; x < b; ++x) fn(x, t);
}

// A [batch, n] array of the batch's per-element gradients.
inline py::array_t<double> array2(const std::vector<std::vector<double>>& v, Index n) {
  py::array_t<double> a({py::ssize_t(v.size()), py::ssize_t(n)});
  double* p = a.mutable_data();
  for (const auto& x : v) p = std::copy(x.begin(), x.end(), p);
  return a;
}

// The sum over the batch of n-entry gradients, in the order of its elements (the same bits for
// any thread count; n zeros for an empty batch).
inline std::vector<double> summed(const std::vector<std::vector<double>>& v, std::size_t n) {
  std::vector<double> s(n, 0.0);
  for (const auto& x : v)
    for (std::size_t i = 0; i < s.size(); ++i) s[i] += x[i];
  return s;
}

inline std::vector<double> vec(const std::optional<In<double>>& a, const char* name) {
  if (!a) return {};
  if (a->ndim() != 1) fail(std::string(name) + " must be 1-D");
  return std::vector<double>(a->data(), a->data() + a->shape(0));
}

inline py::array_t<double> array(const std::vector<double>& v) {
  py::array_t<double> a(py::ssize_t(v.size()));
  std::copy(v.begin(), v.end(), a.mutable_data());
  return a;
}

// Which gradients a backward returns (None for the others).
struct Wants {
  bool q = true, k = true, v = true, parameters = true, tq = false, tk = false, slopes = false,
       sinks = false, decay = false;
};

inline py::object maybe(bool wanted, py::object x) { return wanted ? x : py::object(py::none()); }

// What every backward returns for a batch: dq, dk, dv (new arrays; 0 tokens when not wanted)
// and, per element, the gradients of the parameters and of the query and key positions
// (per_token entries per token: 1, or one per axis of N-D points, token-major).
template <class T>
struct BatchGradients {
  const Wants& w;
  std::size_t np;
  Index nq, nk;  // position-gradient entries of an element: tokens × per_token
  py::array_t<T> dq, dk, dv;
  Batch<T> dqb, dkb, dvb;
  std::vector<std::vector<double>> par, tq, tk;

  BatchGradients(const Wants& wants, const Batch<const T>& q, const Batch<const T>& k,
                 const Batch<const T>& v, std::size_t parameters, Index per_token = 1)
      : w(wants), np(parameters), nq(q.tokens * per_token), nk(k.tokens * per_token),
        dq(empty_batch<T>(q.batch, w.q ? q.tokens : 0, q.heads, q.dim)),
        dk(empty_batch<T>(q.batch, w.k ? k.tokens : 0, k.heads, k.dim)),
        dv(empty_batch<T>(q.batch, w.v ? v.tokens : 0, v.heads, v.dim)),
        dqb(batch(dq)), dkb(batch(dk)), dvb(batch(dv)),
        par(std::size_t(q.batch), std::vector<double>(parameters)),
        tq(std::size_t(q.batch), std::vector<double>(std::size_t(nq))),
        tk(std::size_t(q.batch), std::vector<double>(std::size_t(nk))) {}

  TensorView<T> dq_of(Index b) const { return w.q ? dqb[b] : TensorView<T>(); }
  TensorView<T> dk_of(Index b) const { return w.k ? dkb[b] : TensorView<T>(); }
  TensorView<T> dv_of(Index b) const { return w.v ? dvb[b] : TensorView<T>(); }
  std::vector<double>* par_of(Index b) { return w.parameters ? &par[std::size_t(b)] : nullptr; }
  std::vector<double>* tq_of(Index b) { return w.tq ? &tq[std::size_t(b)] : nullptr; }
  std::vector<double>* tk_of(Index b) { return w.tk ? &tk[std::size_t(b)] : nullptr; }

  // [dq, dk, dv, d_parameters summed over the batch, d_tq [B, nq], d_tk [B, nk]] (for points:
  // [B, tokens × axes], token-major).
  py::list results() const {
    py::list r;
    r.append(maybe(w.q, dq));
    r.append(maybe(w.k, dk));
    r.append(maybe(w.v, dv));
    r.append(maybe(w.parameters, array(summed(par, np))));
    r.append(maybe(w.tq, array2(tq, nq)));
    r.append(maybe(w.tk, array2(tk, nk)));
    return r;
  }
};

// The encoding's parameters as the Python side gives them (float64): ω and a (n each), λ of
// the real blocks (m), μ of the Jordan blocks (j); the rotation pairs' layout. 1-D arrays for
// 1-D positions; [D, blocks] (one row per axis, a MultiAxis) for N-D points.
struct Blocks {
  In<double> omega, a, real, jordan;
  bool interleaved = false;
};

inline peal::Bank<peal::RotationBlock<double>> rotation_bank(const double* omega, const double* a,
                                                              Index n, bool interleaved) {
  std::vector<peal::RotationBlock<double>> rot;
  for (Index i = 0; i < n; ++i) rot.emplace_back(omega[i], a[i]);
  return peal::Bank<peal::RotationBlock<double>>(
      rot, interleaved ? peal::Layout::Interleaved : peal::Layout::HalfSplit);
}

template <class B>
peal::Bank<B> bank(const double* x, Index n) {
  std::vector<B> blocks;
  for (Index i = 0; i < n; ++i) blocks.emplace_back(x[i]);
  return peal::Bank<B>(blocks);
}

inline void check_fit(Index n, Index m, Index j, Index head_dim) {
  if (2 * n + m + 2 * j > head_dim)
    fail(std::to_string(n) + " rotary pairs, " + std::to_string(m) + " real blocks and " +
         std::to_string(j) + " Jordan blocks (" + std::to_string(2 * n + m + 2 * j) +
         " coordinates) do not fit a head of " + std::to_string(head_dim));
}

// Each bank from its parameters, in the order of Blocks (2n + m + 2j <= head_dim); the
// parameter gradients come back in the same order: [ω, a, λ, μ].
inline Encoding encoding(const Blocks& p, Index head_dim) {
  for (const In<double>* x : {&p.omega, &p.a, &p.real, &p.jordan})
    if (x->ndim() != 1) fail("omega, a, real and jordan must be 1-D");
  if (p.omega.shape(0) != p.a.shape(0)) fail("omega and a must have one entry per rotary pair");
  const Index n = Index(p.omega.shape(0)), m = Index(p.real.shape(0)), j = Index(p.jordan.shape(0));
  check_fit(n, m, j, head_dim);
  return Encoding(rotation_bank(p.omega.data(), p.a.data(), n, p.interleaved),
                  bank<peal::RealBlock<double>>(p.real.data(), m),
                  bank<peal::JordanBlock<2, double>>(p.jordan.data(), j),
                  peal::PassThrough<double>(int(head_dim - 2 * n - m - 2 * j)));
}

// Over N-D points p ∈ ℝᴰ: A(p) = Π_a A_a(p_a) with axis a's blocks from row a of each
// parameter (peal::MultiAxis, include/peal/multi_axis.hpp: RoPE-Mixed when a pair has
// frequencies on several axes, axial or M-RoPE-like when each pair has one). No Jordan bank:
// polynomial factors at points are refused by peal's N-D kernels (include/peal/scores_nd.hpp).
using PointAxis = peal::BlockDiagonal<peal::Bank<peal::RotationBlock<double>>,
                                      peal::Bank<peal::RealBlock<double>>, peal::PassThrough<double>>;
using PointEncoding = peal::MultiAxis<PointAxis>;

// The MultiAxis of rows [D, blocks]; the parameter gradients come back axis by axis, each
// [ω, a, λ] (include/peal/parameters.hpp: "axis[a].").
inline PointEncoding point_encoding(const Blocks& p, Index head_dim) {
  for (const In<double>* x : {&p.omega, &p.a, &p.real})
    if (x->ndim() != 2) fail("over N-D points, omega, a and real must be [axes, blocks]");
  if (p.jordan.size() != 0)
    fail("Jordan blocks need 1-D positions: their polynomial factors at N-D points lose "
         "precision (peal's N-D kernels refuse them)");
  const Index D = Index(p.omega.shape(0)), n = Index(p.omega.shape(1)), m = Index(p.real.shape(1));
  if (p.a.shape(0) != D || p.a.shape(1) != n || p.real.shape(0) != D)
    fail("omega, a and real must have one row per axis, and omega and a one entry per pair");
  check_fit(n, m, 0, head_dim);
  std::vector<PointAxis> axes;
  for (Index x = 0; x < D; ++x)
    axes.emplace_back(rotation_bank(p.omega.data() + x * n, p.a.data() + x * n, n, p.interleaved),
                      bank<peal::RealBlock<double>>(p.real.data() + x * m, m),
                      peal::PassThrough<double>(int(head_dim - 2 * n - m)));
  return PointEncoding(std::move(axes));  // checks 1 <= D <= 16
}

// 1-D positions [batch, tokens] (Line) or N-D points [batch, tokens, axes] (Points): the
// encoding of each, its positions per batch element, and how many position-gradient entries
// a token has (1, or one per axis, token-major as peal's N-D backwards give them).
struct Line {
  using Enc = Encoding;
  static Enc encoding(const Blocks& b, Index dim) { return peal_torch::encoding(b, dim); }
  static BatchPositions positions(const In<double>& t, const char* name, Index b, Index tokens) {
    return peal_torch::positions(t, name, b, tokens);
  }
  static Index per_token(const Enc&) { return 1; }
};

struct BatchPoints {
  const double* data;
  Index batch, tokens;
  int axes;
  peal::PositionsND operator[](Index b) const {
    return peal::PositionsND(data + b * tokens * axes, tokens, axes);
  }
};

struct Points {
  using Enc = PointEncoding;
  static Enc encoding(const Blocks& b, Index dim) { return point_encoding(b, dim); }
  static BatchPoints positions(const In<double>& t, const char* name, Index b, Index tokens) {
    if (t.ndim() != 3 || t.shape(0) != b || t.shape(1) != tokens || t.shape(2) < 1 ||
        t.shape(2) > peal::max_position_axes)
      fail(std::string(name) + " must be [" + std::to_string(b) + ", " + std::to_string(tokens) +
           ", axes] with 1 <= axes <= " + std::to_string(peal::max_position_axes));
    return {t.data(), b, tokens, int(t.shape(2))};
  }
  static Index per_token(const Enc& e) { return Index(e.axes()); }
};

struct Options {
  bool causal = false;
  double window = std::numeric_limits<double>::infinity();
  std::optional<In<double>> alibi_slopes, sinks;
  double softcap = 0;
  std::optional<double> scale;
  int threads = 0;
};

struct LinearOptions {
  std::optional<In<double>> decay;
  std::optional<double> scale;
  std::string form = "automatic";
  Index chunk = 0;
  int threads = 0;
  std::string normalization = "none";

  peal::LinearAttentionOptions linear() const {
    peal::LinearAttentionOptions o;
    o.decay = vec(decay, "decay");
    o.scale = scale;
    o.chunk = chunk;
    o.threads = threads;
    if (normalization == "retnet")
      o.normalization = peal::LinearNorm::retnet;
    else if (normalization != "none")
      fail("normalization must be 'none' or 'retnet', not '" + normalization + "'");
    using F = peal::LinearForm;
    static const std::pair<const char*, F> forms[] = {
        {"automatic", F::automatic}, {"parallel", F::parallel}, {"chunkwise", F::chunkwise},
        {"recurrent", F::recurrent}};
    for (const auto& f : forms)
      if (form == f.first) {
        o.form = f.second;
        return o;
      }
    fail("form must be 'automatic', 'parallel', 'chunkwise' or 'recurrent', not '" + form + "'");
  }
};

// The float64 kernels' bindings (python/src/float64.cpp; module.cpp binds the float32 ones),
// and those of the kernels over N-D points (python/src/points.cpp: float32,
// python/src/points_float64.cpp: float64).
void bind_float64(py::module_& m);
void bind_points(py::module_& m);
void bind_points_float64(py::module_& m);

}  // namespace peal_torch
