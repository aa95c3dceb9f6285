// Error policy of peal: bad input throws peal::invalid_argument (a std::invalid_argument)
// with a message naming the function and the offending value. Checks are always on: they
// cost O(1) per call or O(tokens) per kernel call, never per element.
#pragma once

#include <cmath>
#include <sstream>
#include <stdexcept>
#include <string>

namespace peal {

class invalid_argument : public std::invalid_argument {
 public:
  using std::invalid_argument::invalid_argument;
};

namespace detail {

[[noreturn]] inline void fail(const std::string& what) { throw invalid_argument("peal: " + what); }

inline void require(bool ok, const char* what) {
  if (!ok) fail(what);
}

template <class T>
void require_finite(T x, const char* where, const char* name) {
  if (!std::isfinite(static_cast<long double>(x))) {
    std::ostringstream os;
    os << where << ": " << name << " must be finite, got " << static_cast<long double>(x);
    fail(os.str());
  }
}

inline void require_size(long long got, long long expected, const char* where) {
  if (got != expected) {
    std::ostringstream os;
    os << where << ": vector has size " << got << ", the encoding acts on size " << expected;
    fail(os.str());
  }
}

}  // namespace detail
}  // namespace peal
