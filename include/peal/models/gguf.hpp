// The GGUF model file format: a bounded, incremental reader of its metadata (the GGUF
// specification, ggml/docs/gguf.md; as llama.cpp's gguf.cpp reads it). Standard library only
// (no Eigen); not part of <peal/peal.hpp>, include it (or <peal/models/gguf_config.hpp>, which maps
// the metadata to a RopeConfig) explicitly.
//
// File layout (little-endian; version 2 or 3, version 1 with its 32-bit counts is refused):
//   "GGUF" u32 version, u64 tensor_count, u64 metadata_kv_count,
//   kv:     string key, u32 value type, value     (string = u64 length + bytes;
//           types UINT8 0 INT8 1 UINT16 2 INT16 3 UINT32 4 INT32 5 FLOAT32 6 BOOL 7 STRING 8
//           ARRAY 9 (u32 element type, u64 count, elements; nested arrays allowed) UINT64 10
//           INT64 11 FLOAT64 12),
//   tensor: string name, u32 n_dims (<= 4), u64 dims[n_dims], u32 ggml type, u64 offset
//           (relative to the data section, a multiple of general.alignment, default 32),
//   padding to general.alignment, tensor data.
// Only the metadata is read, incrementally (a multi-GB model is never loaded), and of the
// tensor data only the small F32 1-D tensors rope_freqs, rope_factors_long and
// rope_factors_short (names with or without the ".weight" suffix llama.cpp's converter adds).
// Every count and length is checked against the bytes left before anything is allocated
// or read, and bounded by the limits below, so that time and memory stay bounded whatever
// the file says: long strings and large arrays of any element type (e.g. tokenizer
// vocabularies) are skipped with only their size kept, by one seek unless their elements
// carry their own lengths (STRING, ARRAY: then one length read per element); past the total
// caps on stored strings and array elements, values are skipped the same way; more keys,
// key bytes or tensor infos than the caps allow are refused. A damaged file throws
// peal::invalid_argument naming the file and the byte offset; strings from the file appear
// in messages escaped (\", \\, \n, \xNN for control bytes and bytes that are not well-formed
// UTF-8) and cut after 256 bytes. gguf_metadata_from_file refuses a path that is not a
// regular file (a FIFO, a device, a directory) before opening it.
//
// Not checked: the data extent of quantized tensors (their block sizes are not tabulated
// here; their offsets are checked to start inside the file), the UTF-8 validity of strings,
// the values (0 or 1) of a BOOL array that is skipped (those of stored arrays are checked).
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <istream>
#include <limits>
#include <map>
#include <sstream>
#include <string>
#include <system_error>
#include <utility>
#include <vector>

#include "../errors.hpp"

