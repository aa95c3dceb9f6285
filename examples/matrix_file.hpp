// matrix_file.hpp: a square real matrix from a file, for peal_inspect --generator / --transition
// (examples/inspect_config.cpp). Not part of the library: peal itself reads no matrix files.
//
// Two formats, told apart by the first bytes (not by the file name):
//   .npy (magic "\x93NUMPY", numpy's format: github.com/numpy/numpy, numpy/lib/format.py, NEP 1):
//     versions 1.0, 2.0, 3.0; dtype little-endian float64 '<f8' or float32 '<f4'; C or Fortran
//     order; 2-D and square. Everything else is refused by name: big-endian ('>f8'), other dtypes
//     (ints, complex, structured), object arrays ('|O': pickles), other shapes, a header longer
//     than 64 KiB, a d beyond `max_dim`, a file shorter or longer than the header says.
//   text: one row per line, entries separated by whitespace and/or one comma ("1 2 3", "1,2,3",
//     "1, 2, 3": np.savetxt with or without delimiter=','), '#' to the end of the line is a
//     comment, blank lines skipped. Errors name the line: ragged rows, a token that is not a
//     number (strtod in the C locale, the whole token), NaN or Inf, an empty entry (",,"), more
//     than `max_dim` rows or entries, and a non-square result.
// Memory is bounded by the limit, never by the file: the text is read a character at a time
// (tokens of at most 64 characters, rows of at most max_dim entries, at most max_dim rows), the
// .npy header is at most 64 KiB and its data is read only after the shape passed the limit.
// Errors are std::runtime_error with the message (the caller prefixes the file).
#pragma once

#include <Eigen/Core>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <stdexcept>
#include <string>
#include <vector>

