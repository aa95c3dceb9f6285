// The real Schur form X = Q T Qᵀ (T upper quasi-triangular: 1×1 blocks for real eigenvalues,
// 2×2 blocks for complex pairs; Q orthogonal), on plain loops: Householder reduction to
// Hessenberg form with the transformations accumulated, then the Francis double-shift QR
// iteration with Wilkinson's and MATLAB's exceptional shifts. This is the algorithm of
// EISPACK's orthes/hqr2 (Wilkinson & Reinsch, Handbook for Automatic Computation II, 1971)
// as written in JAMA (public domain, NIST/MathWorks 2005), the same source Eigen's RealSchur
// follows; the eigenvector back-substitution of hqr2 is left out. Deflated subdiagonal
// entries are set to exact zeros, so the block structure is read from T's subdiagonal.
// Written out rather than taken from Eigen::RealSchur<long double>, whose instantiation costs
// ~30 s of g++ -O2 in every TU that calls canonical_form (docs/canonical-form.md §7).
#pragma once

#include <Eigen/Core>
#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "../../errors.hpp"
#include "small_linear.hpp"

namespace peal {
namespace detail {
namespace canonical {

template <class Rl>
struct Schur {
  Mat<Rl> T, Q;
};

template <class Rl>
Schur<Rl> real_schur(const Mat<Rl>& X) {
  using std::abs;
  using std::sqrt;
  const int nn = int(X.rows());
  Mat<Rl> H = X, V = Mat<Rl>::Identity(nn, nn);
  std::vector<Rl> ort(std::size_t(nn), Rl(0));
  const int low = 0, high = nn - 1;
  // ---- orthes: Householder reduction to Hessenberg form
  for (int m = low + 1; m <= high - 1; ++m) {
    Rl scale = 0;
    for (int i = m; i <= high; ++i) scale += abs(H(i, m - 1));
    if (scale == 0) continue;
    Rl h = 0;
    for (int i = high; i >= m; --i) {
      ort[std::size_t(i)] = H(i, m - 1) / scale;
      h += ort[std::size_t(i)] * ort[std::size_t(i)];
    }
    Rl g = sqrt(h);
    if (ort[std::size_t(m)] > 0) g = -g;
    h -= ort[std::size_t(m)] * g;
    ort[std::size_t(m)] -= g;
    for (int j = m; j < nn; ++j) {
      Rl f = 0;
      for (int i = high; i >= m; --i) f += ort[std::size_t(i)] * H(i, j);
      f /= h;
      for (int i = m; i <= high; ++i) H(i, j) -= f * ort[std::size_t(i)];
    }
    for (int i = 0; i <= high; ++i) {
      Rl f = 0;
      for (int j = high; j >= m; --j) f += ort[std::size_t(j)] * H(i, j);
      f /= h;
      for (int j = m; j <= high; ++j) H(i, j) -= f * ort[std::size_t(j)];
    }
    ort[std::size_t(m)] *= scale;
    H(m, m - 1) = scale * g;
  }
  for (int m = high - 1; m >= low + 1; --m) {  // accumulate the transformations
    if (H(m, m - 1) == 0) continue;
    for (int i = m + 1; i <= high; ++i) ort[std::size_t(i)] = H(i, m - 1);
    for (int j = m; j <= high; ++j) {
      Rl g = 0;
      for (int i = m; i <= high; ++i) g += ort[std::size_t(i)] * V(i, j);
      g = (g / ort[std::size_t(m)]) / H(m, m - 1);  // double division avoids underflow
      for (int i = m; i <= high; ++i) V(i, j) += g * ort[std::size_t(i)];
    }
  }
  for (int i = 0; i < nn; ++i)
    for (int j = 0; j + 1 < i; ++j) H(i, j) = 0;

  // ---- hqr2 (Schur part): Francis double-shift QR
  const Rl eps = std::numeric_limits<Rl>::epsilon();
  Rl exshift = 0, p = 0, q = 0, r = 0, s = 0, z = 0, t, w, x, y;
  Rl norm = 0;
  for (int i = 0; i < nn; ++i)
    for (int j = std::max(i - 1, 0); j < nn; ++j) norm += abs(H(i, j));
  int n = nn - 1, iter = 0, total = 0;
  while (n >= low) {
    int l = n;
    while (l > low) {
      s = abs(H(l - 1, l - 1)) + abs(H(l, l));
      if (s == 0) s = norm;
      if (abs(H(l, l - 1)) < eps * s) break;
      --l;
    }
    if (l == n) {  // one root
      if (n > low) H(n, n - 1) = 0;
      H(n, n) += exshift;
      --n, iter = 0;
    } else if (l == n - 1) {  // two roots
      if (n - 1 > low) H(n - 1, n - 2) = 0;
      w = H(n, n - 1) * H(n - 1, n);
      p = (H(n - 1, n - 1) - H(n, n)) / 2;
      q = p * p + w;
      z = sqrt(abs(q));
      H(n, n) += exshift;
      H(n - 1, n - 1) += exshift;
      x = H(n, n);
      if (q >= 0) {  // a real pair: rotate it to triangular form
        z = p >= 0 ? p + z : p - z;
        x = H(n, n - 1);
        s = abs(x) + abs(z);
        p = x / s, q = z / s;
        r = sqrt(p * p + q * q);
        p /= r, q /= r;
        for (int j = n - 1; j < nn; ++j) {
          z = H(n - 1, j);
          H(n - 1, j) = q * z + p * H(n, j);
          H(n, j) = q * H(n, j) - p * z;
        }
        for (int i = 0; i <= n; ++i) {
          z = H(i, n - 1);
          H(i, n - 1) = q * z + p * H(i, n);
          H(i, n) = q * H(i, n) - p * z;
        }
        for (int i = low; i <= high; ++i) {
          z = V(i, n - 1);
          V(i, n - 1) = q * z + p * V(i, n);
          V(i, n) = q * V(i, n) - p * z;
        }
        H(n, n - 1) = 0;
      }
      n -= 2, iter = 0;
    } else {  // no convergence yet: a double-shift step on rows l..n
      x = H(n, n);
      y = 0, w = 0;
      if (l < n) {
        y = H(n - 1, n - 1);
        w = H(n, n - 1) * H(n - 1, n);
      }
      if (iter == 10) {  // Wilkinson's exceptional shift
        exshift += x;
        for (int i = low; i <= n; ++i) H(i, i) -= x;
        s = abs(H(n, n - 1)) + abs(H(n - 1, n - 2));
        x = y = Rl(0.75) * s;
        w = Rl(-0.4375) * s * s;
      }
      if (iter == 30) {  // MATLAB's exceptional shift
        s = (y - x) / 2;
        s = s * s + w;
        if (s > 0) {
          s = sqrt(s);
          if (y < x) s = -s;
          s = x - w / ((y - x) / 2 + s);
          for (int i = low; i <= n; ++i) H(i, i) -= s;
          exshift += s;
          x = y = w = Rl(0.964);
        }
      }
      ++iter;
      if (++total > 100 * nn)
        fail("canonical_form: the Schur iteration did not converge (X badly scaled?)");
      int m = n - 2;
      while (m >= l) {
        z = H(m, m);
        r = x - z;
        s = y - z;
        p = (r * s - w) / H(m + 1, m) + H(m, m + 1);
        q = H(m + 1, m + 1) - z - r - s;
        r = H(m + 2, m + 1);
        s = abs(p) + abs(q) + abs(r);
        p /= s, q /= s, r /= s;
        if (m == l) break;
        if (abs(H(m, m - 1)) * (abs(q) + abs(r)) <
            eps * (abs(p) * (abs(H(m - 1, m - 1)) + abs(z) + abs(H(m + 1, m + 1)))))
          break;
        --m;
      }
      for (int i = m + 2; i <= n; ++i) {
        H(i, i - 2) = 0;
        if (i > m + 2) H(i, i - 3) = 0;
      }
      for (int k = m; k <= n - 1; ++k) {
        const bool notlast = k != n - 1;
        if (k != m) {
          p = H(k, k - 1);
          q = H(k + 1, k - 1);
          r = notlast ? H(k + 2, k - 1) : Rl(0);
          x = abs(p) + abs(q) + abs(r);
          if (x == 0) continue;
          p /= x, q /= x, r /= x;
        }
        s = sqrt(p * p + q * q + r * r);
        if (p < 0) s = -s;
        if (s == 0) continue;
        if (k != m)
          H(k, k - 1) = -s * x;
        else if (l != m)
          H(k, k - 1) = -H(k, k - 1);
        p += s;
        x = p / s, y = q / s, z = r / s;
        q /= p, r /= p;
        for (int j = k; j < nn; ++j) {
          t = H(k, j) + q * H(k + 1, j);
          if (notlast) {
            t += r * H(k + 2, j);
            H(k + 2, j) -= t * z;
          }
          H(k, j) -= t * x;
          H(k + 1, j) -= t * y;
        }
        for (int i = 0; i <= std::min(n, k + 3); ++i) {
          t = x * H(i, k) + y * H(i, k + 1);
          if (notlast) {
            t += z * H(i, k + 2);
            H(i, k + 2) -= t * r;
          }
          H(i, k) -= t;
          H(i, k + 1) -= t * q;
        }
        for (int i = low; i <= high; ++i) {
          t = x * V(i, k) + y * V(i, k + 1);
          if (notlast) {
            t += z * V(i, k + 2);
            V(i, k + 2) -= t * r;
          }
          V(i, k) -= t;
          V(i, k + 1) -= t * q;
        }
      }
    }
  }
  for (int i = 0; i < nn; ++i)
    for (int j = 0; j + 1 < i; ++j) H(i, j) = 0;
  return {H, V};
}

}  // namespace canonical
}  // namespace detail
}  // namespace peal