namespace peal {

// ---- Limits of the reader (all well above what real GGUF files contain) -----------------

/// Largest array nesting depth (an array of arrays is depth 2).
inline constexpr int gguf_max_array_depth = 4;
/// Arrays with more elements are skipped, not stored (only their type and count are kept):
/// e.g. tokenizer vocabularies.
inline constexpr std::uint64_t gguf_max_kept_array_entries = 4096;
/// Total number of array elements stored per file (bounds memory at a few tens of MB).
inline constexpr std::uint64_t gguf_max_kept_elements = std::uint64_t(1) << 18;
/// Strings longer than this are skipped, not stored (GgufValue::loaded is false).
inline constexpr std::uint64_t gguf_max_kept_string_bytes = std::uint64_t(1) << 20;
/// Total bytes of string values stored per file (values, and elements of stored arrays):
/// strings past it are skipped like long ones (512 strings of 1 MiB keep 16 MiB, not 512).
inline constexpr std::uint64_t gguf_max_kept_string_total = std::uint64_t(1) << 24;
/// Most metadata key-value pairs per file (real files have a few dozen); more are refused.
inline constexpr std::uint64_t gguf_max_kv_count = std::uint64_t(1) << 16;
/// Total bytes of the metadata keys per file; more are refused.
inline constexpr std::uint64_t gguf_max_key_total = std::uint64_t(1) << 24;
/// Most tensor infos per file (real models have a few thousand); more are refused. Together
/// with the caps above this bounds what a file can make the reader hold at a few hundred MB.
inline constexpr std::uint64_t gguf_max_tensor_count = std::uint64_t(1) << 20;
/// Longest metadata key (ggml/docs/gguf.md: at most 65535 bytes).
inline constexpr std::uint64_t gguf_max_key_bytes = 65535;
/// Longest tensor name (ggml/docs/gguf.md: at most 64 bytes).
inline constexpr std::uint64_t gguf_max_tensor_name_bytes = 64;
/// Most dimensions of a tensor (ggml's GGML_MAX_DIMS).
inline constexpr std::uint32_t gguf_max_dims = 4;
/// Largest general.alignment accepted (a power of two).
inline constexpr std::uint32_t gguf_max_alignment = std::uint32_t(1) << 20;
/// Most entries of a RoPE tensor (rope_freqs, rope_factors_*): preset_max_head_dim / 2 of
/// rope.hpp, written out so that the reader needs no Eigen (gguf_config.hpp checks it).
inline constexpr std::uint64_t gguf_max_rope_tensor_entries = 32768;

/// GGUF metadata value types (ggml/docs/gguf.md gguf_metadata_value_type).
enum class GgufType : std::uint32_t {
  UInt8 = 0,
  Int8 = 1,
  UInt16 = 2,
  Int16 = 3,
  UInt32 = 4,
  Int32 = 5,
  Float32 = 6,
  Bool = 7,
  String = 8,
  Array = 9,
  UInt64 = 10,
  Int64 = 11,
  Float64 = 12,
};

/// The ggml/docs/gguf.md spelling without the prefix: "UINT8", ..., "FLOAT64".
inline const char* to_string(GgufType t) {
  switch (t) {
    case GgufType::UInt8:
      return "UINT8";
    case GgufType::Int8:
      return "INT8";
    case GgufType::UInt16:
      return "UINT16";
    case GgufType::Int16:
      return "INT16";
    case GgufType::UInt32:
      return "UINT32";
    case GgufType::Int32:
      return "INT32";
    case GgufType::Float32:
      return "FLOAT32";
    case GgufType::Bool:
      return "BOOL";
    case GgufType::String:
      return "STRING";
    case GgufType::Array:
      return "ARRAY";
    case GgufType::UInt64:
      return "UINT64";
    case GgufType::Int64:
      return "INT64";
    case GgufType::Float64:
      return "FLOAT64";
  }
  return "?";
}

namespace detail {
namespace gguf {

// Most bytes of a string from the file quoted in a message or in GgufValue::text().
inline constexpr std::size_t max_shown_bytes = 256;

// Bytes of the well-formed UTF-8 sequence of a printable character at s[k] (2 .. 4), else 0
// (a stray or truncated byte, an overlong form, a surrogate, a C1 control U+0080 .. U+009F).
inline std::size_t utf8_length(const std::string& s, std::size_t k) {
  const unsigned char b0 = static_cast<unsigned char>(s[k]);
  std::size_t n = 0;
  unsigned char lo = 0x80, hi = 0xbf;  // the range of the second byte
  if (b0 >= 0xc2 && b0 <= 0xdf) {
    n = 2;
    if (b0 == 0xc2) lo = 0xa0;
  } else if (b0 >= 0xe0 && b0 <= 0xef) {
    n = 3;
    if (b0 == 0xe0) lo = 0xa0;
    if (b0 == 0xed) hi = 0x9f;
  } else if (b0 >= 0xf0 && b0 <= 0xf4) {
    n = 4;
    if (b0 == 0xf0) lo = 0x90;
    if (b0 == 0xf4) hi = 0x8f;
  } else {
    return 0;
  }
  if (s.size() - k < n) return 0;
  for (std::size_t j = 1; j < n; ++j) {
    const unsigned char b = static_cast<unsigned char>(s[k + j]);
    if (b < (j == 1 ? lo : 0x80) || b > (j == 1 ? hi : 0xbf)) return 0;
  }
  return n;
}

// Appends s escaped (\", \\, \n; \xNN for other control bytes and bytes that are not
// well-formed UTF-8: a NUL must not cut a message short), at most `max` bytes of it (never a
// character cut in two); returns the number of bytes of s shown.
inline std::size_t escape_to(std::string& out, const std::string& s, std::size_t max) {
  const char* hex = "0123456789abcdef";
  std::size_t k = 0;
  while (k < s.size()) {
    std::size_t run = k;  // plain printable ASCII: appended in one piece
    while (run < s.size() && run < max && s[run] >= 0x20 && s[run] < 0x7f && s[run] != '"' &&
           s[run] != '\\')
      ++run;
    out.append(s, k, run - k);
    k = run;
    if (k == s.size() || k == max) break;
    const unsigned char ch = static_cast<unsigned char>(s[k]);
    const std::size_t n = ch >= 0x80 ? utf8_length(s, k) : 1;
    if (k + (n ? n : 1) > max) break;
    if (ch == '"' || ch == '\\') {
      out += '\\';
      out += char(ch);
    } else if (ch == '\n') {
      out += "\\n";
    } else if (ch < 0x20 || ch == 0x7f || n == 0) {
      out += "\\x";
      out += hex[ch >> 4];
      out += hex[ch & 15];
    } else {
      out.append(s, k, n);
    }
    k += n ? n : 1;
  }
  return k;
}

// A string from the file as it may appear in a message: escaped, cut after max_shown_bytes
// with its length appended.
inline std::string printable(const std::string& s) {
  std::string out;
  if (escape_to(out, s, max_shown_bytes) < s.size())
    out += "... (" + std::to_string(s.size()) + " bytes)";
  return out;
}

}  // namespace gguf
}  // namespace detail

/// One metadata value. Scalars: unsigned integers and bools in `u`, signed integers in `i`,
/// floats in `f` (FLOAT32 widened exactly), strings in `str`. Arrays: `element_type`,
/// `count`, and the elements in `elements` when loaded (see the limits above).
struct GgufValue {
  GgufType type = GgufType::UInt8;
  std::uint64_t u = 0;
  std::int64_t i = 0;
  double f = 0;
  std::string str;
  GgufType element_type = GgufType::UInt8;
  std::uint64_t count = 0;  ///< array elements, or string bytes
  std::vector<GgufValue> elements;
  bool loaded = true;  ///< false: a long string or a large array, skipped (only its size kept)

