// Coders of the fused scores kernel (scores.hpp): for each encoding type, how A(δ) is
// tabulated and applied to rows of the arithmetic type C, and which parts of a composition
// are left to the per-pair polynomial epilogue (scores_poly.hpp). The interface every coder
// implements is described at "---- Coders" below; coder_t<C, E> picks one per encoding.
#pragma once

#include <Eigen/Core>
#include <Eigen/Eigenvalues>
#include <algorithm>
#include <array>
#include <cmath>
#include <complex>
#include <cstdint>
#include <cstring>
#include <limits>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include "../../bank.hpp"
#include "../../basis_change.hpp"
#include "../../block_diagonal.hpp"
#include "../../block_traits.hpp"
#include "../../encoding.hpp"
#include "../../real_block.hpp"
#include "../../rotation_block.hpp"
#include "../compiler.hpp"
#include "../math/exp_kernel.hpp"
#include "../math/exp_poly.hpp"
#include "../math/sincos.hpp"
#include "../storage.hpp"
#include "poly_parts.hpp"
#include "row_loops.hpp"

namespace peal {
namespace detail {
namespace coders {

// ---- Generic growth rate and chain length of a dense generator ----------------------------
// Templates on purpose: as plain inline functions, EigenSolver was instantiated and compiled
// in every TU that includes this header (~10 s at -O2, docs/build-cost.md), used or not.
template <class S>
double generic_rate(const Matrix<S>& X) {
  if (X.size() == 0) return 0;
  Eigen::EigenSolver<Matrix<S>> es(X, /*computeEigenvectors=*/false);
  double r = 0;
  for (Index i = 0; i < es.eigenvalues().size(); ++i)
    r = std::max(r, std::abs(es.eigenvalues()(i).real()));
  // A defective eigenvalue is found only to ~ε^(1/m): treat tiny real parts as zero only
  // when the generator is normal (then the eigenvalues are well conditioned).
  return r;
}
/// 0 if X is normal (diagonalisable, no polynomial growth), else a conservative dim − 1.
template <class S>
int generic_degree(const Matrix<S>& X) {
  if (X.size() == 0) return 0;
  const double n = X.norm();
  const double c = (X * X.transpose() - X.transpose() * X).norm();
  return c <= 1e-12 * n * n ? 0 : int(X.rows()) - 1;
}

inline double clamp_magnitude(double g) {
  return g < std::numeric_limits<double>::max() ? g : std::numeric_limits<double>::max();
}

// ---- Coders -------------------------------------------------------------------------------
// A coder evaluates an encoding's A(δ) as tables and applies them to rows of the arithmetic
// type C. Interface:
//   int dim() const; double rate() const; int degree() const; bool identity() const;
//   int rel_size() const;   doubles per row of a relative table
//   int coef_size() const;  C values per row of a coefficient table
//   void relative(const double* delta, Index n, double* rel, Index ld) const;
//       rows r < n of `rel` (stride ld) describe A(delta[r]) (magnitude and shape kept apart,
//       so that composing a huge and a tiny factor never forms inf · 0)
//   void compose(const double* x, const double* rel, Index ldr, Index n, C* coef, Index ldc,
//                bool transpose) const;
//       coef row r = A(Dx) A(δ_r), x one row of relative() for Dx (x == nullptr: A(δ_r)),
//       laid out for applying A (transpose = false, keys) or A^T (true, queries)
//   void apply(const C* coef, const C* src, C* dst, bool transpose, C* scratch) const;
//       dst <- A src or A^T src over the coder's dim() coordinates, with the same transpose
//       flag as compose; dst == src is allowed (scratch: 2 dim() values)
//   bool signature(std::vector<double>& sig) const;  appends every parameter the tables depend
//       on (false: the coder cannot be identified, its tables are never reused across calls)
//   void apply_factor(...) const;  same, for a second factor of an already encoded vector
//       (differs from apply() only for BasisChange, whose P^T / P^{-1} is applied once)
//   void apply_both(coef, coefx, src, dst, transpose, scratch) const;  optional: apply() of
//       coef then apply_factor() of coefx in one pass (see the free function apply_both)
// Encode (CoderKernel, detail/encode/kernels.hpp: one row per token, applied to the token's heads) also uses
//   bool out_of_range(const double* rel, const C* coef) const;  whether a row (one row of
//       relative() and its compose()) cannot be applied in C: a magnitude past DBL_MAX (clamped)
//       or a coefficient not finite in C, where apply() would meet inf · 0
//   void apply_exact(double delta, const double* rel, const C* src, C* dst, bool transpose,
//                    bool factor, C* scratch) const;  dst <- A(delta) src (or A^T, or the
//       apply_factor() form when factor) computed past the range of C: rotation first, then
//       the factor by mul_exp (detail/math/exp_poly.hpp), so that 0 stays 0. Not the hot path.
//   void apply_heads(coef, x, xs, y, ys, heads, transpose, factor, scratch) const;  optional:
//       apply() (or apply_factor()) to `heads` vectors x + h xs -> y + h ys (x == y allowed),
//       the hand-vectorised loops of detail/coders/row_loops.hpp (see the free function apply_heads)
// scratch is 4 dim() values everywhere.

template <class C, class E, class = void>
struct coder_for;
template <class C, class E>
using coder_t = typename coder_for<C, E>::type;

/// Bank<RotationBlock> with double parameters: per block (cos, sin) of ω δ (exact angle
/// reduction) and, unless every a = 0, the magnitude e^{a δ}.
template <class C>
class RotationBankCoder {
 public:
  template <class S>
  explicit RotationBankCoder(const Bank<RotationBlock<S>>& bank)
      : nb_(bank.size()), interleaved_(bank.layout() == Layout::Interleaved) {
    const auto& p = bank.params();
    w_hi_.resize(std::size_t(nb_));
    w_lo_.resize(std::size_t(nb_));
    a_.resize(std::size_t(nb_));
    for (int b = 0; b < nb_; ++b) {
      w_hi_[std::size_t(b)] = double(p(b, 0));
      w_lo_[std::size_t(b)] = double(p(b, 1));
      a_[std::size_t(b)] = double(p(b, 2));
      rate_ = std::max(rate_, std::abs(a_[std::size_t(b)]));
    }
    pure_ = rate_ == 0;
  }
  int dim() const { return 2 * nb_; }
  double rate() const { return rate_; }
  int degree() const { return 0; }
  bool identity() const { return nb_ == 0; }
  int rel_size() const { return (pure_ ? 2 : 3) * nb_; }  // [cos | sin | magnitude]
  // Interleaved: complex z_b = (c_b, w_b), w = ∓s, so that the pair (x0 + i x1) becomes
  // (x0 + i x1) z_b (Eigen's vectorised complex product); half-split: [c | ±s]. dim() values.
  int coef_size() const { return 2 * nb_; }
  bool signature(std::vector<double>& sig) const {
    sig.push_back(1);  // coder kind
    sig.push_back(nb_);
    sig.push_back(interleaved_);
    sig.insert(sig.end(), w_hi_.begin(), w_hi_.end());
    sig.insert(sig.end(), w_lo_.begin(), w_lo_.end());
    sig.insert(sig.end(), a_.begin(), a_.end());
    return true;
  }

