// A minimal little-endian GGUF writer for the tests (tests/test_gguf_config.cpp) and the seed
// corpus generator (tests/fuzz/gen_gguf_corpus.cpp): written from ggml/docs/gguf.md, byte by
// byte, independently of include/peal/models/gguf_config.hpp. Values are appended raw, so a test can
// also write malformed files (wrong types, absurd counts) through the low-level calls.
// SparseBuf serves a file of any size (written bytes, then a fill byte) without the file, and
// counts what the reader takes from it.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <streambuf>
#include <string>
#include <utility>
#include <vector>

namespace peal_test {

using Bytes = std::vector<unsigned char>;

// GGUF value type codes (ggml/docs/gguf.md).
enum : std::uint32_t {
  kU8 = 0,
  kI8 = 1,
  kU16 = 2,
  kI16 = 3,
  kU32 = 4,
  kI32 = 5,
  kF32 = 6,
  kBool = 7,
  kStr = 8,
  kArr = 9,
  kU64 = 10,
  kI64 = 11,
  kF64 = 12
};

inline void put_u8(Bytes& b, std::uint8_t x) { b.push_back(x); }
inline void put_u16(Bytes& b, std::uint16_t x) {
  for (int k = 0; k < 2; ++k) b.push_back(static_cast<unsigned char>(x >> (8 * k)));
}
inline void put_u32(Bytes& b, std::uint32_t x) {
  for (int k = 0; k < 4; ++k) b.push_back(static_cast<unsigned char>(x >> (8 * k)));
}
inline void put_u64(Bytes& b, std::uint64_t x) {
  for (int k = 0; k < 8; ++k) b.push_back(static_cast<unsigned char>(x >> (8 * k)));
}
inline void put_f32(Bytes& b, float x) {
  std::uint32_t u;
  std::memcpy(&u, &x, 4);
  put_u32(b, u);
}
inline void put_f64(Bytes& b, double x) {
  std::uint64_t u;
  std::memcpy(&u, &x, 8);
  put_u64(b, u);
}
/// The 24-byte header of a GGUF v3 file (magic, version, tensor and key counts).
inline Bytes gguf_header(std::uint64_t tensor_count, std::uint64_t kv_count) {
  Bytes b = {'G', 'G', 'U', 'F'};
  put_u32(b, 3);
  put_u64(b, tensor_count);
  put_u64(b, kv_count);
  return b;
}
inline void put_str(Bytes& b, const std::string& s) {
  put_u64(b, s.size());
  b.insert(b.end(), s.begin(), s.end());
}

struct GgufTensor {
  std::string name;
  std::vector<std::uint64_t> dims;
  std::uint32_t type = 0;  // ggml type, 0 = F32
  Bytes data;
};

// Builds a file: header, the kvs in order, tensor infos (offsets computed, each tensor's data
// aligned), padding, data. No padding after the last tensor.
struct GgufBuilder {
  std::uint32_t version = 3;
  std::uint32_t alignment = 32;  // only for the layout; write general.alignment yourself
  std::uint64_t kv_count = 0;
  Bytes kvs;
  std::vector<GgufTensor> tensors;

  // Raw kv: key, type code, then the caller appends the value bytes to `kvs`.
  Bytes& key(const std::string& k, std::uint32_t type) {
    ++kv_count;
    put_str(kvs, k);
    put_u32(kvs, type);
    return kvs;
  }
  void str(const std::string& k, const std::string& v) { put_str(key(k, kStr), v); }
  void u32(const std::string& k, std::uint32_t v) { put_u32(key(k, kU32), v); }
  void u64(const std::string& k, std::uint64_t v) { put_u64(key(k, kU64), v); }
  void i32(const std::string& k, std::int32_t v) {
    put_u32(key(k, kI32), static_cast<std::uint32_t>(v));
  }
  void f32(const std::string& k, float v) { put_f32(key(k, kF32), v); }
  void f64(const std::string& k, double v) { put_f64(key(k, kF64), v); }
  void boolean(const std::string& k, bool v) { put_u8(key(k, kBool), v ? 1 : 0); }
  void i32_array(const std::string& k, const std::vector<std::int32_t>& v) {
    Bytes& b = key(k, kArr);
    put_u32(b, kI32);
    put_u64(b, v.size());
    for (std::int32_t x : v) put_u32(b, static_cast<std::uint32_t>(x));
  }
  void str_array(const std::string& k, const std::vector<std::string>& v) {
    Bytes& b = key(k, kArr);
    put_u32(b, kStr);
    put_u64(b, v.size());
    for (const std::string& s : v) put_str(b, s);
  }
  void f32_tensor(const std::string& name, const std::vector<float>& v) {
    GgufTensor t;
    t.name = name;
    t.dims = {v.size()};
    for (float x : v) put_f32(t.data, x);
    tensors.push_back(t);
  }

