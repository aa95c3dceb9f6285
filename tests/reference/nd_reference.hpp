// Independent long double references of the N-D RoPE presets, written from the published
// Python, step by step as it computes (plain C++17, no Eigen, no peal headers):
//   Qwen2-VL / Qwen2.5-VL   transformers models/qwen2_vl/modeling_qwen2_vl.py:
//                           freqs[a] = p_a * inv_freq, emb = cat(freqs, freqs) per row a,
//                           cos/sin split along the head dim by mrope_section * 2, chunk i
//                           from row i % 3; x * cos + rotate_half(x) * sin.
//   Qwen3-VL                models/qwen3_vl/modeling_qwen3_vl.py apply_interleaved_mrope:
//                           freqs_t = freqs[0]; freqs_t[offset : 3 s : 3] = freqs[dim] for
//                           (dim, offset) in ((1, 1), (2, 2)); emb = cat(freqs_t, freqs_t).
//   rope-vit axial          compute_axial_cis: cat(polar(t_x freqs), polar(t_y freqs)) over
//                           complex pairs (view_as_complex: interleaved), x * freqs_cis.
//   rope-vit mixed          init_random_2d_freqs + compute_mixed_cis: angle = t_x fx + t_y fy.
//   DINOv3                  transformers models/dinov3_vit/modeling_dinov3_vit.py:
//                           angles = 2 pi coords[:, :, None] * inv_freq (flatten, tile(2)),
//                           x * cos + rotate_half(x) * sin.
// Every function encodes one query vector x (size head_dim) in place at its position.
#pragma once

#include <cmath>
#include <vector>

namespace peal_ref {
namespace nd {

using LD = long double;
inline LD pi() { return std::acos(-1.0L); }

// x * cos + rotate_half(x) * sin over the whole head (half-split), angles per coordinate.
inline void apply_half_split(std::vector<LD>& x, const std::vector<LD>& angle) {
  const std::size_t d = x.size(), h = d / 2;
  std::vector<LD> rh(d);
  for (std::size_t i = 0; i < h; ++i) rh[i] = -x[h + i], rh[h + i] = x[i];
  for (std::size_t i = 0; i < d; ++i) x[i] = x[i] * std::cos(angle[i]) + rh[i] * std::sin(angle[i]);
}

// Qwen2-VL: p = (t, h, w), inv_freq[j] = theta^(-2j/d), sections (s_t, s_h, s_w).
inline void qwen2_vl(std::vector<LD>& x, const LD p[3], LD theta, const std::vector<int>& sec) {
  const std::size_t d = x.size(), h = d / 2;
  std::vector<std::vector<LD>> emb(3, std::vector<LD>(d));
  for (int a = 0; a < 3; ++a)
    for (std::size_t j = 0; j < h; ++j) {
      const LD f = p[a] * std::pow(theta, -2.0L * LD(j) / LD(d));
      emb[a][j] = emb[a][h + j] = f;
    }
  // mrope_section * 2 = [s_t, s_h, s_w, s_t, s_h, s_w]; chunk i takes row i % 3.
  std::vector<LD> angle(d);
  std::size_t at = 0;
  for (int i = 0; i < 6; ++i)
    for (int c = 0; c < sec[std::size_t(i % 3)]; ++c, ++at) angle[at] = emb[i % 3][at];
  apply_half_split(x, angle);
}

// Qwen3-VL interleaved.
inline void qwen3_vl(std::vector<LD>& x, const LD p[3], LD theta, const std::vector<int>& sec) {
  const std::size_t d = x.size(), h = d / 2;
  std::vector<std::vector<LD>> freqs(3, std::vector<LD>(h));
  for (int a = 0; a < 3; ++a)
    for (std::size_t j = 0; j < h; ++j) freqs[a][j] = p[a] * std::pow(theta, -2.0L * LD(j) / LD(d));
  std::vector<LD> ft = freqs[0];
  for (int dim = 1; dim <= 2; ++dim) {
    const std::size_t length = std::size_t(sec[std::size_t(dim)]) * 3;
    for (std::size_t j = std::size_t(dim); j < length && j < h; j += 3) ft[j] = freqs[dim][j];
  }
  std::vector<LD> angle(d);
  for (std::size_t j = 0; j < h; ++j) angle[j] = angle[h + j] = ft[j];
  apply_half_split(x, angle);
}

// Complex pairs (x[2k], x[2k+1]) multiplied by e^{i angle[k]}.
inline void apply_complex(std::vector<LD>& x, const std::vector<LD>& angle) {
  for (std::size_t k = 0; k < angle.size(); ++k) {
    const LD a = x[2 * k], b = x[2 * k + 1], c = std::cos(angle[k]), s = std::sin(angle[k]);
    x[2 * k] = a * c - b * s;
    x[2 * k + 1] = a * s + b * c;
  }
}

// rope-vit axial: dim = head dim, freqs = 1 / theta^(arange(0, dim, 4)[: dim/4] / dim).
inline void vit_axial(std::vector<LD>& x, LD tx, LD ty, LD theta) {
  const std::size_t d = x.size(), q = d / 4;
  std::vector<LD> angle(2 * q);
  for (std::size_t j = 0; j < q; ++j) {
    const LD f = 1.0L / std::pow(theta, LD(4 * j) / LD(d));
    angle[j] = tx * f;
    angle[q + j] = ty * f;
  }
  apply_complex(x, angle);
}

// rope-vit mixed at initialisation with direction alpha.
inline void vit_mixed(std::vector<LD>& x, LD tx, LD ty, LD theta, LD alpha) {
  const std::size_t d = x.size(), q = d / 4;
  std::vector<LD> angle(2 * q);
  for (std::size_t j = 0; j < q; ++j) {
    const LD mag = 1.0L / std::pow(theta, LD(4 * j) / LD(d));
    const LD fx0 = mag * std::cos(alpha), fx1 = mag * std::cos(pi() / 2 + alpha);
    const LD fy0 = mag * std::sin(alpha), fy1 = mag * std::sin(pi() / 2 + alpha);
    angle[j] = tx * fx0 + ty * fy0;
    angle[q + j] = tx * fx1 + ty * fy1;
  }
  apply_complex(x, angle);
}

// DINOv3 at coordinates (y, x) with inv_freq = 1 / base^(arange(0, 1, 4/d)).
inline void dinov3(std::vector<LD>& v, LD cy, LD cx, LD base) {
  const std::size_t d = v.size(), q = d / 4;
  std::vector<LD> angle(d);
  for (std::size_t j = 0; j < q; ++j) {
    const LD inv = 1.0L / std::pow(base, LD(j) * (4.0L / LD(d)));
    angle[j] = 2 * pi() * cy * inv;      // [HW, 2, d/4] flattened: y first
    angle[q + j] = 2 * pi() * cx * inv;  // then x
  }
  for (std::size_t j = 0; j < 2 * q; ++j) angle[2 * q + j] = angle[j];  // tile(2)
  apply_half_split(v, angle);
}

}  // namespace nd
}  // namespace peal_ref
