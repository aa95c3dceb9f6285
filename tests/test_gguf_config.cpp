// Reading RoPE configurations from GGUF files (include/peal/models/gguf_config.hpp). The files are
// written byte by byte by tests/gguf_writer.hpp (from ggml/docs/gguf.md, independently of
// the reader), with the keys llama.cpp's convert_hf_to_gguf.py writes for the models named;
// sizes follow the published configs, tensors other than the RoPE ones are tiny stand-ins.
#include <algorithm>
#include <catch2/catch.hpp>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <functional>
#include <future>
#include <istream>
#include <peal/models/gguf_config.hpp>
#include <peal/peal.hpp>
#include <sstream>
#include <string>
#include <thread>
#include <vector>
#if defined(__unix__) || defined(__APPLE__)
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#define PEAL_TEST_HAVE_MKFIFO 1
#endif

#include "gguf_writer.hpp"
#include "tolerances.hpp"

namespace {

using namespace peal_test;
using peal::GgufConfig;
using peal::GgufRopeType;
using peal::Layout;
using peal::RopeType;
using LD = long double;

// The message of the peal::invalid_argument f throws; fails the test if it throws nothing
// or anything else.
std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const peal::invalid_argument& e) {
    return e.what();
  } catch (const std::exception& e) {
    FAIL("not a peal::invalid_argument: " << e.what());
  } catch (...) {
    FAIL("not a std::exception");
  }
  FAIL("no exception");
  return {};
}

GgufConfig from(const Bytes& b, const std::string& name = "test.gguf") {
  return peal::rope_config_from_gguf_bytes(b.data(), b.size(), name);
}

// Llama 3.1's factors as convert_hf_to_gguf.py's LlamaModel computes rope_freqs (from
// Meta's published llama3 formula): base frequencies theta^(-2i/D), wavelength 2 pi / f,
// factor 1 below L0 / high_freq_factor, `factor` above L0 / low_freq_factor, and in between
// 1 / ((1 - smooth) / factor + smooth), smooth = (L0 / wavelen - low) / (high - low).
std::vector<float> llama3_rope_freqs(int dim, double theta, double factor, double low, double high,
                                     double L0) {
  std::vector<float> out;
  const double pi = std::acos(-1.0);
  for (int i = 0; i < dim; i += 2) {
    const double freq = 1.0 / std::pow(theta, double(i) / dim);
    const double wavelen = 2 * pi / freq;
    double f;
    if (wavelen < L0 / high)
      f = 1;
    else if (wavelen > L0 / low)
      f = factor;
    else {
      const double smooth = (L0 / wavelen - low) / (high - low);
      f = 1 / ((1 - smooth) / factor + smooth);
    }
    out.push_back(static_cast<float>(f));
  }
  return out;
}

// A tokenizer block in the shape the converter writes (a few tokens; `n_types` token types,
// > gguf_max_kept_array_entries to exercise the skipping of large arrays).
void tokenizer(GgufBuilder& g, std::uint64_t n_types) {
  g.str("tokenizer.ggml.model", "gpt2");
  g.str_array("tokenizer.ggml.tokens", {"!", "\"", "#", "hello", "\xc4\xa0world"});
  std::vector<std::int32_t> types(n_types, 1);
  g.i32_array("tokenizer.ggml.token_type", types);
  g.u32("tokenizer.ggml.bos_token_id", 128000);
}

GgufBuilder llama31(std::uint64_t n_types = 5) {
  GgufBuilder g;
  g.str("general.architecture", "llama");
  g.str("general.type", "model");
  g.str("general.name", "Meta Llama 3.1 8B Instruct");
  g.u32("llama.block_count", 32);
  g.u32("llama.context_length", 131072);
  g.u32("llama.embedding_length", 4096);
  g.u32("llama.feed_forward_length", 14336);
  g.u32("llama.attention.head_count", 32);
  g.u32("llama.attention.head_count_kv", 8);
  g.f32("llama.rope.freq_base", 500000.0f);
  g.f32("llama.attention.layer_norm_rms_epsilon", 1e-5f);
  g.u32("general.file_type", 1);
  g.u32("llama.vocab_size", 128256);
  g.u32("llama.rope.dimension_count", 128);
  tokenizer(g, n_types);
  g.u32("general.quantization_version", 2);
  GgufTensor emb;
  emb.name = "token_embd.weight";
  emb.dims = {4, 3};
  emb.type = 1;  // F16
  emb.data.assign(4 * 3 * 2, 0);
  g.tensors.push_back(emb);
  g.f32_tensor("rope_freqs.weight", llama3_rope_freqs(128, 500000.0, 8, 1, 4, 8192));
  return g;
}

GgufBuilder qwen2_yarn() {
  GgufBuilder g;
  g.str("general.architecture", "qwen2");
  g.str("general.name", "Qwen2 7B Instruct");
  g.u32("qwen2.block_count", 28);
  g.u32("qwen2.context_length", 131072);
  g.u32("qwen2.embedding_length", 3584);
  g.u32("qwen2.feed_forward_length", 18944);
  g.u32("qwen2.attention.head_count", 28);
  g.u32("qwen2.attention.head_count_kv", 4);
  g.f32("qwen2.rope.freq_base", 1000000.0f);
  g.f32("qwen2.attention.layer_norm_rms_epsilon", 1e-6f);
  g.str("qwen2.rope.scaling.type", "yarn");
  g.f32("qwen2.rope.scaling.factor", 4.0f);
  g.u32("qwen2.rope.scaling.original_context_length", 32768);
  g.u32("general.file_type", 1);
  tokenizer(g, 5);
  return g;
}

GgufBuilder qwen_vl(const std::string& arch, std::vector<std::int32_t> sections) {
  GgufBuilder g;
  g.str("general.architecture", arch);
  g.u32(arch + ".block_count", 28);
  g.u32(arch + ".context_length", 32768);
  g.u32(arch + ".embedding_length", 3584);
  g.u32(arch + ".attention.head_count", 28);
  g.u32(arch + ".attention.head_count_kv", 4);
  g.f32(arch + ".rope.freq_base", 1000000.0f);
  g.i32_array(arch + ".rope.dimension_sections", sections);
  return g;
}

bool contains(const std::string& s, const std::string& part) {
  return s.find(part) != std::string::npos;
}

}  // namespace

