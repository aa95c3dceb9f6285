// Derivatives of A(τ) = exp(τX) with respect to an encoding's parameters θ (parameters.hpp
// gives their layout) and to τ (docs/gradients.md §1):
//   dA(enc, τ)       ∂A(τ)/∂θ_k for every k, dense d x d matrices, in the parameter layout;
//   dA_dtau(enc, τ)  ∂A(τ)/∂τ = X A(τ).
// Each block states its own closed form (its member dA(τ, k): RealBlock, JordanBlock
// ∂/∂λ = τ A; RotationBlock, RotationJordanBlock ∂/∂ω = τ (I ⊗ J) A, ∂/∂a = τ A, since ∂X/∂θ
// commutes with X); compositions follow from them:
//   Bank, BlockDiagonal  block-diagonal: each block's derivative in its coordinates;
//   BasisChange          A = P A_J P⁻¹: ∂A/∂θ_J = P ∂A_J P⁻¹ and
//                        ∂A/∂P_ij = E_ij P⁻¹ A − A E_ij P⁻¹ (d(P⁻¹) = −P⁻¹ dP P⁻¹).
// The kernels' form is the bilinear one, never the dense matrices: for d x H matrices U, V (one
// column per head), grad_k += Σ_h u_hᵀ ∂A(τ)/∂θ_k v_h (encoding_derivatives<E>::bilinear) and
// Σ_h u_hᵀ X A(τ) v_h (tau_form), computed per block on the block's own coordinates.
#pragma once

#include <type_traits>
#include <utility>
#include <vector>

#include "detail/compiler.hpp"
#include "detail/math/sincos.hpp"
#include "detail/storage.hpp"
#include "parameters.hpp"

namespace peal {

/// Per kind of encoding: dense(e, τ, out) appends ∂A(τ)/∂θ_k (d x d) for every k;
/// bilinear(e, τ, U, V, grad, stride) adds Σ_h u_hᵀ ∂A(τ)/∂θ_k v_h to grad[k·stride];
/// tau_form(e, τ, U, V) returns Σ_h u_hᵀ X A(τ) v_h. Specialised below.
template <class E, class = void>
struct encoding_derivatives;

namespace detail {
template <class R>
using RowsRef = Eigen::Ref<const Eigen::Matrix<R, Eigen::Dynamic, Eigen::Dynamic>>;

template <class E, class = void>
struct has_encoding_derivatives : std::false_type {};
template <class E>
struct has_encoding_derivatives<
    E, std::void_t<decltype(encoding_derivatives<E>::tau_form(
           std::declval<const E&>(), real_t<typename E::Scalar>(),
           std::declval<RowsRef<real_t<typename E::Scalar>>>(),
           std::declval<RowsRef<real_t<typename E::Scalar>>>()))>> : std::true_type {};

// Σ_h u_hᵀ M v_h = Σ (U ∘ (M V)).
template <class R, class M>
R bilinear_sum(const RowsRef<R>& U, const M& m, const RowsRef<R>& V) {
  return (U.array() * (m * V).array()).sum();
}
}  // namespace detail

template <class B>
struct encoding_derivatives<B, std::enable_if_t<detail::has_block_parameters<B>::value>> {
  using S = typename B::Scalar;
  using R = real_t<S>;
  using T = block_traits<B>;
  static void dense(const B& b, R tau, std::vector<Matrix<S>>& out) {
    for (int k = 0; k < T::n_parameters; ++k) out.push_back(Matrix<S>(b.dA(tau, k)));
  }
  static void bilinear(const B& b, R tau, const detail::RowsRef<R>& U, const detail::RowsRef<R>& V,
                       R* grad, Index stride) {
    for (int k = 0; k < T::n_parameters; ++k)
      grad[k * stride] += detail::bilinear_sum<R>(U, b.dA(tau, k).template cast<R>(), V);
  }
  static R tau_form(const B& b, R tau, const detail::RowsRef<R>& U, const detail::RowsRef<R>& V) {
    using M = Eigen::Matrix<R, T::dim, T::dim>;
    const M xa = M(b.generator().template cast<R>()) * M(b.A(tau).template cast<R>());
    return detail::bilinear_sum<R>(U, xa, V);
  }
};

template <class S>
struct encoding_derivatives<PassThrough<S>> {
  using R = real_t<S>;
  static void dense(const PassThrough<S>&, R, std::vector<Matrix<S>>&) {}
  static void bilinear(const PassThrough<S>&, R, const detail::RowsRef<R>&,
                       const detail::RowsRef<R>&, R*, Index) {}
  static R tau_form(const PassThrough<S>&, R, const detail::RowsRef<R>&, const detail::RowsRef<R>&) {
    return 0;
  }
};

template <class B>
struct encoding_derivatives<Bank<B>, std::enable_if_t<detail::has_block_parameters<B>::value>> {
  using S = typename B::Scalar;
  using R = real_t<S>;
  using BD = encoding_derivatives<B>;
  static constexpr int D = B::Dim;