namespace matrix_file {

struct MatrixFile {
  Eigen::MatrixXd values;  // d x d (float32 data converted exactly)
  bool single = false;     // float32 data ('<f4')
  std::string format;      // "text", "npy <f8 C order", "npy <f4 Fortran order", ...
};

[[noreturn]] inline void refuse(const std::string& what) { throw std::runtime_error(what); }

namespace detail {

// The .npy header dictionary: {'descr': '<f8', 'fortran_order': False, 'shape': (3, 3), }
// (numpy writes exactly these keys, as a Python literal). A small recursive-descent reader.
struct Header {
  std::string descr;
  bool fortran = false, has_descr = false, has_order = false, has_shape = false;
  std::vector<long long> shape;  // entries past 10^12 are clamped (refused later anyway)
};

inline Header parse_header(const std::string& h) {
  std::size_t i = 0;
  auto ws = [&] {
    while (i < h.size() && (h[i] == ' ' || h[i] == '\t' || h[i] == '\n' || h[i] == '\r')) ++i;
  };
  auto bad = [&](const std::string& what) -> void {
    refuse(".npy header: " + what + " at offset " + std::to_string(i) + " of \"" + h + "\"");
  };
  auto expect = [&](char c) {
    ws();
    if (i >= h.size() || h[i] != c) bad(std::string("expected '") + c + "'");
    ++i;
  };
  auto str = [&] {
    ws();
    if (i >= h.size() || (h[i] != '\'' && h[i] != '"')) bad("expected a quoted string");
    const char q = h[i++];
    const std::size_t end = h.find(q, i);
    if (end == std::string::npos) bad("unterminated string");
    std::string s = h.substr(i, end - i);
    i = end + 1;
    return s;
  };
  Header out;
  expect('{');
  for (;;) {
    ws();
    if (i < h.size() && h[i] == '}') break;
    const std::string key = str();
    expect(':');
    ws();
    if (key == "descr") {
      if (i < h.size() && h[i] == '[')
        refuse(
            "structured dtype (a list of fields) is not supported: save a plain float64 or "
            "float32 array");
      out.descr = str(), out.has_descr = true;
    } else if (key == "fortran_order") {
      if (h.compare(i, 4, "True") == 0)
        out.fortran = true, i += 4;
      else if (h.compare(i, 5, "False") == 0)
        i += 5;
      else
        bad("fortran_order is not True or False");
      out.has_order = true;
    } else if (key == "shape") {
      expect('(');
      for (;;) {
        ws();
        if (i < h.size() && h[i] == ')') break;
        if (i >= h.size() || !(h[i] >= '0' && h[i] <= '9')) bad("expected a dimension");
        long long v = 0;
        for (; i < h.size() && h[i] >= '0' && h[i] <= '9'; ++i)
          v = v > 1000000000000LL ? v : v * 10 + (h[i] - '0');
        if (i < h.size() && h[i] == 'L') ++i;  // Python 2's long suffix
        out.shape.push_back(v);
        ws();
        if (i < h.size() && h[i] == ',') ++i;
      }
      ++i;
      out.has_shape = true;
    } else {
      bad("unexpected key '" + key + "'");
    }
    ws();
    if (i < h.size() && h[i] == ',') ++i;
  }
  if (!out.has_descr || !out.has_order || !out.has_shape)
    refuse(".npy header: missing 'descr', 'fortran_order' or 'shape': \"" + h + "\"");
  return out;
}

inline std::string shape_text(const std::vector<long long>& s) {
  std::string t = "(";
  for (std::size_t k = 0; k < s.size(); ++k) t += (k ? ", " : "") + std::to_string(s[k]);
  return t + (s.size() == 1 ? ",)" : ")");
}

// Little-endian bytes to a value, whatever the host's byte order.
inline double load_le(const unsigned char* p, int itemsize) {
  std::uint64_t bits = 0;
  for (int b = itemsize - 1; b >= 0; --b) bits = bits << 8 | p[b];
  if (itemsize == 8) {
    double x;
    std::memcpy(&x, &bits, 8);
    return x;
  }
  const std::uint32_t b32 = std::uint32_t(bits);
  float x;
  std::memcpy(&x, &b32, 4);
  return x;
}

inline MatrixFile read_npy(std::istream& in, int max_dim) {
  unsigned char pre[4];  // after the 6-byte magic: version major, minor, header length
  in.read(reinterpret_cast<char*>(pre), 2);
  if (in.gcount() != 2) refuse("truncated .npy file (no version after the magic)");
  const int major = pre[0];
  if (major < 1 || major > 3)
    refuse(".npy version " + std::to_string(major) + "." + std::to_string(pre[1]) +
           " not supported (1.0, 2.0, 3.0)");
  const int lenbytes = major == 1 ? 2 : 4;
  unsigned char lb[4] = {0, 0, 0, 0};
  in.read(reinterpret_cast<char*>(lb), lenbytes);
  if (in.gcount() != lenbytes) refuse("truncated .npy file (no header length)");
  const std::uint64_t hlen = std::uint64_t(lb[0]) | std::uint64_t(lb[1]) << 8 |
                             std::uint64_t(lb[2]) << 16 | std::uint64_t(lb[3]) << 24;
  if (hlen > 65536)
    refuse(".npy header length " + std::to_string(hlen) +
           " is over the 64 KiB this reader accepts");
  std::string h(std::size_t(hlen), '\0');
  in.read(&h[0], std::streamsize(hlen));
  if (std::uint64_t(in.gcount()) != hlen)
    refuse("truncated .npy file: header of " + std::to_string(hlen) + " bytes, " +
           std::to_string(in.gcount()) + " present");
  const Header hd = parse_header(h);
  const std::string& t = hd.descr;
  int itemsize = 0;
  if (t == "<f8")
    itemsize = 8;
  else if (t == "<f4")
    itemsize = 4;
  else if (t.size() > 1 && t[1] == 'O')
    refuse("dtype '" + t +
           "' is an object array (pickled Python objects): not supported; save a "
           "float64 or float32 array");
  else if (!t.empty() && t[0] == '>')
    refuse("dtype '" + t + "' is big-endian: not supported; save X.astype('<f8') (or '<f4')");
  else
    refuse("dtype '" + t + "' not supported: a float64 ('<f8') or float32 ('<f4') array");
  const auto& s = hd.shape;
  if (s.size() != 2) refuse("shape " + shape_text(s) + " is not 2-D: a d x d matrix is expected");
  if (s[0] != s[1]) refuse("shape " + shape_text(s) + " is not square");
  if (s[0] == 0) refuse("shape " + shape_text(s) + " is empty (d = 0)");
  if (s[0] > max_dim)
    refuse("shape " + shape_text(s) + ": d = " + std::to_string(s[0]) + " is larger than " +
           std::to_string(max_dim) + " (canonical_form's limit: the dense reduction is O(d^3))");
  const int d = int(s[0]);
  const std::size_t bytes = std::size_t(d) * std::size_t(d) * std::size_t(itemsize);
  std::vector<unsigned char> data(bytes);
  in.read(reinterpret_cast<char*>(data.data()), std::streamsize(bytes));
  if (std::size_t(in.gcount()) != bytes)
    refuse("truncated .npy file: " + std::to_string(d) + " x " + std::to_string(d) + " " + t +
           " needs " + std::to_string(bytes) + " bytes of data, " + std::to_string(in.gcount()) +
           " present");
  if (in.peek() != std::char_traits<char>::eof())
    refuse(".npy file has bytes after the " + std::to_string(d) + " x " + std::to_string(d) +
           " data its header announces");
  MatrixFile m;
  m.values.resize(d, d);
  m.single = itemsize == 4;
  m.format = "npy " + t + (hd.fortran ? " Fortran order" : " C order");
  for (int r = 0; r < d; ++r)
    for (int c = 0; c < d; ++c) {
      const std::size_t k = hd.fortran ? std::size_t(c) * d + r : std::size_t(r) * d + c;
      const double x = load_le(data.data() + k * std::size_t(itemsize), itemsize);
      if (!std::isfinite(x))
        refuse("entry (row " + std::to_string(r) + ", column " + std::to_string(c) +
               ") is not finite (" + std::to_string(x) + ")");
      m.values(r, c) = x;
    }
  return m;
}

// The text matrix, a character at a time; `prefix` holds characters already read.
inline MatrixFile read_text(std::istream& in, const std::string& prefix, int max_dim) {
  std::vector<double> values;
  std::vector<int> first_line;  // the line of each row
  int line = 1, cols = -1, count = 0;
  std::string tok;
  bool comment = false, comma = false;  // comma: a ',' not yet followed by an entry
  auto at = [&] { return "line " + std::to_string(line) + ": "; };
  auto end_token = [&] {
    if (tok.empty()) return;
    char* end = nullptr;
    const double x = std::strtod(tok.c_str(), &end);
    if (end == tok.c_str() || *end != '\0') refuse(at() + "\"" + tok + "\" is not a number");
    if (!std::isfinite(x)) refuse(at() + "\"" + tok + "\" is not finite");
    if (count == 0 && int(first_line.size()) >= max_dim)
      refuse(at() + "more than " + std::to_string(max_dim) +
             " rows (canonical_form's limit: the dense reduction is O(d^3))");
    if (++count > max_dim)
      refuse(at() + "more than " + std::to_string(max_dim) +
             " entries (canonical_form's limit: the dense reduction is O(d^3))");
    values.push_back(x);
    tok.clear();
    comma = false;
  };
  auto end_line = [&] {
    end_token();
    if (comma) refuse(at() + "the line ends with ',' (an empty entry)");
    if (count > 0) {
      if (cols < 0) cols = count;
      if (count != cols)
        refuse(at() + std::to_string(count) + " entries, but line " +
               std::to_string(first_line.front()) + " has " + std::to_string(cols) +
               " (ragged rows)");
      first_line.push_back(line);
    }
    count = 0;
    comment = false;
    ++line;
  };
  auto take = [&](char c) {
    if (c == '\n') return end_line();
    if (comment) return;
    if (c == '#') {
      end_token();
      comment = true;
    } else if (c == ' ' || c == '\t' || c == '\r' || c == '\v' || c == '\f') {
      end_token();
    } else if (c == ',') {
      end_token();
      if (comma || count == 0) refuse(at() + "an empty entry before ','");
      comma = true;
    } else {
      if (tok.size() >= 64)
        refuse(at() + "an entry longer than 64 characters (\"" + tok.substr(0, 20) + "...\")");
      tok += c;
    }
  };
  for (char c : prefix) take(c);
  for (char c; in.get(c);) take(c);
  end_line();
  const int rows = int(first_line.size());
  if (rows == 0) refuse("no matrix: the file has no numbers");
  if (rows != cols)
    refuse(std::to_string(rows) + " rows of " + std::to_string(cols) +
           " entries: the matrix is not square");
  MatrixFile m;
  m.values =
      Eigen::Map<const Eigen::Matrix<double, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>>(
          values.data(), rows, cols);
  m.format = "text";
  return m;
}

}  // namespace detail

/// The matrix in `path` (.npy by its magic, else text), at most max_dim x max_dim.
inline MatrixFile read_matrix_file(const std::string& path, int max_dim = 1024) {
  std::ifstream in(path, std::ios::binary);
  if (!in) refuse("cannot open the file");
  char magic[6] = {0, 0, 0, 0, 0, 0};
  in.read(magic, 6);
  const std::streamsize got = in.gcount();
  if (got == 6 && std::memcmp(magic, "\x93NUMPY", 6) == 0) return detail::read_npy(in, max_dim);
  in.clear();  // a text file shorter than the magic: its characters are the prefix
  return detail::read_text(in, std::string(magic, std::size_t(got)), max_dim);
}

}  // namespace matrix_file
