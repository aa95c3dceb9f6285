// Tests of include/peal/parameters.hpp: the names and layout of the parameters of every kind
// of encoding, the round trip with_parameters(enc, parameters(enc).values) (the same A(τ), bit
// for bit), new values taking effect exactly as a directly built encoding, and bad values
// rejected with the encoding left as it was.
#include <catch2/catch.hpp>
#include <cmath>
#include <limits>
#include <peal/parameters.hpp>
#include <random>
#include <string>
#include <vector>

#include "families.hpp"

using namespace peal_test;

namespace {

using LD = long double;

template <class E>
void require_same_A(const E& a, const E& b, double tau) {
  const peal::Matrix<typename E::Scalar> ma = a.A(tau), mb = b.A(tau);
  REQUIRE(ma.rows() == mb.rows());
  CHECK((ma.array() == mb.array()).all());
}

template <class Fam, class S>
void round_trip() {
  std::mt19937_64 rng(99);
  Draw d{rng, Regime::Random};
  const auto enc = Fam::template build<S>(d);
  const peal::ParameterSet p = peal::parameters(enc);
  REQUIRE(p.names.size() == p.values.size());
  REQUIRE(int(p.size()) == peal::parameter_count(enc));
  const auto back = peal::with_parameters(enc, p.values);
  INFO(Fam::name);
  for (double tau : {0.0, -2.5, 1.75}) require_same_A(enc, back, tau);  // finite A in Random
  CHECK(peal::parameters(back).values == p.values);
}

}  // namespace

TEST_CASE("parameters: names and layout of a composition", "[parameters]") {
  const auto bank = peal::Bank<peal::RotationBlock<double>>(
      {peal::RotationBlock<double>(0.5L, -0.1), peal::RotationBlock<double>(0.25L, -0.2)},
      peal::Layout::HalfSplit);
  const auto enc = peal::compose(peal::RealBlock<double>(-0.3), bank, peal::PassThrough<double>(1),
                                 peal::JordanBlock<2, double>(0.0),
                                 peal::RotationJordanBlock<2, double>(0.75L, 0.01));
  const peal::ParameterSet p = peal::parameters(enc);
  const std::vector<std::string> names = {
      "part[0].lambda",         "part[1].block[0].omega", "part[1].block[1].omega",
      "part[1].block[0].a",     "part[1].block[1].a",     "part[3].lambda",
      "part[4].omega",          "part[4].a"};
  CHECK(p.names == names);
  const std::vector<LD> values = {LD(-0.3), 0.5L, 0.25L, LD(-0.1), LD(-0.2), 0.0L, 0.75L, LD(0.01)};
  CHECK(p.values == values);

  // A basis change: the inner encoding's, then P row-major.
  peal::Matrix<double> P(2, 2);
  P << 2, 1, 0, 1;
  const auto bc = peal::change_basis(peal::RotationBlock<double>(0.5L), P);
  const peal::ParameterSet q = peal::parameters(bc);
  CHECK(q.names == std::vector<std::string>{"inner.omega", "inner.a", "P[0][0]", "P[0][1]",
                                            "P[1][0]", "P[1][1]"});
  CHECK(q.values == std::vector<LD>{0.5L, 0.0L, 2.0L, 1.0L, 0.0L, 1.0L});
}