TEST_CASE("gguf: Llama 3.1 8B: interleaved, theta 500000, rope_freqs = llama3 factors") {
  const GgufBuilder g = llama31(5000);  // a 5000-entry token_type array: skipped, not kept
  const Bytes b = g.bytes();
  namespace fs = std::filesystem;
  const fs::path path = fs::temp_directory_path() / "peal_test_llama31.gguf";
  write_file(path.string(), b);
  const GgufConfig c = peal::rope_config_from_gguf(path.string());
  fs::remove(path);

  CHECK(c.architecture == "llama");
  CHECK(c.rope_type == GgufRopeType::Norm);
  CHECK(c.rope.layout == Layout::Interleaved);
  CHECK(c.rope.head_dim == 128);  // 4096 / 32
  CHECK(c.n_rot == 128);
  CHECK(c.rope.partial_rotary_factor == 1.0);
  CHECK(c.rope.rope_theta == 500000.0);
  CHECK(c.rope.scaling.type == RopeType::Default);
  REQUIRE(c.context_length);
  CHECK(*c.context_length == 131072);
  CHECK(c.rope.max_position_embeddings == 131072.0);
  CHECK(!c.max_alibi_bias);
  CHECK(c.version == 3);
  CHECK(c.tensor_count == 2);
  const std::vector<float> expect = llama3_rope_freqs(128, 500000.0, 8, 1, 4, 8192);
  REQUIRE(c.rope.frequency_factors.size() == 64);
  for (std::size_t i = 0; i < 64; ++i) CHECK(c.rope.frequency_factors[i] == double(expect[i]));
  // The three regions of the llama3 formula are all present.
  CHECK(expect.front() == 1.0f);
  CHECK(expect.back() == 8.0f);
  CHECK(std::count_if(expect.begin(), expect.end(), [](float f) { return f > 1 && f < 8; }) > 0);

  // Metadata for an inspector.
  CHECK(c.metadata.at("general.name") == "\"Meta Llama 3.1 8B Instruct\"");
  CHECK(c.metadata.at("llama.rope.freq_base") == "500000");
  CHECK(c.metadata.at("tokenizer.ggml.token_type") == "[5000 x INT32, not loaded]");
  CHECK(contains(c.metadata.at("tokenizer.ggml.tokens"), "(5 x STRING)"));

  // omega_i = theta^(-2i/D) / rope_freqs[i] against peal's own llama3 preset. The factors
  // are rounded to float32 (relative u = 2^-24) by the converter: the frequencies agree to
  // one float rounding (Tol<float>::roundings(1) = 2^-23, with a factor 2 for the double
  // arithmetic of the factors and the long double of the presets).
  peal::RopeConfig l3;
  l3.head_dim = 128;
  l3.rope_theta = 500000.0;
  l3.scaling.type = RopeType::Llama3;
  l3.scaling.factor = 8;
  l3.scaling.low_freq_factor = 1;
  l3.scaling.high_freq_factor = 4;
  l3.scaling.original_max_position_embeddings = 8192;
  const auto ref = peal::rope<double>(l3).inv_freq();
  const auto got = peal::rope<double>(c.rope).inv_freq();
  REQUIRE(got.size() == ref.size());
  const LD tol = peal_test::Tol<float>::roundings(1);
  for (std::size_t i = 0; i < ref.size(); ++i) CHECK(std::abs(got[i] - ref[i]) <= tol * ref[i]);
  // ... and not by accident: without the factors, the low frequencies differ by 8x.
  peal::RopeConfig plain = c.rope;
  plain.frequency_factors.clear();
  CHECK(peal::rope<double>(plain).inv_freq().back() > 7 * ref.back());

  // The same bytes in memory, and through an std::istream, give the same result.
  const GgufConfig m = from(b);
  CHECK(m.rope.frequency_factors == c.rope.frequency_factors);
  CHECK(m.metadata == c.metadata);
  std::istringstream in(std::string(b.begin(), b.end()));
  const GgufConfig s = peal::rope_config_from_gguf(peal::gguf_metadata_from_stream(in, "s"));
  CHECK(s.rope.frequency_factors == c.rope.frequency_factors);
  CHECK(s.metadata == c.metadata);
}

TEST_CASE("gguf: Qwen2 YaRN: half-split, yarn factor 4, original context 32768") {
  const GgufConfig c = from(qwen2_yarn().bytes());
  CHECK(c.architecture == "qwen2");
  CHECK(c.rope_type == GgufRopeType::Neox);
  CHECK(c.rope.layout == Layout::HalfSplit);
  CHECK(c.rope.head_dim == 128);  // 3584 / 28
  CHECK(c.n_rot == 128);          // no dimension_count: head_dim, as llama.cpp
  CHECK(c.rope.rope_theta == 1000000.0);
  CHECK(c.rope.scaling.type == RopeType::Yarn);
  CHECK(c.rope.scaling.factor == 4.0);
  CHECK(c.rope.scaling.original_max_position_embeddings == 32768.0);
  CHECK(c.rope.max_position_embeddings == 131072.0);
  CHECK(!c.rope.scaling.beta_fast);
  CHECK(!c.rope.scaling.attention_factor);
  CHECK(c.rope.frequency_factors.empty());
  // Same frequencies and attention factor as the HF config.json's values given directly.
  peal::RopeConfig hf;
  hf.head_dim = 128;
  hf.rope_theta = 1000000.0;
  hf.max_position_embeddings = 131072;
  hf.scaling.type = RopeType::Yarn;
  hf.scaling.factor = 4;
  hf.scaling.original_max_position_embeddings = 32768;
  const auto a = peal::rope<double>(c.rope), r = peal::rope<double>(hf);
  CHECK(a.inv_freq() == r.inv_freq());
  CHECK(a.attention_factor_long() == r.attention_factor_long());
  CHECK(a.attention_factor_long() > 1);  // 0.1 ln 4 + 1
}

