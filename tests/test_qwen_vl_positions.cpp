// Qwen2-VL / Qwen2.5-VL / Qwen3-VL (t, h, w) position ids (include/peal/models/qwen_vl_positions.hpp).
// Three independent sources are compared:
//   * ref_rope_index below: a transliteration of transformers' get_rope_index (4.5x,
//     models/qwen2_vl/modeling_qwen2_vl.py Qwen2VLModel.get_rope_index, qwen2_5_vl's copy with
//     second_per_grid_ts, qwen3_vl's copy with the video grid split into frames), statement by
//     statement: a list of [3, k] chunks, st_idx = max of the last chunk + 1, list.index(token, st)
//     searches, concatenation, then the scatter into torch.ones at the unmasked places;
//   * ids written out by hand from reading the Python (and the docstring examples of
//     get_rope_index), pinning both implementations to the published behaviour;
//   * the header's two forms (token ids and the segment builder), which must agree.
// All ids are integers (tolerance zero).
#include <algorithm>
#include <array>
#include <catch2/catch.hpp>
#include <cmath>
#include <limits>
#include <optional>
#include <peal/models/qwen_vl_positions.hpp>
#include <string>
#include <vector>

namespace {

using peal::QwenVlGrid;
using peal::QwenVlModel;
using peal::QwenVlOptions;
using peal::QwenVlPositionBuilder;
using peal::QwenVlPositions;
using peal::QwenVlTimeRounding;
using peal::QwenVlTokens;
using LL = long long;

constexpr LL kVS = 151652, kImg = 151655, kVid = 151656, kVE = 151653;

// ---------------------------------------------------------------------------------------------
// Reference: get_rope_index, one sequence of a batch, following the Python line by line.
struct RefResult {
  std::vector<std::array<LL, 3>> pos;  // position_ids[:, 0, j]
  LL delta;
};

using Chunk = std::array<std::vector<LL>, 3>;  // a [3, k] tensor of llm_pos_ids_list

LL chunk_max(const Chunk& c) {  // tensor.max() over all 3 rows
  LL m = std::numeric_limits<LL>::min();
  for (const auto& row : c)
    for (LL v : row) m = v > m ? v : m;
  return m;
}

RefResult ref_rope_index(QwenVlModel model, const std::vector<LL>& input_ids_all,
                         std::vector<std::array<LL, 3>> image_grid_thw,
                         std::vector<std::array<LL, 3>> video_grid_thw,
                         std::optional<std::vector<float>> second_per_grid_ts,
                         int spatial_merge_size, double tokens_per_second,
                         QwenVlTimeRounding rounding, std::vector<int> attention_mask) {
  const LL image_token_id = kImg, video_token_id = kVid, vision_start_token_id = kVS;
  const LL n_all = LL(input_ids_all.size());
  if (model == QwenVlModel::Qwen3VL) {  // repeat_interleave(video_grid_thw, t); t = 1
    std::vector<std::array<LL, 3>> split;
    for (auto g : video_grid_thw)
      for (LL f = 0; f < g[0]; ++f) split.push_back({1, g[1], g[2]});
    video_grid_thw = split;
  }
  RefResult out;
  const bool have_mask = !attention_mask.empty();
  if (!image_grid_thw.empty() || !video_grid_thw.empty()) {
    if (!have_mask) attention_mask.assign(input_ids_all.size(), 1);
    out.pos.assign(input_ids_all.size(), {1, 1, 1});  // torch.ones
    std::size_t image_index = 0, video_index = 0;
    std::vector<LL> input_tokens;  // input_ids[attention_mask == 1].tolist()
    for (std::size_t j = 0; j < input_ids_all.size(); ++j)
      if (attention_mask[j] == 1) input_tokens.push_back(input_ids_all[j]);
    LL image_nums = 0, video_nums = 0;
    for (std::size_t j = 0; j < input_tokens.size(); ++j)
      if (input_tokens[j] == vision_start_token_id) {
        image_nums += input_tokens[j + 1] == image_token_id;
        video_nums += input_tokens[j + 1] == video_token_id;
      }
    auto contains = [&](LL id) {
      for (LL v : input_tokens)
        if (v == id) return true;
      return false;
    };
    auto index_from = [&](LL id, LL st) {  // list.index(id, st); ValueError is a test bug
      for (LL j = st; j < LL(input_tokens.size()); ++j)
        if (input_tokens[std::size_t(j)] == id) return j;
      FAIL("list.index raised ValueError");
      return LL(-1);
    };
    std::vector<Chunk> llm_pos_ids_list;
    LL st = 0;
    LL remain_images = image_nums, remain_videos = video_nums;
    const LL L = LL(input_tokens.size());
    for (LL it = 0; it < image_nums + video_nums; ++it) {
      LL ed_image, ed_video;
      if (contains(image_token_id) && remain_images > 0)
        ed_image = index_from(image_token_id, st);
      else
        ed_image = L + 1;
      if (contains(video_token_id) && remain_videos > 0)
        ed_video = index_from(video_token_id, st);
      else
        ed_video = L + 1;
      LL t, h, w, ed;
      double second_per_grid_t;
      if (ed_image < ed_video) {
        t = image_grid_thw[image_index][0];
        h = image_grid_thw[image_index][1];
        w = image_grid_thw[image_index][2];
        second_per_grid_t = 0;
        image_index += 1;
        remain_images -= 1;
        ed = ed_image;
      } else {
        t = video_grid_thw[video_index][0];
        h = video_grid_thw[video_index][1];
        w = video_grid_thw[video_index][2];
        if (second_per_grid_ts)
          second_per_grid_t = (*second_per_grid_ts)[video_index];
        else
          second_per_grid_t = 1.0;
        video_index += 1;
        remain_videos -= 1;
        ed = ed_video;
      }
      const LL llm_grid_t = t, llm_grid_h = h / spatial_merge_size,
               llm_grid_w = w / spatial_merge_size;
      const LL text_len = ed - st;
      const LL st_idx = llm_pos_ids_list.empty() ? 0 : chunk_max(llm_pos_ids_list.back()) + 1;
      Chunk text;
      for (auto& row : text)
        for (LL i = 0; i < text_len; ++i) row.push_back(i + st_idx);
      llm_pos_ids_list.push_back(text);
      // t_index / h_index / w_index flattened over (t, h, w), then + text_len + st_idx.
      Chunk vis;
      for (LL a = 0; a < llm_grid_t; ++a)
        for (LL b = 0; b < llm_grid_h; ++b)
          for (LL c = 0; c < llm_grid_w; ++c) {
            LL t_index = a;  // Qwen2-VL, Qwen3-VL (llm_grid_t is 1 there)
            if (model == QwenVlModel::Qwen25VL) {
              if (rounding == QwenVlTimeRounding::TruncateSecondsFirst) {
                // second_per_grid_t = torch.as_tensor(s, dtype=range_tensor.dtype) (int64), then
                // time_tensor = expanded_range * s * tokens_per_second; .long()
                const LL s_long = LL(float(second_per_grid_t));
                if (tokens_per_second == std::floor(tokens_per_second))
                  t_index = a * s_long * LL(tokens_per_second);
                else
                  t_index = LL(float(float(a * s_long) * float(tokens_per_second)));
              } else {
                // time_tensor = expanded_range * s (float32 tensor) * tokens_per_second; .long()
                const float s32 = float(second_per_grid_t);
                t_index = LL(float(float(float(a) * s32) * float(tokens_per_second)));
              }
            }
            vis[0].push_back(t_index + text_len + st_idx);
            vis[1].push_back(b + text_len + st_idx);
            vis[2].push_back(c + text_len + st_idx);
          }
      llm_pos_ids_list.push_back(vis);
      st = ed + llm_grid_t * llm_grid_h * llm_grid_w;
    }
    if (st < L) {
      const LL st_idx = llm_pos_ids_list.empty() ? 0 : chunk_max(llm_pos_ids_list.back()) + 1;
      const LL text_len = L - st;
      Chunk text;
      for (auto& row : text)
        for (LL i = 0; i < text_len; ++i) row.push_back(i + st_idx);
      llm_pos_ids_list.push_back(text);
    }
    Chunk llm_positions;  // torch.cat(dim=1)
    for (const Chunk& c : llm_pos_ids_list)
      for (int a = 0; a < 3; ++a)
        llm_positions[std::size_t(a)].insert(llm_positions[std::size_t(a)].end(),
                                             c[std::size_t(a)].begin(), c[std::size_t(a)].end());
    REQUIRE(LL(llm_positions[0].size()) == L);
    std::size_t k = 0;  // position_ids[..., i, attention_mask[i] == 1] = llm_positions
    for (std::size_t j = 0; j < input_ids_all.size(); ++j)
      if (attention_mask[j] == 1) {
        out.pos[j] = {llm_positions[0][k], llm_positions[1][k], llm_positions[2][k]};
        ++k;
      }
    out.delta = chunk_max(llm_positions) + 1 - n_all;
    return out;
  }
  // else branch
  if (have_mask) {
    LL cum = 0, mx = std::numeric_limits<LL>::min();
    for (std::size_t j = 0; j < input_ids_all.size(); ++j) {
      cum += attention_mask[j];
      const LL p = attention_mask[j] == 0 ? 1 : cum - 1;  // cumsum - 1, masked_fill_(mask == 0, 1)
      out.pos.push_back({p, p, p});
      mx = p > mx ? p : mx;
    }
    out.delta = mx + 1 - n_all;
  } else {
    for (LL j = 0; j < n_all; ++j) out.pos.push_back({j, j, j});
    out.delta = 0;
  }
  return out;
}

// ---------------------------------------------------------------------------------------------
// A prompt written once, giving input_ids, the grids, and the builder calls together.
struct Prompt {
  QwenVlOptions opt;
  std::vector<LL> ids;
  std::vector<QwenVlGrid> images, videos;
  std::vector<double> seconds;  // per video (Qwen2.5-VL)
  QwenVlPositionBuilder builder;
  LL text_id = 1000;

