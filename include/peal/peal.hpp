// peal: positional-encoding algebra. score(q, t; k, s) = q^T A(t - s) k with
// A(tau) = exp(tau X), X block-diagonal in real Jordan form (docs/design.md).
#pragma once

#include "version.hpp"
#include "errors.hpp"
#include "layout.hpp"
#include "encoding.hpp"
#include "block_traits.hpp"
#include "real_block.hpp"
#include "rotation_block.hpp"
#include "jordan_block.hpp"
#include "rotation_jordan_block.hpp"
#include "bank.hpp"
#include "pass_through.hpp"
#include "block_diagonal.hpp"
#include "basis_change.hpp"
#include "view.hpp"
#include "positions.hpp"
#include "positions_nd.hpp"
#include "multi_axis.hpp"
// Kernels on batches (docs/kernels-encode.md, docs/kernels-scores.md).
#include "encode.hpp"
#include "scores.hpp"
#include "attention.hpp"
#include "merge_attention.hpp"
#include "linear_attention.hpp"
#include "scores_nd.hpp"
#include "per_head.hpp"
// Presets (docs/presets.md). The readers are included explicitly, where they are used:
// hf_config.hpp (config.json; needs nlohmann/json), gguf.hpp and gguf_config.hpp (GGUF files),
// model_positions.hpp and model_conventions.hpp (a model's layers, docs/models.md).
// score_options.hpp, linear_options.hpp and linear_state.hpp come with their kernels.
#include "rope.hpp"
#include "alibi.hpp"
#include "xpos.hpp"
#include "retnet.hpp"
#include "mrope.hpp"
#include "vision_rope.hpp"
#include "qwen_vl_positions.hpp"
// Training (docs/gradients.md): the parameters of an encoding as data, the derivatives of
// A(τ), the backward of encode, scores and attention.
#include "parameters.hpp"
#include "derivatives.hpp"
#include "encode_backward.hpp"
#include "scores_backward.hpp"
#include "attention_backward.hpp"
// Last: with PEAL_COMPILED (a TU linking peal::compiled) the preset kernels are declared
// extern here and come from the library (docs/build-cost.md); otherwise this adds nothing.
#include "compiled.hpp"