  void relative(const double* delta, Index n, double* rel, Index ld) const {
    // Evenly spaced deltas (every regular tile): exact rows every kExact rows, the rows in
    // between by the angle-addition recurrence A(δ + σ) = A(δ) A(σ) in double (error ≤ kExact
    // ulps of double, far below the arithmetic type's rounding): a 16x cheaper table.
    constexpr Index kExact = 16;
    bool even = n > 2;
    const double step = n > 1 ? delta[1] - delta[0] : 0.0;
    for (Index r = 2; even && r < n; ++r) even = delta[r] == delta[0] + double(r) * step;
    if (!even) {
      for (Index r = 0; r < n; ++r) exact_row(delta[r], rel + r * ld);
      return;
    }
    std::vector<double> st(std::size_t(3 * nb_));
    exact_row(step, st.data());
    const double* PEAL_RESTRICT sc = st.data();
    const double* PEAL_RESTRICT ss = sc + nb_;
    const double* PEAL_RESTRICT sg = ss + nb_;
    for (Index r = 0; r < n; ++r) {
      double* PEAL_RESTRICT c = rel + r * ld;
      if (r % kExact == 0) {
        exact_row(delta[r], c);
        continue;
      }
      const double* PEAL_RESTRICT pc = c - ld;
      const double* PEAL_RESTRICT ps = pc + nb_;
      double* PEAL_RESTRICT s = c + nb_;
      for (int b = 0; b < nb_; ++b) {
        c[b] = pc[b] * sc[b] - ps[b] * ss[b];
        s[b] = pc[b] * ss[b] + ps[b] * sc[b];
      }
      if (!pure_) {
        const double* PEAL_RESTRICT pg = ps + nb_;
        double* PEAL_RESTRICT g = s + nb_;
        for (int b = 0; b < nb_; ++b)
          g[b] = std::min(pg[b] * sg[b], std::numeric_limits<double>::max());
      }
    }
  }
  // One row of A(δ): cos, sin of ω δ (exact reduction) and e^{a δ}.
  void exact_row(double delta, double* row) const {
    double* c = row;
    double* s = c + nb_;
    angles_sincos(w_hi_.data(), w_lo_.data(), delta, nb_, s, c);
    if (!pure_) {  // e^{a δ}, +inf clamped to DBL_MAX. exp_batch, not Eigen's vectorised exp:
      // Eigen clamps the argument, so e^{-4e6} came out as 5.6e-309 instead of 0 (encode of
      // xPos queries at t = 1.7e9, the conformance suite's large positions).
      double* g = s + nb_;
      exp_batch(a_.data(), delta, nb_, g);
      for (int b = 0; b < nb_; ++b) g[b] = clamp_magnitude(g[b]);
    }
  }

  void compose(const double* x, const double* rel, Index ldr, Index n, C* coef, Index ldc,
               bool transpose) const {
    // A = g [[c, s], [−s, c]] acts as y0 = c x0 + s x1, y1 = c x1 − s x0; A^T flips s.
    // A(D)A(δ): angles add like c − i s, magnitudes multiply. Chunks of kChunk blocks keep
    // every loop branch free and unit stride, so that they vectorize.
    constexpr int kChunk = 64;
    const double sgn = transpose ? -1.0 : 1.0;
    const int nb = nb_;
    double tc[kChunk], ts[kChunk];
    for (Index r = 0; r < n; ++r) {
      C* PEAL_RESTRICT o = coef + r * ldc;
      for (int b0 = 0; b0 < nb; b0 += kChunk) {
        const int m = std::min(kChunk, nb - b0);
        const double* PEAL_RESTRICT c = rel + r * ldr + b0;
        const double* PEAL_RESTRICT s = c + nb;
        const double* PEAL_RESTRICT g = s + nb;
        if (x != nullptr) {
          const double* PEAL_RESTRICT xc = x + b0;
          const double* PEAL_RESTRICT xs = xc + nb;
          for (int b = 0; b < m; ++b) {
            tc[b] = xc[b] * c[b] - xs[b] * s[b];
            ts[b] = sgn * (xc[b] * s[b] + xs[b] * c[b]);
          }
          if (!pure_) {
            const double* PEAL_RESTRICT xg = xs + nb;
            constexpr double big = std::numeric_limits<double>::max();
            for (int b = 0; b < m; ++b) {
              const double mg = std::min(xg[b] * g[b], big);
              tc[b] *= mg;
              ts[b] *= mg;
            }
          }
        } else if (!pure_) {
          for (int b = 0; b < m; ++b) tc[b] = g[b] * c[b], ts[b] = sgn * g[b] * s[b];
        } else {
          for (int b = 0; b < m; ++b) tc[b] = c[b], ts[b] = sgn * s[b];
        }
        if (interleaved_) {  // y0 = c x0 + s x1, y1 = c x1 − s x0: z = (c, −s)
          C* PEAL_RESTRICT z = o + 2 * b0;
          for (int b = 0; b < m; ++b) {
            z[2 * b] = C(tc[b]);
            z[2 * b + 1] = C(-ts[b]);
          }
        } else {
          C* PEAL_RESTRICT cc = o + b0;
          C* PEAL_RESTRICT ss = o + nb + b0;
          for (int b = 0; b < m; ++b) cc[b] = C(tc[b]), ss[b] = C(ts[b]);
        }
      }
    }
  }
  void apply(const C* coef, const C* src, C* dst, bool /*transpose: in coef*/,
             C* /*scratch*/) const {
    const int nb = nb_;
    if (interleaved_) {
      using Z = Eigen::Array<std::complex<C>, Eigen::Dynamic, 1>;
      Eigen::Map<const Z> z(reinterpret_cast<const std::complex<C>*>(coef), nb);
      Eigen::Map<const Z> x(reinterpret_cast<const std::complex<C>*>(src), nb);
      Eigen::Map<Z>(reinterpret_cast<std::complex<C>*>(dst), nb) = x * z;
    } else {
      if (src == dst)
        rotate_halves(dst, dst + nb, coef, coef + nb, nb);
      else
        rotate_halves(src, src + nb, dst, dst + nb, coef, coef + nb, nb);
    }
  }

  void apply_factor(const C* coef, const C* src, C* dst, bool t, C* scratch) const {
    apply(coef, src, dst, t, scratch);
  }
  // dst <- X R src in one pass (R = coef, X = coefx, same transpose flag): rotations commute
  // and compose by complex multiplication, z = z_R z_X (magnitudes multiply too), so the
  // row is read and written once instead of twice (pure-rotation tiles: R = A(t − T),
  // X = A(T)).
  void apply_both(const C* coef, const C* coefx, const C* src, C* dst, bool /*transpose*/,
                  C* /*scratch*/) const {
    const int nb = nb_;
    if (interleaved_) {
      using Z = Eigen::Array<std::complex<C>, Eigen::Dynamic, 1>;
      Eigen::Map<const Z> z(reinterpret_cast<const std::complex<C>*>(coef), nb);
      Eigen::Map<const Z> zx(reinterpret_cast<const std::complex<C>*>(coefx), nb);
      Eigen::Map<const Z> x(reinterpret_cast<const std::complex<C>*>(src), nb);
      Eigen::Map<Z>(reinterpret_cast<std::complex<C>*>(dst), nb) = x * (z * zx);
    } else {
      if (src == dst)
        rotate_halves(dst, dst + nb, coef, coef + nb, coefx, coefx + nb, nb);
      else
        rotate_halves(src, src + nb, dst, dst + nb, coef, coef + nb, coefx, coefx + nb, nb);
    }
  }

