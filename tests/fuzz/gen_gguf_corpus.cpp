// Writes the seed corpus of fuzz_gguf_config.cpp: small GGUF files with the keys
// llama.cpp's convert_hf_to_gguf.py writes for the models named (sizes from their published
// configs; token lists shortened, no weights except the RoPE tensors and a tiny stand-in),
// and small versions of the hostile files of issue 19 (issue19-*.gguf).
//
//   c++ -std=c++17 -Itests tests/fuzz/gen_gguf_corpus.cpp -o /tmp/gen && /tmp/gen
//   tests/fuzz/corpus_gguf_config
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "../gguf_writer.hpp"

using namespace peal_test;

namespace {

void common(GgufBuilder& g, const std::string& arch, std::uint32_t ctx, std::uint32_t embd,
            std::uint32_t heads, std::uint32_t kv_heads, float base) {
  g.str("general.architecture", arch);
  g.str("general.name", arch + " seed");
  g.u32(arch + ".block_count", 2);
  g.u32(arch + ".context_length", ctx);
  g.u32(arch + ".embedding_length", embd);
  g.u32(arch + ".attention.head_count", heads);
  g.u32(arch + ".attention.head_count_kv", kv_heads);
  g.f32(arch + ".rope.freq_base", base);
  g.f32(arch + ".attention.layer_norm_rms_epsilon", 1e-5f);
  g.str("tokenizer.ggml.model", "gpt2");
  g.str_array("tokenizer.ggml.tokens", {"a", "b", "hello"});
  g.i32_array("tokenizer.ggml.token_type", {1, 1, 1});
}

void tiny_tensor(GgufBuilder& g) {
  GgufTensor t;
  t.name = "token_embd.weight";
  t.dims = {2, 3};
  t.type = 1;  // F16
  t.data.assign(12, 0);
  g.tensors.push_back(t);
}

std::vector<float> llama3_factors(int dim, double theta) {
  std::vector<float> out;
  const double pi = std::acos(-1.0), L0 = 8192, lo = 1, hi = 4, factor = 8;
  for (int i = 0; i < dim; i += 2) {
    const double wavelen = 2 * pi * std::pow(theta, double(i) / dim);
    double f = wavelen < L0 / hi ? 1 : wavelen > L0 / lo ? factor : 0;
    if (f == 0) {
      const double smooth = (L0 / wavelen - lo) / (hi - lo);
      f = 1 / ((1 - smooth) / factor + smooth);
    }
    out.push_back(float(f));
  }
  return out;
}

void save(const std::string& dir, const std::string& name, const Bytes& b) {
  write_file(dir + "/" + name, b);
  std::printf("%s/%s\n", dir.c_str(), name.c_str());
}
void save(const std::string& dir, const std::string& name, const GgufBuilder& g) {
  save(dir, name, g.bytes());
}


// Issue 19's hostile files, each under the fuzzer's -max_len (64 KiB): the originals need a
// sparse 16 GiB file or hundreds of MB, which tests/test_gguf_config.cpp builds instead.
void issue19(const std::string& dir) {
  // Counts a sparse file has room for: refused by gguf_max_tensor_count / gguf_max_kv_count.
  save(dir, "issue19-sparse-tensor-count.gguf", gguf_header((std::uint64_t(16) << 30) / 24, 0));
  save(dir, "issue19-kv-count-cap.gguf", gguf_header(0, (std::uint64_t(1) << 16) + 1));
  {  // 1000 tensor infos (the duplicate check was pairwise), the last repeating the 500th
    GgufBuilder g;
    g.str("general.architecture", "bloom");
    for (int k = 0; k < 1000; ++k) {
      GgufTensor t;
      t.name = "blk." + std::to_string(k == 999 ? 500 : k) + ".attn_q.weight";
      t.dims = {0};  // no data: the file stays under 64 KiB
      g.tensors.push_back(t);
    }
    save(dir, "issue19-duplicate-tensor-name.gguf", g);
  }
  {  // a BOOL array too large to keep (was read element by element) with a 2 in it
    GgufBuilder g;
    g.str("general.architecture", "bloom");
    Bytes& b = g.key("peal.flags", kArr);
    put_u32(b, kBool);
    put_u64(b, 5000);
    for (int k = 0; k < 5000; ++k) put_u8(b, k == 4321 ? 2 : 1);
    g.str_array("tokenizer.ggml.tokens", std::vector<std::string>(4097, "ab"));  // walked
    save(dir, "issue19-skipped-bool-and-string-arrays.gguf", g);
  }
  {  // file bytes in messages: a NUL and control bytes in the architecture, a key and a name
    GgufBuilder g;
    g.str("general.architecture", std::string("lla\0ma\x01\n\xff", 9));
    save(dir, "issue19-nul-in-architecture.gguf", g);
    GgufBuilder k;
    k.str("general.architecture", "llama");
    k.u32(std::string("llama.x\0y", 9), 1);
    k.u32(std::string("llama.x\0y", 9), 2);
    save(dir, "issue19-nul-in-duplicate-key.gguf", k);
    GgufBuilder l;
    put_u32(l.key(std::string(60000, 'q') + '\0', 13), 0);  // a long key, an unknown type
    save(dir, "issue19-long-key.gguf", l);
  }
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s output_dir\n", argv[0]);
    return 2;
  }
  const std::string dir = argv[1];
  {
    GgufBuilder g;
    common(g, "llama", 131072, 4096, 32, 8, 500000.0f);
    g.u32("llama.rope.dimension_count", 128);
    tiny_tensor(g);
    g.f32_tensor("rope_freqs.weight", llama3_factors(128, 500000.0));
    save(dir, "llama-3.1-8b.gguf", g);
  }
  {
    GgufBuilder g;
    common(g, "llama", 4096, 4096, 32, 32, 10000.0f);
    g.version = 2;
    g.u32("general.alignment", 8);
    g.alignment = 8;
    tiny_tensor(g);
    save(dir, "llama-2-7b-v2-align8.gguf", g);
  }
  {
    GgufBuilder g;
    common(g, "qwen2", 131072, 3584, 28, 4, 1000000.0f);
    g.str("qwen2.rope.scaling.type", "yarn");
    g.f32("qwen2.rope.scaling.factor", 4.0f);
    g.u32("qwen2.rope.scaling.original_context_length", 32768);
    save(dir, "qwen2-7b-yarn.gguf", g);
  }
  {
    GgufBuilder g;
    common(g, "qwen2vl", 32768, 3584, 28, 4, 1000000.0f);
    g.i32_array("qwen2vl.rope.dimension_sections", {16, 24, 24, 0});
    save(dir, "qwen2-vl-7b.gguf", g);
  }
  {
    GgufBuilder g;
    common(g, "qwen3vl", 262144, 4096, 32, 8, 5000000.0f);
    g.u32("qwen3vl.attention.key_length", 128);
    g.i32_array("qwen3vl.rope.dimension_sections", {24, 20, 20, 0});
    save(dir, "qwen3-vl-8b.gguf", g);
  }
  {
    GgufBuilder g;
    common(g, "phi3", 131072, 3072, 32, 32, 10000.0f);
    g.u32("phi3.rope.dimension_count", 96);
    g.u32("phi3.rope.scaling.original_context_length", 4096);
    g.f32("phi3.rope.scaling.attn_factor", 1.19024f);
    g.str("phi3.rope.scaling.type", "longrope");
    std::vector<float> lf(48), sf(48);
    for (int i = 0; i < 48; ++i) {
      lf[std::size_t(i)] = 1.0f + 0.75f * float(i);
      sf[std::size_t(i)] = 1.0f + 0.02f * float(i);
    }
    g.f32_tensor("rope_factors_long.weight", lf);
    g.f32_tensor("rope_factors_short.weight", sf);
    save(dir, "phi-3-mini-128k-longrope.gguf", g);
  }
  {
    GgufBuilder g;
    common(g, "gptneox", 2048, 6144, 64, 64, 10000.0f);
    g.u32("gptneox.rope.dimension_count", 24);  // rotary_pct 0.25 of head_dim 96
    g.f32("gptneox.rope.scale_linear", 2.0f);
    save(dir, "gpt-neox-20b-partial-linear.gguf", g);
  }
  {
    GgufBuilder g;
    common(g, "bloom", 2048, 4096, 32, 32, 10000.0f);
    g.f32("bloom.attention.max_alibi_bias", 8.0f);
    Bytes& b = g.key("peal.nested", kArr);  // an array of arrays, for the reader
    put_u32(b, kArr);
    put_u64(b, 2);
    for (int k = 0; k < 2; ++k) {
      put_u32(b, kF64);
      put_u64(b, 1);
      put_f64(b, 0.5 * k);
    }
    g.boolean("peal.flag", true);
    g.f64("peal.f64", 1.0 / 3.0);
    put_u64(g.key("peal.i64", kI64), std::uint64_t(-5));
    put_u16(g.key("peal.u16", kU16), 7);
    save(dir, "bloom-alibi-types.gguf", g);
  }
  issue19(dir);
  return 0;
}