  bool is_integer() const {
    switch (type) {
      case GgufType::UInt8:
      case GgufType::Int8:
      case GgufType::UInt16:
      case GgufType::Int16:
      case GgufType::UInt32:
      case GgufType::Int32:
      case GgufType::UInt64:
      case GgufType::Int64:
        return true;
      default:
        return false;
    }
  }
  bool is_signed() const {
    return type == GgufType::Int8 || type == GgufType::Int16 || type == GgufType::Int32 ||
           type == GgufType::Int64;
  }
  bool is_float() const { return type == GgufType::Float32 || type == GgufType::Float64; }

  /// A printable form: numbers as written (FLOAT32 with 9 digits, FLOAT64 with 17), strings
  /// quoted and escaped (at most 256 bytes shown), arrays as [a, b, ...] with at most 8
  /// elements shown and the count and type.
  std::string text() const {
    std::ostringstream os;
    switch (type) {
      case GgufType::Bool:
        os << (u ? "true" : "false");
        break;
      case GgufType::Float32:
        os.precision(9);
        os << f;
        break;
      case GgufType::Float64:
        os.precision(17);
        os << f;
        break;
      case GgufType::String: {
        if (!loaded) {
          os << "<string of " << count << " bytes, not loaded>";
          break;
        }
        std::string body;
        const std::size_t shown = detail::gguf::escape_to(body, str, detail::gguf::max_shown_bytes);
        os << '"' << body << '"';
        if (shown < str.size()) os << "... (" << str.size() << " bytes)";
        break;
      }
      case GgufType::Array: {
        if (!loaded) {
          os << "[" << count << " x " << to_string(element_type) << ", not loaded]";
          break;
        }
        os << '[';
        const std::size_t shown = elements.size() < 8 ? elements.size() : 8;
        for (std::size_t k = 0; k < shown; ++k) os << (k ? ", " : "") << elements[k].text();
        if (shown < elements.size()) os << ", ...";
        os << "] (" << count << " x " << to_string(element_type) << ")";
        break;
      }
      default:
        if (is_signed())
          os << i;
        else
          os << u;
        break;
    }
    return os.str();
  }
};

/// One tensor info record.
struct GgufTensorInfo {
  std::string name;
  std::vector<std::uint64_t> dims;  ///< ggml order: dims[0] is the contiguous one
  std::uint32_t type = 0;           ///< ggml_type (0 = F32)
  std::uint64_t offset = 0;         ///< relative to GgufMetadata::data_offset
};

/// What gguf_metadata_* reads: the header, every key (in a map: keys are unique), every
/// tensor info, and the data of the small RoPE tensors (rope_freqs, rope_factors_long,
/// rope_factors_short) under their names as written in the file.
struct GgufMetadata {
  std::string source;  ///< the file name (or the name given for a buffer), for messages
  std::uint32_t version = 0;
  std::uint64_t tensor_count = 0;
  std::map<std::string, GgufValue> kv;
  std::vector<GgufTensorInfo> tensors;
  std::uint32_t alignment = 32;
  std::uint64_t data_offset = 0;  ///< absolute offset of the tensor data section
  std::uint64_t file_size = 0;
  std::map<std::string, std::vector<float>> rope_tensors;

  const GgufValue* find(const std::string& key) const {
    const auto it = kv.find(key);
    return it == kv.end() ? nullptr : &it->second;
  }
};

namespace detail {
namespace gguf {

inline std::string hex(std::uint64_t x) {
  std::ostringstream os;
  os << "0x" << std::hex << x;
  return os.str();
}

// A bounded little-endian reader over a byte buffer or an std::istream of known size.
// Every read checks the bytes left first; errors name the source and the byte offset.
class Cursor {
 public:
  Cursor(const unsigned char* data, std::uint64_t size, std::string name)
      : data_(data), size_(size), name_(std::move(name)) {}
  Cursor(std::istream& in, std::uint64_t size, std::string name)
      : in_(&in), size_(size), name_(std::move(name)) {}