  // The coefficients of one row in the form of detail/coders/row_loops.hpp's loops, then those
  // loops over the heads (the pair count a template parameter for the common sizes): y0 =
  // zr x0 − zi x1, y1 = zr x1 + zi x0 is cc = [zr, zr], ss = [−zi, zi] (interleaved), and
  // c x0 + s x1 is rotate_halfsplit's c x0 − s' x1 with s' = −s (half-split).
  void apply_heads(const C* coef, const C* x, Index xs, C* y, Index ys, Index heads,
                   bool /*transpose: in coef*/, bool /*factor*/, C* scratch) const {
    const int n = nb_;
    if (n == 0) return;
    C* PEAL_RESTRICT cc = scratch;
    C* PEAL_RESTRICT ss = scratch + 2 * n;
    if (interleaved_) {
      for (int i = 0; i < n; ++i) {
        const C zr = coef[2 * i], zi = coef[2 * i + 1];
        cc[2 * i] = cc[2 * i + 1] = zr;
        ss[2 * i] = -zi;
        ss[2 * i + 1] = zi;
      }
    } else {
      for (int i = 0; i < n; ++i) cc[i] = coef[i], ss[i] = -coef[n + i];
    }
    apply_tables(cc, ss, x, xs, y, ys, heads);
  }
  // Encode's per-token form (CoderKernel, detail/encode/kernels.hpp): the loops' tables cc, ss
  // (2 nb values each) straight from one row of relative(), as compose() then apply_heads()
  // would leave them, bit for bit, without the coefficient row between (with one head, those
  // two passes over the pairs cost 1.2x the rotation: bench/README.md). Returns whether the
  // row is out of range (out_of_range()'s test: apply_exact() then).
  bool row_tables(const double* rel, bool transpose, C* PEAL_RESTRICT cc,
                  C* PEAL_RESTRICT ss) const {
    const int n = nb_;
    const double* PEAL_RESTRICT c = rel;
    const double* PEAL_RESTRICT s = c + n;
    const double* PEAL_RESTRICT g = s + n;  // e^{a δ}, unless pure (then 1: g c = c exactly)
    const double sgn = transpose ? -1.0 : 1.0;
    const bool pure = pure_;
    if (interleaved_)  // tc = g c, ts = ± g s
      for (int b = 0; b < n; ++b) {
        const double gb = pure ? 1.0 : g[b], tc = gb * c[b], ts = sgn * gb * s[b];
        cc[2 * b] = cc[2 * b + 1] = C(tc);
        ss[2 * b] = C(ts);
        ss[2 * b + 1] = C(-ts);
      }
    else
      for (int b = 0; b < n; ++b) {
        const double gb = pure ? 1.0 : g[b];
        cc[b] = C(gb * c[b]), ss[b] = C(-(sgn * gb * s[b]));
      }
    if (pure_) return false;
    int out = 0;
    for (int b = 0; b < n; ++b) out |= !(g[b] < std::numeric_limits<double>::max());
    const int m = interleaved_ ? 2 * n : n;
    for (int e = 0; e < m; ++e) out |= !std::isfinite(cc[e]) || !std::isfinite(ss[e]);
    return out != 0;
  }
  // The loops of detail/coders/row_loops.hpp over the heads with tables from row_tables().
  void apply_tables(const C* cc, const C* ss, const C* x, Index xs, C* y, Index ys,
                    Index heads) const {
    if (nb_ == 0) return;
    if (x == y && (heads == 1 || xs == ys))
      heads_in_place(y, ys, heads, cc, ss);
    else
      heads_copy(x, xs, y, ys, heads, cc, ss);
  }
  bool out_of_range(const double* rel, const C* coef) const {
    if (pure_) return false;
    const double* g = rel + 2 * nb_;
    int out = 0;
    for (int b = 0; b < nb_; ++b) out |= !(g[b] < std::numeric_limits<double>::max());
    for (int e = 0; e < 2 * nb_; ++e) out |= !std::isfinite(coef[e]);
    return out != 0;
  }
  // A = e^{a δ} [[c, s], [−s, c]] (A^T: s flipped), the rotation in double, then e^{a δ}
  // by mul_exp: exact past the range of C.
  void apply_exact(double delta, const double* rel, const C* src, C* dst, bool transpose,
                   bool /*factor*/, C* /*scratch*/) const {
    const int stride = interleaved_ ? 1 : nb_, step = interleaved_ ? 2 : 1;
    for (int b = 0; b < nb_; ++b) {
      const int j = step * b;
      const double x0 = double(src[j]), x1 = double(src[j + stride]);
      const double c = rel[b], s = transpose ? -rel[nb_ + b] : rel[nb_ + b];
      const double e = a_[std::size_t(b)] * delta;
      dst[j] = C(detail::mul_exp(c * x0 + s * x1, e));
      dst[j + stride] = C(detail::mul_exp(c * x1 - s * x0, e));
    }
  }

  // Rows of a linear-attention state step (detail/tiled/linear_ops.hpp) in one pass: each row
  // w_r (ld apart) <- g A w_r + v_r k (A = coef, the keys' orientation), and o[r] += w_r · q.
  // Four rows at a time, so that the table, k and q are loaded once for four rows. Optional
  // in the coder protocol (has_step_rows); a composition has it when every part has.
  void step_rows(const C* coef, C g, C* W, Index ld, Index rows, const C* v, const C* k,
                 const C* q, C* o) const {
    if (interleaved_)
      step_rows_impl<true>(coef, g, W, ld, rows, v, k, q, o);
    else
      step_rows_impl<false>(coef, g, W, ld, rows, v, k, q, o);
  }

 private:
  // The head loops of apply_heads, in place and out of place (row_loops.hpp's rotate_heads_*
  // are out of line: inlined here, g++ 12 left the chunk loops as calls and spilled the
  // coefficients, in-place RoPE 1.2-1.4x slower in bench_encode).
  PEAL_NOINLINE void heads_in_place(C* y, Index ys, Index heads, const C* cc, const C* ss) const {
    const int n = nb_;
    with_pair_count(n, [&](auto N) {
      if (interleaved_)
        rotate_heads_interleaved<N()>(y, heads, ys, cc, ss, n);
      else
        rotate_heads_halfsplit<N()>(y, heads, ys, cc, ss, n);
    });
  }
  PEAL_NOINLINE void heads_copy(const C* x, Index xs, C* y, Index ys, Index heads, const C* cc,
                                const C* ss) const {
    const int n = nb_;
    with_pair_count(n, [&](auto N) {
      if (interleaved_)
        rotate_heads_interleaved<N()>(x, xs, y, ys, heads, cc, ss, n);
      else
        rotate_heads_halfsplit<N()>(x, xs, y, ys, heads, cc, ss, n);
    });
  }

