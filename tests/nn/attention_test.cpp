// nn::attention, each kernel (SDPA, the explicit product, the automatic choice), against the
// attention written out here a second way (scores, a mask built by comparing positions, softmax in
// float32, the key/value head of each query head picked by index): output and q, k, v gradients, in
// float32 and under bfloat16 autocast; causal without and with cached positions (one query and
// several), grouped-query attention, no mask. Relative error (Frobenius norm) below 1e-5 in float32
// and 1e-2 in bfloat16 (8 significant bits: 4e-3 per rounding); a mask aligned top-left instead of
// bottom-right, or a wrong key/value head grouping, is off by more than 0.1.
#include "meridian/nn/attention.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "meridian/nn/autocast.h"
#include "relative_error.h"

namespace nn = meridian::nn;

namespace {

// softmax(q k^T / sqrt(D) + mask) v; query head h reads key/value head h / (H / KV); causal: query i
// at position Tk - Tq + i sees keys at positions <= its own.
at::Tensor reference_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, bool causal) {
  const int64_t heads = q.size(1), kv_heads = k.size(1), tq = q.size(2), tk = k.size(2);
  const auto group = at::arange(heads, at::kLong).div(heads / kv_heads, "floor");
  const auto keys = k.index_select(1, group), values = v.index_select(1, group);
  auto scores = at::matmul(q, keys.transpose(-2, -1)) * (1.0 / std::sqrt(double(q.size(3))));
  if (causal) {
    const auto query_pos = at::arange(tq, at::kLong).unsqueeze(1) + (tk - tq);
    const auto key_pos = at::arange(tk, at::kLong).unsqueeze(0);
    scores = scores.masked_fill(key_pos > query_pos, -std::numeric_limits<float>::infinity());
  }
  return at::matmul(at::softmax(scores, -1, at::kFloat).to(values.scalar_type()), values);
}

struct AttentionCase {
  int64_t heads, kv_heads, tq, tk;
  bool causal;
};

}  // namespace

TEST(Attention, EveryKernelEqualsTheProductWrittenOut) {
  const std::vector<AttentionCase> cases{
      {4, 4, 7, 7, true},   // training: no cache
      {4, 2, 7, 7, true},   // grouped-query attention
      {4, 2, 1, 9, true},   // generation: one query after 8 cached positions
      {4, 4, 3, 9, true},   // several queries after 6 cached positions
      {6, 2, 3, 9, true},   // both, 3 query heads per key/value head
      {3, 3, 5, 8, false},  // SigLIP: every key (the pooling head: 1 query)
      {3, 3, 1, 8, false},
  };
  for (const auto kernel : {nn::AttentionKernel::kSdpa, nn::AttentionKernel::kExplicit, nn::AttentionKernel::kAuto})
    for (const bool bf16 : {false, true})
      for (const auto& c : cases) {
        const std::string what = std::string(kernel == nn::AttentionKernel::kSdpa       ? "sdpa"
                                             : kernel == nn::AttentionKernel::kExplicit ? "explicit"
                                                                                        : "auto") +
                                 (bf16 ? " bf16" : " float32") + " H " + std::to_string(c.heads) + " KV " +
                                 std::to_string(c.kv_heads) + " Tq " + std::to_string(c.tq) + " Tk " +
                                 std::to_string(c.tk) + (c.causal ? " causal" : "");
        torch::manual_seed(7);
        const int64_t b = 2, d = 16;
        // As the models make them: [B, T, heads * D] projections viewed as [B, heads, T, D].
        const auto dtype = bf16 ? at::kBFloat16 : at::kFloat;
        auto make = [&](int64_t heads, int64_t t) { return torch::randn({b, t, heads * d}).to(dtype); };
        const auto q0 = make(c.heads, c.tq), k0 = make(c.kv_heads, c.tk), v0 = make(c.kv_heads, c.tk);
        const auto upstream = torch::randn({b, c.heads, c.tq, d});
        std::vector<at::Tensor> out, grads;
        for (const bool mine : {true, false}) {
          auto q = q0.clone().requires_grad_(), k = k0.clone().requires_grad_(), v = v0.clone().requires_grad_();
          auto heads = [&](const at::Tensor& x, int64_t h) { return x.view({b, x.size(1), h, d}).transpose(1, 2); };
          at::Tensor o;
          {
            meridian::nn::AutocastScope autocast(c10::DeviceType::CPU, bf16);
            o = mine ? nn::attention(heads(q, c.heads), heads(k, c.kv_heads), heads(v, c.kv_heads), c.causal, kernel)
                     : reference_attention(heads(q, c.heads), heads(k, c.kv_heads), heads(v, c.kv_heads), c.causal);
          }
          ASSERT_EQ(o.sizes(), (at::IntArrayRef{b, c.heads, c.tq, d})) << what;
          EXPECT_EQ(o.scalar_type(), dtype) << what;
          (o.to(at::kFloat) * upstream).sum().backward();
          out.push_back(o);
          for (const auto& t : {q, k, v}) grads.push_back(t.grad());
        }
        const double tolerance = bf16 ? 1e-2 : 1e-5;
        EXPECT_LT(meridian::test::relative_error(out[0], out[1]), tolerance) << what;
        for (size_t i = 0; i < 3; ++i)
          EXPECT_LT(meridian::test::relative_error(grads[i], grads[3 + i]), tolerance) << what << " gradient of "
                                                                                       << "qkv"[i];
      }
}

TEST(Attention, ShapesThatDoNotFitAreRefused) {
  const auto q = torch::randn({2, 4, 3, 8}), k = torch::randn({2, 3, 3, 8});
  EXPECT_THROW(nn::attention(q, k, k, true), std::invalid_argument);  // 3 kv heads for 4
  EXPECT_THROW(nn::attention(q, q.narrow(2, 0, 2), q.narrow(2, 0, 2), true), std::invalid_argument);  // Tq > Tk
  EXPECT_THROW(nn::attention(q[0], q[0], q[0], false), std::invalid_argument);                        // 3-d
}