  explicit Prompt(QwenVlOptions o) : opt(o), builder(o) {}
  Prompt& text(LL n) {
    for (LL i = 0; i < n; ++i) ids.push_back(text_id++);
    builder.text(n);
    return *this;
  }
  Prompt& special(LL id) {  // vision_start / vision_end: text for the builder
    ids.push_back(id);
    builder.text(1);
    return *this;
  }
  static LL count(const QwenVlGrid& g, int m) { return g.t * (g.h / m) * (g.w / m); }
  Prompt& image(QwenVlGrid g) {
    special(kVS);
    ids.insert(ids.end(), std::size_t(count(g, opt.spatial_merge_size)), kImg);
    images.push_back(g);
    builder.image(g);
    return special(kVE);
  }
  Prompt& video(QwenVlGrid g, std::optional<double> s = std::nullopt) {
    if (opt.model == QwenVlModel::Qwen3VL) {  // per frame: timestamp text, vs, pads, ve
      QwenVlGrid frame = g;
      frame.t = 1;
      for (LL f = 0; f < g.t; ++f) {
        text(3);  // "<0.5 seconds>" is a few text tokens
        special(kVS);
        ids.insert(ids.end(), std::size_t(count(frame, opt.spatial_merge_size)), kVid);
        builder.video(frame);
        special(kVE);
      }
      videos.push_back(g);
      return *this;
    }
    special(kVS);
    ids.insert(ids.end(), std::size_t(count(g, opt.spatial_merge_size)), kVid);
    videos.push_back(g);
    if (s) {
      seconds.push_back(*s);
      builder.video(g, *s);
    } else {
      builder.video(g);
    }
    return special(kVE);
  }