  // Interleaved pairs (2b, 2b + 1), z = (c, u): (x0 c − x1 u, x0 u + x1 c), as apply's
  // complex product; half-split pairs (b, b + nb), [c | s]: (c x0 + s x1, c x1 − s x0).
  template <bool Inter>
  void step_rows_impl(const C* PEAL_RESTRICT coef, C g, C* PEAL_RESTRICT W, Index ld, Index rows,
                      const C* PEAL_RESTRICT v, const C* PEAL_RESTRICT k, const C* PEAL_RESTRICT q,
                      C* PEAL_RESTRICT o) const {
    const int nb = nb_;
    constexpr int st = Inter ? 2 : 1;
    const int off = Inter ? 1 : nb;
    const C* PEAL_RESTRICT cc = coef;
    const C* PEAL_RESTRICT ss = Inter ? coef + 1 : coef + nb;
    constexpr C sgn = Inter ? C(-1) : C(1);
    Index r = 0;
    for (; r + 4 <= rows; r += 4) {
      C* PEAL_RESTRICT w0 = W + r * ld;
      C* PEAL_RESTRICT w1 = w0 + ld;
      C* PEAL_RESTRICT w2 = w1 + ld;
      C* PEAL_RESTRICT w3 = w2 + ld;
      const C v0 = v[r], v1 = v[r + 1], v2 = v[r + 2], v3 = v[r + 3];
      C a0 = 0, a1 = 0, a2 = 0, a3 = 0;
PEAL_SIMD_REDUCTION(+ : a0, a1, a2, a3)
      for (int b = 0; b < nb; ++b) {
        const int e0 = b * st, e1 = e0 + off;
        const C c = g * cc[b * st], sn = sgn * g * ss[b * st];
        const C k0 = k[e0], k1 = k[e1], q0 = q[e0], q1 = q[e1];
        C x0 = w0[e0], x1 = w0[e1];
        C y0 = c * x0 + sn * x1 + v0 * k0, y1 = c * x1 - sn * x0 + v0 * k1;
        w0[e0] = y0, w0[e1] = y1, a0 += y0 * q0 + y1 * q1;
        x0 = w1[e0], x1 = w1[e1];
        y0 = c * x0 + sn * x1 + v1 * k0, y1 = c * x1 - sn * x0 + v1 * k1;
        w1[e0] = y0, w1[e1] = y1, a1 += y0 * q0 + y1 * q1;
        x0 = w2[e0], x1 = w2[e1];
        y0 = c * x0 + sn * x1 + v2 * k0, y1 = c * x1 - sn * x0 + v2 * k1;
        w2[e0] = y0, w2[e1] = y1, a2 += y0 * q0 + y1 * q1;
        x0 = w3[e0], x1 = w3[e1];
        y0 = c * x0 + sn * x1 + v3 * k0, y1 = c * x1 - sn * x0 + v3 * k1;
        w3[e0] = y0, w3[e1] = y1, a3 += y0 * q0 + y1 * q1;
      }
      o[r] += a0, o[r + 1] += a1, o[r + 2] += a2, o[r + 3] += a3;
    }
    for (; r < rows; ++r) {
      C* PEAL_RESTRICT w0 = W + r * ld;
      const C v0 = v[r];
      C a0 = 0;
PEAL_SIMD_REDUCTION(+ : a0)
      for (int b = 0; b < nb; ++b) {
        const int e0 = b * st, e1 = e0 + off;
        const C c = g * cc[b * st], sn = sgn * g * ss[b * st];
        const C x0 = w0[e0], x1 = w0[e1];
        const C y0 = c * x0 + sn * x1 + v0 * k[e0], y1 = c * x1 - sn * x0 + v0 * k[e1];
        w0[e0] = y0, w0[e1] = y1, a0 += y0 * q[e0] + y1 * q[e1];
      }
      o[r] += a0;
    }
  }

  // Half-split rotation y_lo = c x_lo + s x_hi, y_hi = c x_hi − s x_lo. Separate functions
  // with restrict-qualified parameters: g++ ignores restrict on local pointers and, unable
  // to rule out aliasing, left the loop scalar (measured: 14 % of a 512-token fused run).
  static void rotate_halves(C* PEAL_RESTRICT lo, C* PEAL_RESTRICT hi, const C* PEAL_RESTRICT c,
                            const C* PEAL_RESTRICT s, int n) {
    for (int b = 0; b < n; ++b) {
      const C x0 = lo[b], x1 = hi[b];
      lo[b] = c[b] * x0 + s[b] * x1;
      hi[b] = c[b] * x1 - s[b] * x0;
    }
  }
  static void rotate_halves(const C* PEAL_RESTRICT xlo, const C* PEAL_RESTRICT xhi,
                            C* PEAL_RESTRICT lo, C* PEAL_RESTRICT hi, const C* PEAL_RESTRICT c,
                            const C* PEAL_RESTRICT s, int n) {
    for (int b = 0; b < n; ++b) {
      const C x0 = xlo[b], x1 = xhi[b];
      lo[b] = c[b] * x0 + s[b] * x1;
      hi[b] = c[b] * x1 - s[b] * x0;
    }
  }
  // The same with (c, s) = (c1 c2 − s1 s2, s1 c2 + c1 s2): the two rotations composed.
  static void rotate_halves(C* PEAL_RESTRICT lo, C* PEAL_RESTRICT hi, const C* PEAL_RESTRICT c1,
                            const C* PEAL_RESTRICT s1, const C* PEAL_RESTRICT c2,
                            const C* PEAL_RESTRICT s2, int n) {
    for (int b = 0; b < n; ++b) {
      const C c = c1[b] * c2[b] - s1[b] * s2[b], s = s1[b] * c2[b] + c1[b] * s2[b];
      const C x0 = lo[b], x1 = hi[b];
      lo[b] = c * x0 + s * x1;
      hi[b] = c * x1 - s * x0;
    }
  }
  static void rotate_halves(const C* PEAL_RESTRICT xlo, const C* PEAL_RESTRICT xhi,
                            C* PEAL_RESTRICT lo, C* PEAL_RESTRICT hi, const C* PEAL_RESTRICT c1,
                            const C* PEAL_RESTRICT s1, const C* PEAL_RESTRICT c2,
                            const C* PEAL_RESTRICT s2, int n) {
    for (int b = 0; b < n; ++b) {
      const C c = c1[b] * c2[b] - s1[b] * s2[b], s = s1[b] * c2[b] + c1[b] * s2[b];
      const C x0 = xlo[b], x1 = xhi[b];
      lo[b] = c * x0 + s * x1;
      hi[b] = c * x1 - s * x0;
    }
  }

  int nb_;
  bool interleaved_;
  bool pure_ = true;
  double rate_ = 0;
  std::vector<double> w_hi_, w_lo_, a_;
};

/// A value identifying the type B within this process (the address of a per-type object),
/// added to the table signatures: two block types with equal trait signatures never share
/// tables.
template <class B>
inline const char type_tag_object = 0;
template <class B>
double type_tag() {
  return double(reinterpret_cast<std::uintptr_t>(&type_tag_object<B>));
}

/// Blocks with block_traits (block_traits.hpp) of one fixed size M (a single block, or a
/// Bank of them): per block the magnitude and the M x M shape of A(δ) (traits::factors);
/// composition multiplies shapes in double.
template <class C, class Block>
class FixedBlocksCoder {
  using traits = block_traits<Block>;
  static constexpr int M = traits::dim;
  static constexpr int MM = M * M;