  std::uint64_t pos() const { return pos_; }
  std::uint64_t size() const { return size_; }
  std::uint64_t remaining() const { return size_ - pos_; }
  const std::string& name() const { return name_; }

  [[noreturn]] void fail_at(std::uint64_t at, const std::string& what) const {
    fail("gguf_config: \"" + name_ + "\", byte " + std::to_string(at) + ": " + what);
  }

  // need(n, what + suffix), the message built only when it fails.
  void need(std::uint64_t n, const std::string& what, const char* suffix) const {
    if (n > remaining()) need(n, what + suffix);
  }

  void need(std::uint64_t n, const std::string& what) const {
    if (n > remaining())
      fail_at(pos_, "truncated file: " + what + " needs " + std::to_string(n) + " bytes, " +
                        std::to_string(remaining()) + " left (file size " + std::to_string(size_) +
                        ")");
  }

  void bytes(void* out, std::size_t n, const std::string& what) {
    need(n, what);
    if (n == 0) return;
    if (data_) {
      std::memcpy(out, data_ + pos_, n);
    } else {
      sync();
      in_->read(static_cast<char*>(out), static_cast<std::streamsize>(n));
      if (static_cast<std::uint64_t>(in_->gcount()) != n)
        fail_at(pos_, "cannot read " + what + " (" + std::to_string(n) + " bytes)");
      stream_pos_ += n;
    }
    pos_ += n;
  }

  void skip(std::uint64_t n, const std::string& what) {
    need(n, what);
    if (in_ && n <= sizeof(scratch_)) {  // small skips: read (keeps the stream buffer)
      bytes(scratch_, static_cast<std::size_t>(n), what);
      return;
    }
    pos_ += n;
  }

  void seek(std::uint64_t at) {
    if (at > size_) fail_at(pos_, "seek to " + std::to_string(at) + " past the end");
    pos_ = at;
  }

  template <class U>
  U uint(const std::string& what) {
    unsigned char b[sizeof(U)];
    bytes(b, sizeof(U), what);
    U x = 0;
    for (std::size_t k = 0; k < sizeof(U); ++k) x = U(x | (U(b[k]) << (8 * k)));
    return x;
  }
  std::uint8_t u8(const std::string& w) { return uint<std::uint8_t>(w); }
  std::uint16_t u16(const std::string& w) { return uint<std::uint16_t>(w); }
  std::uint32_t u32(const std::string& w) { return uint<std::uint32_t>(w); }
  std::uint64_t u64(const std::string& w) { return uint<std::uint64_t>(w); }
  float f32(const std::string& w) {
    const std::uint32_t b = u32(w);
    float x;
    std::memcpy(&x, &b, sizeof x);
    return x;
  }
  double f64(const std::string& w) {
    const std::uint64_t b = u64(w);
    double x;
    std::memcpy(&x, &b, sizeof x);
    return x;
  }

 private:
  void sync() {
    if (stream_pos_ != pos_) {
      in_->clear();
      in_->seekg(static_cast<std::streamoff>(pos_), std::ios::beg);
      if (!*in_) fail_at(pos_, "cannot seek");
      stream_pos_ = pos_;
    }
  }

  const unsigned char* data_ = nullptr;
  std::istream* in_ = nullptr;
  std::uint64_t size_ = 0;
  std::uint64_t pos_ = 0;
  std::uint64_t stream_pos_ = 0;
  std::string name_;
  unsigned char scratch_[4096];
};

// Smallest encoded size of a value of type t (for bounding counts by the bytes left).
inline std::uint64_t min_size(GgufType t) {
  switch (t) {
    case GgufType::UInt8:
    case GgufType::Int8:
    case GgufType::Bool:
      return 1;
    case GgufType::UInt16:
    case GgufType::Int16:
      return 2;
    case GgufType::UInt32:
    case GgufType::Int32:
    case GgufType::Float32:
      return 4;
    case GgufType::UInt64:
    case GgufType::Int64:
    case GgufType::Float64:
      return 8;
    case GgufType::String:
      return 8;
    case GgufType::Array:
      return 12;
  }
  return 1;
}

inline GgufType value_type(Cursor& c, const std::string& what) {
  const std::uint64_t at = c.pos();
  const std::uint32_t t = c.u32(what);
  if (t > 12)
    c.fail_at(at, what + ": unknown GGUF value type " + std::to_string(t) +
                      " (known: 0 .. 12, UINT8 .. FLOAT64)");
  return static_cast<GgufType>(t);
}

// A gguf string: u64 length (<= max_len and the bytes left), then the bytes.
inline std::string read_string(Cursor& c, std::uint64_t max_len, const std::string& what) {
  const std::uint64_t at = c.pos();
  const std::uint64_t n = c.u64(what + " length");
  if (n > max_len)
    c.fail_at(at,
              what + " has length " + std::to_string(n) + ", more than " + std::to_string(max_len));
  c.need(n, what);
  std::string s(static_cast<std::size_t>(n), '\0');
  c.bytes(&s[0], static_cast<std::size_t>(n), what);
  return s;
}

struct Parser {
  Cursor& c;
  std::uint64_t kept_elements = 0;      // bounded by gguf_max_kept_elements
  std::uint64_t kept_string_bytes = 0;  // bounded by gguf_max_kept_string_total