  static void dense(const Bank<B>& e, R tau, std::vector<Matrix<S>>& out) {
    const int n = e.size(), d = e.dim();
    const std::size_t first = out.size();
    out.resize(first + std::size_t(block_traits<B>::n_parameters * n), Matrix<S>::Zero(d, d));
    std::vector<Matrix<S>> db;
    for (int i = 0; i < n; ++i) {
      db.clear();
      BD::dense(e.block(i), tau, db);
      for (std::size_t k = 0; k < db.size(); ++k) {
        Matrix<S>& m = out[first + k * std::size_t(n) + std::size_t(i)];
        for (int r = 0; r < D; ++r)
          for (int c = 0; c < D; ++c) m(e.coordinate(i, r), e.coordinate(i, c)) = db[k](r, c);
      }
    }
  }
  static void bilinear(const Bank<B>& e, R tau, const detail::RowsRef<R>& U,
                       const detail::RowsRef<R>& V, R* grad, Index stride) {
    if constexpr (kRotations) {
      rotations(e, tau, U, V, grad, stride, nullptr);
    } else {
      Eigen::Matrix<R, D, Eigen::Dynamic> u(D, U.cols()), v(D, V.cols());
      for (int i = 0; i < e.size(); ++i) {
        gather(e, i, U, u), gather(e, i, V, v);
        BD::bilinear(e.block(i), tau, u, v, grad + i * stride, stride * e.size());
      }
    }
  }
  static R tau_form(const Bank<B>& e, R tau, const detail::RowsRef<R>& U, const detail::RowsRef<R>& V) {
    R sum = 0;
    if constexpr (kRotations) {
      rotations(e, tau, U, V, nullptr, 0, &sum);
    } else {
      Eigen::Matrix<R, D, Eigen::Dynamic> u(D, U.cols()), v(D, V.cols());
      for (int i = 0; i < e.size(); ++i) {
        gather(e, i, U, u), gather(e, i, V, v);
        sum += BD::tau_form(e.block(i), tau, u, v);
      }
    }
    return sum;
  }

 private:
  template <class M>
  static void gather(const Bank<B>& e, int i, const detail::RowsRef<R>& X, M& x) {
    for (int c = 0; c < D; ++c) x.row(c) = X.row(e.coordinate(i, c));
  }

  // A bank of rotations in double (RoPE, xPos, RetNet): per pair i, over the heads,
  // S1 = Σ_h u₀v₀ + u₁v₁ and S2 = Σ_h u₀v₁ − u₁v₀; then with (c, s) of ω_i τ (one batched
  // exact reduction, detail/math/sincos.hpp) and g = e^{a_i τ}:
  //   Σ_h uᵀ ∂A/∂ω v = τ g (c S2 − s S1),  Σ_h uᵀ ∂A/∂a v = τ g (c S1 + s S2),
  //   Σ_h uᵀ X A v = g (ω (c S2 − s S1) + a (c S1 + s S2)).
  static constexpr bool kRotations =
      std::is_same<B, RotationBlock<S>>::value && std::is_same<R, double>::value;
  static void rotations(const Bank<B>& e, R tau, const detail::RowsRef<R>& U,
                        const detail::RowsRef<R>& V, R* grad, Index stride, R* dtau) {
    const bool half = e.layout() == Layout::HalfSplit;
    rotation_forms(
        e, tau,
        [&](double* s1, double* s2) {
          for (Index h = 0; h < U.cols(); ++h)
            pair_sums(U.col(h).data(), V.col(h).data(), e.size(), half, s1, s2);
        },
        grad, stride, dtau);
  }

