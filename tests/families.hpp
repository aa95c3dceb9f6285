// Random encodings for the property suite. A family builds the same encoding for any
// scalar from the same random stream, so a float or double encoding can be compared with
// its long double twin. Regimes follow the project style: zero parameters, tiny parameters
// and times (~1e-8), random, and large times (|tau| up to 1e4) with real parts scaled so
// that every result stays representable.
#pragma once

#include <random>
#include <vector>

#include <peal/peal.hpp>

namespace peal_test {

enum class Regime { Zero, Tiny, Random, Large };

struct Draw {
  std::mt19937_64& rng;
  Regime regime;
  double uniform(double lo, double hi) { return std::uniform_real_distribution<double>(lo, hi)(rng); }
  // A frequency: |omega| up to 2 (RoPE frequencies are in (0, 1]).
  double omega() {
    const double w = uniform(-2, 2);
    return regime == Regime::Zero ? 0.0 : regime == Regime::Tiny ? 1e-8 * w : w;
  }
  // A real part (decay < 0, growth > 0), scaled so |real * tau| <= ~5 for large tau.
  double real() {
    const double l = uniform(-0.5, 0.5);
    switch (regime) {
      case Regime::Zero: return 0.0;
      case Regime::Tiny: return 1e-8 * l;
      case Regime::Random: return l;
      case Regime::Large: return 1e-3 * l;
    }
    return l;
  }
  // A time for this regime.
  double time() {
    switch (regime) {
      case Regime::Zero: return uniform(-3, 3);
      case Regime::Tiny: return uniform(-1e-8, 1e-8);
      case Regime::Random: return uniform(-3, 3);
      case Regime::Large: return uniform(-1e4, 1e4);
    }
    return 0;
  }
};

struct RealFam {
  static constexpr const char* name = "RealBlock";
  template <class S>
  static auto build(Draw& d) { return peal::RealBlock<S>(d.real()); }
};
struct RotationFam {
  static constexpr const char* name = "RotationBlock";
  template <class S>
  static auto build(Draw& d) {
    const double w = d.omega();
    return peal::RotationBlock<S>(w, d.real());
  }
};
template <int M>
struct JordanFam {
  static constexpr const char* name = "JordanBlock";
  template <class S>
  static auto build(Draw& d) { return peal::JordanBlock<M, S>(d.real()); }
};
template <int M>
struct RotationJordanFam {
  static constexpr const char* name = "RotationJordanBlock";
  template <class S>
  static auto build(Draw& d) {
    const double w = d.omega();
    return peal::RotationJordanBlock<M, S>(w, d.real());
  }
};
template <class BlockFam, peal::Layout L, int N = 4>
struct BankFam {
  static constexpr const char* name = "Bank";
  template <class S>
  static auto build(Draw& d) {
    using B = decltype(BlockFam::template build<S>(d));
    std::vector<B> blocks;
    for (int i = 0; i < N; ++i) blocks.push_back(BlockFam::template build<S>(d));
    return peal::Bank<B>(blocks, L);
  }
};
// Every block type, a half-split rotation bank and pass-through coordinates.
struct MixedFam {
  static constexpr const char* name = "Mixed";
  template <class S>
  static auto build(Draw& d) {
    auto r = RealFam::build<S>(d);
    auto rot = RotationFam::build<S>(d);
    auto j = JordanFam<3>::build<S>(d);
    auto rj = RotationJordanFam<2>::build<S>(d);
    auto bank = BankFam<RotationFam, peal::Layout::HalfSplit, 3>::build<S>(d);
    return peal::compose(r, rot, j, rj, bank, peal::PassThrough<S>(2));
  }
};
// The mixed composition in a random, well-conditioned basis P = I + 0.3 U.
struct BasisChangeFam {
  static constexpr const char* name = "BasisChange";
  template <class S>
  static auto build(Draw& d) {
    auto inner = MixedFam::build<S>(d);
    const int n = inner.dim();
    peal::Matrix<S> P = peal::Matrix<S>::Identity(n, n);
    for (int i = 0; i < n; ++i)
      for (int j = 0; j < n; ++j) P(i, j) += S(0.3 * d.uniform(-1, 1) / std::sqrt(double(n)));
    return peal::change_basis(inner, P);
  }
};

template <class Fam, class S>
struct Case {
  using Family = Fam;
  using Scalar = S;
};

// ---- Families added for the kernel-conformance suite (tests/conformance_suite.hpp) ----------

// Compositions nested in a composition, next to a top-level Jordan block: the kernels recurse
// into the nested parts, and scores() keeps the nested JordanBlock<3> in its GEMM while the
// top-level JordanBlock<2> is evaluated per pair (docs/kernels-scores.md §3).
struct NestedFam {
  static constexpr const char* name = "Nested";
  template <class S>
  static auto build(Draw& d) {  // one draw per statement: the twins draw in the same order
    auto bank = BankFam<RotationFam, peal::Layout::HalfSplit, 2>::build<S>(d);
    auto j3 = JordanFam<3>::build<S>(d);
    auto inner = peal::compose(bank, j3, peal::PassThrough<S>(1));
    auto j2 = JordanFam<2>::build<S>(d);
    auto real = RealFam::build<S>(d);
    auto rj = RotationJordanFam<1>::build<S>(d);
    auto tail = peal::compose(real, rj);
    return peal::compose(inner, j2, tail, peal::PassThrough<S>(1));
  }
};

// The same rotation bank with another Scalar, parameter for parameter (omega_hi, omega_lo, a
// copied exactly): the long double twin of a preset built in double, whose rates a preset
// would otherwise round differently for each Scalar (xpos, retnet: a = ln(...) in real_t<S>).
template <class S>
peal::Bank<peal::RotationBlock<S>> rotation_bank_as(
    const peal::Bank<peal::RotationBlock<double>>& b) {
  using R = peal::real_t<S>;
  std::vector<peal::RotationBlock<S>> blocks;
  for (int i = 0; i < b.size(); ++i) {
    const auto p = b.block(i).params();
    // A pair normalised in double is not one in long double (|lo| <= ulp(hi)/2 is checked by
    // from_params): renormalise in R. hi + lo == p[0] + p[1] exactly: hi - RN(hi + lo) is
    // exact (Sterbenz) and the residual spans at most ~52 bits, within R's 64.
    const R hi = R(p[0]) + R(p[1]);
    const R lo = (R(p[0]) - hi) + R(p[1]);
    blocks.push_back(peal::RotationBlock<S>::from_params({hi, lo, R(p[2])}));
  }
  return peal::Bank<peal::RotationBlock<S>>(blocks, b.layout());
}

// RoPE presets (rope.hpp): every rope_type, a layout, a head size and a rotary percentage
// (partial rotary: the PassThrough tail). The frequencies are computed in long double for every
// Scalar, so rope<double> and rope<long double> have the same omega exactly.
template <peal::RopeType Type, peal::Layout L, int HeadDim, int RotaryPercent = 100>
struct RopeFam {
  static constexpr const char* name = "rope";
  static peal::RopeConfig config() {
    peal::RopeConfig c;
    c.head_dim = HeadDim;
    c.rope_theta = Type == peal::RopeType::Llama3 ? 500000.0 : 10000.0;
    c.partial_rotary_factor = RotaryPercent / 100.0;
    c.layout = L;
    c.max_position_embeddings = 131072;
    auto& sc = c.scaling;
    sc.type = Type;
    const int pairs = int(HeadDim * c.partial_rotary_factor) / 2;
    switch (Type) {
      case peal::RopeType::Default:
        break;
      case peal::RopeType::Linear:
        sc.factor = 4.0;
        break;
      case peal::RopeType::Dynamic:
        sc.factor = 2.0, c.max_position_embeddings = 4096;
        break;
      case peal::RopeType::Yarn:
        sc.factor = 4.0, sc.original_max_position_embeddings = 4096;
        break;
      case peal::RopeType::LongRope: {
        sc.original_max_position_embeddings = 4096;
        std::vector<double> s(static_cast<std::size_t>(pairs)), l(static_cast<std::size_t>(pairs));
        for (int i = 0; i < pairs; ++i) {
          const double u = pairs > 1 ? double(i) / (pairs - 1) : 0.0;
          s[std::size_t(i)] = 1.0 + 0.3 * u, l[std::size_t(i)] = 1.0 + 63.0 * u * u;
        }
        sc.short_factor = s, sc.long_factor = l;
        break;
      }
      case peal::RopeType::Llama3:
        sc.factor = 8.0, sc.low_freq_factor = 1.0, sc.high_freq_factor = 4.0;
        sc.original_max_position_embeddings = 8192;
        break;
    }
    return c;
  }
  // seq_len matters for dynamic NTK and LongRoPE: past the trained length, so they rescale.
  template <class S>
  static auto build(Draw&) {
    return peal::rope<S>(config(), 8192.0);
  }
};

// xPos (xpos.hpp), head size 32.
struct XposFam {
  static constexpr const char* name = "xpos";
  template <class S>
  static auto build(Draw&) {
    return rotation_bank_as<S>(peal::xpos<double>(32));
  }
};

// RoPE's rotation as RetNet uses it (retnet_rotation: interleaved pairs, ω_i = 10000^(−i/7),
// a = 0), head size 16: a pure rotation bank of the type of RetNetFam's decaying banks
// (Bank<RotationBlock>), so that tests running both share their instantiations
// (docs/build-cost.md).
struct RetNetRotationFam {
  static constexpr const char* name = "RoPE rotation bank";
  template <class S>
  static auto build(Draw&) {
    return rotation_bank_as<S>(peal::retnet_rotation<double>(16));
  }
};

// RetNet (retnet.hpp): the encoding of head Head of 3, head size 32 (gamma = 1 - 2^(-5-Head)).
template <int Head>
struct RetNetFam {
  static constexpr const char* name = "retnet";
  template <class S>
  static auto build(Draw&) {
    return rotation_bank_as<S>(peal::retnet<double>(32, 3)[Head]);
  }
};

// ALiBi's Jordan construction (alibi.hpp, docs/design.md §1): a rotation bank composed with
// alibi(m).encoding() = JordanBlock<2>{0}. shape() gives the inputs their augmentation: the last
// two coordinates of a query are (1, 0), of key head h (0, -m_h) with m = alibi_slopes(heads),
// so that the score carries the bias -m_h (t - s).
struct AlibiFam {
  static constexpr const char* name = "alibi";
  template <class S>
  static auto build(Draw& d) {
    return peal::compose(BankFam<RotationFam, peal::Layout::Interleaved, 3>::build<S>(d),
                         peal::alibi<S>(0.5).encoding());
  }
  template <class V>
  static void shape(bool query, int head, int heads, V& v) {
    const auto n = v.size();
    v[n - 2] = query ? 1 : 0;
    v[n - 1] = query ? 0 : -peal::alibi_slopes(heads)[std::size_t(head)];
  }
};

}  // namespace peal_test
