// The (t, h, w) position ids of Qwen2-VL / Qwen2.5-VL / Qwen3-VL prompts (multimodal RoPE,
// docs/design.md §1 "N-D positions"), exactly as Hugging Face transformers' get_rope_index
// computes them (transformers 4.x: src/transformers/models/{qwen2_vl, qwen2_5_vl, qwen3_vl}/
// modeling_*.py, Qwen2VLModel.get_rope_index and its Qwen2.5-VL / Qwen3-VL variants, read at the
// stored commits 00b676f8 (qwen2_vl, qwen2_5_vl), efa7189c (first qwen2_5_vl), 00709b86
// (qwen3_vl)). The result feeds an M-RoPE encoding as [tokens, 3] positions; this header only
// computes positions, it encodes nothing.
//
// The prompt is text and vision segments. A vision segment is the run of image (video) pad
// tokens standing for one grid_thw = (t, h, w) in patches; after the 2x2 (spatial_merge_size)
// patch merger it holds t * (h/m) * (w/m) tokens, frame-major, then row, then column.
// With `next` = (largest id so far) + 1, starting at 0:
//   text token        t = h = w = next, next += 1 (the vision_start / vision_end tokens are text)
//   vision segment    frame f, merged row r, merged column c:
//                       t = next + tau(f),  h = next + r,  w = next + c,
//                     then next = (max over the segment) + 1
//                               = next + max(tau(t-1), h/m - 1, w/m - 1) + 1
//   tau(f)            Qwen2-VL: f.  Qwen3-VL: 0 (a video is split into t one-frame grids, each
//                     preceded by its own timestamp text and vision_start: the processor writes
//                     "<t seconds><|vision_start|><video pads><|vision_end|>" per frame).
//                     Qwen2.5-VL images: 0 (second_per_grid_t = 0). Qwen2.5-VL videos, with
//                     s = second_per_grid_t (processor: temporal_patch_size / fps; default 1.0)
//                     and k = tokens_per_second (vision_config; 2 in the released checkpoints):
//                       TruncateProduct (default): trunc(float32(float32(f) * float32(s)) * k)
//                         -- transformers' first Qwen2.5-VL code (stored commit efa7189c:
//                         time_tensor = expanded_range * second_per_grid_t * tokens_per_second,
//                         a float32 product, then .long()), Qwen's design, and transformers
//                         after PR #48669 ("Fix Qwen2.5-VL temporal RoPE for fractional video
//                         intervals"): s = 0.5, k = 2 gives tau = 0, 1, 2, 3;
//                       TruncateSecondsFirst: f * trunc(float32(s)) * k -- later 4.5x releases
//                         (stored commit 00b676f8: second_per_grid_t = torch.as_tensor(
//                         second_per_grid_t, dtype=range_tensor.dtype), int64, before the
//                         product) and 5.x before PR #48669 (tokens_per_second *
//                         int(second_per_grid_t)): s = 0.5 gives tau = 0, 0, 0, 0.
//                     Pick the one of the transformers release to be matched. A non-integral k
//                     multiplies in float32 (torch's default dtype, as when an int64 tensor
//                     meets a Python float); an integral k in int64 (TruncateSecondsFirst) or
//                     float32 (TruncateProduct), as there.
//   rope_delta        max(ids) + 1 - n, with n the whole length including padding: decoding
//                     token j (0-based over the whole sequence) has t = h = w = j + rope_delta.
//
// Two forms, giving the same ids:
//   qwen_vl_position_ids(input_ids, tokens, image_grids, video_grids, second_per_grid_t, opt
//                        [, attention_mask])   -- from token ids, as get_rope_index does:
//     segments are found the way transformers finds them (count the vision_start tokens followed
//     by an image / video token; for each, the first image or video token at or after the end of
//     the previous segment starts the next segment, the earlier one of the two kinds wins), and
//     grids are consumed in order. Masked tokens (attention_mask 0) are skipped and get ids
//     (1, 1, 1), as transformers' torch.ones initialisation leaves them. When both grid lists are
//     empty the text-only branch applies: ids = running count of unmasked tokens - 1, masked
//     tokens 1, and with a mask rope_delta = max(all ids, masked included) + 1 - n.
//   QwenVlPositionBuilder{opt}.text(n).image(grid).text(k).video(grid, s)...  -- no token ids:
//     the same ids as the token form for the prompt made of these segments (count the
//     vision_start token in the text before a segment).
//
// Checked (peal::invalid_argument naming the function and the value), beyond transformers, which
// trusts its processor: grid sizes >= 1, h and w divisible by spatial_merge_size, every grid used
// and every segment made only of its kind of pad token (the count transformers' forward checks as
// "Image features and image tokens do not match"), every image / video pad token inside a
// segment, second_per_grid_t finite and >= 0 (one per video, Qwen2.5-VL only), mask values 0/1,
// distinct special token ids. Sizes are bounded before anything is allocated: at most
// qwen_vl_max_tokens tokens (prompt, one segment, or a builder's total), at most
// qwen_vl_max_bytes = 4 GiB of working memory and ids (a builder's ids, capacity included; the
// token form's ids, its list of unmasked tokens and of video segments), second_per_grid_t and
// tokens_per_second <= 2^40, and every id bounded by qwen_vl_max_position = 2^52 (before the
// float32 rounding of the temporal offsets), so ids are exact in double.
//
// Cost: linear in the prompt (the token form's search for the next pad token of each kind
// only moves forward).
//
// Not reproduced: transformers 5.x's rewrite (mm_token_type_ids runs instead of vision_start
// counting, and next = start + max(h/m, w/m) after every segment, which differs from the above
// for a Qwen2-VL / Qwen2.5-VL video whose temporal ids pass its spatial ones), batches (call once
// per sequence), and transformers 5.3's Qwen2.5-VL regressions (issues #45325, #45381).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <initializer_list>
#include <sstream>
#include <string>
#include <vector>

