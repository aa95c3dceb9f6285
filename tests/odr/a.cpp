// ODR test, translation unit A (with main). Both TUs include the umbrella header, the
// kernels (encode.hpp, scores.hpp) and the GGUF reader (gguf_config.hpp, with gguf.hpp) and
// use their non-template functions; a non-inline definition in any peal header makes this
// fail to link (multiple definition), and differing results would mean differing definitions.
#include <peal/encode.hpp>
#include <peal/models/gguf_config.hpp>
#include <peal/peal.hpp>
#include <peal/scores.hpp>

double peal_odr_b();  // defined in b.cpp

double peal_odr_a() {
  const auto enc =
      peal::compose(peal::RotationBlock<double>(0.25), peal::JordanBlock<2, double>(0));
  return enc.A(3.0).sum() + peal::detail::reduced_angle(1.0, 0.0, 10.0) +
         double(peal::coordinate(peal::Layout::HalfSplit, 4, 2, 1, 1)) +
         peal::detail::encode_kernels::exp_kernel(0.5) +
         peal::detail::tiled::max_half_spread(0.01, 2, 11.0, 4096.0) +
         double(peal::gguf_rope_type("llama") == peal::GgufRopeType::Norm) +
         double(peal::detail::gguf::min_size(peal::GgufType::Array));
}

int main() { return peal_odr_a() == peal_odr_b() ? 0 : 1; }