 public:
  /// s1_i += u₀v₀ + u₁v₁, s2_i += u₀v₁ − u₁v₀ over the pairs of one head's rows u, v (any
  /// storage, converted to double in the loop; restrict: vectorised).
  template <class T>
  static void pair_sums(const T* PEAL_RESTRICT u, const T* PEAL_RESTRICT v, int n, bool half,
                        double* PEAL_RESTRICT s1, double* PEAL_RESTRICT s2) {
    auto d = [](T x) { return detail::to_arith<double>(x); };
    if (half) {
      for (int i = 0; i < n; ++i) {
        const double u0 = d(u[i]), u1 = d(u[i + n]), v0 = d(v[i]), v1 = d(v[i + n]);
        s1[i] += u0 * v0 + u1 * v1;
        s2[i] += u0 * v1 - u1 * v0;
      }
    } else {
      for (int i = 0; i < n; ++i) {
        const double u0 = d(u[2 * i]), u1 = d(u[2 * i + 1]), v0 = d(v[2 * i]), v1 = d(v[2 * i + 1]);
        s1[i] += u0 * v0 + u1 * v1;
        s2[i] += u0 * v1 - u1 * v0;
      }
    }
  }
  /// The forms above from the pair sums that sums(s1, s2) accumulates (both zeroed first), in
  /// one pass: with grad, adds the ω and a forms to grad[i·stride] and grad[(n + i)·stride]
  /// (the bank's parameter layout); with dtau, adds Σ_h uᵀ X A v to *dtau.
  template <class Sums>
  static void rotation_forms(const Bank<B>& e, R tau, Sums&& sums, R* grad, Index stride,
                             R* dtau) {
    static_assert(kRotations, "rotation_forms: a bank of rotations with double parameters");
    const int n = e.size();
    thread_local std::vector<double> buf;
    buf.assign(std::size_t(4 * n), 0.0);
    double *sn = buf.data(), *cs = sn + n, *s1 = cs + n, *s2 = s1 + n;
    const auto& p = e.params();
    detail::angles_sincos(p.col(0).data(), p.col(1).data(), tau, n, sn, cs);
    sums(s1, s2);
    forms_from_sums(e, tau, sn, cs, s1, s2, grad, stride, dtau);
  }
  /// The forms above from sn, cs = sin, cos of ω_i τ (angles_sincos's, or the same values from
  /// the encode coder's row: encode_backward.hpp's fused pass) and the pair sums s1, s2.
  static void forms_from_sums(const Bank<B>& e, R tau, const double* sn, const double* cs,
                              const double* s1, const double* s2, R* grad, Index stride, R* dtau) {
    static_assert(kRotations, "forms_from_sums: a bank of rotations with double parameters");
    const int n = e.size();
    const auto& p = e.params();
    const double *w_hi = p.col(0).data(), *w_lo = p.col(1).data(), *a = p.col(2).data();
    int growth = 0;
    for (int i = 0; i < n; ++i) growth |= a[i] != 0;
    if (!growth) {  // RoPE: e^{aτ} = 1 (mul_exp(v, 0) = v), loops that vectorise
      if (grad && stride == 1) pure_forms(tau, sn, cs, s1, s2, grad, grad + n, n);
      if (!dtau && (!grad || stride == 1)) return;
      R sum = 0;
      for (int i = 0; i < n; ++i) {
        const double dw = cs[i] * s2[i] - sn[i] * s1[i], da = cs[i] * s1[i] + sn[i] * s2[i];
        if (grad && stride != 1) {
          grad[Index(i) * stride] += tau * dw;
          grad[Index(n + i) * stride] += tau * da;
        }
        sum += (w_hi[i] + w_lo[i]) * dw;
      }
      if (dtau) *dtau += sum;
      return;
    }
    R sum = 0;
    for (int i = 0; i < n; ++i) {
      const double dw = cs[i] * s2[i] - sn[i] * s1[i], da = cs[i] * s1[i] + sn[i] * s2[i];
      if (grad) {  // τ e^{aτ} times each form, exact past the range (detail::mul_exp)
        grad[Index(i) * stride] += a[i] == 0 ? tau * dw : detail::mul_exp(tau * dw, a[i] * tau);
        grad[Index(n + i) * stride] += a[i] == 0 ? tau * da : detail::mul_exp(tau * da, a[i] * tau);
      }
      if (dtau) sum += detail::mul_exp((w_hi[i] + w_lo[i]) * dw + a[i] * da, a[i] * tau);
    }
    if (dtau) *dtau += sum;
  }

