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

}  // namespace peal_test