TEST_CASE("gguf: YaRN extras, linear, scale_linear, longrope, partial rotary") {
  SECTION("yarn beta and attention factor") {
    GgufBuilder g = qwen2_yarn();
    g.f32("qwen2.rope.scaling.yarn_beta_fast", 16.0f);
    g.f32("qwen2.rope.scaling.yarn_beta_slow", 2.0f);
    g.f32("qwen2.rope.scaling.yarn_attn_factor", 1.25f);
    g.f32("qwen2.rope.scaling.yarn_ext_factor", 1.0f);
    const GgufConfig c = from(g.bytes());
    CHECK(c.rope.scaling.beta_fast == 16.0);
    CHECK(c.rope.scaling.beta_slow == 2.0);
    CHECK(c.rope.scaling.attention_factor == 1.25);
  }
  SECTION("yarn ext_factor other than 1 is refused") {
    GgufBuilder g = qwen2_yarn();
    g.f32("qwen2.rope.scaling.yarn_ext_factor", 0.5f);
    CHECK(contains(error_of([&] { from(g.bytes()); }), "qwen2.rope.scaling.yarn_ext_factor"));
  }
  SECTION("linear type, and the older scale_linear key without a type") {
    GgufBuilder g;
    g.str("general.architecture", "llama");
    g.u32("llama.embedding_length", 4096);
    g.u32("llama.attention.head_count", 32);
    g.f32("llama.rope.scale_linear", 2.0f);
    const GgufConfig c = from(g.bytes());
    CHECK(c.rope.scaling.type == RopeType::Linear);
    CHECK(c.rope.scaling.factor == 2.0);
    CHECK(c.rope.rope_theta == 10000.0);  // the default
    GgufBuilder n = g;
    n.str("llama.rope.scaling.type", "none");
    CHECK(from(n.bytes()).rope.scaling.type == RopeType::Default);
    GgufBuilder bad = g;
    bad.str("llama.rope.scaling.type", "dynamic");
    const std::string e = error_of([&] { from(bad.bytes(), "bad.gguf"); });
    CHECK(contains(e, "llama.rope.scaling.type"));
    CHECK(contains(e, "bad.gguf"));
  }
  SECTION("longrope (Phi-3): factors from the rope_factors_* tensors") {
    GgufBuilder g;
    g.str("general.architecture", "phi3");
    g.u32("phi3.context_length", 131072);
    g.u32("phi3.embedding_length", 3072);
    g.u32("phi3.attention.head_count", 32);
    g.u32("phi3.rope.dimension_count", 96);
    g.f32("phi3.rope.freq_base", 10000.0f);
    g.u32("phi3.rope.scaling.original_context_length", 4096);
    g.f32("phi3.rope.scaling.attn_factor", 1.19f);
    g.str("phi3.rope.scaling.type", "longrope");
    std::vector<float> lf(48), sf(48);
    for (int i = 0; i < 48; ++i) {
      lf[std::size_t(i)] = 1.0f + 0.5f * float(i);
      sf[std::size_t(i)] = 1.0f + 0.01f * float(i);
    }
    GgufBuilder missing = g;
    g.f32_tensor("rope_factors_long.weight", lf);
    g.f32_tensor("rope_factors_short.weight", sf);
    const GgufConfig c = from(g.bytes());
    CHECK(c.rope.layout == Layout::HalfSplit);
    CHECK(c.rope.head_dim == 96);
    CHECK(c.rope.scaling.type == RopeType::LongRope);
    REQUIRE(c.rope.scaling.long_factor);
    REQUIRE(c.rope.scaling.short_factor);
    CHECK(*c.rope.scaling.long_factor == std::vector<double>(lf.begin(), lf.end()));
    CHECK(*c.rope.scaling.short_factor == std::vector<double>(sf.begin(), sf.end()));
    CHECK(c.rope.scaling.attention_factor == double(1.19f));
    CHECK(c.rope.scaling.original_max_position_embeddings == 4096.0);
    missing.f32_tensor("rope_factors_long.weight", lf);
    CHECK(contains(error_of([&] { from(missing.bytes()); }), "rope_factors_short"));
  }
  SECTION("partial rotary: key_length 256, dimension_count 64 (a quarter)") {
    GgufBuilder g;
    g.str("general.architecture", "qwen3next");
    g.u32("qwen3next.embedding_length", 2048);
    g.u32("qwen3next.attention.head_count", 16);
    g.u32("qwen3next.attention.key_length", 256);
    g.u32("qwen3next.rope.dimension_count", 64);
    const GgufConfig c = from(g.bytes());
    CHECK(c.rope.head_dim == 256);
    CHECK(c.n_rot == 64);
    CHECK(peal::rope_rotary_dim(c.rope) == 64);
    CHECK(peal::rope<double>(c.rope).rotary_dim() == 64);
  }
  SECTION("odd or too large dimension_count") {
    for (std::uint32_t n : {0u, 7u, 130u}) {
      GgufBuilder g;
      g.str("general.architecture", "llama");
      g.u32("llama.embedding_length", 4096);
      g.u32("llama.attention.head_count", 32);
      g.u32("llama.rope.dimension_count", n);
      CHECK(contains(error_of([&] { from(g.bytes()); }), "llama.rope.dimension_count"));
    }
  }
}

TEST_CASE("gguf: Qwen2-VL and Qwen3-VL M-RoPE sections") {
  const GgufConfig c = from(qwen_vl("qwen2vl", {16, 24, 24, 0}).bytes());
  CHECK(c.rope_type == GgufRopeType::MRope);
  CHECK(c.rope.layout == Layout::HalfSplit);
  CHECK(c.rope.scaling.mrope_section == std::vector<int>{16, 24, 24});
  CHECK(!c.rope.scaling.mrope_interleaved);
  CHECK(c.n_rot == 128);
  // A 1-D rope() refuses it (it needs (t, h, w) positions).
  CHECK(contains(error_of([&] { peal::rope<double>(c.rope); }), "mrope"));

  const GgufConfig c3 = from(qwen_vl("qwen3vl", {24, 20, 20, 0}).bytes());
  CHECK(c3.rope_type == GgufRopeType::IMRope);
  CHECK(c3.rope.scaling.mrope_section == std::vector<int>{24, 20, 20});
  CHECK(c3.rope.scaling.mrope_interleaved);

  CHECK(contains(error_of([&] {
                   from(qwen_vl("qwen2vl", {16, 24, 20, 0}).bytes());
                 }),
                 "sums to 60, expected n_rot / 2 = 64"));
  CHECK(contains(error_of([&] {
                   from(qwen_vl("qwen2vl", {16, 24, 24, 8}).bytes());
                 }),
                 "4th section"));
  GgufBuilder none;
  none.str("general.architecture", "qwen2vl");
  none.u32("qwen2vl.embedding_length", 3584);
  none.u32("qwen2vl.attention.head_count", 28);
  CHECK(contains(error_of([&] { from(none.bytes()); }), "qwen2vl.rope.dimension_sections"));
  // glm4 is M-RoPE only with sections.
  GgufBuilder glm;
  glm.str("general.architecture", "glm4");
  glm.u32("glm4.embedding_length", 4096);
  glm.u32("glm4.attention.head_count", 32);
  CHECK(from(glm.bytes()).rope_type == GgufRopeType::Norm);
}

