// How the coordinates of a vector map to the blocks of a Bank (docs/design.md §2).
//   Interleaved: block i owns coordinates (i*D, i*D+1, ..., i*D+D-1): for rotations the
//                pairs (0,1),(2,3),... of GPT-J, original Llama and ggml "normal" RoPE.
//   HalfSplit:   block i owns coordinates (i, i+n, i+2n, ...), n = number of blocks: for
//                rotations the pairs (i, i+d/2) of GPT-NeoX and Hugging Face rotate_half.
#pragma once

namespace peal {

enum class Layout { Interleaved, HalfSplit };

/// Coordinate of component c of block i in a bank of n blocks of size D.
inline constexpr int coordinate(Layout layout, int n, int D, int i, int c) {
  return layout == Layout::Interleaved ? i * D + c : c * n + i;
}

}  // namespace peal
