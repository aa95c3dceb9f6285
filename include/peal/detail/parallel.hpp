// parallel_each: fn(x) for every x in [0, n) on up to `threads` OpenMP threads, each x on one
// thread (dynamic schedule, one x at a time), so that what fn writes per x does not depend on
// the thread count. An exception must not leave an OpenMP region: the first one fn throws is
// kept and rethrown after the region (the other items still run). Without OpenMP, or with one
// thread or item, a plain loop (an exception leaves at once) on the calling thread, with
// Eigen's products kept on it (SerialEigen). The tile driver's own loop (tile_run.hpp) also
// builds a workspace per thread and stops the others on a failure: it keeps its own.
//
// SerialEigen: Eigen's dynamic-size matrix products (operator*, through
// Eigen/src/Core/products/Parallelizer.h) split themselves over an OpenMP team whenever they
// run outside a parallel region with more than one thread and omp_get_max_threads() > 1, since
// Eigen's nbThreads() is that value unless a program sets it. A kernel's serial path (threads =
// 1, or one unit of work) would then start a team per product, which its thread count never
// asked for, and pay the team's start and stop on every tile-sized product: the attention
// backward on 8 x 256 tokens (4 heads, d = 128, one thread) took 2x its time after
// torch.set_num_threads(2) (bench/README.md, "PyTorch op"). Inside a parallel region Eigen
// stays on its thread by itself. For its lifetime a SerialEigen sets the calling thread's
// OpenMP thread count (nthreads-var, a per-thread setting: no other thread sees it) to 1, so
// that nbThreads() is 1, and restores it; a kernel resolves its own `threads = 0` before.
#pragma once

#include <cstddef>
#include <exception>

#ifdef _OPENMP
#include <omp.h>
#endif

namespace peal {
namespace detail {

class SerialEigen {
 public:
  SerialEigen() {
#ifdef _OPENMP
    const int n = omp_get_max_threads();
    if (n > 1 && !omp_in_parallel()) {
      saved_ = n;
      omp_set_num_threads(1);
    }
#endif
  }
  ~SerialEigen() {
#ifdef _OPENMP
    if (saved_ > 0) omp_set_num_threads(saved_);
#endif
  }
  SerialEigen(const SerialEigen&) = delete;
  SerialEigen& operator=(const SerialEigen&) = delete;

#ifdef _OPENMP
 private:
  int saved_ = 0;
#endif
};

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
  const SerialEigen serial;
  for (std::ptrdiff_t x = 0; x < n; ++x) fn(x);
}

}  // namespace detail
}  // namespace peal