TEST_CASE("parameters: presets, multi-axis and per-head encodings", "[parameters]") {
  peal::RopeConfig c;
  c.head_dim = 8;
  c.rope_theta = 10000;
  c.partial_rotary_factor = 0.5;
  const auto r = peal::rope<double>(c);
  const peal::ParameterSet p = peal::parameters(r);
  CHECK(p.names == std::vector<std::string>{"inv_freq[0]", "inv_freq[1]"});
  CHECK(p.values == r.inv_freq());  // HF's inv_freq, all its long double bits

  // A frequency changed: the same A as the preset built from those frequencies.
  std::vector<LD> th = p.values;
  th[1] = 0.03L;
  const auto r2 = peal::with_parameters(r, th);
  peal::RopeFrequencies f;
  f.inv_freq = th;
  f.rotary_dim = 4;
  f.attention_factor = r.attention_factor_long();
  const peal::RopeEncoding<double> direct(f, 8, r.layout(), r.type());
  require_same_A(r2, direct, 123.5);
  CHECK(r2.head_dim() == 8);
  CHECK(r2.layout() == r.layout());

  const auto axis = [](LD w) {
    return peal::Bank<peal::RotationBlock<double>>({peal::RotationBlock<double>(w)});
  };
  const peal::MultiAxis<peal::Bank<peal::RotationBlock<double>>> m({axis(0.5L), axis(0.125L)});
  const peal::ParameterSet pm = peal::parameters(m);
  CHECK(pm.names == std::vector<std::string>{"axis[0].block[0].omega", "axis[0].block[0].a",
                                             "axis[1].block[0].omega", "axis[1].block[0].a"});
  const auto m2 = peal::with_parameters(m, {0.5L, 0.0L, 0.375L, 0.0L});
  CHECK(m2.axis(1).block(0).omega() == 0.375L);
  CHECK(m2.axis(0).block(0).omega() == 0.5L);

  const peal::PerHead<peal::RealBlock<double>> ph(
      {peal::RealBlock<double>(-0.5), peal::RealBlock<double>(-0.25)});
  const peal::ParameterSet pp = peal::parameters(ph);
  CHECK(pp.names == std::vector<std::string>{"head[0].lambda", "head[1].lambda"});
  const auto ph2 = peal::with_parameters(ph, {-1.0L, -2.0L});
  CHECK(ph2.head(1).lambda() == -2.0);
}

TEST_CASE("parameters: round trip of every family, bit for bit", "[parameters]") {
  round_trip<RealFam, double>();
  round_trip<RotationJordanFam<2>, float>();
  round_trip<MixedFam, double>();
  round_trip<MixedFam, LD>();
  round_trip<BasisChangeFam, float>();
  round_trip<BasisChangeFam, double>();
  round_trip<NestedFam, double>();
  round_trip<RopeFam<peal::RopeType::Llama3, peal::Layout::HalfSplit, 32>, double>();
  round_trip<RopeFam<peal::RopeType::LongRope, peal::Layout::Interleaved, 16, 50>, LD>();
  round_trip<XposFam, double>();
  round_trip<RetNetFam<2>, float>();
  round_trip<AlibiFam, double>();
}

TEST_CASE("parameters: bad values are rejected and the encoding is unchanged", "[parameters]") {
  const auto enc = peal::compose(peal::RealBlock<double>(-0.3), peal::RotationBlock<double>(0.5L));
  const std::vector<LD> good = peal::parameters(enc).values;
  const LD nan = std::numeric_limits<LD>::quiet_NaN(), inf = std::numeric_limits<LD>::infinity();
  CHECK_THROWS_AS(peal::with_parameters(enc, {1.0L, 2.0L}), peal::invalid_argument);  // count
  for (std::size_t k = 0; k < good.size(); ++k)
    for (LD bad : {nan, inf, LD(1e4000L)}) {
      std::vector<LD> th = good;
      th[k] = bad;
      CHECK_THROWS_AS(peal::with_parameters(enc, th), peal::invalid_argument);
    }
  CHECK(peal::parameters(enc).values == good);

  peal::Matrix<double> P = peal::Matrix<double>::Identity(2, 2);
  const auto bc = peal::change_basis(peal::RotationBlock<double>(0.5L), P);
  CHECK_THROWS_AS(peal::with_parameters(bc, {0.5L, 0.0L, 1.0L, 1.0L, 1.0L, 1.0L}),
                  peal::invalid_argument);  // singular P

  peal::RopeConfig c;
  c.head_dim = 4;
  c.rope_theta = 10000;
  const auto r = peal::rope<double>(c);
  CHECK_THROWS_AS(peal::with_parameters(r, {1.0L, -0.5L}), peal::invalid_argument);
  CHECK_THROWS_AS(peal::with_parameters(r, {1.0L, 0.0L}), peal::invalid_argument);
}