  QwenVlPositions token_form(const std::vector<int>& mask = {}) const {
    return peal::qwen_vl_position_ids(ids, QwenVlTokens{}, images, videos, seconds, opt, mask);
  }
  RefResult reference(const std::vector<int>& mask = {}) const {
    std::vector<std::array<LL, 3>> ig, vg;
    for (auto g : images) ig.push_back({g.t, g.h, g.w});
    for (auto g : videos) vg.push_back({g.t, g.h, g.w});
    std::optional<std::vector<float>> s;
    if (!seconds.empty()) s = std::vector<float>(seconds.begin(), seconds.end());
    return ref_rope_index(opt.model, ids, ig, vg, s, opt.spatial_merge_size, opt.tokens_per_second,
                          opt.time_rounding, mask);
  }
};

void require_equal(const QwenVlPositions& got, const RefResult& ref) {
  REQUIRE(std::size_t(got.tokens()) == ref.pos.size());
  for (std::size_t j = 0; j < ref.pos.size(); ++j)
    for (int a = 0; a < 3; ++a) {
      INFO("token " << j << " axis " << a);
      REQUIRE(got(peal::Index(j), a) == double(ref.pos[j][std::size_t(a)]));
    }
  REQUIRE(got.rope_delta == ref.delta);
}

void require_same(const QwenVlPositions& a, const QwenVlPositions& b) {
  REQUIRE(a.ids == b.ids);
  REQUIRE(a.rope_delta == b.rope_delta);
}

// All three sources agree; returns the token form.
QwenVlPositions check_all(const Prompt& p) {
  const QwenVlPositions tok = p.token_form();
  require_equal(tok, p.reference());
  require_same(p.builder.positions(), tok);
  return tok;
}

std::vector<double> flat(std::initializer_list<std::array<LL, 3>> rows) {
  std::vector<double> v;
  for (const auto& r : rows)
    for (LL x : r) v.push_back(double(x));
  return v;
}

QwenVlOptions opts(QwenVlModel m, double tps = 2,
                   QwenVlTimeRounding r = QwenVlTimeRounding::TruncateSecondsFirst) {
  QwenVlOptions o;
  o.model = m;
  o.tokens_per_second = tps;
  o.time_rounding = r;
  return o;
}

const QwenVlModel kModels[] = {QwenVlModel::Qwen2VL, QwenVlModel::Qwen25VL, QwenVlModel::Qwen3VL};

}  // namespace

TEST_CASE("qwen_vl: text only is 0..n-1 on every axis, rope_delta 0", "[qwen_vl]") {
  for (QwenVlModel m : kModels) {
    Prompt p(opts(m));
    p.text(5);
    const auto got = check_all(p);
    REQUIRE(got.ids == flat({{0, 0, 0}, {1, 1, 1}, {2, 2, 2}, {3, 3, 3}, {4, 4, 4}}));
    REQUIRE(got.rope_delta == 0);
  }
  // Empty prompt.
  const auto e = peal::qwen_vl_position_ids({}, QwenVlTokens{}, {}, {}, {}, QwenVlOptions{});
  REQUIRE(e.tokens() == 0);
  REQUIRE(e.rope_delta == 0);
}

TEST_CASE("qwen_vl: one image 1x4x6 (merge 2), ids written out by hand", "[qwen_vl]") {
  // [T, VS, I x 6, VE, T]: text 0, 1; the image starts at 2 with t = 2, h = 2 + row (2 rows),
  // w = 2 + col (3 columns), max 4; VE = 5, T = 6; rope_delta = 6 + 1 - 10 = -3.
  for (QwenVlModel m : kModels) {
    Prompt p(opts(m));
    p.text(1).image({1, 4, 6}).text(1);
    const auto got = check_all(p);
    REQUIRE(got.ids == flat({{0, 0, 0},
                             {1, 1, 1},
                             {2, 2, 2},
                             {2, 2, 3},
                             {2, 2, 4},
                             {2, 3, 2},
                             {2, 3, 3},
                             {2, 3, 4},
                             {5, 5, 5},
                             {6, 6, 6}}));
    REQUIRE(got.rope_delta == -3);
  }
}

TEST_CASE("qwen_vl: a prompt starting with an image, and a tall image", "[qwen_vl]") {
  for (QwenVlModel m : kModels) {
    Prompt p(opts(m));
    p.image({1, 8, 2}).text(4);  // h' = 4 rows, w' = 1 column: max = 1 + 3
    const auto got = check_all(p);
    REQUIRE(got.ids == flat({{0, 0, 0},
                             {1, 1, 1},
                             {1, 2, 1},
                             {1, 3, 1},
                             {1, 4, 1},
                             {5, 5, 5},
                             {6, 6, 6},
                             {7, 7, 7},
                             {8, 8, 8},
                             {9, 9, 9}}));
    REQUIRE(got.rope_delta == 0);  // 9 + 1 - 10
  }
}