TEST_CASE("gguf: ALiBi and unknown architectures") {
  GgufBuilder g;
  g.str("general.architecture", "bloom");
  g.u32("bloom.embedding_length", 4096);
  g.u32("bloom.attention.head_count", 32);
  g.f32("bloom.attention.max_alibi_bias", 8.0f);
  const GgufConfig c = from(g.bytes());
  CHECK(c.rope_type == GgufRopeType::None);
  REQUIRE(c.max_alibi_bias);
  CHECK(*c.max_alibi_bias == 8.0);
  CHECK(c.n_rot == 0);

  GgufBuilder u;
  u.str("general.architecture", "not-a-model");
  const std::string e = error_of([&] { from(u.bytes(), "u.gguf"); });
  CHECK(contains(e, "not-a-model"));
  CHECK(contains(e, "llama"));
  CHECK(contains(e, "qwen2vl"));
  CHECK(contains(e, "u.gguf"));
  GgufBuilder none;
  none.u32("llama.context_length", 1);
  CHECK(contains(error_of([&] { from(none.bytes()); }), "general.architecture is missing"));
}

TEST_CASE("gguf: damaged headers") {
  const Bytes good = llama31().bytes();
  SECTION("wrong magic") {
    Bytes b = good;
    b[3] = 'X';
    const std::string e = error_of([&] { from(b, "m.gguf"); });
    CHECK(contains(e, "\"m.gguf\", byte 0"));
    CHECK(contains(e, "not a GGUF file"));
  }
  SECTION("versions") {
    for (std::uint32_t v : {1u, 0u, 4u, 0x03000000u}) {
      GgufBuilder g = llama31();
      g.version = v;
      const std::string e = error_of([&] { from(g.bytes()); });
      CHECK(contains(e, "byte 4"));
      CHECK(contains(e, "version"));
      if (v == 1) CHECK(contains(e, "version 1"));
      if (v == 0x03000000u) CHECK(contains(e, "big-endian"));
    }
    GgufBuilder v2 = llama31();
    v2.version = 2;
    CHECK(from(v2.bytes()).version == 2);
  }
  SECTION("every truncation of a valid file throws") {
    // The file ends with the rope_freqs data: every proper prefix is incomplete.
    for (std::size_t n = 0; n < good.size(); ++n) {
      const Bytes b(good.begin(), good.begin() + std::ptrdiff_t(n));
      bool threw = false;
      try {
        from(b);
      } catch (const peal::invalid_argument&) {
        threw = true;
      }
      if (!threw) FAIL("prefix of " << n << " bytes was accepted");
    }
    CHECK_NOTHROW(from(good));
    // And through a file: a prefix cut inside the tensor infos.
    namespace fs = std::filesystem;
    const fs::path path = fs::temp_directory_path() / "peal_test_truncated.gguf";
    write_file(path.string(), Bytes(good.begin(), good.begin() + std::ptrdiff_t(good.size() / 2)));
    const std::string e = error_of([&] { peal::rope_config_from_gguf(path.string()); });
    fs::remove(path);
    CHECK(contains(e, path.string()));
    CHECK(contains(e, "truncated"));
    CHECK(contains(error_of([&] { peal::rope_config_from_gguf("/nonexistent/x.gguf"); }),
                   "cannot open"));
  }
  SECTION("absurd counts and lengths") {
    Bytes b = {'G', 'G', 'U', 'F'};
    put_u32(b, 3);
    put_u64(b, 0);
    put_u64(b, std::uint64_t(1) << 60);  // kv count
    CHECK(contains(error_of([&] { from(b); }), "metadata_kv_count"));

    Bytes t = {'G', 'G', 'U', 'F'};
    put_u32(t, 3);
    put_u64(t, std::uint64_t(1) << 62);  // tensor count
    put_u64(t, 0);
    CHECK(contains(error_of([&] { from(t); }), "tensor_count"));

    GgufBuilder g;
    put_u64(g.kvs, std::uint64_t(1) << 62);  // key length
    g.kv_count = 1;
    g.kvs.resize(g.kvs.size() + 64, 'a');
    CHECK(contains(error_of([&] { from(g.bytes()); }), "length"));

    GgufBuilder s;
    put_u64(s.key("general.name", kStr), std::uint64_t(1) << 62);  // string value length
    CHECK(contains(error_of([&] { from(s.bytes()); }), "truncated"));

    GgufBuilder a;
    Bytes& ab = a.key("x.array", kArr);
    put_u32(ab, kU64);
    put_u64(ab, std::uint64_t(1) << 61);  // array count
    CHECK(contains(error_of([&] { from(a.bytes()); }), "an array of"));
    GgufBuilder a2;
    Bytes& ab2 = a2.key("x.array", kArr);
    put_u32(ab2, kStr);
    put_u64(ab2, ~std::uint64_t(0));
    CHECK(contains(error_of([&] { from(a2.bytes()); }), "an array of"));

    GgufBuilder d = llama31();
    d.tensors[0].dims.assign(100, 1);  // n_dims 100
    CHECK(contains(error_of([&] { from(d.bytes()); }), "n_dims 100"));
    GgufBuilder big = llama31();
    big.tensors[1].dims = {std::uint64_t(1) << 40};  // rope_freqs claims 2^40 floats
    CHECK(contains(error_of([&] { from(big.bytes()); }), "rope_freqs"));
    GgufBuilder huge = llama31();
    huge.tensors[0].dims = {std::uint64_t(1) << 32, std::uint64_t(1) << 32};
    CHECK(contains(error_of([&] { from(huge.bytes()); }), "overflows"));
  }
  SECTION("unknown value type, bad bool, duplicate key, bad alignment") {
    GgufBuilder g;
    g.str("general.architecture", "llama");
    put_u32(g.key("x.y", 13), 0);
    const std::string e = error_of([&] { from(g.bytes()); });
    CHECK(contains(e, "unknown GGUF value type 13"));
    CHECK(contains(e, "x.y"));
    CHECK(contains(e, "byte "));

    GgufBuilder b;
    put_u8(b.key("x.flag", kBool), 2);
    CHECK(contains(error_of([&] { from(b.bytes()); }), "BOOL"));

    GgufBuilder dup;
    dup.u32("x.a", 1);
    dup.u32("x.a", 2);
    CHECK(contains(error_of([&] { from(dup.bytes()); }), "duplicate key x.a"));

    for (std::uint32_t al : {0u, 3u, 48u}) {
      GgufBuilder al_g = llama31();
      al_g.u32("general.alignment", al);
      CHECK(contains(error_of([&] { from(al_g.bytes()); }), "general.alignment"));
    }
    GgufBuilder al64 = llama31();
    al64.u64("general.alignment", 32);
    CHECK(contains(error_of([&] { from(al64.bytes()); }), "UINT32"));
    GgufBuilder al8 = llama31();
    al8.u32("general.alignment", 8);
    al8.alignment = 8;
    CHECK(from(al8.bytes()).rope.frequency_factors.size() == 64);
  }
  SECTION("tensor checks: misaligned offset, rope_freqs type and shape") {
    GgufBuilder f16 = llama31();
    f16.tensors[1].type = 1;
    CHECK(contains(error_of([&] { from(f16.bytes()); }), "F32 (0) expected"));
    GgufBuilder two = llama31();
    two.tensors[1].dims = {32, 2};
    CHECK(contains(error_of([&] { from(two.bytes()); }), "1 expected"));
    GgufBuilder wrong = llama31();
    wrong.tensors[1] = GgufTensor();
    wrong.f32_tensor("rope_freqs.weight", std::vector<float>(32, 1.0f));
    wrong.tensors.erase(wrong.tensors.begin() + 1);
    CHECK(contains(error_of([&] { from(wrong.bytes()); }), "frequency_factors has 32 entries"));
    // A misaligned offset: patch the last tensor's offset field (8 bytes before the padding).
    Bytes b = llama31().bytes();
    // Find the offset field of rope_freqs.weight: after its name, n_dims, dims, type.
    const std::string name = "rope_freqs.weight";
    const auto it = std::search(b.begin(), b.end(), name.begin(), name.end());
    REQUIRE(it != b.end());
    const std::size_t off_field = std::size_t(it - b.begin()) + name.size() + 4 + 8 + 4;
    b[off_field] = static_cast<unsigned char>(b[off_field] + 4);
    CHECK(contains(error_of([&] { from(b); }), "not a multiple of general.alignment"));
  }
}

