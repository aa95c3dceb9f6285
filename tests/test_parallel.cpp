// Tests of include/peal/detail/parallel.hpp: parallel_each visits every item once on any thread
// count and rethrows an item's exception; on its serial path (one thread, or one item) Eigen's
// products stay on the calling thread (SerialEigen: Eigen::nbThreads() is 1 there, so that
// Eigen/src/Core/products/Parallelizer.h starts no team), and the caller's OpenMP setting comes
// back after it, also when an item throws.
#include <Eigen/Core>
#include <catch2/catch.hpp>
#include <peal/detail/parallel.hpp>
#include <stdexcept>
#include <vector>

#ifdef _OPENMP
#include <omp.h>
#endif

using peal::detail::parallel_each;
using peal::detail::SerialEigen;

TEST_CASE("parallel_each: every item once on 1 to 3 threads; an item's exception rethrown",
          "[parallel]") {
  for (int threads : {1, 2, 3})
    for (std::ptrdiff_t n : {0, 1, 7}) {
      std::vector<int> seen(std::size_t(n), 0);
      parallel_each(n, threads, [&](std::ptrdiff_t x) { ++seen[std::size_t(x)]; });
      for (int s : seen) CHECK(s == 1);
      CHECK_THROWS_WITH(parallel_each(n + 2, threads,
                                      [](std::ptrdiff_t x) {
                                        if (x == 1) throw std::runtime_error("item 1");
                                      }),
                        "item 1");
    }
}

TEST_CASE("parallel_each: Eigen's products stay on the calling thread on the serial path",
          "[parallel]") {
#ifdef _OPENMP
  struct Restore {  // the process's setting back after the test case, whatever fails in it
    int n = omp_get_max_threads();
    ~Restore() { omp_set_num_threads(n); }
  } restore;
  omp_set_num_threads(3);  // what torch.set_num_threads(3) leaves, or OMP_NUM_THREADS=3
  REQUIRE(Eigen::nbThreads() == 3);
  // Serial: threads = 1, or a single item. Eigen would otherwise split a product over 3.
  for (const auto& [n, threads] : {std::pair<std::ptrdiff_t, int>{1, 1}, {5, 1}, {1, 3}}) {
    std::vector<int> eigen(std::size_t(n), 0);
    parallel_each(n, threads, [&](std::ptrdiff_t x) { eigen[std::size_t(x)] = Eigen::nbThreads(); });
    for (int e : eigen) CHECK(e == 1);
    CHECK(omp_get_max_threads() == 3);  // restored
  }
  // Parallel: each item inside a team of more than one thread, where Eigen keeps a product on
  // its thread by its own rule (omp_get_num_threads() > 1).
  std::vector<int> team(4, 0);
  parallel_each(4, 2, [&](std::ptrdiff_t x) { team[std::size_t(x)] = omp_get_num_threads(); });
  for (int t : team) CHECK(t == 2);
  // An exception on the serial path leaves the setting as it found it.
  CHECK_THROWS(parallel_each(3, 1, [](std::ptrdiff_t) { throw std::runtime_error("x"); }));
  CHECK(omp_get_max_threads() == 3);
  {
    const SerialEigen outer;
    CHECK(Eigen::nbThreads() == 1);
    {
      const SerialEigen inner;  // nested: nothing to save, nothing to restore
      CHECK(Eigen::nbThreads() == 1);
    }
    CHECK(Eigen::nbThreads() == 1);
  }
  CHECK(omp_get_max_threads() == 3);
#else
  const SerialEigen serial;  // without OpenMP Eigen never threads; the guard does nothing
  CHECK(Eigen::nbThreads() == 1);
#endif
}