 private:
  static void pure_forms(R tau, const double* PEAL_RESTRICT sn, const double* PEAL_RESTRICT cs,
                         const double* PEAL_RESTRICT s1, const double* PEAL_RESTRICT s2,
                         R* PEAL_RESTRICT gw, R* PEAL_RESTRICT ga, int n) {
    for (int i = 0; i < n; ++i) {
      gw[i] += tau * (cs[i] * s2[i] - sn[i] * s1[i]);
      ga[i] += tau * (cs[i] * s1[i] + sn[i] * s2[i]);
    }
  }
};

template <class... Parts>
struct encoding_derivatives<BlockDiagonal<Parts...>,
                            std::enable_if_t<(detail::has_encoding_derivatives<Parts>::value && ...)>> {
  using E = BlockDiagonal<Parts...>;
  using S = typename E::Scalar;
  using R = real_t<S>;

  static void dense(const E& e, R tau, std::vector<Matrix<S>>& out) {
    const int d = e.dim();
    int off = 0;
    std::vector<Matrix<S>> dp;
    for_parts(e, [&](const auto& p) {
      dp.clear();
      encoding_derivatives<std::decay_t<decltype(p)>>::dense(p, tau, dp);
      for (auto& m : dp) {
        Matrix<S> full = Matrix<S>::Zero(d, d);
        full.block(off, off, m.rows(), m.cols()) = m;
        out.push_back(std::move(full));
      }
      off += int(p.dim());
    });
  }
  static void bilinear(const E& e, R tau, const detail::RowsRef<R>& U, const detail::RowsRef<R>& V,
                       R* grad, Index stride) {
    int off = 0;
    for_parts(e, [&](const auto& p) {
      using P = std::decay_t<decltype(p)>;
      const int n = int(p.dim());
      encoding_derivatives<P>::bilinear(p, tau, U.middleRows(off, n), V.middleRows(off, n), grad,
                                        stride);
      grad += Index(encoding_parameters<P>::count(p)) * stride;
      off += n;
    });
  }
  static R tau_form(const E& e, R tau, const detail::RowsRef<R>& U, const detail::RowsRef<R>& V) {
    int off = 0;
    R sum = 0;
    for_parts(e, [&](const auto& p) {
      const int n = int(p.dim());
      sum += encoding_derivatives<std::decay_t<decltype(p)>>::tau_form(
          p, tau, U.middleRows(off, n), V.middleRows(off, n));
      off += n;
    });
    return sum;
  }

 private:
  template <class Fn>
  static void for_parts(const E& e, Fn&& fn) {
    for_parts_impl(e, fn, std::index_sequence_for<Parts...>{});
  }
  template <class Fn, std::size_t... I>
  static void for_parts_impl(const E& e, Fn& fn, std::index_sequence<I...>) {
    (fn(e.template part<I>()), ...);
  }
};

template <class Inner>
struct encoding_derivatives<BasisChange<Inner>,
                            std::enable_if_t<detail::has_encoding_derivatives<Inner>::value>> {
  using E = BasisChange<Inner>;
  using S = typename E::Scalar;
  using R = real_t<S>;
  using MR = Eigen::Matrix<R, Eigen::Dynamic, Eigen::Dynamic>;
  using ID = encoding_derivatives<Inner>;

  // ∂A/∂θ_J = P ∂A_J P⁻¹; ∂A/∂P_ij = E_ij P⁻¹ A − A E_ij P⁻¹: row i gets row j of P⁻¹A,
  // minus the outer product (column i of A)(row j of P⁻¹).
  static void dense(const E& e, R tau, std::vector<Matrix<S>>& out) {
    std::vector<Matrix<S>> di;
    ID::dense(e.inner(), tau, di);
    for (auto& m : di) out.push_back(e.P() * m * e.P_inverse());
    const Matrix<S> a = e.A(tau), pa = e.P_inverse() * a;
    const int n = e.dim();
    for (int i = 0; i < n; ++i)
      for (int j = 0; j < n; ++j) {
        Matrix<S> m = -a.col(i) * e.P_inverse().row(j);
        m.row(i) += pa.row(j);
        out.push_back(std::move(m));
      }
  }
  // uᵀ A v = (Pᵀu)ᵀ A_J (P⁻¹v): the inner parameters see U' = PᵀU, V' = P⁻¹V; for P,
  // Σ_h u_h (A_J v'_h)ᵀ − (P⁻ᵀ A_Jᵀ u'_h) v'_hᵀ.
  static void bilinear(const E& e, R tau, const detail::RowsRef<R>& U, const detail::RowsRef<R>& V,
                       R* grad, Index stride) {
    // Transposes materialised, so that every product below is one plain GEMM shape.
    const MR Pt = e.P().transpose().template cast<R>(), Pi = e.P_inverse().template cast<R>();
    const MR PiT = Pi.transpose(), aj = e.inner().A(tau).template cast<R>(), ajT = aj.transpose();
    const MR u0 = U, v0 = V;
    const MR u1 = Pt * u0, v1 = Pi * v0;
    ID::bilinear(e.inner(), tau, u1, v1, grad, stride);
    const MR w = aj * v1, z = PiT * MR(ajT * u1);
    R* g = grad + Index(encoding_parameters<Inner>::count(e.inner())) * stride;
    const int n = e.dim();
    for (int i = 0; i < n; ++i)
      for (int j = 0; j < n; ++j) {
        R acc = 0;
        for (Index h = 0; h < U.cols(); ++h) acc += u0(i, h) * w(j, h) - z(i, h) * v1(j, h);
        g[(Index(i) * n + j) * stride] += acc;
      }
  }
  static R tau_form(const E& e, R tau, const detail::RowsRef<R>& U, const detail::RowsRef<R>& V) {
    const MR Pt = e.P().transpose().template cast<R>(), Pi = e.P_inverse().template cast<R>();
    const MR u0 = U, v0 = V;
    const MR u1 = Pt * u0, v1 = Pi * v0;
    return ID::tau_form(e.inner(), tau, u1, v1);
  }
};

template <class S>
struct encoding_derivatives<RopeEncoding<S>> {
  using E = RopeEncoding<S>;
  using R = real_t<S>;
  using BaseD = encoding_derivatives<typename E::Base>;
  // The frequencies are the bank's ω (its first size() parameters); a is not a parameter.
  static void dense(const E& e, R tau, std::vector<Matrix<S>>& out) {
    std::vector<Matrix<S>> all;
    BaseD::dense(e.encoding(), tau, all);
    for (std::size_t i = 0; i < e.inv_freq().size(); ++i) out.push_back(std::move(all[i]));
  }
  static void bilinear(const E& e, R tau, const detail::RowsRef<R>& U, const detail::RowsRef<R>& V,
                       R* grad, Index stride) {
    const std::size_t n = e.inv_freq().size();
    thread_local std::vector<R> all;  // the bank's ω and a; a is not RoPE's
    all.assign(2 * n, R(0));
    BaseD::bilinear(e.encoding(), tau, U, V, all.data(), 1);
    for (std::size_t i = 0; i < n; ++i) grad[Index(i) * stride] += all[i];
  }
  static R tau_form(const E& e, R tau, const detail::RowsRef<R>& U, const detail::RowsRef<R>& V) {
    return BaseD::tau_form(e.encoding(), tau, U, V);
  }
};

/// ∂A(τ)/∂θ_k for every parameter k of enc (parameters.hpp), dense d x d.
template <class E>
std::vector<Matrix<typename E::Scalar>> dA(const E& enc, real_t<typename E::Scalar> tau) {
  static_assert(detail::has_encoding_derivatives<E>::value,
                "peal: this encoding type states no derivatives (a block type needs dA(tau, k) "
                "and the parameter members of block_traits)");
  detail::require_finite(tau, "dA", "tau");
  std::vector<Matrix<typename E::Scalar>> out;
  out.reserve(std::size_t(parameter_count(enc)));
  encoding_derivatives<E>::dense(enc, tau, out);
  return out;
}

/// ∂A(τ)/∂τ = X A(τ).
template <class E>
Matrix<typename E::Scalar> dA_dtau(const E& enc, real_t<typename E::Scalar> tau) {
  detail::require_finite(tau, "dA_dtau", "tau");
  using M = Matrix<typename E::Scalar>;
  return M(enc.generator()) * M(enc.A(tau));
}

}  // namespace peal