TEST_CASE("gguf: value types: wrong types for keys, nested arrays") {
  SECTION("freq_base as a string") {
    GgufBuilder g;
    g.str("general.architecture", "llama");
    g.u32("llama.embedding_length", 4096);
    g.u32("llama.attention.head_count", 32);
    g.str("llama.rope.freq_base", "500000");
    const std::string e = error_of([&] { from(g.bytes(), "tc.gguf"); });
    CHECK(contains(e, "llama.rope.freq_base must be a number"));
    CHECK(contains(e, "STRING"));
    CHECK(contains(e, "tc.gguf"));
  }
  SECTION("architecture as an integer, head_count as a float, a negative key_length") {
    GgufBuilder a;
    a.u32("general.architecture", 7);
    CHECK(contains(error_of([&] { from(a.bytes()); }), "general.architecture must be a string"));
    GgufBuilder h;
    h.str("general.architecture", "llama");
    h.u32("llama.embedding_length", 4096);
    h.f32("llama.attention.head_count", 32.0f);
    CHECK(contains(error_of([&] { from(h.bytes()); }),
                   "llama.attention.head_count must be an integer"));
    GgufBuilder k;
    k.str("general.architecture", "llama");
    k.i32("llama.attention.key_length", -128);
    CHECK(contains(error_of([&] { from(k.bytes()); }), "llama.attention.key_length must be in"));
  }
  SECTION("numbers of any width are accepted for numeric keys") {
    GgufBuilder g;
    g.str("general.architecture", "llama");
    g.u64("llama.embedding_length", 4096);
    g.i32("llama.attention.head_count", 32);
    g.f64("llama.rope.freq_base", 500000.0);
    g.u64("llama.context_length", 8192);
    const GgufConfig c = from(g.bytes());
    CHECK(c.rope.head_dim == 128);
    CHECK(c.rope.rope_theta == 500000.0);
    CHECK(*c.context_length == 8192);
  }
  SECTION("per-layer head_count arrays") {
    GgufBuilder g;
    g.str("general.architecture", "llama");
    g.u32("llama.embedding_length", 4096);
    g.i32_array("llama.attention.head_count", {32, 32, 32});
    CHECK(from(g.bytes()).rope.head_dim == 128);
    GgufBuilder d;
    d.str("general.architecture", "llama");
    d.u32("llama.embedding_length", 4096);
    d.i32_array("llama.attention.head_count", {32, 16});
    CHECK(contains(error_of([&] { from(d.bytes()); }), "differs between layers"));
  }
  SECTION("nested arrays are read; too deep is refused") {
    GgufBuilder g;
    g.str("general.architecture", "bloom");
    Bytes& b = g.key("x.nested", kArr);
    put_u32(b, kArr);
    put_u64(b, 2);
    for (int k = 0; k < 2; ++k) {
      put_u32(b, kI32);
      put_u64(b, 2);
      put_u32(b, std::uint32_t(10 * k + 1));
      put_u32(b, std::uint32_t(10 * k + 2));
    }
    const GgufConfig c = from(g.bytes());
    CHECK(c.metadata.at("x.nested") == "[[1, 2] (2 x INT32), [11, 12] (2 x INT32)] (2 x ARRAY)");
    const peal::GgufMetadata md =
        peal::gguf_metadata_from_bytes(g.bytes().data(), g.bytes().size());
    CHECK(md.kv.at("x.nested").elements.at(1).elements.at(0).i == 11);

    GgufBuilder deep;
    Bytes& db = deep.key("x.deep", kArr);
    for (int k = 0; k < 6; ++k) {
      put_u32(db, kArr);
      put_u64(db, 1);
    }
    put_u32(db, kU8);
    put_u64(db, 0);
    CHECK(contains(error_of([&] { from(deep.bytes()); }), "nested deeper"));
  }
}

