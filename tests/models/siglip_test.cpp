// SigLIP's attention (SelfAttention of the encoder layers, the attention of PoolingHead; nn::attention
// inside) against today's product written out here: q, k, v projections, heads folded into the
// batch, softmax(q k^T / sqrt(D)) in float32 times v, out_proj. Output and the gradients of x and of
// every attention weight and bias (the key bias's: zero to rounding), in float32 and under bfloat16 autocast, at
// SigLIP-tiny's width (192, 3 heads). Relative error (Frobenius norm) below 1e-5 in float32, 1e-2 in bfloat16.
#include "meridian/models/siglip.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cmath>
#include <functional>
#include <string>
#include <vector>

#include "meridian/nn/autocast.h"
#include "relative_error.h"

namespace models = meridian::models;

namespace {
// q [B, Tq, W], k and v [B, T, W] -> [B, Tq, W], heads folded into the batch.
at::Tensor attend(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, int64_t heads) {
  const int64_t b = q.size(0), tq = q.size(1), t = k.size(1), d = q.size(2) / heads;
  auto fold = [&](const at::Tensor& x, int64_t n) {
    return x.reshape({b, n, heads, d}).transpose(1, 2).reshape({b * heads, n, d});
  };
  const auto scores = at::bmm(fold(q, tq) * (1.0 / std::sqrt(double(d))), fold(k, t).transpose(1, 2));
  const auto weights = at::softmax(scores, -1, at::kFloat).to(q.scalar_type());
  return at::bmm(weights, fold(v, t)).view({b, heads, tq, d}).transpose(1, 2).reshape({b, tq, heads * d});
}

// The module's output and the gradients of x and of `names` against the reference's, which gets
// copies of those parameters (in that order) and x.
void expect_siglip_equal(torch::nn::Module& module, const std::function<at::Tensor(const at::Tensor&)>& forward,
                         const std::vector<std::string>& names,
                         const std::function<at::Tensor(const at::Tensor&, const std::vector<at::Tensor>&)>& reference,
                         const std::vector<int64_t>& shape) {
  for (const bool bf16 : {false, true}) {
    const std::string what = bf16 ? "bf16" : "float32";
    torch::manual_seed(9);
    const auto params = module.named_parameters();
    std::vector<at::Tensor> copies;
    for (const auto& n : names) copies.push_back(params[n].detach().clone().requires_grad_());
    const auto x0 = torch::randn(shape);
    auto x = x0.clone().requires_grad_(), x_ref = x0.clone().requires_grad_();
    at::Tensor mine, theirs;
    {
      meridian::nn::AutocastScope autocast(c10::DeviceType::CPU, bf16);
      mine = forward(x);
      theirs = reference(x_ref, copies);
    }
    const auto upstream = torch::randn(mine.sizes());
    (mine.to(at::kFloat) * upstream).sum().backward();
    (theirs.to(at::kFloat) * upstream).sum().backward();
    const double tolerance = bf16 ? 1e-2 : 1e-5;
    EXPECT_LT(meridian::test::relative_error(mine, theirs), tolerance) << what;
    EXPECT_LT(meridian::test::relative_error(x.grad(), x_ref.grad()), tolerance) << what << " dx";
    for (size_t i = 0; i < names.size(); ++i) {
      const auto& grad = params[names[i]].grad();
      if (names[i] == "k_proj.bias")  // zero but for rounding: softmax ignores a shift of all of a query's scores
        EXPECT_LT(grad.norm().item<double>(), tolerance * params["v_proj.bias"].grad().norm().item<double>()) << what;
      else
        EXPECT_LT(meridian::test::relative_error(grad, copies[i].grad()), tolerance) << what << " " << names[i];
    }
    for (const auto& n : names) params[n].mutable_grad() = at::Tensor();
  }
}
}  // namespace

TEST(Siglip, SelfAttentionEqualsTheExplicitProduct) {
  torch::manual_seed(8);
  const int64_t heads = 3;
  models::SelfAttention attention(192, heads);
  const std::vector<std::string> names{"q_proj.weight", "q_proj.bias", "k_proj.weight",   "k_proj.bias",
                                       "v_proj.weight", "v_proj.bias", "out_proj.weight", "out_proj.bias"};
  expect_siglip_equal(
      *attention, [&](const at::Tensor& x) { return attention->forward(x); }, names,
      [&](const at::Tensor& x, const std::vector<at::Tensor>& w) {
        const auto q = at::linear(x, w[0], w[1]), k = at::linear(x, w[2], w[3]), v = at::linear(x, w[4], w[5]);
        return at::linear(attend(q, k, v, heads), w[6], w[7]);
      },
      {4, 64, 192});
}

// The pooling head: one learned query over the patches, then layernorm and MLP (the module's own,
// not under test).
TEST(Siglip, PoolingHeadAttentionEqualsTheExplicitProduct) {
  torch::manual_seed(8);
  models::TowerConfig tower;  // width 192, 3 heads
  models::PoolingHead head(tower);
  const int64_t w = tower.width;
  auto* layernorm = head->named_children()["layernorm"]->as<torch::nn::LayerNorm>();
  auto* mlp = head->named_children()["mlp"]->as<models::Mlp>();
  const std::vector<std::string> names{"probe", "attention.in_proj_weight", "attention.in_proj_bias",
                                       "attention.out_proj.weight", "attention.out_proj.bias"};
  expect_siglip_equal(
      *head, [&](const at::Tensor& x) { return head->forward(x); }, names,
      [&](const at::Tensor& x, const std::vector<at::Tensor>& p) {
        const int64_t b = x.size(0);
        const auto q = at::linear(p[0], p[1].narrow(0, 0, w), p[2].narrow(0, 0, w)).expand({b, 1, w});
        const auto k = at::linear(x, p[1].narrow(0, w, w), p[2].narrow(0, w, w));
        const auto v = at::linear(x, p[1].narrow(0, 2 * w, w), p[2].narrow(0, 2 * w, w));
        auto h = at::linear(attend(q, k, v, tower.heads), p[3], p[4]).to(x.scalar_type());
        h = h + mlp->forward(layernorm->forward(h));
        return h.select(1, 0);
      },
      {4, 64, 192});
}