 public:
  explicit FixedBlocksCoder(const Block& b) : blocks_{b}, layout_(Layout::Interleaved) { init(); }
  explicit FixedBlocksCoder(const Bank<Block>& bank) : layout_(bank.layout()) {
    for (int i = 0; i < bank.size(); ++i) blocks_.push_back(bank.block(i));
    init();
  }
  int dim() const { return nb_ * M; }
  double rate() const { return rate_; }
  int degree() const { return degree_; }
  bool identity() const { return nb_ == 0; }
  int rel_size() const { return nb_ * (1 + MM); }
  int coef_size() const { return nb_ * MM; }
  bool signature(std::vector<double>& sig) const {
    sig.push_back(2);  // coder kind
    sig.push_back(M);
    sig.push_back(nb_);
    sig.push_back(double(layout_ == Layout::Interleaved));
    sig.push_back(type_tag<Block>());
    for (const auto& b : blocks_) traits::signature(b, sig);
    return true;
  }

  void relative(const double* delta, Index n, double* rel, Index ld) const {
    for (Index r = 0; r < n; ++r)
      for (int b = 0; b < nb_; ++b) {
        double* o = rel + r * ld + b * (1 + MM);
        traits::factors(blocks_[std::size_t(b)], delta[r], o[0], o + 1);
        o[0] = clamp_magnitude(o[0]);
      }
  }
  void compose(const double* x, const double* rel, Index ldr, Index n, C* coef, Index ldc,
               bool /*transpose: in apply*/) const {
    for (Index r = 0; r < n; ++r)
      for (int b = 0; b < nb_; ++b) {
        const double* R = rel + r * ldr + b * (1 + MM);
        C* o = coef + r * ldc + b * MM;
        if (x == nullptr) {
          for (int e = 0; e < MM; ++e) o[e] = C(R[0] * R[1 + e]);
        } else {
          const double* X = x + b * (1 + MM);
          const double g = std::min(X[0] * R[0], std::numeric_limits<double>::max());
          for (int i = 0; i < M; ++i)
            for (int j = 0; j < M; ++j) {
              double acc = 0;
              for (int l = 0; l < M; ++l) acc += X[1 + i * M + l] * R[1 + l * M + j];
              o[i * M + j] = C(g * acc);
            }
        }
      }
  }
  void apply(const C* coef, const C* src, C* dst, bool transpose, C* /*scratch*/) const {
    for (int b = 0; b < nb_; ++b) {
      const C* a = coef + b * MM;
      C x[M], y[M];
      for (int c = 0; c < M; ++c) x[c] = src[coordinate(layout_, nb_, M, b, c)];
      for (int i = 0; i < M; ++i) {
        C acc = 0;
        if (transpose)
          for (int l = 0; l < M; ++l) acc += a[l * M + i] * x[l];
        else
          for (int l = 0; l < M; ++l) acc += a[i * M + l] * x[l];
        y[i] = acc;
      }
      for (int c = 0; c < M; ++c) dst[coordinate(layout_, nb_, M, b, c)] = y[c];
    }
  }

  void apply_factor(const C* coef, const C* src, C* dst, bool t, C* scratch) const {
    apply(coef, src, dst, t, scratch);
  }
  bool out_of_range(const double* rel, const C* coef) const {
    for (int b = 0; b < nb_; ++b)
      if (!(rel[b * (1 + MM)] < std::numeric_limits<double>::max())) return true;
    for (int e = 0; e < coef_size(); ++e)
      if (!std::isfinite(coef[e])) return true;
    return false;
  }
  // Each block's own apply() (exact past the range: the blocks' contract, docs/design.md §5).
  void apply_exact(double delta, const double* /*rel*/, const C* src, C* dst, bool transpose,
                   bool /*factor*/, C* /*scratch*/) const {
    using S = typename Block::Scalar;
    Eigen::Matrix<S, M, 1> v;
    for (int b = 0; b < nb_; ++b) {
      for (int c = 0; c < M; ++c) v(c) = S(src[coordinate(layout_, nb_, M, b, c)]);
      blocks_[std::size_t(b)].apply(v, real_t<S>(delta), transpose);
      for (int c = 0; c < M; ++c) dst[coordinate(layout_, nb_, M, b, c)] = C(v(c));
    }
  }

 private:
  void init() {
    nb_ = int(blocks_.size());
    for (const auto& b : blocks_) {
      rate_ = std::max(rate_, traits::rate(b));
      degree_ = std::max(degree_, block_degree_of(b));
    }
  }
  std::vector<Block> blocks_;
  Layout layout_;
  int nb_ = 0;
  double rate_ = 0;
  int degree_ = 0;
};

/// Bank<RealBlock> with double parameters: per block the magnitude e^{λ δ}, one batched exp
/// per row (detail/math/exp_kernel.hpp), and a diagonal scale (row_loops.hpp's `scale`).
template <class C>
class RealBankCoder {
 public:
  template <class S>
  explicit RealBankCoder(const Bank<RealBlock<S>>& bank) : nb_(bank.size()) {
    lambda_.resize(std::size_t(nb_));
    for (int b = 0; b < nb_; ++b) {
      lambda_[std::size_t(b)] = double(bank.params()(b, 0));
      rate_ = std::max(rate_, std::abs(lambda_[std::size_t(b)]));
    }
  }
  int dim() const { return nb_; }
  double rate() const { return rate_; }
  int degree() const { return 0; }
  bool identity() const { return nb_ == 0; }
  int rel_size() const { return nb_; }
  int coef_size() const { return nb_; }
  bool signature(std::vector<double>& sig) const {
    sig.push_back(6);  // coder kind
    sig.push_back(nb_);
    sig.insert(sig.end(), lambda_.begin(), lambda_.end());
    return true;
  }
  void relative(const double* delta, Index n, double* rel, Index ld) const {
    for (Index r = 0; r < n; ++r) {
      double* PEAL_RESTRICT g = rel + r * ld;
      exp_batch(lambda_.data(), delta[r], nb_, g);
      for (int b = 0; b < nb_; ++b) g[b] = clamp_magnitude(g[b]);
    }
  }
  void compose(const double* x, const double* rel, Index ldr, Index n, C* coef, Index ldc,
               bool /*transpose: A is diagonal*/) const {
    constexpr double big = std::numeric_limits<double>::max();
    for (Index r = 0; r < n; ++r) {
      const double* PEAL_RESTRICT g = rel + r * ldr;
      C* PEAL_RESTRICT o = coef + r * ldc;
      if (x == nullptr)
        for (int b = 0; b < nb_; ++b) o[b] = C(g[b]);
      else
        for (int b = 0; b < nb_; ++b) o[b] = C(std::min(x[b] * g[b], big));
    }
  }
  void apply(const C* coef, const C* src, C* dst, bool /*transpose*/, C* /*scratch*/) const {
    if (src == dst)
      scale(dst, coef, nb_);
    else
      scale(src, dst, coef, nb_);
  }
  void apply_factor(const C* coef, const C* src, C* dst, bool t, C* scratch) const {
    apply(coef, src, dst, t, scratch);
  }
  void apply_heads(const C* coef, const C* x, Index xs, C* y, Index ys, Index heads,
                   bool /*transpose*/, bool /*factor*/, C* /*scratch*/) const {
    if (x == y && (heads == 1 || xs == ys)) {
      for (Index h = 0; h < heads; ++h) scale(y + h * ys, coef, nb_);
    } else {
      for (Index h = 0; h < heads; ++h) scale(x + h * xs, y + h * ys, coef, nb_);
    }
  }
  // Past DBL_MAX (clamped there by relative()) or past the largest C.
  bool out_of_range(const double* rel, const C* /*coef*/) const {
    constexpr double big = std::numeric_limits<double>::max();
    constexpr double cmax = double(std::numeric_limits<C>::max());
    int out = 0;
    for (int b = 0; b < nb_; ++b) out |= !(rel[b] < big) | !(rel[b] <= cmax);
    return out != 0;
  }
  void apply_exact(double delta, const double* /*rel*/, const C* src, C* dst, bool /*transpose*/,
                   bool /*factor*/, C* /*scratch*/) const {
    for (int b = 0; b < nb_; ++b)
      dst[b] = C(detail::mul_exp(double(src[b]), lambda_[std::size_t(b)] * delta));
  }