TEST_CASE("gguf: a multi-GB model file: only the header region is read") {
  // rope_freqs first, then a 2 GiB F16 token_embd [4096, 262144] whose data is a hole of a
  // sparse file: the reader checks that it fits and reads none of it.
  GgufBuilder g = llama31();
  g.tensors.clear();
  g.f32_tensor("rope_freqs.weight", llama3_rope_freqs(128, 500000.0, 8, 1, 4, 8192));
  GgufTensor emb;
  emb.name = "token_embd.weight";
  emb.dims = {4096, 262144};
  emb.type = 1;              // F16, 2 bytes
  g.tensors.push_back(emb);  // no data written: the builder puts its offset after rope_freqs
  const Bytes b = g.bytes();
  namespace fs = std::filesystem;
  const fs::path path = fs::temp_directory_path() / "peal_test_big.gguf";
  write_file(path.string(), b);
  const std::uintmax_t full = std::uintmax_t(b.size()) + (std::uintmax_t(1) << 31);
  std::error_code ec;
  fs::resize_file(path, full, ec);
  if (ec) {
    fs::remove(path);
    WARN("cannot make a sparse 2 GiB file here: " << ec.message());
    return;
  }
  const GgufConfig c = peal::rope_config_from_gguf(path.string());
  CHECK(c.rope.frequency_factors.size() == 64);
  CHECK(c.tensor_count == 2);
  // One byte short: token_embd no longer fits.
  fs::resize_file(path, full - 1);
  const std::string e = error_of([&] { peal::rope_config_from_gguf(path.string()); });
  fs::remove(path);
  CHECK(contains(e, "token_embd.weight"));
  CHECK(contains(e, "extends past the end"));
}

TEST_CASE("gguf: an invalid RoPE configuration names the file and the keys read") {
  GgufBuilder g;
  g.str("general.architecture", "llama");
  g.u32("llama.embedding_length", 4096);
  g.u32("llama.attention.head_count", 32);
  g.f32("llama.rope.freq_base", 0.5f);
  const std::string e = error_of([&] { from(g.bytes(), "theta.gguf"); });
  CHECK(contains(e, "theta.gguf"));
  CHECK(contains(e, "rope_theta must be finite and > 1"));
  CHECK(contains(e, "rope_theta <- llama.rope.freq_base"));
  GgufBuilder f = llama31();
  f.tensors.back() = GgufTensor();
  std::vector<float> bad = llama3_rope_freqs(128, 500000.0, 8, 1, 4, 8192);
  bad[3] = -1.0f;
  f.tensors.pop_back();
  f.f32_tensor("rope_freqs.weight", bad);
  const std::string fe = error_of([&] { from(f.bytes(), "ff.gguf"); });
  CHECK(contains(fe, "frequency_factors[3] must be finite and > 0"));
  CHECK(contains(fe, "ff.gguf"));
}

// ---- Hostile files (issue 19): bounded time and memory, messages that survive their bytes ----

namespace {


// gguf_metadata_from_stream over a SparseBuf: head, then fill up to size bytes.
struct SparseRead {
  SparseBuf buf;
  std::istream in;
  SparseRead(Bytes head, std::uint64_t size, unsigned char fill = 0)
      : buf(std::move(head), size, fill), in(&buf) {}
  peal::GgufMetadata read() { return peal::gguf_metadata_from_stream(in, "sparse.gguf"); }
};

}  // namespace

TEST_CASE("gguf: counts of a sparse file are capped before anything is reserved",
          "[gguf][limits][gguf_sparse_counts]") {
  // A 24-byte header in front of 16 GiB of zeros (a sparse file): the bytes left hold
  // 715 million minimal tensor infos, and reserving for them was a std::bad_alloc.
  for (const std::uint64_t size :
       {std::uint64_t(4) << 30, std::uint64_t(16) << 30, std::uint64_t(1) << 50}) {
    SparseRead r(gguf_header((size - 24) / 24, 0), size);
    const std::string e = error_of([&] { r.read(); });
    CHECK(contains(e, "gguf_max_tensor_count"));
    CHECK(contains(e, "byte 8"));
    CHECK(r.buf.served <= 4096);  // the header only
  }
  SparseRead kv(gguf_header(0, peal::gguf_max_kv_count + 1), std::uint64_t(16) << 30);
  CHECK(contains(error_of([&] { kv.read(); }), "gguf_max_kv_count"));
  // At the cap, the zeros are read as 2^20 tensor infos named "" (24 MB), then the repeat
  // is named.
  SparseRead at_cap(gguf_header(peal::gguf_max_tensor_count, 0), std::uint64_t(16) << 30);
  const std::string e = error_of([&] { at_cap.read(); });
  CHECK(contains(e, "duplicate tensor name"));
  CHECK(at_cap.buf.served <= (std::uint64_t(64) << 20));  // the tensor infos, not the 16 GiB
  // A file, sparse on disk, takes the same path (gguf_metadata_from_file reads a stream).
  namespace fs = std::filesystem;
  const fs::path path = fs::temp_directory_path() / "peal_test_sparse_count.gguf";
  write_file(path.string(), gguf_header((std::uint64_t(16) << 30) / 24 - 1, 0));
  std::error_code ec;
  fs::resize_file(path, std::uint64_t(16) << 30, ec);
  if (!ec)
    CHECK(contains(error_of([&] { peal::gguf_metadata_from_file(path.string()); }),
                   "gguf_max_tensor_count"));
  else
    WARN("cannot make a sparse 16 GiB file here: " << ec.message());
  fs::remove(path);
}

