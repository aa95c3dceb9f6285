// parallel_each: fn(x) for every x in [0, n) on up to `threads` OpenMP threads, each x on one
// thread (dynamic schedule, one x at a time), so that what fn writes per x does not depend on
// the thread count. An exception must not leave an OpenMP region: the first one fn throws is
// kept and rethrown after the region (the other items still run). Without OpenMP, or with one
// thread or item, a plain loop (an exception leaves at once). The tile driver's own loop
// (tile_run.hpp) also builds a workspace per thread and stops the others on a failure: it
// keeps its own.
#pragma once

#include <cstddef>
#include <exception>

#ifdef _OPENMP
#include <omp.h>
#endif

namespace peal {
namespace detail {

template <class Fn>
void parallel_each(std::ptrdiff_t n, int threads, Fn&& fn) {
#ifdef _OPENMP
  if (threads > 1 && n > 1) {
    std::exception_ptr err;
#pragma omp parallel for schedule(dynamic, 1) num_threads(threads)
    for (std::ptrdiff_t x = 0; x < n; ++x) {
      try {
        fn(x);
      } catch (...) {
#pragma omp critical(peal_parallel_each_error)
        {
          if (!err) err = std::current_exception();
        }
      }
    }
    if (err) std::rethrow_exception(err);
    return;
  }
#else
  (void)threads;
#endif
  for (std::ptrdiff_t x = 0; x < n; ++x) fn(x);
}

}  // namespace detail
}  // namespace peal
