#include "meridian/nn/attention.h"

#include <cmath>
#include <limits>
#include <stdexcept>
#include <string>

namespace meridian::nn {

namespace {
std::string shape(const at::Tensor& t) { return std::string(c10::str(t.sizes())); }

void check_shapes(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, bool causal) {
  const auto where = [&] { return " (q " + shape(q) + ", k " + shape(k) + ", v " + shape(v) + ")"; };
  if (q.dim() != 4 || k.dim() != 4 || v.dim() != 4)
    throw std::invalid_argument("attention: q, k and v must be [B, heads, T, D]" + where());
  if (k.sizes() != v.sizes() || k.size(0) != q.size(0) || k.size(3) != q.size(3))
    throw std::invalid_argument("attention: k and v must be alike and match q's batch and head size" + where());
  if (k.size(1) < 1 || q.size(1) % k.size(1) != 0)
    throw std::invalid_argument("attention: the key/value heads must divide the query heads" + where());
  if (causal && q.size(2) > k.size(2))
    throw std::invalid_argument("attention: causal with more queries than keys" + where());
}

// Query i may see key j when j <= Tk - Tq + i: [Tq, Tk], true where allowed (SDPA's bool-mask sense).
at::Tensor causal_mask(int64_t tq, int64_t tk, const at::TensorOptions& options) {
  return at::ones({tq, tk}, options.dtype(at::kBool)).tril(tk - tq);
}

at::Tensor explicit_attention(const at::Tensor& q, at::Tensor k, at::Tensor v, bool causal) {
  const int64_t heads = q.size(1), kv_heads = k.size(1), tq = q.size(2), tk = k.size(2);
  if (kv_heads != heads) {  // each key/value head serves heads / kv_heads consecutive query heads
    k = k.repeat_interleave(heads / kv_heads, 1);
    v = v.repeat_interleave(heads / kv_heads, 1);
  }
  auto scores = at::matmul(q, k.transpose(-2, -1)) / std::sqrt(double(q.size(3)));  // [B, H, Tq, Tk]
  if (causal && tq > 1)
    scores =
        scores.masked_fill(causal_mask(tq, tk, q.options()).logical_not(), -std::numeric_limits<float>::infinity());
  return at::matmul(at::softmax(scores, -1, at::kFloat).to(v.scalar_type()), v);
}
}  // namespace

at::Tensor attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, bool causal,
                     AttentionKernel kernel) {
  check_shapes(q, k, v, causal);
  if (kernel == AttentionKernel::kAuto) {
    const bool reduced = q.scalar_type() == at::kBFloat16 || q.scalar_type() == at::kHalf;
    kernel = reduced && q.is_cpu() ? AttentionKernel::kExplicit : AttentionKernel::kSdpa;
  }
  if (kernel == AttentionKernel::kExplicit) return explicit_attention(q, k, v, causal);
  const int64_t tq = q.size(2), tk = k.size(2);
  // enable_gqa reads key/value head h / (H / KV) for query head h, as repeat_interleave would, without
  // the copies.
  const bool gqa = k.size(1) != q.size(1);
  // SDPA's is_causal aligns the mask top-left (query i sees keys 0 .. i), right only without cached
  // positions (Tq == Tk). A single query after a cache sees every key: no mask at all, which keeps the
  // flash kernels; several queries after a cache need the mask spelt out.
  if (!causal || tq == 1) return at::scaled_dot_product_attention(q, k, v, {}, 0.0, false, std::nullopt, gqa);
  if (tq == tk) return at::scaled_dot_product_attention(q, k, v, {}, 0.0, true, std::nullopt, gqa);
  return at::scaled_dot_product_attention(q, k, v, causal_mask(tq, tk, q.options()), 0.0, false, std::nullopt, gqa);
}

}  // namespace meridian::nn
