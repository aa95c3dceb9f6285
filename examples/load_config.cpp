// Load a Hugging Face config.json, build its RoPE preset and encode a small batch of
// queries and keys laid out [tokens, heads, head_dim] as an inference engine holds them.
//
//   example_load_config                 uses the Llama-3.1-style config written below
//   example_load_config path/config.json
//
// The attention factor (YaRN, LongRoPE) is not part of A(tau): it scales the rotary
// coordinates of q and k (peal::scale_rotary), as Hugging Face's cos/sin scaling does.
#include <cstdio>
#include <exception>
#include <peal/encode.hpp>
#include <peal/models/hf_config.hpp>
#include <peal/peal.hpp>
#include <random>
#include <vector>

static const char* kConfig = R"({
  "architectures": ["LlamaForCausalLM"],
  "hidden_size": 4096,
  "num_attention_heads": 32,
  "num_key_value_heads": 8,
  "max_position_embeddings": 131072,
  "model_type": "llama",
  "rope_scaling": {
    "factor": 8.0,
    "low_freq_factor": 1.0,
    "high_freq_factor": 4.0,
    "original_max_position_embeddings": 8192,
    "rope_type": "llama3"
  },
  "rope_theta": 500000.0,
  "torch_dtype": "bfloat16"
})";

int main(int argc, char** argv) {
  try {
    const peal::RopeConfig cfg = argc > 1
                                     ? peal::rope_config_from_hf_file(argv[1])
                                     : peal::rope_config_from_hf(nlohmann::json::parse(kConfig));
    // seq_len matters for dynamic NTK and LongRoPE only (the length of the table in use).
    const double seq_len = 4096;
    const auto rope = peal::rope<float>(cfg, seq_len);
    std::printf(
        "rope_type %s, head_dim %d, rotary_dim %d, theta %g, layout %s, attention "
        "factor %.6f\n",
        peal::to_string(rope.type()), rope.head_dim(), rope.rotary_dim(), cfg.rope_theta,
        rope.layout() == peal::Layout::HalfSplit ? "half-split" : "interleaved",
        rope.attention_factor());
    std::printf("omega_0 = %.9Lg, omega_last = %.9Lg\n", rope.inv_freq().front(),
                rope.inv_freq().back());

    // A batch: 4 tokens at positions far apart, 2 heads.
    const int T = 4, H = 2, d = rope.head_dim();
    std::vector<float> q(std::size_t(T * H * d)), k(q.size());
    std::mt19937 rng(1);
    std::uniform_real_distribution<float> u(-1, 1);
    for (auto& x : q) x = u(rng);
    for (auto& x : k) x = u(rng);
    const std::vector<float> q0 = q, k0 = k;
    const std::vector<double> pos = {0, 1, 4095, 1e6};

    auto qv = peal::make_view(q.data(), T, H, d);
    auto kv = peal::make_view(k.data(), T, H, d);
    peal::encode_queries(rope, qv, peal::Positions(pos));
    peal::encode_keys(rope, kv, peal::Positions(pos));
    peal::scale_rotary(rope, qv);  // a no-op when the attention factor is 1
    peal::scale_rotary(rope, kv);

    // Scores depend only on t - s: token 3 (t = 1e6) against token 2 (s = 4095).
    const auto dot = [&](const std::vector<float>& a, int ta, const std::vector<float>& b, int tb,
                         int h) {
      double s = 0;
      for (int i = 0; i < d; ++i)
        s += double(a[std::size_t((ta * H + h) * d + i)]) * b[std::size_t((tb * H + h) * d + i)];
      return s;
    };
    for (int h = 0; h < H; ++h) {
      const double encoded = dot(q, 3, k, 2, h);
      // The same score from the encoding itself, through the lag t - s.
      Eigen::Map<const peal::Vector<float>> qh(q0.data() + (3 * H + h) * d, d);
      Eigen::Map<const peal::Vector<float>> kh(k0.data() + (2 * H + h) * d, d);
      const double af = rope.attention_factor();
      const double lag = double(rope.score(qh, pos[3], kh, pos[2]));
      std::printf("head %d: q~.k~ = %+.6f, af^2 * q^T A(t-s) k = %+.6f (full rotary: %s)\n", h,
                  encoded, af * af * lag, rope.rotary_dim() == d ? "yes" : "no");
    }
    std::printf("encoded q[token 3, head 0, 0..3] = %+.6f %+.6f %+.6f %+.6f\n",
                q[std::size_t(6 * d)], q[std::size_t(6 * d + 1)], q[std::size_t(6 * d + 2)],
                q[std::size_t(6 * d + 3)]);
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "load_config: %s\n", e.what());
    return 1;
  }
}