TEST_CASE("qwen_vl: get_rope_index's docstring examples (builder form)", "[qwen_vl]") {
  // Qwen2-VL docstring: a video of 3 temporal patches, 2x2 merged patches, then 5 text tokens:
  // t 0000 1111 2222, h 0011 0011 0011, w 0101 0101 0101, text 3..7.
  {
    QwenVlPositionBuilder b(opts(QwenVlModel::Qwen2VL));
    b.video({3, 4, 4}).text(5);
    std::vector<double> want;
    for (LL f = 0; f < 3; ++f)
      for (LL r = 0; r < 2; ++r)
        for (LL c = 0; c < 2; ++c) want.insert(want.end(), {double(f), double(r), double(c)});
    for (LL i = 3; i <= 7; ++i) want.insert(want.end(), {double(i), double(i), double(i)});
    REQUIRE(b.positions().ids == want);
    REQUIRE(b.positions().rope_delta == 8 - 17);
  }
  // Qwen2.5-VL docstring: tokens_per_second 25, fps 1, temporal_patch_size 2 (s = 2):
  // t 0 0 0 0 50 50 50 50 100 100 100 100, text 101..105.
  for (auto r : {QwenVlTimeRounding::TruncateSecondsFirst, QwenVlTimeRounding::TruncateProduct}) {
    QwenVlPositionBuilder b(opts(QwenVlModel::Qwen25VL, 25, r));
    b.video({3, 4, 4}, 2.0).text(5);
    const auto& ids = b.positions().ids;
    const double t_want[] = {0,   0,   0,   0,   50,  50,  50,  50, 100,
                             100, 100, 100, 101, 102, 103, 104, 105};
    const double h_want[] = {0, 0, 1, 1, 0, 0, 1, 1, 0, 0, 1, 1, 101, 102, 103, 104, 105};
    const double w_want[] = {0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 101, 102, 103, 104, 105};
    REQUIRE(ids.size() == 3 * 17);
    for (std::size_t j = 0; j < 17; ++j) {
      INFO("token " << j);
      REQUIRE(ids[3 * j] == t_want[j]);
      REQUIRE(ids[3 * j + 1] == h_want[j]);
      REQUIRE(ids[3 * j + 2] == w_want[j]);
    }
    REQUIRE(b.positions().rope_delta == 106 - 17);
  }
}

TEST_CASE("qwen_vl: Qwen2.5-VL video temporal ids, s = 1.0 / 0.5 / 1.5 / 0.7, both roundings",
          "[qwen_vl]") {
  // [VS, V x 16 (grid 4x4x4, merge 2), VE]: VS = 0, base 1, t = 1 + tau(f), h, w = 1 + {0, 1}.
  struct Case {
    double s;
    QwenVlTimeRounding r;
    std::array<LL, 4> tau;
  };
  const auto first = QwenVlTimeRounding::TruncateSecondsFirst;
  const auto prod = QwenVlTimeRounding::TruncateProduct;
  const Case cases[] = {
      {1.0, first, {0, 2, 4, 6}},
      {1.0, prod, {0, 2, 4, 6}},
      {0.5, first, {0, 0, 0, 0}},  // int64 cast of 0.5 (transformers 4.50-4.57, 5.x)
      {0.5, prod, {0, 1, 2, 3}},   // Qwen's original / transformers after PR #48669
      {1.5, first, {0, 2, 4, 6}},  // trunc(1.5) = 1
      {1.5, prod, {0, 3, 6, 9}},
      {0.7, prod, {0, 1, 2, 4}},  // 1.4, 2.8, 4.2 truncated (float32 2.0999999 * 2)
      {0.0, prod, {0, 0, 0, 0}},
  };
  for (const Case& c : cases) {
    INFO("s = " << c.s << " rounding " << int(c.r));
    Prompt p(opts(QwenVlModel::Qwen25VL, 2, c.r));
    p.video({4, 4, 4}, c.s);
    const auto got = check_all(p);
    REQUIRE(got.tokens() == 18);
    for (LL f = 0; f < 4; ++f)
      for (LL k = 0; k < 4; ++k) {
        const peal::Index j = peal::Index(1 + 4 * f + k);
        REQUIRE(got(j, 0) == double(1 + c.tau[std::size_t(f)]));
        REQUIRE(got(j, 1) == double(1 + k / 2));
        REQUIRE(got(j, 2) == double(1 + k % 2));
      }
    const LL top = 1 + std::max<LL>(c.tau[3], 1);
    REQUIRE(got(17, 0) == double(top + 1));  // VE
    REQUIRE(got.rope_delta == top + 2 - 18);
  }
  // The default rounding is the product's (Qwen's original code).
  {
    QwenVlOptions o;
    o.model = QwenVlModel::Qwen25VL;
    REQUIRE(o.time_rounding == QwenVlTimeRounding::TruncateProduct);
    QwenVlPositionBuilder b(o);
    b.text(1).video({4, 4, 4}, 0.5);
    for (LL f = 0; f < 4; ++f) REQUIRE(b.positions()(peal::Index(1 + 4 * f), 0) == double(1 + f));
  }
  // Default second_per_grid_t (none given) is 1.0, as transformers' fallback.
  Prompt p(opts(QwenVlModel::Qwen25VL));
  p.video({4, 4, 4});
  const auto got = check_all(p);
  REQUIRE(got(1 + 4 * 3, 0) == 1 + 6);
  // float32, not double: s = 2 / 1.5 fps, k = 1.5, frame 7: float32(4/3) * 7 = 9.3333340 and
  // * 1.5 = 14.000001 -> 14 (torch), where double gives 13.999999999999998 -> 13.
  {
    QwenVlPositionBuilder b(opts(QwenVlModel::Qwen25VL, 1.5, QwenVlTimeRounding::TruncateProduct));
    b.video({8, 2, 2}, 2.0 / 1.5);
    REQUIRE(b.positions()(7, 0) == 14);
    REQUIRE(LL(7 * (2.0 / 1.5) * 1.5) == 13);  // the double product would truncate to 13
  }
  // A non-integral tokens_per_second goes through float32 in both roundings.
  for (auto r : {first, prod}) {
    Prompt q(opts(QwenVlModel::Qwen25VL, 2.5, r));
    q.video({4, 4, 4}, 1.0);
    const auto g = check_all(q);
    REQUIRE(g(1 + 4 * 3, 0) == 1 + 7);  // 3 * 1 * 2.5 = 7.5 -> 7
  }
}

