// Scaled dot-product attention of the models (Llama's decoder, SigLIP's encoders and pooling head)
// through one function, so that the choice of kernel is made in one place. Not collective; runs on
// the inputs' device and in their dtype (bfloat16 under autocast: the projections' outputs).
#pragma once

#include <ATen/ATen.h>

namespace meridian::nn {

enum class AttentionKernel {
  // kSdpa, except for bfloat16 or half inputs on a CPU: kExplicit there. LibTorch 2.15's CPU flash
  // kernel is 13-22 % faster than the explicit product in float32 but its bf16 backward is 2.5-4.5x
  // slower (attention forward + backward, 1 thread, SigLIP-tiny and lm-sized heads; docs/performance.md).
  kAuto,
  // at::scaled_dot_product_attention: flash or memory-efficient kernels on a GPU, the flash kernel on
  // a CPU; never builds the [B, H, Tq, Tk] scores.
  kSdpa,
  // The product written out: scores q k^T / sqrt(D) [B, H, Tq, Tk], the causal mask, softmax in
  // float32 (as transformers' eager attention under bf16), times v.
  kExplicit,
};

// softmax(q k^T / sqrt(D) + mask) v per head.
//   q [B, H, Tq, D]; k, v [B, KV, Tk, D] with KV dividing H: query head h reads key/value head
//   h / (H / KV) (repeat_interleave's grouping: Llama's grouped-query attention).
//   causal: query i sits at position Tk - Tq + i (after Tk - Tq cached positions) and sees keys
//   0 .. Tk - Tq + i; otherwise every query sees every key.
// Returns [B, H, Tq, D] in v's dtype (not necessarily contiguous). Throws std::invalid_argument when
// the shapes do not fit together.
at::Tensor attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, bool causal,
                     AttentionKernel kernel = AttentionKernel::kAuto);

}  // namespace meridian::nn