#include "../errors.hpp"
#include "../view.hpp"

namespace peal {

enum class QwenVlModel { Qwen2VL, Qwen25VL, Qwen3VL };

/// How Qwen2.5-VL turns a video frame index into a temporal offset (see the header comment).
enum class QwenVlTimeRounding { TruncateSecondsFirst, TruncateProduct };

/// grid_thw of one image or video, in patches before the spatial merge (as the processors return
/// image_grid_thw / video_grid_thw).
struct QwenVlGrid {
  long long t = 1, h = 1, w = 1;
};

/// Special token ids (config.json vision_start_token_id, image_token_id, video_token_id); the
/// defaults are Qwen2-VL's, Qwen2.5-VL's and Qwen3-VL's.
struct QwenVlTokens {
  long long vision_start = 151652, image = 151655, video = 151656;
};

struct QwenVlOptions {
  QwenVlModel model = QwenVlModel::Qwen2VL;
  int spatial_merge_size = 2;    ///< vision_config.spatial_merge_size
  double tokens_per_second = 2;  ///< vision_config.tokens_per_second (Qwen2.5-VL only)
  QwenVlTimeRounding time_rounding = QwenVlTimeRounding::TruncateProduct;
};

/// Largest number of tokens of a prompt, of one vision segment, or of a builder's total.
constexpr long long qwen_vl_max_tokens = 1LL << 30;
/// Bound on position ids before float32 rounding (ids are then < 2^53, exact in double).
constexpr long long qwen_vl_max_position = 1LL << 52;
/// Largest allocation of a builder (its ids, 24 bytes a token, capacity included: at most
/// 178956970 tokens) or of one qwen_vl_position_ids call (ids and the list of unmasked
/// tokens, 32 bytes a token, and the Qwen3-VL frame segments): 4 GiB.
constexpr long long qwen_vl_max_bytes = 1LL << 32;

struct QwenVlPositions {
  /// Token-major [n, 3]: ids[3*i + a], a = 0 (t), 1 (h), 2 (w).
  std::vector<double> ids;
  /// max(ids) + 1 - n: decoding token j (0-based over the whole sequence) uses j + rope_delta.
  long long rope_delta = 0;
  Index tokens() const { return Index(ids.size() / 3); }
  double operator()(Index i, int axis) const { return ids[std::size_t(3 * i + axis)]; }
};

namespace detail {
namespace qwen_vl {

inline const char* model_name(QwenVlModel m) {
  switch (m) {
    case QwenVlModel::Qwen2VL:
      return "Qwen2-VL";
    case QwenVlModel::Qwen25VL:
      return "Qwen2.5-VL";
    case QwenVlModel::Qwen3VL:
      return "Qwen3-VL";
  }
  return "?";
}

constexpr double max_seconds =
    1099511627776.0;  // 2^40, for second_per_grid_t and tokens_per_second

inline void check_options(const QwenVlOptions& o, const char* where) {
  std::ostringstream os;
  if (o.model != QwenVlModel::Qwen2VL && o.model != QwenVlModel::Qwen25VL &&
      o.model != QwenVlModel::Qwen3VL) {
    os << where << ": unknown QwenVlModel " << int(o.model);
    fail(os.str());
  }
  if (o.spatial_merge_size < 1 || o.spatial_merge_size > (1 << 15)) {
    os << where << ": spatial_merge_size must be in [1, 32768], got " << o.spatial_merge_size;
    fail(os.str());
  }
  if (o.model == QwenVlModel::Qwen25VL) {
    if (!(o.tokens_per_second >= 0 && o.tokens_per_second <= max_seconds)) {
      os << where << ": tokens_per_second must be in [0, 2^40], got " << o.tokens_per_second;
      fail(os.str());
    }
    if (o.time_rounding != QwenVlTimeRounding::TruncateSecondsFirst &&
        o.time_rounding != QwenVlTimeRounding::TruncateProduct) {
      os << where << ": unknown QwenVlTimeRounding " << int(o.time_rounding);
      fail(os.str());
    }
  }
}

/// Throws unless `bytes`, what a call is about to allocate, is at most qwen_vl_max_bytes.
inline void check_bytes(long double bytes, const char* where, const std::string& what) {
  if (bytes > static_cast<long double>(qwen_vl_max_bytes)) {
    std::ostringstream os;
    os << where << ": " << what << " need " << static_cast<double>(bytes)
       << " bytes, more than qwen_vl_max_bytes = 2^32";
    fail(os.str());
  }
}

inline std::string grid_string(const QwenVlGrid& g) {
  return std::to_string(g.t) + "x" + std::to_string(g.h) + "x" + std::to_string(g.w);
}

/// Tokens of a grid after the merge, t * (h/m) * (w/m); throws unless every size is >= 1,
/// h and w are multiples of m and the count is at most qwen_vl_max_tokens.
inline long long grid_tokens(const QwenVlGrid& g, int m, const char* where, const char* kind,
                             std::size_t index) {
  auto bad = [&](const std::string& why) {  // the message is formatted on failure only
    std::ostringstream os;
    os << where << ": " << kind << " grid " << index << " (t x h x w = " << grid_string(g) << ") ";
    fail(os.str() + why);
  };
  if (g.t < 1 || g.h < 1 || g.w < 1) bad("must have sizes >= 1");
  if (g.h % m != 0 || g.w % m != 0)
    bad("must have h and w divisible by spatial_merge_size " + std::to_string(m));
  const long long hm = g.h / m, wm = g.w / m;
  // hm, wm < 2^63 / m each; bound them before multiplying.
  if (hm > qwen_vl_max_tokens || wm > qwen_vl_max_tokens || hm * wm > qwen_vl_max_tokens ||
      g.t > qwen_vl_max_tokens / (hm * wm))
    bad("has more than qwen_vl_max_tokens = 2^30 tokens after merging");
  return g.t * hm * wm;
}

inline void check_seconds(double s, const char* where, std::size_t index) {
  if (!(s >= 0 && s <= max_seconds)) {
    std::ostringstream os;
    os << where << ": second_per_grid_t[" << index << "] must be in [0, 2^40], got " << s;
    fail(os.str());
  }
}

/// Temporal offset tau(f) of frame f (see the header comment). second_per_grid_t reaches the
/// model as a float32 tensor (the processor's BatchFeature), so it is rounded to float first.
inline long long temporal_offset(long long f, bool video, double seconds, const QwenVlOptions& o) {
  if (o.model == QwenVlModel::Qwen2VL) return f;
  if (o.model == QwenVlModel::Qwen3VL || !video) return 0;
  const double k = o.tokens_per_second;
  if (o.time_rounding == QwenVlTimeRounding::TruncateSecondsFirst) {
    // torch.as_tensor(s, dtype=int64) of the float32 value: truncation toward zero.
    const long long s = static_cast<long long>(static_cast<float>(seconds));
    if (k == std::floor(k)) return f * s * static_cast<long long>(k);  // int64 throughout
    const float p = static_cast<float>(f * s);                         // int64 -> float32
    return static_cast<long long>(static_cast<float>(p * static_cast<float>(k)));
  }
  const float p = static_cast<float>(static_cast<float>(f) * static_cast<float>(seconds));
  return static_cast<long long>(static_cast<float>(p * static_cast<float>(k)));
}

/// Writes the ids of a vision segment whose ids start at `base` through emit(k, t, h, w) for its
/// k-th token, and returns the segment's largest id. The grid has been checked by grid_tokens.
template <class Emit>
long long place_vision(long long base, const QwenVlGrid& g, bool video, double seconds,
                       const QwenVlOptions& o, const char* where, Emit&& emit) {
  const long long m = o.spatial_merge_size, hm = g.h / m, wm = g.w / m;
  // Bound the largest id before computing any (tau is nondecreasing in f since s, k >= 0).
  long double tau_bound = static_cast<long double>(g.t - 1);
  if (o.model == QwenVlModel::Qwen3VL || (o.model == QwenVlModel::Qwen25VL && !video))
    tau_bound = 0;
  else if (o.model == QwenVlModel::Qwen25VL)
    tau_bound *= static_cast<long double>(seconds) * static_cast<long double>(o.tokens_per_second);
  const long double spatial = static_cast<long double>((hm > wm ? hm : wm) - 1);
  if (static_cast<long double>(base) + (tau_bound > spatial ? tau_bound : spatial) >
      static_cast<long double>(qwen_vl_max_position)) {
    std::ostringstream os;
    os << where << ": a " << (video ? "video" : "image") << " grid " << grid_string(g)
       << " starting at position " << base << " reaches past qwen_vl_max_position = 2^52 "
       << "(temporal offset bound " << static_cast<double>(tau_bound) << ")";
    fail(os.str());
  }
  long long top = base + (hm > wm ? hm : wm) - 1, k = 0;
  for (long long f = 0; f < g.t; ++f) {
    const long long t = base + temporal_offset(f, video, seconds, o);
    if (t > top) top = t;
    for (long long r = 0; r < hm; ++r)
      for (long long c = 0; c < wm; ++c) emit(k++, t, base + r, base + c);
  }
  return top;
}

}  // namespace qwen_vl
}  // namespace detail

/// Segment form: positions of a prompt built from text runs and vision segments, without token
/// ids. Each call appends; positions() is the result so far.
class QwenVlPositionBuilder {
 public:
  explicit QwenVlPositionBuilder(const QwenVlOptions& options = QwenVlOptions{}) : opt_(options) {
    detail::qwen_vl::check_options(opt_, "QwenVlPositionBuilder");
  }