TEST_CASE("qwen_vl: image + text + video, Qwen2-VL and Qwen2.5-VL", "[qwen_vl]") {
  for (QwenVlModel m : {QwenVlModel::Qwen2VL, QwenVlModel::Qwen25VL}) {
    for (double s : {1.0, 0.5}) {
      for (auto r :
           {QwenVlTimeRounding::TruncateSecondsFirst, QwenVlTimeRounding::TruncateProduct}) {
        INFO("model " << int(m) << " s " << s << " rounding " << int(r));
        Prompt p(opts(m, 2, r));
        p.text(3).image({1, 4, 6}).text(7);
        if (m == QwenVlModel::Qwen25VL)
          p.video({4, 4, 4}, s);
        else
          p.video({4, 4, 4});
        p.text(2);
        const auto got = check_all(p);
        // Image: base 4 (3 text + VS); max(h', w') = 3 -> image ids up to 6, VE 7, text 8..14,
        // VS 15, video base 16.
        REQUIRE(got(4, 0) == 4);
        REQUIRE(got(4 + 6, 0) == 7);
        REQUIRE(got(4 + 6 + 8, 0) == 15);
        const LL tau3 = m == QwenVlModel::Qwen2VL                  ? 3
                        : r == QwenVlTimeRounding::TruncateProduct ? LL(3 * s * 2)
                                                                   : 3 * LL(s) * 2;
        REQUIRE(got(4 + 6 + 8 + 1 + 12, 0) == double(16 + tau3));  // first token of frame 3
        const LL top = 16 + std::max<LL>(tau3, 1);
        REQUIRE(got.rope_delta == top + 1 + 3 - LL(p.ids.size()));  // VE + 2 text after top
      }
    }
  }
}

TEST_CASE("qwen_vl: two images, and an image right after a video", "[qwen_vl]") {
  for (QwenVlModel m : kModels) {
    Prompt p(opts(m));
    p.text(2).image({1, 4, 4}).text(1).image({1, 2, 6}).video({2, 4, 2}).text(3);
    check_all(p);
    Prompt q(opts(m));
    q.image({1, 6, 4}).image({1, 2, 2});
    check_all(q);
  }
}

TEST_CASE("qwen_vl: Qwen3-VL splits a video into one-frame grids, ids by hand", "[qwen_vl]") {
  // [T, VS, V x 4, VE, T, T, VS, V x 4, VE] with video grid 2x4x4: frame 0 at base 2
  // (t = 2, h, w in 2..3), VE 4, T T 5 6, VS 7, frame 1 at base 8, VE 10; delta 11 - 15.
  const std::vector<LL> ids = {1, kVS, kVid, kVid, kVid, kVid, kVE, 2,
                               3, kVS, kVid, kVid, kVid, kVid, kVE};
  const auto got = peal::qwen_vl_position_ids(ids, QwenVlTokens{}, {}, {{2, 4, 4}}, {},
                                              opts(QwenVlModel::Qwen3VL));
  REQUIRE(got.ids == flat({{0, 0, 0},
                           {1, 1, 1},
                           {2, 2, 2},
                           {2, 2, 3},
                           {2, 3, 2},
                           {2, 3, 3},
                           {4, 4, 4},
                           {5, 5, 5},
                           {6, 6, 6},
                           {7, 7, 7},
                           {8, 8, 8},
                           {8, 8, 9},
                           {8, 9, 8},
                           {8, 9, 9},
                           {10, 10, 10}}));
  REQUIRE(got.rope_delta == -4);
  require_equal(got, ref_rope_index(QwenVlModel::Qwen3VL, ids, {}, {{2, 4, 4}}, std::nullopt, 2, 2,
                                    QwenVlTimeRounding::TruncateSecondsFirst, {}));
  // Larger mixed prompts through the Prompt helper (timestamps between frames).
  Prompt p(opts(QwenVlModel::Qwen3VL));
  p.text(4).video({3, 4, 6}).text(2).image({1, 8, 4}).video({2, 2, 2}).text(1);
  check_all(p);
}

