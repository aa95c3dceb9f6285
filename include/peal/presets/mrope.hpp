// Multimodal RoPE over (t, h, w) positions (docs/positions-nd.md §2):
//
//   Qwen2-VL / Qwen2.5-VL, transformers models/qwen2_vl/modeling_qwen2_vl.py
//   (apply_multimodal_rotary_pos_emb): rope_scaling {"type": "mrope", "mrope_section":
//   [s_t, s_h, s_w]}, s_t + s_h + s_w = rotary_dim / 2. cos/sin are built for each of the
//   three position rows with the ordinary frequencies ω_j = θ^(−2j/D) (j not reset per
//   section), then split along the head dimension by mrope_section * 2 and chunk i taken
//   from row i mod 3: pair j (coordinates j, j + D/2, half-split) uses t for j < s_t, h for
//   s_t ≤ j < s_t + s_h, w otherwise.
//
//   Qwen3-VL, models/qwen3_vl/modeling_qwen3_vl.py (apply_interleaved_mrope,
//   "mrope_interleaved": true, e.g. [24, 20, 20]): pair j uses h if j mod 3 = 1 and
//   j < 3 s_h, w if j mod 3 = 2 and j < 3 s_w, t otherwise. ggml's IMROPE is the same rule.
//
// In the algebra each pair is a RotationBlock whose ω ∈ ℝ³ has one non-zero axis: the
// encoding is a MultiAxis of three rope banks with the other axes' frequencies zeroed.
// Text tokens sit at t = h = w, where it is plain RoPE. Any rope_type of rope.hpp applies
// to the frequencies first (and frequency_factors), as rope<S>() would.
#pragma once

#include <numeric>
#include <string>
#include <utility>
#include <vector>

#include "../bank.hpp"
#include "../block_diagonal.hpp"
#include "../multi_axis.hpp"
#include "../rotation_block.hpp"
#include "rope.hpp"

namespace peal {

/// The axis (0 = t, 1 = h, 2 = w) of each of the n_pairs rotary pairs (header comment).
/// Throws unless sections has 3 entries >= 0 summing to n_pairs.
inline std::vector<int> mrope_pair_axes(const std::vector<int>& sections, bool interleaved,
                                        int n_pairs) {
  if (sections.size() != 3)
    detail::fail("mrope: mrope_section must have 3 entries (t, h, w), got " +
                 std::to_string(sections.size()));
  long long sum = 0;
  for (int s : sections) {
    if (s < 0) detail::fail("mrope: mrope_section entries must be >= 0, got " + std::to_string(s));
    sum += s;
  }
  if (sum != n_pairs)
    detail::fail("mrope: mrope_section [" + std::to_string(sections[0]) + ", " +
                 std::to_string(sections[1]) + ", " + std::to_string(sections[2]) + "] sums to " +
                 std::to_string(sum) + ", but rotary_dim / 2 = " + std::to_string(n_pairs));
  std::vector<int> axis(std::size_t(n_pairs), 0);
  for (int j = 0; j < n_pairs; ++j) {
    if (interleaved) {
      if (j % 3 == 1 && j < 3 * sections[1]) axis[std::size_t(j)] = 1;
      else if (j % 3 == 2 && j < 3 * sections[2]) axis[std::size_t(j)] = 2;
    } else {
      axis[std::size_t(j)] = j < sections[0] ? 0 : j < sections[0] + sections[1] ? 1 : 2;
    }
  }
  return axis;
}

/// M-RoPE: a MultiAxis over (t, h, w) of BlockDiagonal(rotation bank, pass-through), plus the
/// preset's metadata (frequencies, the axis of each pair, the attention factor).
template <class S = double>
class MRopeEncoding : public MultiAxis<BlockDiagonal<Bank<RotationBlock<S>>, PassThrough<S>>> {
 public:
  using Axis = BlockDiagonal<Bank<RotationBlock<S>>, PassThrough<S>>;
  using Base = MultiAxis<Axis>;
  using encoding_type = Base;  // what the kernels dispatch on
  using Real = real_t<S>;

  MRopeEncoding(const RopeFrequencies& f, int head_dim, Layout layout,
                const std::vector<int>& sections, bool interleaved)
      : MRopeEncoding(f, head_dim, layout, sections, interleaved,
                      checked_axes(f, head_dim, sections, interleaved)) {}

  const Base& encoding() const { return *this; }
  int head_dim() const { return this->dim(); }
  int rotary_dim() const { return rotary_dim_; }
  const std::vector<long double>& inv_freq() const { return inv_freq_; }
  /// pair_axis()[j]: 0 (t), 1 (h) or 2 (w).
  const std::vector<int>& pair_axis() const { return pair_axis_; }
  const std::vector<int>& sections() const { return sections_; }
  bool interleaved() const { return interleaved_; }
  /// The rotary pairs' layout in each head (Layout::HalfSplit for Qwen2-VL / Qwen3-VL).
  Layout layout() const { return layout_; }
  /// As RopeEncoding::attention_factor (YaRN/LongRoPE; 1 for Qwen-VL's default rope).
  Real attention_factor() const { return static_cast<Real>(attention_factor_); }
  long double attention_factor_long() const { return attention_factor_; }

 private:
  MRopeEncoding(const RopeFrequencies& f, int head_dim, Layout layout,
                const std::vector<int>& sections, bool interleaved, std::vector<int> axis)
      : Base(make_axes(f, head_dim, layout, axis)),
        inv_freq_(f.inv_freq),
        pair_axis_(std::move(axis)),
        sections_(sections),
        interleaved_(interleaved),
        layout_(layout),
        attention_factor_(f.attention_factor),
        rotary_dim_(f.rotary_dim) {}
  // The frequencies checked as RopeEncoding checks them, then the axis of every pair.
  static std::vector<int> checked_axes(const RopeFrequencies& f, int head_dim,
                                       const std::vector<int>& sections, bool interleaved) {
    detail::check_rope_frequencies(f, head_dim, "MRopeEncoding");
    return mrope_pair_axes(sections, interleaved, int(f.inv_freq.size()));
  }
  static std::vector<Axis> make_axes(const RopeFrequencies& f, int head_dim, Layout layout,
                                     const std::vector<int>& axis) {
    std::vector<Axis> axes;
    for (int a = 0; a < 3; ++a) {
      std::vector<RotationBlock<S>> blocks;
      for (std::size_t j = 0; j < f.inv_freq.size(); ++j)
        blocks.emplace_back(axis[j] == a ? f.inv_freq[j] : 0.0L);
      axes.emplace_back(Bank<RotationBlock<S>>(blocks, layout),
                        PassThrough<S>(head_dim - f.rotary_dim));
    }
    return axes;
  }

  std::vector<long double> inv_freq_;
  std::vector<int> pair_axis_, sections_;
  bool interleaved_;
  Layout layout_;
  long double attention_factor_;
  int rotary_dim_;
};

/// The M-RoPE preset of a configuration with scaling.mrope_section (and mrope_interleaved);
/// frequencies as rope<S>(config, seq_len) computes them.
template <class S = double>
MRopeEncoding<S> mrope(const RopeConfig& config, double seq_len = 0) {
  if (config.scaling.mrope_section.empty())
    detail::fail("mrope: the config has no mrope_section (a 1-D RoPE: use rope<S>(config))");
  RopeConfig base = config;
  base.scaling.mrope_section.clear();
  const RopeFrequencies f = rope_frequencies(base, seq_len);
  return MRopeEncoding<S>(f, config.head_dim, config.layout, config.scaling.mrope_section,
                          config.scaling.mrope_interleaved);
}

}  // namespace peal
