// The error policy (docs/design.md §2, errors.hpp): bad input throws peal::invalid_argument
// with a message naming the problem; nothing returns silent garbage.
#include <catch2/catch.hpp>

#include <limits>
#include <peal/peal.hpp>
#include <vector>

using Catch::Matchers::Contains;

namespace {
const double kNaN = std::numeric_limits<double>::quiet_NaN();
const double kInf = std::numeric_limits<double>::infinity();
}  // namespace

TEST_CASE("non-finite parameters are rejected at construction") {
  for (double bad : {kNaN, kInf, -kInf}) {
    CHECK_THROWS_AS(peal::RealBlock<double>(bad), peal::invalid_argument);
    CHECK_THROWS_AS(peal::RotationBlock<float>(bad), peal::invalid_argument);
    CHECK_THROWS_AS(peal::RotationBlock<double>(0.5, bad), peal::invalid_argument);
    CHECK_THROWS_AS((peal::JordanBlock<3, double>(bad)), peal::invalid_argument);
    CHECK_THROWS_AS((peal::RotationJordanBlock<2, double>(bad, 0.0)), peal::invalid_argument);
    CHECK_THROWS_AS((peal::RotationJordanBlock<2, double>(1.0, bad)), peal::invalid_argument);
  }
  using Bank = peal::Bank<peal::RotationBlock<double>>;
  Bank::ParamArray p(2, 3);
  p << 1.0, 0.0, 0.0, kNaN, 0.0, 0.0;
  CHECK_THROWS_WITH(Bank::from_params(p), Contains("omega_hi must be finite"));
}

TEST_CASE("non-finite positions are rejected") {
  const auto enc = peal::compose(peal::RotationBlock<double>(1.0), peal::JordanBlock<2, double>(0));
  Eigen::VectorXd v = Eigen::VectorXd::Ones(4);
  for (double bad : {kNaN, kInf, -kInf}) {
    CHECK_THROWS_AS(enc.A(bad), peal::invalid_argument);
    CHECK_THROWS_AS(enc.F(bad), peal::invalid_argument);
    CHECK_THROWS_AS(enc.G(bad), peal::invalid_argument);
    CHECK_THROWS_AS(enc.encode_query(v, bad), peal::invalid_argument);
    CHECK_THROWS_AS(enc.encode_key(v, bad), peal::invalid_argument);
    CHECK_THROWS_AS(enc.score(v, bad, v, 0.0), peal::invalid_argument);
    CHECK_THROWS_AS(enc.score(v, 0.0, v, bad), peal::invalid_argument);
  }
  CHECK(v == Eigen::VectorXd::Ones(4));  // untouched by the failed calls
}

TEST_CASE("wrong vector sizes are rejected with the sizes in the message") {
  const peal::Bank<peal::RotationBlock<float>> bank(
      std::vector<peal::RotationBlock<float>>(4, peal::RotationBlock<float>(0.5)));
  Eigen::VectorXf short_v(7), ok(8);
  ok.setOnes();
  CHECK_THROWS_WITH(bank.encode_query(short_v, 1.0), Contains("size 7") && Contains("size 8"));
  CHECK_THROWS_AS(bank.encode_key(short_v, 1.0), peal::invalid_argument);
  CHECK_THROWS_AS(bank.score(ok, 0.0, short_v, 1.0), peal::invalid_argument);
  std::vector<float> sv(9, 1.0f);
  CHECK_THROWS_AS(bank.encode_query(sv, 1.0), peal::invalid_argument);
  std::vector<float> good(8, 1.0f);
  CHECK_NOTHROW(bank.encode_query(good, 1.0));
}

TEST_CASE("a basis change needs a square, finite, invertible P of the right size") {
  const peal::RotationBlock<double> r(1.0);
  CHECK_THROWS_AS(peal::change_basis(r, Eigen::Matrix3d::Identity()), peal::invalid_argument);
  Eigen::Matrix2d singular;
  singular << 1, 2, 2, 4;
  CHECK_THROWS_WITH(peal::change_basis(r, singular), Contains("singular"));
  Eigen::Matrix2d bad = Eigen::Matrix2d::Identity();
  bad(0, 1) = kNaN;
  CHECK_THROWS_AS(peal::change_basis(r, bad), peal::invalid_argument);
  CHECK_THROWS_AS(peal::PassThrough<double>(-1), peal::invalid_argument);
}