TEST_CASE("gguf: 2^20 tensor infos: unique names checked by one sort",
          "[gguf][limits][gguf_dup_names]") {
  // gguf_max_tensor_count minimal tensor infos (31 bytes each, 32 MB): a pairwise check of
  // their names is 5e11 comparisons (hours; 160k infos took 80 s), the sort about 2e7.
  const std::uint64_t n = peal::gguf_max_tensor_count;
  Bytes b = gguf_header(n, 0);
  std::vector<std::size_t> at;
  for (std::uint64_t k = 0; k < n; ++k) {
    char name[16];
    std::snprintf(name, sizeof name, "t%07llu", static_cast<unsigned long long>(k));
    at.push_back(b.size());
    put_str(b, name);
    put_u32(b, 0);  // n_dims 0: one element
    put_u32(b, 0);  // F32
    put_u64(b, 0);  // every tensor at data offset 0 (allowed: only the extent is checked)
  }
  b.resize(b.size() + 64, 0);
  {
    const peal::GgufMetadata md = peal::gguf_metadata_from_bytes(b.data(), b.size());
    CHECK(md.tensors.size() == n);
    CHECK(md.tensors.back().name == "t1048575");
  }
  // Tensors 1000 and n - 1 repeat tensors 12 and 77 (their names patched in place).
  const auto rename = [&](std::uint64_t k, const std::string& name) {
    std::copy(name.begin(), name.end(), b.begin() + std::ptrdiff_t(at[k] + 8));
  };
  rename(1000, "t0000012");
  rename(n - 1, "t0000077");
  const std::string e =
      error_of([&] { peal::gguf_metadata_from_bytes(b.data(), b.size(), "dup.gguf"); });
  CHECK(contains(e, "byte " + std::to_string(at[1000]) + ":"));
  CHECK(contains(e, "duplicate tensor name t0000012: tensor 1000 and tensor 12"));
}

TEST_CASE("gguf: a skipped array of any fixed-size element type costs one seek",
          "[gguf][limits][gguf_skip_arrays]") {
  // An array of 2^24 elements of each fixed-size type in front of a sparse tail of ones (valid
  // BOOLs): the reader takes the header and the key from the stream, not the elements.
  const std::uint64_t count = std::uint64_t(1) << 24;
  for (const std::uint32_t t : {kU8, kBool, kI16, kU32, kF32, kU64, kF64}) {
    GgufBuilder g;
    g.str("general.architecture", "bloom");
    Bytes& a = g.key("x.big", kArr);
    put_u32(a, t);
    put_u64(a, count);
    Bytes head = gguf_header(0, g.kv_count);  // no padding: the elements follow the count
    head.insert(head.end(), g.kvs.begin(), g.kvs.end());
    const std::uint64_t width = t == kU8 || t == kBool ? 1 : t == kI16 ? 2 : t <= kF32 ? 4 : 8;
    SparseRead r(head, head.size() + count * width, 1);
    const peal::GgufMetadata md = r.read();
    INFO("element type " << t);
    CHECK(!md.kv.at("x.big").loaded);
    CHECK(md.kv.at("x.big").count == count);
    CHECK(r.buf.served <= 8192);  // was 16 MiB for BOOL, read element by element
  }
  // A stored BOOL array (at most gguf_max_kept_array_entries) is checked element by element;
  // the values of a skipped one are not.
  for (const std::uint64_t n : {std::uint64_t(16), peal::gguf_max_kept_array_entries + 1}) {
    GgufBuilder g;
    Bytes& a = g.key("x.flags", kArr);
    put_u32(a, kBool);
    put_u64(a, n);
    for (std::uint64_t k = 0; k < n; ++k) put_u8(a, k + 1 == n ? 2 : 1);
    const Bytes b = g.bytes();
    if (n <= peal::gguf_max_kept_array_entries)
      CHECK(contains(error_of([&] { peal::gguf_metadata_from_bytes(b.data(), b.size()); }),
                     "a BOOL must be 0 or 1, got 2"));
    else
      CHECK(!peal::gguf_metadata_from_bytes(b.data(), b.size()).kv.at("x.flags").loaded);
  }
  // A skipped STRING array is walked length by length; the key after it is read.
  GgufBuilder s;
  s.str_array("x.vocab", std::vector<std::string>(peal::gguf_max_kept_array_entries + 1, "ab"));
  s.u32("x.after", 7);
  const Bytes sb = s.bytes();
  const peal::GgufMetadata md = peal::gguf_metadata_from_bytes(sb.data(), sb.size());
  CHECK(!md.kv.at("x.vocab").loaded);
  CHECK(md.kv.at("x.after").u == 7);
}

TEST_CASE("gguf: the totals of stored strings and keys and array elements are capped",
          "[gguf][limits][gguf_caps]") {
  SECTION("strings past gguf_max_kept_string_total are skipped like long ones") {
    // 20 strings of 1 MiB: 16 MiB stored at most (was all 20: 512 of them took 515 MB).
    const std::uint64_t big = peal::gguf_max_kept_string_bytes;
    const std::uint64_t n = peal::gguf_max_kept_string_total / big + 4;
    GgufBuilder g;
    g.str("general.architecture", "bloom");
    for (std::uint64_t k = 0; k < n; ++k) g.str("x.big" + std::to_string(k), std::string(big, 'a'));
    g.str("x.small", "fits");
    const Bytes b = g.bytes();
    const peal::GgufMetadata md = peal::gguf_metadata_from_bytes(b.data(), b.size());
    std::uint64_t stored = 0, loaded = 0;
    for (const auto& kv : md.kv) {
      if (kv.second.type != peal::GgufType::String) continue;
      stored += kv.second.str.size();
      if (kv.first.compare(0, 5, "x.big") == 0 && kv.second.loaded) ++loaded;
    }
    CHECK(stored <= peal::gguf_max_kept_string_total);
    CHECK(loaded == peal::gguf_max_kept_string_total / big - 1);  // "bloom" took 5 bytes
    const peal::GgufValue& last = md.kv.at("x.big" + std::to_string(n - 1));
    CHECK(!last.loaded);
    CHECK(last.count == big);
    CHECK(last.text() == "<string of 1048576 bytes, not loaded>");
    CHECK(md.kv.at("x.small").str == "fits");  // what still fits is stored
    CHECK(from(b).architecture == "bloom");
  }
  SECTION("keys past gguf_max_key_total are refused") {
    const std::uint64_t n = peal::gguf_max_key_total / peal::gguf_max_key_bytes + 1;
    GgufBuilder g;
    for (std::uint64_t k = 0; k < n; ++k) {
      std::string key(peal::gguf_max_key_bytes, 'k');
      key.replace(0, 8, std::to_string(10000000 + k));
      g.u32(key, 1);
    }
    const Bytes b = g.bytes();
    CHECK(contains(error_of([&] { peal::gguf_metadata_from_bytes(b.data(), b.size()); }),
                   "gguf_max_key_total"));
  }
  SECTION("array elements past gguf_max_kept_elements are skipped") {
    const std::uint64_t per = peal::gguf_max_kept_array_entries;
    const std::uint64_t n = peal::gguf_max_kept_elements / per + 1;
    GgufBuilder g;
    for (std::uint64_t k = 0; k < n; ++k) {
      Bytes& a = g.key("x.a" + std::to_string(100 + k), kArr);
      put_u32(a, kU8);
      put_u64(a, per);
      a.resize(a.size() + per, 3);
    }
    const Bytes b = g.bytes();
    const peal::GgufMetadata md = peal::gguf_metadata_from_bytes(b.data(), b.size());
    std::uint64_t kept = 0;
    for (const auto& kv : md.kv) kept += kv.second.elements.size();
    CHECK(kept == peal::gguf_max_kept_elements);
    CHECK(!md.kv.at("x.a" + std::to_string(100 + n - 1)).loaded);
  }
}