TEST_CASE("qwen_vl: attention mask (left padding) matches the masked branch", "[qwen_vl]") {
  // [PAD, PAD, T, VS, I x 4, VE], grid 1x4x4: masked tokens keep (1, 1, 1); unmasked T 0, VS 1,
  // image base 2 (ids 2..3), VE 4; rope_delta = 4 + 1 - 9 (the padded length).
  const std::vector<LL> ids = {0, 0, 7, kVS, kImg, kImg, kImg, kImg, kVE};
  const std::vector<int> mask = {0, 0, 1, 1, 1, 1, 1, 1, 1};
  const auto got = peal::qwen_vl_position_ids(ids, QwenVlTokens{}, {{1, 4, 4}}, {}, {},
                                              opts(QwenVlModel::Qwen2VL), mask);
  REQUIRE(got.ids == flat({{1, 1, 1},
                           {1, 1, 1},
                           {0, 0, 0},
                           {1, 1, 1},
                           {2, 2, 2},
                           {2, 2, 3},
                           {2, 3, 2},
                           {2, 3, 3},
                           {4, 4, 4}}));
  REQUIRE(got.rope_delta == -4);
  require_equal(got, ref_rope_index(QwenVlModel::Qwen2VL, ids, {{1, 4, 4}}, {}, std::nullopt, 2, 2,
                                    QwenVlTimeRounding::TruncateSecondsFirst, mask));
  // Padding on both sides and inside text, every model.
  for (QwenVlModel m : kModels) {
    Prompt p(opts(m));
    p.text(5).image({1, 4, 6}).text(2).video({2, 4, 4}).text(3);
    std::vector<int> mk(p.ids.size(), 1);
    mk[0] = mk[1] = 0;
    mk[3] = 0;  // a text token inside the prompt
    mk.back() = 0;
    require_equal(p.token_form(mk), p.reference(mk));
  }
  // Text-only branch with a mask: cumsum - 1, masked 1, the max includes the masked 1s.
  for (const auto& mk : {std::vector<int>{0, 1, 1}, std::vector<int>{0, 0, 1},
                         std::vector<int>{1, 1, 1, 0}, std::vector<int>{0, 0}}) {
    const std::vector<LL> t(mk.size(), 5);
    const auto g = peal::qwen_vl_position_ids(t, QwenVlTokens{}, {}, {}, {}, QwenVlOptions{}, mk);
    require_equal(g, ref_rope_index(QwenVlModel::Qwen2VL, t, {}, {}, std::nullopt, 2, 2,
                                    QwenVlTimeRounding::TruncateSecondsFirst, mk));
  }
  const auto g =
      peal::qwen_vl_position_ids({5, 5, 5}, QwenVlTokens{}, {}, {}, {}, QwenVlOptions{}, {0, 1, 1});
  REQUIRE(g.ids == flat({{1, 1, 1}, {0, 0, 0}, {1, 1, 1}}));
  REQUIRE(g.rope_delta == -1);
}

TEST_CASE("qwen_vl: rope_delta continues decoding at max + 1", "[qwen_vl]") {
  // transformers' forward, decode stage: position_ids = arange(seq) + cache_position[0] +
  // rope_deltas, the same on the three axes. Appending text to the builder must give exactly
  // j + rope_delta for token j, and the token form of the longer prompt must agree.
  for (QwenVlModel m : kModels) {
    Prompt p(opts(m, 2, QwenVlTimeRounding::TruncateProduct));
    p.text(2).image({1, 6, 4});
    if (m == QwenVlModel::Qwen25VL)
      p.video({3, 4, 4}, 0.5);
    else
      p.video({3, 4, 4});
    const LL n = LL(p.ids.size());
    const LL delta = p.token_form().rope_delta;
    p.text(6);  // six decoded tokens
    const auto longer = check_all(p);
    for (LL j = n; j < n + 6; ++j)
      for (int a = 0; a < 3; ++a) REQUIRE(longer(peal::Index(j), a) == double(j + delta));
    REQUIRE(longer.rope_delta == delta);
    REQUIRE(p.builder.next_position() == n + 6 + delta);
  }
}

TEST_CASE("qwen_vl: merge size 1 and larger merges", "[qwen_vl]") {
  for (int merge : {1, 3}) {
    QwenVlOptions o = opts(QwenVlModel::Qwen2VL);
    o.spatial_merge_size = merge;
    Prompt p(o);
    p.text(1).image({1, 3 * merge, 2 * merge}).video({2, merge, 4 * merge}).text(2);
    check_all(p);
  }
}