  /// n text tokens (count the vision_start / vision_end and timestamp tokens here).
  QwenVlPositionBuilder& text(Index n) {
    if (n < 0) detail::fail("QwenVlPositionBuilder::text: negative count " + std::to_string(n));
    if (static_cast<long double>(next_) + static_cast<long double>(n) >
        static_cast<long double>(qwen_vl_max_position))
      detail::fail("QwenVlPositionBuilder::text: positions reach past qwen_vl_max_position = 2^52");
    grow(static_cast<long long>(n), "QwenVlPositionBuilder::text");
    for (Index i = 0; i < n; ++i) {
      const double p = double(next_ + i);
      out_.ids.insert(out_.ids.end(), {p, p, p});
    }
    next_ += n;
    out_.rope_delta = next_ - static_cast<long long>(out_.tokens());
    return *this;
  }

  /// One image (Qwen2.5-VL: temporal offset 0 for every frame).
  QwenVlPositionBuilder& image(const QwenVlGrid& g) { return vision(g, false, 0.0, "image"); }

  /// One video; Qwen2.5-VL uses second_per_grid_t = 1.0 (transformers' default when the
  /// processor gives none). Qwen3-VL: one frame (t = 1) per call, with the timestamp text between.
  QwenVlPositionBuilder& video(const QwenVlGrid& g) { return vision(g, true, 1.0, "video"); }