  GgufValue value(GgufType t, int depth, bool keep, const std::string& what) {
    GgufValue v;
    v.type = t;
    v.loaded = keep;
    switch (t) {
      case GgufType::UInt8:
        v.u = c.u8(what);
        break;
      case GgufType::Int8:
        v.i = static_cast<std::int8_t>(c.u8(what));
        break;
      case GgufType::UInt16:
        v.u = c.u16(what);
        break;
      case GgufType::Int16:
        v.i = static_cast<std::int16_t>(c.u16(what));
        break;
      case GgufType::UInt32:
        v.u = c.u32(what);
        break;
      case GgufType::Int32:
        v.i = static_cast<std::int32_t>(c.u32(what));
        break;
      case GgufType::UInt64:
        v.u = c.u64(what);
        break;
      case GgufType::Int64:
        v.i = static_cast<std::int64_t>(c.u64(what));
        break;
      case GgufType::Float32:
        v.f = c.f32(what);
        break;
      case GgufType::Float64:
        v.f = c.f64(what);
        break;
      case GgufType::Bool: {
        const std::uint64_t at = c.pos();
        v.u = c.u8(what);
        if (v.u > 1) c.fail_at(at, what + ": a BOOL must be 0 or 1, got " + std::to_string(v.u));
        break;
      }
      case GgufType::String: {
        v.count = c.u64(what);  // the length
        c.need(v.count, what);
        if (keep && v.count <= gguf_max_kept_string_bytes &&
            v.count <= gguf_max_kept_string_total - kept_string_bytes) {
          kept_string_bytes += v.count;
          v.str.assign(static_cast<std::size_t>(v.count), '\0');
          if (v.count) c.bytes(&v.str[0], static_cast<std::size_t>(v.count), what);
        } else {
          v.loaded = false;
          c.skip(v.count, what);
        }
        break;
      }
      case GgufType::Array: {
        const std::uint64_t at = c.pos();
        if (depth >= gguf_max_array_depth)
          c.fail_at(at, what + ": arrays nested deeper than " +
                            std::to_string(gguf_max_array_depth) + " (gguf_max_array_depth)");
        v.element_type = value_type(c, what + " element type");
        const std::uint64_t count_at = c.pos();
        v.count = c.u64(what + " element count");
        const std::uint64_t m = min_size(v.element_type);
        if (v.count > c.remaining() / m)
          c.fail_at(count_at, what + ": an array of " + std::to_string(v.count) + " " +
                                  to_string(v.element_type) + " needs at least " +
                                  std::to_string(m) + " bytes each, " +
                                  std::to_string(c.remaining()) + " bytes left");
        const bool keep_elems = keep && v.count <= gguf_max_kept_array_entries &&
                                kept_elements + v.count <= gguf_max_kept_elements;
        v.loaded = keep_elems;
        if (keep_elems) {
          kept_elements += v.count;
          v.elements.reserve(static_cast<std::size_t>(v.count));
        }
        // A skipped array of fixed-size elements (BOOL included: its values are not
        // checked): one seek, whatever its size.
        if (!keep_elems && v.element_type != GgufType::String &&
            v.element_type != GgufType::Array) {
          c.skip(v.count * m, what + " elements");
          break;
        }
        const std::string elem = "an element of " + what;  // built once, not per element
        if (!keep_elems && v.element_type == GgufType::String) {
          for (std::uint64_t k = 0; k < v.count; ++k) c.skip(c.u64(elem), elem);  // each length
          break;
        }
        for (std::uint64_t k = 0; k < v.count; ++k) {
          GgufValue e = value(v.element_type, depth + 1, keep_elems, elem);
          if (keep_elems) v.elements.push_back(std::move(e));
        }
        break;
      }
    }
    return v;
  }
};

inline bool is_rope_tensor(const std::string& n) {
  return n == "rope_freqs" || n == "rope_freqs.weight" || n == "rope_factors_long" ||
         n == "rope_factors_long.weight" || n == "rope_factors_short" ||
         n == "rope_factors_short.weight";
}

// Bytes per element of the unquantized ggml types (0: a quantized or unknown type).
inline std::uint64_t plain_type_size(std::uint32_t t) {
  switch (t) {
    case 0:
      return 4;  // F32
    case 1:
      return 2;  // F16
    case 24:
      return 1;  // I8
    case 25:
      return 2;  // I16
    case 26:
      return 4;  // I32
    case 27:
      return 8;  // I64
    case 28:
      return 8;  // F64
    case 30:
      return 2;  // BF16
    default:
      return 0;
  }
}

// The header: magic, version (2 or 3), tensor_count, metadata_kv_count (returned), both
// counts bounded by the bytes left.
inline std::uint64_t read_header(Cursor& c, GgufMetadata& md) {
  unsigned char magic[4] = {0, 0, 0, 0};
  if (c.size() < 4) c.need(4, "the magic \"GGUF\"");
  c.bytes(magic, 4, "the magic");
  if (!(magic[0] == 'G' && magic[1] == 'G' && magic[2] == 'U' && magic[3] == 'F'))
    c.fail_at(0, "not a GGUF file: the magic is " +
                     hex(std::uint32_t(magic[0]) | std::uint32_t(magic[1]) << 8 |
                         std::uint32_t(magic[2]) << 16 | std::uint32_t(magic[3]) << 24) +
                     ", expected \"GGUF\" (0x46554747)");
  md.version = c.u32("the version");
  if (md.version == 1)
    c.fail_at(4,
              "GGUF version 1 (32-bit counts) is not supported: re-convert the model "
              "(versions 2 and 3 are read)");
  if (md.version != 2 && md.version != 3) {
    std::string why =
        "unsupported GGUF version " + std::to_string(md.version) + " (versions 2 and 3 are read)";
    if ((md.version & 0xffffu) == 0 && (md.version >> 24) <= 3)
      why += "; this looks like a big-endian file, which is not supported";
    c.fail_at(4, why);
  }
  md.tensor_count = c.u64("the tensor count");
  const std::uint64_t kv_count = c.u64("the metadata key-value count");
  // The caps first: a sparse file has room for any count, memory does not.
  if (kv_count > gguf_max_kv_count)
    c.fail_at(16, "metadata_kv_count " + std::to_string(kv_count) + " is more than " +
                      std::to_string(gguf_max_kv_count) + " (gguf_max_kv_count)");
  if (md.tensor_count > gguf_max_tensor_count)
    c.fail_at(8, "tensor_count " + std::to_string(md.tensor_count) + " is more than " +
                     std::to_string(gguf_max_tensor_count) + " (gguf_max_tensor_count)");
  // Smallest kv: key length (8) + value type (4) + 1 byte; smallest tensor info: name length
  // (8) + n_dims (4) + type (4) + offset (8).
  if (kv_count > c.remaining() / 13)
    c.fail_at(16, "metadata_kv_count " + std::to_string(kv_count) + " cannot fit in the " +
                      std::to_string(c.remaining()) + " bytes left");
  if (md.tensor_count > c.remaining() / 24)
    c.fail_at(8, "tensor_count " + std::to_string(md.tensor_count) + " cannot fit in the " +
                     std::to_string(c.remaining()) + " bytes left");
  return kv_count;
}

// The key-value pairs (keys unique), then general.alignment (a UINT32 power of two).
inline void read_kvs(Cursor& c, GgufMetadata& md, std::uint64_t kv_count) {
  Parser p{c};
  std::uint64_t key_bytes = 0;
  for (std::uint64_t k = 0; k < kv_count; ++k) {
    const std::uint64_t at = c.pos();
    std::string key = read_string(c, gguf_max_key_bytes, "key " + std::to_string(k));
    key_bytes += key.size();
    if (key_bytes > gguf_max_key_total)
      c.fail_at(at, "the keys up to key " + std::to_string(k) + " have " +
                        std::to_string(key_bytes) + " bytes, more than " +
                        std::to_string(gguf_max_key_total) + " (gguf_max_key_total)");
    const std::string shown = printable(key);
    const GgufType t = value_type(c, "the value type of key " + shown);
    GgufValue v = p.value(t, 0, true, "the value of key " + shown);
    if (!md.kv.emplace(std::move(key), std::move(v)).second)
      c.fail_at(at, "duplicate key " + shown);
  }

  if (const GgufValue* a = md.find("general.alignment")) {
    if (a->type != GgufType::UInt32)
      c.fail_at(c.pos(), std::string("general.alignment must be a UINT32, got ") +
                             to_string(a->type) + " " + a->text());
    if (a->u == 0 || (a->u & (a->u - 1)) != 0 || a->u > gguf_max_alignment)
      c.fail_at(c.pos(), "general.alignment must be a power of two <= " +
                             std::to_string(gguf_max_alignment) + ", got " + a->text());
    md.alignment = static_cast<std::uint32_t>(a->u);
  }
}

// Tensor info k: name, dims (element count within int64), type, aligned offset.
inline GgufTensorInfo read_tensor_info(Cursor& c, const GgufMetadata& md, std::uint64_t k) {
  GgufTensorInfo ti;
  const std::string w = "tensor " + std::to_string(k);
  ti.name = read_string(c, gguf_max_tensor_name_bytes, w + " name");
  const std::string wn = w + " (" + printable(ti.name) + ")";
  const std::uint64_t nd_at = c.pos();
  // The fields' sizes are checked up front, so that the reads below need no message of
  // their own (up to 10^6 tensor infos: no string built per field).
  c.need(4, wn, " n_dims");
  const std::uint32_t nd = c.u32(wn);
  if (nd > gguf_max_dims)
    c.fail_at(nd_at, wn + " has n_dims " + std::to_string(nd) + ", more than " +
                         std::to_string(gguf_max_dims) + " (GGML_MAX_DIMS)");
  c.need(8 * std::uint64_t(nd) + 4 + 8, wn, " dims, type and offset");
  std::uint64_t elems = 1;
  for (std::uint32_t d = 0; d < nd; ++d) {
    const std::uint64_t at = c.pos();
    const std::uint64_t n = c.u64(wn);
    if (n > std::uint64_t(std::numeric_limits<std::int64_t>::max()) ||
        (n != 0 && elems > std::uint64_t(std::numeric_limits<std::int64_t>::max()) / n))
      c.fail_at(at, wn + ": the element count overflows int64 at dims[" + std::to_string(d) +
                        "] = " + std::to_string(n));
    elems *= n;
    ti.dims.push_back(n);
  }
  ti.type = c.u32(wn);
  const std::uint64_t off_at = c.pos();
  ti.offset = c.u64(wn);
  if (ti.offset % md.alignment != 0)
    c.fail_at(off_at, wn + " has offset " + std::to_string(ti.offset) +
                          ", not a multiple of general.alignment " + std::to_string(md.alignment));
  return ti;
}

// Tensor names are unique: one sort of the indices by name (O(n log n); a pairwise check is
// O(n^2), minutes for a few MB of tensor infos). The first repeat in file order is named,
// at the byte offset name_at[] of its tensor info.
inline void check_unique_names(const Cursor& c, const std::vector<GgufTensorInfo>& ts,
                               const std::vector<std::uint64_t>& name_at) {
  std::vector<std::uint32_t> idx(ts.size());  // ts.size() <= gguf_max_tensor_count
  for (std::size_t k = 0; k < idx.size(); ++k) idx[k] = static_cast<std::uint32_t>(k);
  std::sort(idx.begin(), idx.end(), [&](std::uint32_t a, std::uint32_t b) {
    const int cmp = ts[a].name.compare(ts[b].name);
    return cmp < 0 || (cmp == 0 && a < b);
  });
  std::uint32_t repeat = 0, first = 0;  // repeat 0: none (tensor 0 repeats nothing)
  std::size_t group = 0;                // start of the run of equal names in idx
  for (std::size_t k = 1; k < idx.size(); ++k) {
    if (ts[idx[k]].name != ts[idx[group]].name) {
      group = k;
    } else if (repeat == 0 || idx[k] < repeat) {
      repeat = idx[k];
      first = idx[group];
    }
  }
  if (repeat != 0)
    c.fail_at(name_at[repeat], "duplicate tensor name " + printable(ts[repeat].name) + ": tensor " +
                                   std::to_string(repeat) + " and tensor " + std::to_string(first));
}

// The tensor data section (md.data_offset set): every tensor starts inside it and, for the
// unquantized types, ends inside it; the RoPE tensors (F32, 1-D, 1 ..
// gguf_max_rope_tensor_entries entries) are loaded into md.rope_tensors.
inline void read_tensor_data(Cursor& c, GgufMetadata& md) {
  const std::uint64_t data_bytes = md.tensor_count > 0 ? c.size() - md.data_offset : 0;
  for (const GgufTensorInfo& ti : md.tensors) {
    const bool rope = is_rope_tensor(ti.name);  // then ti.name is one of six known names
    if (ti.offset > data_bytes)
      c.fail_at(md.data_offset, "tensor " + printable(ti.name) + " starts at data offset " +
                                    std::to_string(ti.offset) + ", past the end of the file (" +
                                    std::to_string(data_bytes) + " data bytes)");
    std::uint64_t elems = 1;
    for (std::uint64_t n : ti.dims) elems *= n;  // no overflow: checked in read_tensor_info
    const std::uint64_t es = plain_type_size(ti.type);
    if (es != 0 && elems > (data_bytes - ti.offset) / es)
      c.fail_at(md.data_offset + ti.offset,
                "truncated file: tensor " + printable(ti.name) + " (" + std::to_string(elems) +
                    " elements of " + std::to_string(es) + " bytes) extends past the end");
    if (!rope) continue;
    if (ti.type != 0)
      c.fail_at(md.data_offset + ti.offset, "tensor " + ti.name + " has ggml type " +
                                                std::to_string(ti.type) + ", F32 (0) expected");
    if (ti.dims.size() != 1)
      c.fail_at(md.data_offset + ti.offset, "tensor " + ti.name + " has " +
                                                std::to_string(ti.dims.size()) +
                                                " dimensions, 1 expected");
    if (elems == 0 || elems > gguf_max_rope_tensor_entries)
      c.fail_at(md.data_offset + ti.offset,
                "tensor " + ti.name + " has " + std::to_string(elems) + " entries, expected 1 .. " +
                    std::to_string(gguf_max_rope_tensor_entries) + " (preset_max_head_dim / 2)");
    c.seek(md.data_offset + ti.offset);
    std::vector<float> v(static_cast<std::size_t>(elems));
    const std::string what = "tensor " + ti.name + " data";  // built once, not per entry
    for (float& x : v) x = c.f32(what);
    md.rope_tensors.emplace(ti.name, std::move(v));
  }
}

// A whole GGUF image: header, key-value pairs, tensor infos, data section start, RoPE tensors.
inline GgufMetadata read(Cursor& c) {
  GgufMetadata md;
  md.source = c.name();
  md.file_size = c.size();
  const std::uint64_t kv_count = read_header(c, md);
  read_kvs(c, md, kv_count);
  // Reserved for what a real model has, not from the count: the vector grows with the
  // tensor infos actually read.
  const std::uint64_t guess = md.tensor_count < 4096 ? md.tensor_count : 4096;
  md.tensors.reserve(static_cast<std::size_t>(guess));
  std::vector<std::uint64_t> name_at;
  name_at.reserve(static_cast<std::size_t>(guess));
  for (std::uint64_t k = 0; k < md.tensor_count; ++k) {
    name_at.push_back(c.pos());
    md.tensors.push_back(read_tensor_info(c, md, k));
  }
  check_unique_names(c, md.tensors, name_at);
  // Tensor data start: the end of the tensor infos, aligned.
  const std::uint64_t end = c.pos();
  const std::uint64_t pad = (md.alignment - end % md.alignment) % md.alignment;
  md.data_offset = end + pad;
  if (md.tensor_count > 0 && md.data_offset > c.size())
    c.fail_at(end, "truncated file: the tensor data section starts at " +
                       std::to_string(md.data_offset) + ", past the end (file size " +
                       std::to_string(c.size()) + ")");
  read_tensor_data(c, md);
  return md;
}

}  // namespace gguf
}  // namespace detail

/// Reads the metadata of a GGUF image held in memory; `name` is used in messages.
inline GgufMetadata gguf_metadata_from_bytes(const void* data, std::size_t size,
                                             const std::string& name = "<memory>") {
  if (!data && size != 0) detail::fail("gguf_config: gguf_metadata_from_bytes: null data");
  detail::gguf::Cursor c(static_cast<const unsigned char*>(data), size, name);
  return detail::gguf::read(c);
}

/// Reads the metadata of a GGUF image from a seekable binary stream positioned anywhere
/// (offsets are from its beginning; its size is found by seeking to the end), incrementally:
/// the header region and the small RoPE tensors only. `name` is used in messages.
inline GgufMetadata gguf_metadata_from_stream(std::istream& in, const std::string& name) {
  in.clear();
  in.seekg(0, std::ios::end);
  const std::streamoff end = in.tellg();
  if (!in || end < 0) detail::fail("gguf_config: cannot determine the size of \"" + name + "\"");
  in.seekg(0, std::ios::beg);
  if (!in) detail::fail("gguf_config: cannot seek in \"" + name + "\"");
  detail::gguf::Cursor c(in, static_cast<std::uint64_t>(end), name);
  return detail::gguf::read(c);
}

/// Reads the metadata of a GGUF file (the header region only, incrementally, plus the small
/// RoPE tensors: a multi-GB model is never read whole). A path that is not a regular file
/// (after symbolic links) is refused before it is opened: opening a FIFO with no writer
/// would block forever, and a device or directory has no size to check the counts against.
inline GgufMetadata gguf_metadata_from_file(const std::string& path) {
  std::error_code ec;
  const std::filesystem::file_status st = std::filesystem::status(path, ec);
  if (st.type() == std::filesystem::file_type::not_found)
    detail::fail("gguf_config: cannot open \"" + path + "\": no such file");
  if (ec) detail::fail("gguf_config: cannot open \"" + path + "\": " + ec.message());
  if (!std::filesystem::is_regular_file(st))
    detail::fail("gguf_config: \"" + path + "\" is not a regular file (a FIFO, a device or a " +
                 "directory): refused before opening it");
  std::ifstream in(path, std::ios::binary);
  if (!in) detail::fail("gguf_config: cannot open \"" + path + "\"");
  return gguf_metadata_from_stream(in, path);
}

}  // namespace peal