 private:
  int nb_;
  double rate_ = 0;
  std::vector<double> lambda_;
};

/// PassThrough: the identity.
template <class C>
class PassThroughCoder {
 public:
  template <class S>
  explicit PassThroughCoder(const PassThrough<S>& p) : n_(p.dim()) {}
  int dim() const { return n_; }
  double rate() const { return 0; }
  int degree() const { return 0; }
  bool identity() const { return true; }
  int rel_size() const { return 0; }
  int coef_size() const { return 0; }
  bool signature(std::vector<double>& sig) const {
    sig.push_back(3);
    sig.push_back(n_);
    return true;
  }
  void relative(const double*, Index, double*, Index) const {}
  void compose(const double*, const double*, Index, Index, C*, Index, bool) const {}
  void apply(const C*, const C* src, C* dst, bool, C*) const {
    if (src != dst && n_ > 0) std::memcpy(dst, src, sizeof(C) * std::size_t(n_));
  }
  void apply_factor(const C* c, const C* src, C* dst, bool t, C* scratch) const {
    apply(c, src, dst, t, scratch);
  }
  void apply_heads(const C*, const C* x, Index xs, C* y, Index ys, Index heads, bool, bool,
                   C*) const {
    if (n_ == 0 || (x == y && (heads == 1 || xs == ys))) return;
    for (Index h = 0; h < heads; ++h)
      std::memcpy(y + h * ys, x + h * xs, sizeof(C) * std::size_t(n_));
  }
  bool out_of_range(const double*, const C*) const { return false; }
  void apply_exact(double, const double*, const C* src, C* dst, bool t, bool, C* scratch) const {
    apply(nullptr, src, dst, t, scratch);
  }
  void step_rows(const C*, C g, C* W, Index ld, Index rows, const C* v, const C* PEAL_RESTRICT k,
                 const C* PEAL_RESTRICT q, C* o) const {
    for (Index r = 0; r < rows; ++r) {
      C* PEAL_RESTRICT w = W + r * ld;
      const C vr = v[r];
      C acc = 0;
PEAL_SIMD_REDUCTION(+ : acc)
      for (int e = 0; e < n_; ++e) {
        w[e] = g * w[e] + vr * k[e];
        acc += w[e] * q[e];
      }
      o[r] += acc;
    }
  }

 private:
  int n_;
};

/// Coder of one part of a composition: ZeroCoder when the part is evaluated per pair (Split,
/// detail/coders/poly_parts.hpp), else its own.
template <class C, class P, bool Split>
using part_coder_t =
    std::conditional_t<Split && is_per_pair_polynomial<P>::value, ZeroCoder<C>, coder_t<C, P>>;

// dst <- X R src: the coder's one-pass apply_both when it has one, else apply R, then X.
template <class K, class = void>
struct has_apply_both : std::false_type {};
template <class K>
struct has_apply_both<K, std::void_t<decltype(std::declval<const K&>().apply_both(
                             nullptr, nullptr, nullptr, nullptr, false, nullptr))>>
    : std::true_type {};
template <class K, class C>
void apply_both(const K& k, const C* coef, const C* coefx, const C* src, C* dst, bool transpose,
                C* scratch) {
  if constexpr (has_apply_both<K>::value) {
    k.apply_both(coef, coefx, src, dst, transpose, scratch);
  } else {
    k.apply(coef, src, dst, transpose, scratch);
    k.apply_factor(coefx, dst, dst, transpose, scratch);
  }
}

// y_h <- A x_h (apply(), or apply_factor() when factor) for `heads` vectors with one row of
// coefficients: the coder's apply_heads when it has one (its tuned loops), else a loop.
template <class K, class C, class = void>
struct has_apply_heads : std::false_type {};
template <class K, class C>
struct has_apply_heads<K, C, std::void_t<decltype(std::declval<const K&>().apply_heads(
                                 (const C*)nullptr, (const C*)nullptr, Index(0), (C*)nullptr,
                                 Index(0), Index(0), false, false, (C*)nullptr))>>
    : std::true_type {};
// A coder whose tuned loops take their tables straight from a row of relative() (encode's
// per-token form: row_tables, apply_tables).
template <class K, class C, class = void>
struct has_row_tables : std::false_type {};
template <class K, class C>
struct has_row_tables<K, C, std::void_t<decltype(std::declval<const K&>().row_tables(
                                (const double*)nullptr, false, (C*)nullptr, (C*)nullptr))>>
    : std::true_type {};
template <class K, class C>
void apply_heads(const K& k, const C* coef, const C* x, Index xs, C* y, Index ys, Index heads,
                 bool transpose, bool factor, C* scratch) {
  if constexpr (has_apply_heads<K, C>::value) {
    k.apply_heads(coef, x, xs, y, ys, heads, transpose, factor, scratch);
  } else {
    for (Index h = 0; h < heads; ++h) {
      if (factor)
        k.apply_factor(coef, x + h * xs, y + h * ys, transpose, scratch);
      else
        k.apply(coef, x + h * xs, y + h * ys, transpose, scratch);
    }
  }
}

/// Coders with step_rows (the fused rows of a linear-attention state step,
/// detail/tiled/linear_ops.hpp).
template <class K, class C, class = void>
struct has_step_rows : std::false_type {};
template <class K, class C>
struct has_step_rows<K, C, std::void_t<decltype(std::declval<const K&>().step_rows(
                               (const C*)nullptr, C(1), (C*)nullptr, Index(0), Index(0),
                               (const C*)nullptr, (const C*)nullptr, (const C*)nullptr,
                               (C*)nullptr))>> : std::true_type {};

/// BlockDiagonal: each part's coder on its coordinates and on its columns of the tables.
/// Split: the polynomial parts are left to the per-pair epilogue (their coordinates are zero).
template <class C, bool Split, class... Parts>
class BlockDiagonalCoder {
  static constexpr std::size_t N = sizeof...(Parts);