TEST_CASE("qwen_vl: bad input is refused with a message", "[qwen_vl]") {
  using Catch::Matchers::Contains;
  const QwenVlTokens tk{};
  const auto q2 = opts(QwenVlModel::Qwen2VL), q25 = opts(QwenVlModel::Qwen25VL);
  const std::vector<LL> one_image = {1, kVS, kImg, kImg, kImg, kImg, kImg, kImg, kVE};
  auto call = [&](const std::vector<LL>& ids, std::vector<QwenVlGrid> im,
                  std::vector<QwenVlGrid> vi, std::vector<double> s, QwenVlOptions o,
                  std::vector<int> mask = {}) {
    return peal::qwen_vl_position_ids(ids, tk, im, vi, s, o, mask);
  };
  REQUIRE_NOTHROW(call(one_image, {{1, 4, 6}}, {}, {}, q2));
  // Grid sizes.
  REQUIRE_THROWS_WITH(call(one_image, {{0, 4, 6}}, {}, {}, q2), Contains("sizes >= 1"));
  REQUIRE_THROWS_WITH(call(one_image, {{1, -4, 6}}, {}, {}, q2), Contains("sizes >= 1"));
  REQUIRE_THROWS_WITH(call(one_image, {{1, 5, 6}}, {}, {}, q2), Contains("divisible"));
  REQUIRE_THROWS_WITH(call(one_image, {{1LL << 40, 4, 6}}, {}, {}, q2),
                      Contains("qwen_vl_max_tokens"));
  REQUIRE_THROWS_WITH(call(one_image, {{1, 1LL << 40, 1LL << 40}}, {}, {}, q2),
                      Contains("qwen_vl_max_tokens"));
  // Token counts against grids.
  REQUIRE_THROWS_WITH(call(one_image, {{1, 4, 8}}, {}, {}, q2), Contains("needs 8 pad tokens"));
  REQUIRE_THROWS_WITH(call(one_image, {{1, 4, 4}}, {}, {}, q2), Contains("hold 6 image"));
  REQUIRE_THROWS_WITH(call(one_image, {}, {{1, 4, 6}}, {}, q2), Contains("only 0 image grids"));
  REQUIRE_THROWS_WITH(call(one_image, {{1, 4, 6}, {1, 2, 2}}, {}, {}, q2),
                      Contains("used 1 of 2 image grids"));
  std::vector<LL> two = one_image;
  two.insert(two.end(), {kVS, kImg, kVE});
  REQUIRE_THROWS_WITH(call(two, {{1, 4, 6}}, {}, {}, q2), Contains("only 1 image grids"));
  std::vector<LL> stray = one_image;
  stray.push_back(kImg);  // a pad token outside any announced segment
  REQUIRE_THROWS_WITH(call(stray, {{1, 4, 6}}, {}, {}, q2), Contains("7 image"));
  REQUIRE_THROWS_WITH(call({1, kImg, 2}, {}, {}, {}, q2), Contains("no image or video grid"));
  REQUIRE_THROWS_WITH(call({1, kVS}, {{1, 2, 2}}, {}, {}, q2), Contains("vision_start"));
  // second_per_grid_t.
  const std::vector<LL> one_video = {kVS, kVid, kVid, kVid, kVid, kVE};
  REQUIRE_NOTHROW(call(one_video, {}, {{1, 4, 4}}, {0.5}, q25));
  REQUIRE_THROWS_WITH(call(one_video, {}, {{1, 4, 4}}, {std::nan("")}, q25), Contains("[0, 2^40]"));
  REQUIRE_THROWS_WITH(call(one_video, {}, {{1, 4, 4}}, {-1.0}, q25), Contains("[0, 2^40]"));
  REQUIRE_THROWS_WITH(call(one_video, {}, {{1, 4, 4}}, {HUGE_VAL}, q25), Contains("[0, 2^40]"));
  REQUIRE_THROWS_WITH(call(one_video, {}, {{1, 4, 4}}, {1.0, 1.0}, q25), Contains("2 second_per"));
  REQUIRE_THROWS_WITH(call(one_video, {}, {{1, 4, 4}}, {1.0}, q2),
                      Contains("Qwen2.5-VL parameter"));
  QwenVlOptions bad_tps = q25;
  bad_tps.tokens_per_second = std::nan("");
  REQUIRE_THROWS_WITH(call(one_video, {}, {{1, 4, 4}}, {}, bad_tps), Contains("tokens_per_second"));
  // Temporal ids past 2^52.
  std::vector<LL> long_video = {kVS};
  long_video.insert(long_video.end(), 4, kVid);
  long_video.push_back(kVE);
  REQUIRE_THROWS_WITH(call(long_video, {}, {{4, 2, 2}}, {1e10}, opts(QwenVlModel::Qwen25VL, 1e6)),
                      Contains("qwen_vl_max_position"));
  // Options, mask, token ids.
  QwenVlOptions m0 = q2;
  m0.spatial_merge_size = 0;
  REQUIRE_THROWS_WITH(call(one_image, {{1, 4, 6}}, {}, {}, m0), Contains("spatial_merge_size"));
  REQUIRE_THROWS_WITH(call(one_image, {{1, 4, 6}}, {}, {}, q2, {1, 1}), Contains("attention_mask"));
  REQUIRE_THROWS_WITH(call(one_image, {{1, 4, 6}}, {}, {}, q2, std::vector<int>(9, 2)),
                      Contains("0 or 1"));
  QwenVlTokens same{5, 5, 6};
  REQUIRE_THROWS_WITH(peal::qwen_vl_position_ids(one_image, same, {{1, 4, 6}}, {}, {}, q2),
                      Contains("must differ"));
  // Qwen3-VL: more frames than tokens is refused before splitting.
  REQUIRE_THROWS_WITH(call(one_video, {}, {{1LL << 29, 2, 2}}, {}, opts(QwenVlModel::Qwen3VL)),
                      Contains("frames"));
  // Builder.
  QwenVlPositionBuilder b(q2);
  REQUIRE_THROWS_WITH(b.text(-1), Contains("negative"));
  REQUIRE_THROWS_WITH(b.image({1, 3, 4}), Contains("divisible"));
  REQUIRE_THROWS_WITH(b.video({1, 4, 4}, 0.5), Contains("Qwen2.5-VL parameter"));
  REQUIRE_THROWS_WITH(b.text(peal::Index(1) << 31), Contains("qwen_vl_max_tokens"));
  QwenVlPositionBuilder b3(opts(QwenVlModel::Qwen3VL));
  REQUIRE_THROWS_WITH(b3.video({2, 4, 4}), Contains("one grid per frame"));
  QwenVlPositionBuilder b25(q25);
  REQUIRE_THROWS_WITH(b25.video({2, 4, 4}, std::nan("")), Contains("[0, 2^40]"));
  REQUIRE(b.tokens() == 0);  // nothing appended by the refused calls
  QwenVlPositionBuilder bp(opts(QwenVlModel::Qwen25VL, 1e6));
  bp.text(2);
  REQUIRE_THROWS_WITH(bp.video({4, 2, 2}, 1e10), Contains("qwen_vl_max_position"));
  REQUIRE(bp.tokens() == 2);  // the refused segment left nothing behind
  REQUIRE(bp.positions().ids.size() == 6);
  REQUIRE(bp.positions().rope_delta == 0);
}

