// Per-thread working memory of the fused kernels (detail/tiled/tile_run.hpp): an arena carved in
// two passes (sizes, then pointers) and the cache of the last call's coefficient tables.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "../../view.hpp"

namespace peal {
namespace detail {
namespace tiled {

// ---- Per-thread arena ----------------------------------------------------------------------
/// A pointer into the arena (what the workspace hands out instead of std::vector).
template <class T>
struct Buf {
  T* p = nullptr;
  T* data() const { return p; }
  T& operator[](std::size_t i) const { return p[i]; }
};

/// Uninitialised, 64-byte aligned scratch memory owned by the calling thread and kept between
/// calls (its size is bounded by the tile sizes: it never grows with the sequence length).
class Arena {
 public:
  void reset() { need_ = 0; }
  void begin(int pass) {
    pass_ = pass;
    off_ = 0;
    if (pass == 1 && need_ > cap_) {
      mem_.reset(new unsigned char[need_ + 64]);
      cap_ = need_;
    }
  }
  template <class T>
  Buf<T> take(Index n) {
    const std::size_t bytes =
        (std::size_t(std::max<Index>(n, 0)) * sizeof(T) + 63) & ~std::size_t(63);
    Buf<T> b;
    if (pass_ == 1) {
      auto base = reinterpret_cast<std::uintptr_t>(mem_.get());
      base = (base + 63) & ~std::uintptr_t(63);
      b.p = reinterpret_cast<T*>(base + off_);
    }
    off_ += bytes;
    if (pass_ == 0) need_ = off_;
    return b;
  }

 private:
  std::unique_ptr<unsigned char[]> mem_;
  std::size_t cap_ = 0, need_ = 0, off_ = 0;
  int pass_ = 0;
};

/// Working memory of a thread inside a call.
inline Arena& thread_arena() {
  thread_local Arena arena;
  return arena;
}

/// The shared coefficient tables of the last call on this thread, with what identifies them:
/// repeated calls with the same encoding and tile offsets (every layer, every decoding step)
/// reuse them instead of recomputing sin/cos. Bounded by the tile sizes.
template <class C>
struct TableCache {
  std::vector<double> key;
  std::vector<C> kcoef, qcoef;
};
template <class C>
TableCache<C>& table_cache() {
  thread_local TableCache<C> cache;
  return cache;
}

}  // namespace tiled
}  // namespace detail
}  // namespace peal
