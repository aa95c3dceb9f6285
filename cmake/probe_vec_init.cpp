// Probe run by CMakeLists.txt with -O2 -march=native: exits 1 where the compiler stores a
// 256-bit constant {c x 4, 0 x 4} as a broadcast of c (GCC 12.2 with AVX-512), 0 otherwise.
#include <vector>

__attribute__((noinline)) std::vector<float> halves_f() { return {1, 1, 1, 1, 0, 0, 0, 0}; }
__attribute__((noinline)) std::vector<long long> halves_l() { return {5, 5, 0, 0}; }

int main() {
  const std::vector<float> f = halves_f();
  const std::vector<long long> l = halves_l();
  for (int i = 0; i < 8; ++i)
    if (f[i] != (i < 4 ? 1.0f : 0.0f)) return 1;
  for (int i = 0; i < 4; ++i)
    if (l[i] != (i < 2 ? 5 : 0)) return 1;
  return 0;
}
