// Strided views for the kernels' tests: a dense [n, H, w] array copied into a buffer whose
// view has every element at stride 2 and gaps after each token and head (tests/
// attention_backward_check.hpp, tests/scores_backward_check.hpp).
#pragma once

#include <catch2/catch.hpp>
#include <peal/view.hpp>
#include <vector>

namespace peal_test {

// Strided views: a dense [n, H, w] array copied into a head-major buffer with every element
// at stride 2 and a gap after each token and head, the rest of the buffer `fill`. The kernels
// must read and write through the strides and leave the gaps alone.
inline peal::Strides padded_strides(int n, int w) {
  return {2 * w + 1, peal::Index(n) * (2 * w + 1) + 3, 2};
}
template <class T>
std::vector<T> scatter(const std::vector<T>& x, int n, int H, int w, T fill) {
  const peal::Strides st = padded_strides(n, w);
  std::vector<T> b(std::size_t(H * st.head + 3), fill);
  for (int i = 0; i < n; ++i)
    for (int h = 0; h < H; ++h)
      for (int e = 0; e < w; ++e)
        b[std::size_t(i * st.token + h * st.head + e * st.elem)] = x[std::size_t((i * H + h) * w + e)];
  return b;
}
// The dense array back from a scattered buffer; every slot outside the view must still be fill.
template <class T>
std::vector<T> gather(const std::vector<T>& b, int n, int H, int w, T fill) {
  const peal::Strides st = padded_strides(n, w);
  std::vector<T> x(std::size_t(n * H * w));
  std::vector<char> in_view(b.size(), 0);
  for (int i = 0; i < n; ++i)
    for (int h = 0; h < H; ++h)
      for (int e = 0; e < w; ++e) {
        const auto o = std::size_t(i * st.token + h * st.head + e * st.elem);
        x[std::size_t((i * H + h) * w + e)] = b[o];
        in_view[o] = 1;
      }
  std::size_t touched = 0;
  for (std::size_t o = 0; o < b.size(); ++o) touched += !in_view[o] && !(b[o] == fill);
  CHECK(touched == 0);  // the gaps between the strided elements are not written
  return x;
}


// The kernel's view of the dense [n, H, w] array x: x itself, or (strided) a scattered copy
// held in keep, its gaps filled with `fill`.
template <class T>
peal::TensorView<const T> view_in(bool strided, const std::vector<T>& x, std::vector<T>& keep,
                                  int n, int H, int w, T fill = T(-3)) {
  if (!strided) return peal::TensorView<const T>(x.data(), n, H, w);
  keep = scatter(x, n, H, w, fill);
  return peal::TensorView<const T>(keep.data(), n, H, w, padded_strides(n, w));
}
template <class T>
peal::TensorView<T> view_out(bool strided, std::vector<T>& x, std::vector<T>& keep, int n, int H,
                             int w, T fill = T(7)) {
  if (!strided) return peal::TensorView<T>(x.data(), n, H, w);
  keep = scatter(x, n, H, w, fill);
  return peal::TensorView<T>(keep.data(), n, H, w, padded_strides(n, w));
}
// After the call: x gets the results written through view_out (its gaps checked untouched).
template <class T>
void read_back(bool strided, std::vector<T>& x, const std::vector<T>& keep, int n, int H, int w,
               T fill = T(7)) {
  if (strided) x = gather(keep, n, H, w, fill);
}

}  // namespace peal_test