  std::uint64_t pad(std::uint64_t n) const { return (alignment - n % alignment) % alignment; }

  Bytes bytes() const {
    Bytes b = {'G', 'G', 'U', 'F'};
    put_u32(b, version);
    put_u64(b, tensors.size());
    put_u64(b, kv_count);
    b.insert(b.end(), kvs.begin(), kvs.end());
    std::uint64_t off = 0;
    for (const GgufTensor& t : tensors) {
      put_str(b, t.name);
      put_u32(b, static_cast<std::uint32_t>(t.dims.size()));
      for (std::uint64_t d : t.dims) put_u64(b, d);
      put_u32(b, t.type);
      put_u64(b, off);
      off += t.data.size();
      off += pad(off);
    }
    b.resize(b.size() + pad(b.size()), 0);
    for (std::size_t k = 0; k < tensors.size(); ++k) {
      b.insert(b.end(), tensors[k].data.begin(), tensors[k].data.end());
      if (k + 1 < tensors.size()) b.resize(b.size() + pad(b.size()), 0);  // data start aligned
    }
    return b;
  }
};

inline void write_file(const std::string& path, const Bytes& b) {
  std::ofstream out(path, std::ios::binary);
  out.write(reinterpret_cast<const char*>(b.data()), static_cast<std::streamsize>(b.size()));
}

// A seekable read-only stream of `size` bytes: `head`, then `fill` up to the end (a sparse file
// of any size, e.g. 16 GiB, with no file). `served` counts the bytes handed to the reader: a
// bound on its work that does not depend on the machine's speed.
class SparseBuf : public std::streambuf {
 public:
  SparseBuf(Bytes head, std::uint64_t size, unsigned char fill = 0)
      : head_(std::move(head)), size_(size), fill_(fill) {}
  std::uint64_t served = 0;

 protected:
  int_type underflow() override {
    if (pos_ >= size_) return traits_type::eof();
    const std::uint64_t n = std::min<std::uint64_t>(sizeof(buf_), size_ - pos_);
    for (std::uint64_t k = 0; k < n; ++k)
      buf_[k] = static_cast<char>(pos_ + k < head_.size() ? head_[pos_ + k] : fill_);
    setg(buf_, buf_, buf_ + n);
    pos_ += n;
    served += n;
    return traits_type::to_int_type(buf_[0]);
  }
  pos_type seekoff(off_type off, std::ios_base::seekdir dir, std::ios_base::openmode) override {
    const off_type here = off_type(pos_) - off_type(egptr() - gptr());
    const off_type to = dir == std::ios_base::beg   ? off
                        : dir == std::ios_base::cur ? here + off
                                                    : off_type(size_) + off;
    if (to < 0 || std::uint64_t(to) > size_) return pos_type(off_type(-1));
    pos_ = std::uint64_t(to);
    setg(buf_, buf_, buf_);  // the buffer no longer matches pos_
    return pos_type(to);
  }
  pos_type seekpos(pos_type p, std::ios_base::openmode m) override {
    return seekoff(off_type(p), std::ios_base::beg, m);
  }

 private:
  Bytes head_;
  std::uint64_t size_;
  unsigned char fill_;
  std::uint64_t pos_ = 0;  // the stream position of egptr()
  char buf_[4096];
};

}  // namespace peal_test
