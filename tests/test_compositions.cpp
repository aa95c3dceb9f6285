// Bank layouts, BlockDiagonal offsets and pass-through, and BasisChange factors, beyond
// what the generic suite checks.
#include <catch2/catch.hpp>

#include <peal/peal.hpp>
#include <vector>

#include "tolerances.hpp"

using peal::Layout;
using peal_test::Tol;

TEST_CASE("Interleaved and HalfSplit banks are one encoding up to a fixed permutation") {
  std::vector<peal::RotationBlock<double>> blocks;
  for (int i = 0; i < 5; ++i) blocks.emplace_back(std::pow(10000.0L, -2.0L * i / 10), -0.01 * i);
  const peal::Bank<peal::RotationBlock<double>> inter(blocks, Layout::Interleaved);
  const peal::Bank<peal::RotationBlock<double>> half(blocks, Layout::HalfSplit);
  // P maps interleaved coordinate 2i+c to half-split coordinate c*n+i.
  Eigen::MatrixXd P = Eigen::MatrixXd::Zero(10, 10);
  for (int i = 0; i < 5; ++i)
    for (int c = 0; c < 2; ++c) P(c * 5 + i, 2 * i + c) = 1;
  for (double tau : {0.0, 1.0, -7.5, 4096.0}) {
    CHECK((P * inter.A(tau) * P.transpose() - half.A(tau)).norm() == 0.0);
    CHECK((P * inter.generator() * P.transpose() - half.generator()).norm() == 0.0);
  }
  CHECK(half.coordinate(2, 1) == 7);
  CHECK(inter.coordinate(2, 1) == 5);
}

TEST_CASE("a Bank keeps its parameters structure-of-arrays") {
  std::vector<peal::RotationBlock<float>> blocks{peal::RotationBlock<float>(1.0L / 3, -0.5),
                                                 peal::RotationBlock<float>(0.25, 0.0)};
  const peal::Bank<peal::RotationBlock<float>> bank(blocks, Layout::HalfSplit);
  REQUIRE(bank.size() == 2);
  REQUIRE(bank.dim() == 4);
  // Column 0: omega_hi of every block, contiguous; column 1 the low parts; column 2 a.
  const double* w = bank.params().col(0).data();
  CHECK(w[0] == double(1.0L / 3));
  CHECK(w[1] == 0.25);
  CHECK(bank.params()(0, 1) == double(1.0L / 3 - (long double)double(1.0L / 3)));
  CHECK(bank.params()(0, 2) == -0.5);
  CHECK(bank.block(0).omega() == 1.0L / 3);
  const auto round_trip = decltype(bank)::from_params(bank.params(), Layout::HalfSplit);
  CHECK((round_trip.A(3.0) - bank.A(3.0)).norm() == 0.0f);
}

TEST_CASE("BlockDiagonal places parts at consecutive offsets; PassThrough is the identity") {
  const auto enc = peal::compose(peal::RealBlock<double>(-0.5), peal::RotationBlock<double>(1.0),
                                 peal::JordanBlock<3, double>(0.1), peal::PassThrough<double>(2));
  REQUIRE(enc.dim() == 8);
  CHECK(enc.offset<0>() == 0);
  CHECK(enc.offset<2>() == 3);
  CHECK(enc.offset<3>() == 6);
  const double tau = 1.5;
  const Eigen::MatrixXd a = enc.A(tau);
  CHECK((a.block(1, 1, 2, 2) - enc.part<1>().A(tau)).norm() == 0.0);
  CHECK((a.block(3, 3, 3, 3) - enc.part<2>().A(tau)).norm() == 0.0);
  CHECK((a.block(6, 6, 2, 2) - Eigen::Matrix2d::Identity()).norm() == 0.0);
  CHECK(a.block(0, 1, 1, 7).norm() == 0.0);
  Eigen::VectorXd q = Eigen::VectorXd::LinSpaced(8, 1, 8), qe = q;
  enc.encode_query(qe, tau);
  // Both sides are <= 3-term sums (the Jordan block's rows) of the same closed-form entries:
  // entry(3) relative to |A|^T |q|.
  const double mag = (a.cwiseAbs().transpose() * q.cwiseAbs()).norm();
  CHECK((qe - a.transpose() * q).norm() <= Tol<double>::entry(3) * mag);
  CHECK(qe.tail(2) == q.tail(2));
}

TEST_CASE("BasisChange: F_P(t) = A_J(t)^T P^T, G_P(s) = A_J(-s) P^{-1}") {
  const auto inner = peal::compose(peal::RotationBlock<double>(0.7, -0.1), peal::JordanBlock<2, double>(0));
  Eigen::Matrix4d P;
  P << 1, 0.2, 0, 0.1, 0, 1, 0.3, 0, 0.1, 0, 1, 0.2, 0, 0.4, 0, 1;
  const auto e = peal::change_basis(inner, P);
  const double t = 2.0, s = -1.0;
  // Two evaluations of the same products of the same entries (inner.A is deterministic):
  // each entry of a 4-term product differs by <= 2 gamma_4 = 4 eps of |A_J| |P|, so
  // roundings(8) of that size. P^{-1} enters twice (peal's and Eigen's inverse of the same
  // P, kappa(P) ~ 2): the generic bound would carry kappa(P) and, for A = P A_J P^{-1}, two
  // products; the old absolute 1e-14 was tighter than that and is kept as tight:
  // roundings(8) for G, roundings(4) for A, relative to |A_J| |P^{-1}| and
  // |P| |A_J| |P^{-1}| (measured differences ~1e-2 of these).
  const Eigen::Matrix4d Pinv = P.inverse();
  const auto mag = [](const Eigen::Matrix4d& x, const Eigen::Matrix4d& y) {
    return (x.cwiseAbs() * y.cwiseAbs()).norm();
  };
  const Eigen::Matrix4d At = inner.A(t), As = inner.A(-s);
  const double tf = double(Tol<double>::roundings(8)) * mag(At.transpose(), P.transpose());
  const double tg = double(Tol<double>::roundings(8)) * mag(As, Pinv);
  const double ta =
      double(Tol<double>::roundings(4)) * (P.cwiseAbs() * At.cwiseAbs() * Pinv.cwiseAbs()).norm();
  CHECK((e.F(t) - At.transpose() * P.transpose()).norm() <= tf);
  CHECK((e.G(s) - As * Pinv).norm() <= tg);
  CHECK((e.A(t) - P * At * Pinv).norm() <= ta);
  // F_P is not A(t)^T: the factorization carries P on the query side and P^{-1} on the key.
  CHECK((e.F(t) - e.A(t).transpose()).norm() > 1e-3);
  Eigen::Vector4d q(1, -2, 0.5, 3), k(0.3, 0.1, -1, 2);
  Eigen::Vector4d qe = q, ke = k;
  e.encode_query(qe, t);
  e.encode_key(ke, s);
  // Against q . A(t - s) k (A dense in double): each side within entry(8) (two 4 x 4
  // factors and a 4-term dot) of the componentwise size |q|^T |P| |A_J| |P^{-1}| |k|, with
  // kappa(P) for the two inverses.
  const double want = q.dot(e.A(t - s) * k);
  const double kappa = P.norm() * Pinv.norm();
  const double size =
      q.cwiseAbs().dot((P.cwiseAbs() * inner.A(t - s).cwiseAbs() * Pinv.cwiseAbs()) * k.cwiseAbs());
  const double tol = double(Tol<double>::entry(8)) * kappa * size;
  CHECK(std::abs(qe.dot(ke) - want) <= tol);
  CHECK(std::abs(e.score(q, t, k, s) - want) <= tol);
}