  /// One Qwen2.5-VL video with its second_per_grid_t (other models refuse the argument).
  QwenVlPositionBuilder& video(const QwenVlGrid& g, double second_per_grid_t) {
    if (opt_.model != QwenVlModel::Qwen25VL)
      detail::fail(std::string("QwenVlPositionBuilder::video: second_per_grid_t is a Qwen2.5-VL "
                               "parameter, the model is ") +
                   detail::qwen_vl::model_name(opt_.model));
    detail::qwen_vl::check_seconds(second_per_grid_t, "QwenVlPositionBuilder::video", 0);
    return vision(g, true, second_per_grid_t, "video");
  }

  Index tokens() const { return out_.tokens(); }
  /// Position ids of the next token appended as text (max(ids) + 1).
  long long next_position() const { return next_; }
  const QwenVlPositions& positions() const { return out_; }

 private:
  QwenVlPositionBuilder& vision(const QwenVlGrid& g, bool video, double seconds, const char* kind) {
    const char* where = video ? "QwenVlPositionBuilder::video" : "QwenVlPositionBuilder::image";
    const long long n =
        detail::qwen_vl::grid_tokens(g, opt_.spatial_merge_size, where, kind, images_videos_);
    if (video && opt_.model == QwenVlModel::Qwen3VL && g.t != 1)
      detail::fail(std::string(where) +
                   ": Qwen3-VL videos are one grid per frame (t = 1), each "
                   "after its timestamp text and vision_start; got t = " +
                   std::to_string(g.t));
    grow(n, where);
    const std::size_t at = out_.ids.size();
    out_.ids.resize(at + std::size_t(3 * n));
    long long top = 0;
    try {
      top = detail::qwen_vl::place_vision(next_, g, video, seconds, opt_, where,
                                          [&](long long k, long long t, long long h, long long w) {
                                            double* p = out_.ids.data() + at + std::size_t(3 * k);
                                            p[0] = double(t);
                                            p[1] = double(h);
                                            p[2] = double(w);
                                          });
    } catch (...) {
      out_.ids.resize(at);  // a refused segment leaves the builder as it was
      throw;
    }
    next_ = top + 1;
    out_.rope_delta = next_ - static_cast<long long>(out_.tokens());
    ++images_videos_;
    return *this;
  }