 public:
  explicit BlockDiagonalCoder(const BlockDiagonal<Parts...>& bd)
      : BlockDiagonalCoder(bd, std::make_index_sequence<N>{}) {}
  int dim() const { return dim_; }
  double rate() const {
    return std::apply([](const auto&... c) { return std::max({0.0, c.rate()...}); }, cs_);
  }
  int degree() const {
    return std::apply([](const auto&... c) { return std::max({0, c.degree()...}); }, cs_);
  }
  bool identity() const {
    return std::apply([](const auto&... c) { return (true && ... && c.identity()); }, cs_);
  }
  int rel_size() const { return rel_off_[N]; }
  int coef_size() const { return coef_off_[N]; }
  bool signature(std::vector<double>& sig) const {
    sig.push_back(4);
    sig.push_back(double(N));
    return std::apply([&](const auto&... c) { return (true && ... && c.signature(sig)); }, cs_);
  }
  void relative(const double* delta, Index n, double* rel, Index ld) const {
    each([&](const auto& c, std::size_t i) { c.relative(delta, n, rel + rel_off_[i], ld); });
  }
  void compose(const double* x, const double* rel, Index ldr, Index n, C* coef, Index ldc,
               bool transpose) const {
    each([&](const auto& c, std::size_t i) {
      c.compose(x ? x + rel_off_[i] : nullptr, rel + rel_off_[i], ldr, n, coef + coef_off_[i], ldc,
                transpose);
    });
  }
  void apply(const C* coef, const C* src, C* dst, bool transpose, C* scratch) const {
    each([&](const auto& c, std::size_t i) {
      c.apply(coef + coef_off_[i], src + off_[i], dst + off_[i], transpose, scratch);
    });
  }
  void apply_factor(const C* coef, const C* src, C* dst, bool transpose, C* scratch) const {
    each([&](const auto& c, std::size_t i) {
      c.apply_factor(coef + coef_off_[i], src + off_[i], dst + off_[i], transpose, scratch);
    });
  }
  void apply_both(const C* coef, const C* coefx, const C* src, C* dst, bool transpose,
                  C* scratch) const {
    each([&](const auto& c, std::size_t i) {
      coders::apply_both(c, coef + coef_off_[i], coefx + coef_off_[i], src + off_[i],
                                 dst + off_[i], transpose, scratch);
    });
  }
  void apply_heads(const C* coef, const C* x, Index xs, C* y, Index ys, Index heads,
                   bool transpose, bool factor, C* scratch) const {
    each([&](const auto& c, std::size_t i) {
      coders::apply_heads(c, coef + coef_off_[i], x + off_[i], xs, y + off_[i], ys, heads,
                                  transpose, factor, scratch);
    });
  }
  bool out_of_range(const double* rel, const C* coef) const {
    bool out = false;
    each([&](const auto& c, std::size_t i) {
      out = out || c.out_of_range(rel + rel_off_[i], coef + coef_off_[i]);
    });
    return out;
  }
  void apply_exact(double delta, const double* rel, const C* src, C* dst, bool transpose,
                   bool factor, C* scratch) const {
    each([&](const auto& c, std::size_t i) {
      c.apply_exact(delta, rel + rel_off_[i], src + off_[i], dst + off_[i], transpose, factor,
                    scratch);
    });
  }
  template <bool All = (has_step_rows<part_coder_t<C, Parts, Split>, C>::value && ...)>
  std::enable_if_t<All> step_rows(const C* coef, C g, C* W, Index ld, Index rows, const C* v,
                                  const C* k, const C* q, C* o) const {
    each([&](const auto& c, std::size_t i) {
      c.step_rows(coef + coef_off_[i], g, W + off_[i], ld, rows, v, k + off_[i], q + off_[i], o);
    });
  }

 private:
  template <std::size_t... I>
  BlockDiagonalCoder(const BlockDiagonal<Parts...>& bd, std::index_sequence<I...>)
      : cs_(part_coder_t<C, Parts, Split>(bd.template part<I>())...),
        off_{{bd.template offset<I>()...}},
        dim_(bd.dim()) {
    rel_off_[0] = coef_off_[0] = 0;
    std::size_t i = 0;
    std::apply(
        [&](const auto&... c) {
          ((rel_off_[i + 1] = rel_off_[i] + c.rel_size(),
            coef_off_[i + 1] = coef_off_[i] + c.coef_size(), ++i),
           ...);
        },
        cs_);
  }
  template <class Fn>
  void each(Fn&& fn) const {
    each_impl(fn, std::make_index_sequence<N>{});
  }
  template <class Fn, std::size_t... I>
  void each_impl(Fn& fn, std::index_sequence<I...>) const {
    (fn(std::get<I>(cs_), I), ...);
  }

  std::tuple<part_coder_t<C, Parts, Split>...> cs_;
  std::array<int, N> off_;
  std::array<int, N + 1> rel_off_{}, coef_off_{};
  int dim_;
};

/// BasisChange<E>: q -> P^T q, k -> P^{-1} k (O(d²) per row), then E's coder.
template <class C, class E>
class BasisChangeCoder {
 public:
  explicit BasisChangeCoder(const BasisChange<E>& b)
      : inner_(b.inner()),
        pt_(b.P().transpose().template cast<C>()),
        pinv_(b.P_inverse().template cast<C>()) {}
  int dim() const { return inner_.dim(); }
  double rate() const { return inner_.rate(); }
  int degree() const { return inner_.degree(); }
  bool identity() const { return false; }
  int rel_size() const { return inner_.rel_size(); }
  int coef_size() const { return inner_.coef_size(); }
  bool signature(std::vector<double>& sig) const { return inner_.signature(sig); }
  void relative(const double* delta, Index n, double* rel, Index ld) const {
    inner_.relative(delta, n, rel, ld);
  }
  void compose(const double* x, const double* rel, Index ldr, Index n, C* coef, Index ldc,
               bool transpose) const {
    inner_.compose(x, rel, ldr, n, coef, ldc, transpose);
  }
  void apply(const C* coef, const C* src, C* dst, bool transpose, C* scratch) const {
    const Index d = pt_.rows();
    Eigen::Map<const Vector<C>> xm(src, d);
    Eigen::Map<Vector<C>> tm(scratch, d);
    if (transpose)
      tm.noalias() = pt_ * xm;
    else
      tm.noalias() = pinv_ * xm;
    inner_.apply(coef, scratch, dst, transpose, scratch + d);
  }
  void apply_factor(const C* coef, const C* src, C* dst, bool transpose, C* scratch) const {
    inner_.apply_factor(coef, src, dst, transpose, scratch);
  }
  // P^T (queries) or P^{-1} (keys) on every head, then E's loops over the heads in place;
  // the factor alone is E's.
  void apply_heads(const C* coef, const C* x, Index xs, C* y, Index ys, Index heads,
                   bool transpose, bool factor, C* scratch) const {
    if (!factor) {
      const Index d = pt_.rows();
      const Matrix<C>& m = transpose ? pt_ : pinv_;
      Eigen::Map<Vector<C>> tm(scratch, d);
      for (Index h = 0; h < heads; ++h) {
        tm.noalias() = m * Eigen::Map<const Vector<C>>(x + h * xs, d);
        Eigen::Map<Vector<C>>(y + h * ys, d) = tm;
      }
      x = y, xs = ys;
    }
    coders::apply_heads(inner_, coef, x, xs, y, ys, heads, transpose, factor, scratch);
  }
  bool out_of_range(const double* rel, const C* coef) const {
    return inner_.out_of_range(rel, coef);
  }
  void apply_exact(double delta, const double* rel, const C* src, C* dst, bool transpose,
                   bool factor, C* scratch) const {
    if (factor) return inner_.apply_exact(delta, rel, src, dst, transpose, true, scratch);
    const Index d = pt_.rows();
    Eigen::Map<Vector<C>> tm(scratch, d);
    tm.noalias() = (transpose ? pt_ : pinv_) * Eigen::Map<const Vector<C>>(src, d);
    inner_.apply_exact(delta, rel, scratch, dst, transpose, false, scratch + d);
  }

