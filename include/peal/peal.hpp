// peal: positional-encoding algebra. score(q, t; k, s) = q^T A(t - s) k with
// A(tau) = exp(tau X), X block-diagonal in real Jordan form (docs/design.md).
#pragma once

#include "bank.hpp"
#include "basis_change.hpp"
#include "block_diagonal.hpp"
#include "block_traits.hpp"
#include "encoding.hpp"
#include "errors.hpp"
#include "jordan_block.hpp"
#include "layout.hpp"
#include "multi_axis.hpp"
#include "pass_through.hpp"
#include "positions.hpp"
#include "positions_nd.hpp"
#include "real_block.hpp"
#include "rotation_block.hpp"
#include "rotation_jordan_block.hpp"
#include "version.hpp"
#include "view.hpp"
// Kernels on batches (docs/kernels-encode.md, docs/kernels-scores.md).
#include "attention.hpp"
#include "encode.hpp"
#include "linear_attention.hpp"
#include "merge_attention.hpp"
#include "per_head.hpp"
#include "scores.hpp"
#include "scores_nd.hpp"
// Presets (presets/, docs/presets.md) and Qwen-VL's position ids. The rest of models/ is
// included explicitly, where it is used: models/hf_config.hpp (config.json; needs
// nlohmann/json), models/gguf.hpp and models/gguf_config.hpp (GGUF files),
// models/model_positions.hpp and models/model_conventions.hpp (a model's layers,
// docs/models.md). score_options.hpp, linear_options.hpp and linear_state.hpp come with their
// kernels.
#include "models/qwen_vl_positions.hpp"
#include "presets/alibi.hpp"
#include "presets/mrope.hpp"
#include "presets/retnet.hpp"
#include "presets/rope.hpp"
#include "presets/vision_rope.hpp"
#include "presets/xpos.hpp"
// Training (docs/gradients.md): the parameters of an encoding as data, the derivatives of
// A(τ), the backward of encode, scores and attention.
#include "attention_backward.hpp"
#include "linear_attention_backward.hpp"
#include "linear_state_backward.hpp"
#include "derivatives.hpp"
#include "encode_backward.hpp"
#include "parameters.hpp"
#include "scores_backward.hpp"
#include "scores_nd_backward.hpp"
// Any generator X in: its real canonical form as blocks in a basis change, and a family of
// commuting generators (one per axis) as a MultiAxis in one basis (docs/canonical-form.md).
#include "canonical_axes.hpp"
#include "canonical_form.hpp"
#include "from_transition.hpp"
// Last: with PEAL_COMPILED (a TU linking peal::compiled) the preset kernels are declared
// extern here and come from the library (docs/build-cost.md); otherwise this adds nothing.
#include "compiled.hpp"