TEST_CASE("gguf: a path that is not a regular file is refused before it is opened",
          "[gguf][files][gguf_fifo]") {
  namespace fs = std::filesystem;
  const std::string dir = fs::temp_directory_path().string();
  CHECK(contains(error_of([&] { peal::gguf_metadata_from_file(dir); }), "not a regular file"));
  if (fs::exists("/dev/null"))
    CHECK(contains(error_of([&] { peal::rope_config_from_gguf("/dev/null"); }),
                   "not a regular file"));
  // A symbolic link to a regular file is read.
  const fs::path target = fs::temp_directory_path() / "peal_test_link_target.gguf";
  const fs::path link = fs::temp_directory_path() / "peal_test_link.gguf";
  write_file(target.string(), llama31().bytes());
  std::error_code ec;
  fs::remove(link, ec);
  fs::create_symlink(target, link, ec);
  if (!ec) CHECK(peal::rope_config_from_gguf(link.string()).architecture == "llama");
  fs::remove(link, ec);
  fs::remove(target, ec);
#ifdef PEAL_TEST_HAVE_MKFIFO
  // A FIFO with no writer: opening it for reading would block forever.
  const fs::path fifo =
      fs::temp_directory_path() / ("peal_test_fifo_" + std::to_string(::getpid()) + ".gguf");
  fs::remove(fifo, ec);
  REQUIRE(::mkfifo(fifo.c_str(), 0600) == 0);
  std::promise<std::string> done;
  std::future<std::string> result = done.get_future();
  std::thread reader([&] {
    try {
      peal::gguf_metadata_from_file(fifo.string());
      done.set_value("no exception");
    } catch (const std::exception& e) {
      done.set_value(e.what());
    }
  });
  // Not a timing measurement: a guard, so that a reader blocked in open() fails the test
  // instead of hanging it (a writer is then opened to release it).
  const bool returned = result.wait_for(std::chrono::seconds(20)) == std::future_status::ready;
  if (!returned) {
    const int w = ::open(fifo.c_str(), O_WRONLY);
    if (w >= 0) ::close(w);
  }
  reader.join();
  fs::remove(fifo, ec);
  CHECK(returned);
  CHECK(contains(result.get(), "not a regular file"));
#else
  WARN("no mkfifo on this platform: the FIFO case is not run");
#endif
}

TEST_CASE("gguf: strings from the file are escaped in messages", "[gguf][errors][gguf_escape]") {
  // A NUL in general.architecture cut what() short; control bytes and bad UTF-8 were raw.
  GgufBuilder a;
  a.str("general.architecture", std::string("lla\0ma\x01\n", 8));
  const std::string ea = error_of([&] { from(a.bytes(), "nul.gguf"); });
  CHECK(contains(ea, "general.architecture is \"lla\\x00ma\\x01\\n\", an architecture"));
  CHECK(contains(ea, "(known: "));

  GgufBuilder k;
  k.u32(std::string("x\0y", 3), 1);
  k.u32(std::string("x\0y", 3), 2);
  CHECK(contains(error_of([&] { from(k.bytes()); }), "duplicate key x\\x00y"));

  GgufBuilder t = llama31();
  t.tensors[0].name = std::string("emb\0\x07", 5);
  t.tensors[1].name = t.tensors[0].name;
  CHECK(contains(error_of([&] { from(t.bytes()); }), "duplicate tensor name emb\\x00\\x07:"));
  GgufBuilder tt = llama31();
  tt.tensors[0].name = std::string("emb\0w", 5);
  tt.tensors[0].dims = {std::uint64_t(1) << 20};  // F16 data past the end of the file
  CHECK(contains(error_of([&] { from(tt.bytes()); }), "tensor emb\\x00w (1048576 elements"));

  // A long key is cut: the message stays short and says how long the key was.
  GgufBuilder l;
  put_u32(l.key(std::string(60000, 'q') + '\0', 13), 0);
  const std::string el = error_of([&] { from(l.bytes()); });
  CHECK(contains(el, "unknown GGUF value type 13"));
  CHECK(contains(el, "... (60001 bytes)"));
  CHECK(el.size() < 1000);

  // Values: bytes that are not UTF-8 are escaped, well-formed UTF-8 is kept.
  GgufBuilder v;
  v.str("general.architecture", "llama");
  v.str("general.name", "\xc4\xa0world \xe2\x82\xac");
  v.u32("llama.embedding_length", 4096);
  v.u32("llama.attention.head_count", 32);
  v.str("llama.rope.freq_base", "\xff\xc3(\xe2\x82");
  const std::string ev = error_of([&] { from(v.bytes()); });
  CHECK(
      contains(ev, "llama.rope.freq_base must be a number, got STRING \"\\xff\\xc3(\\xe2\\x82\""));
  GgufBuilder u;
  u.str("general.architecture", "bloom");
  u.str("general.name", "\xc4\xa0world \xe2\x82\xac \xc2\x85");  // U+0085 is a C1 control
  CHECK(from(u.bytes()).metadata.at("general.name") == "\"\xc4\xa0world \xe2\x82\xac \\xc2\\x85\"");
}