 private:
  coder_t<C, E> inner_;
  Matrix<C> pt_, pinv_;
};

template <class E, class C, class = void>
struct has_apply_on : std::false_type {};
template <class E, class C>
struct has_apply_on<
    E, C,
    std::void_t<decltype(std::declval<const E&>().apply(
        std::declval<Eigen::Map<Vector<C>>&>(), std::declval<real_t<typename E::Scalar>>(), true))>>
    : std::true_type {};

/// Any other encoding with apply(v, tau, transpose): the table holds δ itself and every row
/// calls the encoding's apply (correct for every encoding, not fast).
template <class C, class E>
class FallbackCoder {
  static_assert(has_apply_on<E, C>::value,
                "peal::scores: the encoding needs apply(v, tau, transpose) on an Eigen vector");
  static constexpr int slots = int((sizeof(double) + sizeof(C) - 1) / sizeof(C));

 public:
  explicit FallbackCoder(const E& e) : e_(&e), dim_(int(e.dim())) {}
  int dim() const { return dim_; }
  // From the generator on each call (an eigenvalue solve: the runs ask once, in their
  // constructors), not in the constructor: encode builds this coder per call and thread and
  // never asks, and a TU that only encodes does not compile the eigenvalue solver.
  double rate() const { return generic_rate(generator()); }
  int degree() const { return generic_degree(generator()); }
  bool identity() const { return dim_ == 0; }
  int rel_size() const { return 1; }
  int coef_size() const { return slots; }
  bool signature(std::vector<double>&) const { return false; }
  void relative(const double* delta, Index n, double* rel, Index ld) const {
    for (Index r = 0; r < n; ++r) rel[r * ld] = delta[r];
  }
  void compose(const double* x, const double* rel, Index ldr, Index n, C* coef, Index ldc,
               bool /*transpose*/) const {
    for (Index r = 0; r < n; ++r) {
      const double d = (x ? x[0] : 0.0) + rel[r * ldr];
      std::memcpy(coef + r * ldc, &d, sizeof(double));
    }
  }
  void apply(const C* coef, const C* src, C* dst, bool transpose, C* /*scratch*/) const {
    double d;
    std::memcpy(&d, coef, sizeof(double));
    if (src != dst) std::memcpy(dst, src, sizeof(C) * std::size_t(dim_));
    Eigen::Map<Vector<C>> vm(dst, dim_);
    e_->apply(vm, real_t<typename E::Scalar>(d), transpose);
  }

  void apply_factor(const C* coef, const C* src, C* dst, bool t, C* scratch) const {
    apply(coef, src, dst, t, scratch);
  }
  // The encoding's apply() is its own exact evaluation: nothing is out of range here.
  bool out_of_range(const double*, const C*) const { return false; }
  void apply_exact(double delta, const double*, const C* src, C* dst, bool t, bool,
                   C* scratch) const {
    std::memcpy(scratch, &delta, sizeof(double));
    apply(scratch, src, dst, t, nullptr);
  }

 private:
  Matrix<double> generator() const {
    return Matrix<typename E::Scalar>(e_->generator()).template cast<double>();
  }
  const E* e_;
  int dim_;
};

template <class K>
struct is_fallback_coder : std::false_type {};
template <class C, class E>
struct is_fallback_coder<FallbackCoder<C, E>> : std::true_type {};

template <class B>
struct is_fast_rotation : std::false_type {};
template <class S>
struct is_fast_rotation<RotationBlock<S>> : std::is_same<real_t<S>, double> {};

template <class B>
struct is_fast_real : std::false_type {};
template <class S>
struct is_fast_real<RealBlock<S>> : std::is_same<real_t<S>, double> {};

template <class C, class E, class>
struct coder_for {  // no traits: the encoding's own apply, per row
  using type = FallbackCoder<C, E>;
};
template <class C, class S>
struct coder_for<C, Bank<RotationBlock<S>>,
                 std::enable_if_t<std::is_same<real_t<S>, double>::value>> {
  using type = RotationBankCoder<C>;
};
template <class C, class S>
struct coder_for<C, Bank<RealBlock<S>>, std::enable_if_t<std::is_same<real_t<S>, double>::value>> {
  using type = RealBankCoder<C>;
};
template <class C, class B>
struct coder_for<C, Bank<B>,
                 std::enable_if_t<has_block_traits<B>::value && !is_fast_rotation<B>::value &&
                                  !is_fast_real<B>::value>> {
  using type = FixedBlocksCoder<C, B>;
};
template <class C, class B>  // a block with block_traits
struct coder_for<C, B, std::enable_if_t<has_block_traits<B>::value>> {
  using type = FixedBlocksCoder<C, B>;
};
template <class C, class S>
struct coder_for<C, PassThrough<S>> {
  using type = PassThroughCoder<C>;
};
template <class C, class... Parts>
struct coder_for<C, BlockDiagonal<Parts...>> {
  using type = BlockDiagonalCoder<C, false, Parts...>;
};
template <class C, class E>
struct coder_for<C, BasisChange<E>> {
  using type = BasisChangeCoder<C, E>;
};
template <class C, class E>  // a preset: the coder of the encoding it is
struct coder_for<C, E, std::enable_if_t<has_encoding_type<E>::value>>
    : coder_for<C, typename E::encoding_type> {};

/// How scores() splits an encoding between the GEMM (coder) and the per-pair polynomial
/// epilogue (poly, detail/coders/poly_parts.hpp): a BlockDiagonal whose top-level parts include
/// blocks with block_traits<P>::per_pair_polynomial (real Jordan chains, JordanBlock<M ≥ 2>)
/// evaluates those parts per pair; everything else (a bare or banked Jordan block, a nested
/// composition, a BasisChange, RotationJordanBlock) goes through the GEMM.
template <class C, class E, class = void>
struct scores_split : std::false_type {
  using coder = coder_t<C, E>;
  using poly = NoPolyEpilogue<C>;
};
template <class C, class... Parts>
struct scores_split<C, BlockDiagonal<Parts...>, std::enable_if_t<any_poly_part<Parts...>::value>>
    : std::true_type {
  using coder = BlockDiagonalCoder<C, true, Parts...>;
  using poly = PolyEpilogue<C, Parts...>;
};

/// Whether G(s) = A(−s) stays bounded: a pure rotation, identity included (no growth or decay,
/// no Jordan chain), which is what
/// attention's keys_encoded and linear attention's absolute-frame decode and RetNet chunk
/// normalisation need.
template <class C, class E>
bool is_pure_rotation(const E& enc) {
  using split = scores_split<C, E>;
  const typename split::coder coder(enc);
  return !split::poly::active && coder.rate() == 0 && coder.degree() == 0;
}

}  // namespace coders
}  // namespace detail
}  // namespace peal