  // Room for n more tokens, refused past qwen_vl_max_tokens or qwen_vl_max_bytes of ids before
  // anything is allocated; the capacity grows geometrically up to that cap, never past it.
  void grow(long long n, const char* where) {
    const long long have = static_cast<long long>(out_.tokens());
    if (n > qwen_vl_max_tokens - have)
      detail::fail(std::string(where) + ": more than qwen_vl_max_tokens = 2^30 tokens in total");
    constexpr long long cap = qwen_vl_max_bytes / static_cast<long long>(3 * sizeof(double));
    if (n > cap - have)
      detail::qwen_vl::check_bytes(static_cast<long double>(have + n) * 3 * sizeof(double), where,
                                   "the ids of " + std::to_string(have + n) + " tokens");
    std::vector<double>& ids = out_.ids;
    const std::size_t need = std::size_t(3 * (have + n));
    if (need > ids.capacity())
      ids.reserve(std::min(std::max(need, 2 * ids.capacity()), std::size_t(3 * cap)));
  }

  QwenVlOptions opt_;
  QwenVlPositions out_;
  long long next_ = 0;
  std::size_t images_videos_ = 0;
};

/// Token form: the ids transformers' get_rope_index gives one sequence `input_ids` (see the
/// header comment). second_per_grid_t: Qwen2.5-VL only, empty (1.0 for every video) or one per
/// video. attention_mask: empty (all ones) or one 0/1 value per token.
inline QwenVlPositions qwen_vl_position_ids(const std::vector<long long>& input_ids,
                                            const QwenVlTokens& tokens,
                                            const std::vector<QwenVlGrid>& image_grids,
                                            const std::vector<QwenVlGrid>& video_grids,
                                            const std::vector<double>& second_per_grid_t,
                                            const QwenVlOptions& options,
                                            const std::vector<int>& attention_mask = {}) {
  namespace q = detail::qwen_vl;
  const char* where = "qwen_vl_position_ids";
  q::check_options(options, where);
  const long long n = static_cast<long long>(input_ids.size());
  if (n > qwen_vl_max_tokens)
    detail::fail(std::string(where) + ": " + std::to_string(n) +
                 " tokens, more than qwen_vl_max_tokens = 2^30");
  // The ids (3 doubles a token) and the unmasked tokens' indices (one each).
  const long double token_bytes = static_cast<long double>(n) * (3 * sizeof(double) + sizeof(long long));
  q::check_bytes(token_bytes, where, "the ids of " + std::to_string(n) + " tokens");
  if (tokens.vision_start == tokens.image || tokens.vision_start == tokens.video ||
      tokens.image == tokens.video)
    detail::fail(std::string(where) +
                 ": vision_start, image and video token ids must differ, got " +
                 std::to_string(tokens.vision_start) + ", " + std::to_string(tokens.image) + ", " +
                 std::to_string(tokens.video));
  if (!attention_mask.empty() && static_cast<long long>(attention_mask.size()) != n)
    detail::fail(std::string(where) + ": attention_mask has " +
                 std::to_string(attention_mask.size()) + " values for " + std::to_string(n) +
                 " tokens");
  for (std::size_t i = 0; i < attention_mask.size(); ++i)
    if (attention_mask[i] != 0 && attention_mask[i] != 1)
      detail::fail(std::string(where) + ": attention_mask[" + std::to_string(i) +
                   "] must be 0 or 1, got " + std::to_string(attention_mask[i]));
  const bool qwen25 = options.model == QwenVlModel::Qwen25VL;
  if (!qwen25 && !second_per_grid_t.empty())
    detail::fail(std::string(where) +
                 ": second_per_grid_t is a Qwen2.5-VL parameter, the model is " +
                 q::model_name(options.model));
  if (!second_per_grid_t.empty() && second_per_grid_t.size() != video_grids.size())
    detail::fail(std::string(where) + ": " + std::to_string(second_per_grid_t.size()) +
                 " second_per_grid_t values for " + std::to_string(video_grids.size()) + " videos");
  for (std::size_t i = 0; i < second_per_grid_t.size(); ++i)
    q::check_seconds(second_per_grid_t[i], where, i);

  const int m = options.spatial_merge_size;
  std::vector<long long> image_len(image_grids.size());
  for (std::size_t i = 0; i < image_grids.size(); ++i)
    image_len[i] = q::grid_tokens(image_grids[i], m, where, "image", i);
  // Video segments: Qwen3-VL splits a grid (t, h, w) into t grids (1, h, w).
  struct Seg {
    QwenVlGrid grid;
    double seconds;
    long long len;
    std::size_t video;
  };
  std::vector<Seg> videos;
  long long frames = 0;
  for (std::size_t i = 0; i < video_grids.size(); ++i) {
    const long long len = q::grid_tokens(video_grids[i], m, where, "video", i);
    const double s = second_per_grid_t.empty() ? 1.0 : second_per_grid_t[i];
    if (options.model != QwenVlModel::Qwen3VL) {
      videos.push_back({video_grids[i], s, len, i});
      continue;
    }
    frames += video_grids[i].t;  // each frame segment holds >= 1 token: bound before splitting
    if (frames > n)
      detail::fail(std::string(where) + ": the Qwen3-VL video grids hold " +
                   std::to_string(frames) + "+ frames (one segment each) but input_ids has only " +
                   std::to_string(n) + " tokens");
    q::check_bytes(token_bytes + static_cast<long double>(frames) * sizeof(Seg), where,
                   "the ids of " + std::to_string(n) + " tokens and " + std::to_string(frames) +
                       " Qwen3-VL frame segments");
    QwenVlGrid frame = video_grids[i];
    frame.t = 1;
    for (long long f = 0; f < video_grids[i].t; ++f)
      videos.push_back({frame, s, len / video_grids[i].t, i});
  }

  // The unmasked tokens, as transformers' input_ids[attention_mask == 1].
  std::vector<long long> kept;
  kept.reserve(std::size_t(n));
  for (long long i = 0; i < n; ++i)
    if (attention_mask.empty() || attention_mask[std::size_t(i)] == 1) kept.push_back(i);
  const long long L = static_cast<long long>(kept.size());
  auto tok = [&](long long j) { return input_ids[std::size_t(kept[std::size_t(j)])]; };
  long long n_image = 0, n_video = 0;
  for (long long j = 0; j < L; ++j) {
    n_image += tok(j) == tokens.image;
    n_video += tok(j) == tokens.video;
  }

  QwenVlPositions out;
  out.ids.assign(std::size_t(3 * n), 1.0);  // torch.ones: masked tokens keep (1, 1, 1)
  auto set = [&](long long j, long long t, long long h, long long w) {
    double* p = out.ids.data() + std::size_t(3 * kept[std::size_t(j)]);
    p[0] = double(t);
    p[1] = double(h);
    p[2] = double(w);
  };

  if (image_grids.empty() && video_grids.empty()) {
    // Text-only branch of get_rope_index.
    if (n_image + n_video > 0)
      detail::fail(std::string(where) + ": input_ids hold " + std::to_string(n_image) +
                   " image and " + std::to_string(n_video) +
                   " video pad tokens but no image or video grid was given");
    for (long long j = 0; j < L; ++j) set(j, j, j, j);
    long long top = attention_mask.empty() ? 0 : L - 1;
    if (L < n && top < 1) top = 1;  // masked tokens hold 1 and count in the max
    out.rope_delta = attention_mask.empty() ? 0 : top + 1 - n;
    return out;
  }

  // Segments announced by vision_start tokens.
  long long remain_images = 0, remain_videos = 0;
  for (long long j = 0; j < L; ++j) {
    if (tok(j) != tokens.vision_start) continue;
    if (j + 1 >= L)
      detail::fail(std::string(where) + ": the last token (" +
                   std::to_string(kept[std::size_t(j)]) +
                   ") is a vision_start token with nothing after it");
    remain_images += tok(j + 1) == tokens.image;
    remain_videos += tok(j + 1) == tokens.video;
  }
  // First token `id` at or after `from` (L + 1: none). `from` never decreases, so a kind's
  // last answer `at` is still the first one while at >= from (none lies in [from, at)), and
  // each kind's scan starts past the previous one: linear in L for the whole prompt.
  auto find = [&](long long id, long long from, long long& at) {
    if (at >= from) return at;
    long long j = from;
    while (j < L && tok(j) != id) ++j;
    at = j < L ? j : L + 1;
    return at;
  };
  long long at_image = -1, at_video = -1;
  long long st = 0, next = 0, covered_images = 0, covered_videos = 0;
  std::size_t image_index = 0, video_index = 0;
  const long long segments = remain_images + remain_videos;
  for (long long s = 0; s < segments; ++s) {
    const long long ed_image = remain_images > 0 ? find(tokens.image, st, at_image) : L + 1;
    const long long ed_video = remain_videos > 0 ? find(tokens.video, st, at_video) : L + 1;
    if ((remain_images > 0 && ed_image > L) || (remain_videos > 0 && ed_video > L))
      detail::fail(std::string(where) + ": a vision_start announces an " +
                   (ed_image > L && remain_images > 0 ? "image" : "video") +
                   " but no such pad token follows the previous segment (which ends at token " +
                   std::to_string(st < L ? kept[std::size_t(st)] : n) + ")");
    const bool is_image = ed_image < ed_video;
    const long long ed = is_image ? ed_image : ed_video;
    const std::size_t index = is_image ? image_index : video_index;
    const std::size_t count = is_image ? image_grids.size() : videos.size();
    if (index >= count)
      detail::fail(std::string(where) + ": " + (is_image ? "image" : "video") + " segment " +
                   std::to_string(index) + " at token " + std::to_string(kept[std::size_t(ed)]) +
                   " but only " + std::to_string(count) + (is_image ? " image" : " video") +
                   (options.model == QwenVlModel::Qwen3VL && !is_image ? " frame" : "") +
                   " grids were given");
    const QwenVlGrid& g = is_image ? image_grids[index] : videos[index].grid;
    const long long len = is_image ? image_len[index] : videos[index].len;
    const long long pad = is_image ? tokens.image : tokens.video;
    long long run = 0;
    while (run < len && ed + run < L && tok(ed + run) == pad) ++run;
    if (run != len)
      detail::fail(std::string(where) + ": " + (is_image ? "image" : "video") + " grid " +
                   std::to_string(is_image ? index : videos[index].video) + " (" +
                   q::grid_string(g) + ", merge " + std::to_string(m) + ") needs " +
                   std::to_string(len) + " pad tokens from token " +
                   std::to_string(kept[std::size_t(ed)]) + ", found " + std::to_string(run));
    for (long long j = st; j < ed; ++j) set(j, next + (j - st), next + (j - st), next + (j - st));
    const long long base = next + (ed - st);
    const long long top = q::place_vision(
        base, g, !is_image, is_image ? 0.0 : videos[index].seconds, options, where,
        [&](long long k, long long t, long long h, long long w) { set(ed + k, t, h, w); });
    next = top + 1;
    st = ed + len;
    if (is_image) {
      ++image_index;
      --remain_images;
      covered_images += len;
    } else {
      ++video_index;
      --remain_videos;
      covered_videos += len;
    }
  }
  for (long long j = st; j < L; ++j) set(j, next + (j - st), next + (j - st), next + (j - st));
  if (L > st) next += L - st;

  if (image_index != image_grids.size() || video_index != videos.size() ||
      covered_images != n_image || covered_videos != n_video) {
    std::ostringstream os;
    os << where << ": input_ids hold " << n_image << " image and " << n_video
       << " video pad tokens; the segments announced by vision_start tokens used " << image_index
       << " of " << image_grids.size() << " image grids (" << covered_images << " tokens) and "
       << video_index << " of " << videos.size()
       << (options.model == QwenVlModel::Qwen3VL ? " video frame" : " video") << " grids ("
       << covered_videos << " tokens)";
    detail::fail(os.str());
  }
  out.rope_delta = next - n;
  return out;
}

}  // namespace peal