TEST_CASE("qwen_vl: a sweep of generated prompts, every model and rounding, with masks",
          "[qwen_vl]") {
  // Deterministic prompts: text runs, images and videos of assorted grids (merge 2), compared
  // across the reference, the token form and the builder; then with padding on the left.
  unsigned long long state = 12345;
  auto next = [&](LL lo, LL hi) {  // uniform-ish in [lo, hi]
    state = state * 6364136223846793005ULL + 1442695040888963407ULL;
    return lo + LL((state >> 33) % (unsigned long long)(hi - lo + 1));
  };
  const double seconds[] = {0.0, 0.25, 0.5, 0.7, 1.0, 4.0 / 3.0, 2.0, 3.5};
  int prompts = 0;
  for (QwenVlModel m : kModels)
    for (auto r : {QwenVlTimeRounding::TruncateSecondsFirst, QwenVlTimeRounding::TruncateProduct})
      for (double tps : {2.0, 25.0, 1.5})
        for (int rep = 0; rep < 12; ++rep) {
          Prompt p(opts(m, tps, r));
          const bool with_seconds = m == QwenVlModel::Qwen25VL && rep % 2 == 0;
          const LL parts = next(1, 6);
          for (LL k = 0; k < parts; ++k) {
            const LL kind = next(0, 2);
            if (kind == 0) {
              p.text(next(0, 5));
            } else if (kind == 1) {
              p.image({1, 2 * next(1, 5), 2 * next(1, 5)});
            } else {
              const QwenVlGrid g{next(1, 7), 2 * next(1, 3), 2 * next(1, 4)};
              if (with_seconds)
                p.video(g, seconds[next(0, 7)]);
              else
                p.video(g);
            }
          }
          p.text(next(0, 3));
          INFO("model " << int(m) << " rounding " << int(r) << " tps " << tps << " rep " << rep);
          check_all(p);
          std::vector<int> mk(p.ids.size(), 1);
          const LL pad = std::min<LL>(next(0, 3), LL(mk.size()));
          for (LL i = 0; i < pad; ++i) mk[std::size_t(i)] = 0;
          if (p.images.empty() && p.videos.empty() && !mk.empty()) mk.back() = 0;
          // Left padding over plain text only (masking a vision_start would hide its segment).
          bool masks_vision = false;
          for (LL i = 0; i < pad; ++i)
            masks_vision |= p.ids[std::size_t(i)] == kVS || p.ids[std::size_t(i)] == kImg ||
                            p.ids[std::size_t(i)] == kVid;
          if (!masks_vision) {
            require_equal(p.token_form(mk), p.reference(mk));
            ++prompts;
          }
        }
  REQUIRE(prompts > 50);  // the masked comparison ran on most prompts
}

TEST_CASE("qwen_vl: the builder's memory is bounded, refused before allocating", "[qwen_vl]") {
  using Catch::Matchers::Contains;
  // 32768 x 32768 merged tokens pass the 2^30-token bound, but their ids take 24 GiB: refused
  // with peal's error (it was std::bad_alloc, or the OOM killer), nothing allocated.
  QwenVlPositionBuilder b;
  REQUIRE_THROWS_WITH(b.image({1, 65536, 65536}), Contains("qwen_vl_max_bytes"));
  REQUIRE_THROWS_WITH(b.video({4, 16384, 16384}), Contains("qwen_vl_max_bytes"));
  REQUIRE_THROWS_WITH(b.text(peal::Index(1) << 28), Contains("qwen_vl_max_bytes"));
  CHECK(b.positions().ids.capacity() == 0);
  b.text(5);
  const LL cap_tokens = peal::qwen_vl_max_bytes / LL(3 * sizeof(double));
  REQUIRE_THROWS_WITH(b.text(peal::Index(cap_tokens - 4)), Contains("qwen_vl_max_bytes"));
  REQUIRE_THROWS_WITH(b.image({1, 2, 2 * (cap_tokens - 4)}), Contains("qwen_vl_max_bytes"));
  CHECK(b.tokens() == 5);
  CHECK(b.positions().ids.size() == 15);
  CHECK(b.positions().ids.capacity() * sizeof(double) <= std::size_t(peal::qwen_vl_max_bytes));
  b.image({1, 4, 4}).text(1);
  CHECK(b.tokens() == 10);
  CHECK(b.next_position() == 8);
}

TEST_CASE("qwen_vl: many segments of both kinds (the segment search is linear)", "[qwen_vl]") {
  // 2^15 one-token images, a video, 2^15 one-token videos, an image: each segment's search
  // for the next pad token of the other kind used to rescan to the far end (quadratic: ~10 s
  // at this size, x4 per doubling), now each kind's search moves forward only. One-token
  // segments (a 2x2 grid, merge 2) put every token at t = h = w = its index.
  const LL N = LL(1) << 15;
  std::vector<LL> ids;
  std::vector<QwenVlGrid> images, videos;
  QwenVlPositionBuilder b;
  auto add = [&](bool image) {
    ids.insert(ids.end(), {kVS, image ? kImg : kVid, kVE});
    (image ? images : videos).push_back({1, 2, 2});
    b.text(1);
    if (image)
      b.image({1, 2, 2});
    else
      b.video({1, 2, 2});
    b.text(1);
  };
  for (LL i = 0; i < N; ++i) add(true);
  add(false);
  for (LL i = 0; i < N; ++i) add(false);
  add(true);
  const QwenVlPositions got =
      peal::qwen_vl_position_ids(ids, QwenVlTokens{}, images, videos, {}, QwenVlOptions{});
  REQUIRE(got.tokens() == LL(ids.size()));
  LL wrong = 0;
  for (LL i = 0; i < got.tokens(); ++i)
    for (int a = 0; a < 3; ++a) wrong += got(i, a) != double(i);
  CHECK(wrong == 0);
  CHECK(got.rope_delta == 0);
  CHECK(got.ids == b.positions().ids);
}
