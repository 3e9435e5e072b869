// Activation checkpointing (nn::BlockRunner) against the plain run: the same loss, gradients
// equal to rounding (the input gradient of a recomputed block arrives in its own memory layout, so a
// sum over it may run in another order), in float32 and under bfloat16 autocast; the hooks see every
// block before and after its forward, and again during backward when it is recomputed; a block
// that draws random numbers draws the same ones in its recomputation.
#include "meridian/nn/blocks.h"

#include <ATen/autocast_mode.h>
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <vector>

#include "meridian/models/llama.h"
#include "meridian/nn/autocast.h"

namespace models = meridian::models;
namespace nn = meridian::nn;

namespace {

struct Recorder : nn::BlockHooks {
  std::vector<std::string> events;
  void before(size_t i, bool recompute) override {
    events.push_back((recompute ? "R" : "F") + std::to_string(i) + (at::GradMode::is_enabled() ? "g" : "n"));
  }
  void after(size_t, bool) override {}
};

models::LlamaConfig tiny() {
  models::LlamaConfig c;
  c.vocab_size = 97, c.dim = 32, c.layers = 3, c.heads = 4, c.kv_heads = 2, c.hidden = 48, c.max_seq_len = 16;
  return c;
}

// Loss and parameter gradients of one forward/backward.
std::pair<double, std::vector<at::Tensor>> run(models::Llama& model, const at::Tensor& tokens, bool bf16) {
  model->zero_grad();
  at::Tensor loss;
  {
    if (bf16) nn::AutocastState{true, at::kBFloat16}.apply(c10::kCPU);
    const auto logits = model->forward(tokens).to(at::kFloat);
    loss = at::cross_entropy_loss(logits.reshape({-1, logits.size(-1)}), tokens.reshape({-1}));
    if (bf16) {
      nn::AutocastState{false, at::kBFloat16}.apply(c10::kCPU);
      at::autocast::clear_cache();
    }
  }
  loss.backward();  // outside autocast, as the Trainer does: the recomputation restores it itself
  std::vector<at::Tensor> grads;
  for (const auto& p : model->parameters()) grads.push_back(p.grad().clone());
  return {loss.item<double>(), grads};
}

}  // namespace

TEST(Blocks, CheckpointingGivesTheSameGradients) {
  for (const bool bf16 : {false, true}) {
    torch::manual_seed(3);
    models::Llama model(tiny());
    const auto tokens = torch::randint(97, {2, 16}, at::kLong);
    const auto [plain_loss, plain] = run(model, tokens, bf16);
    Recorder recorder;
    model->blocks().set_hooks(&recorder);
    model->blocks().set_checkpointing(true);
    const auto [loss, grads] = run(model, tokens, bf16);
    model->blocks().set_checkpointing(false);
    model->blocks().set_hooks(nullptr);
    EXPECT_EQ(loss, plain_loss) << (bf16 ? "bf16" : "float32");  // the forward is the same computation
    ASSERT_EQ(grads.size(), plain.size());
    for (size_t i = 0; i < grads.size(); ++i) {
      const double scale = plain[i].abs().max().item<double>();
      EXPECT_GT(scale, 0) << i;
      const double tolerance = (bf16 ? 2e-2 : 1e-5) * scale;
      EXPECT_LE((grads[i] - plain[i]).abs().max().item<double>(), tolerance)
          << "parameter " << i << (bf16 ? " bf16" : "");
    }
    // First pass without a graph, block by block; backward recomputes them last to first, with one.
    EXPECT_EQ(recorder.events, (std::vector<std::string>{"F0n", "F1n", "F2n", "R2g", "R1g", "R0g"}));
  }
}

TEST(Blocks, RecomputationDrawsTheSameRandomNumbers) {
  torch::manual_seed(5);
  const auto weight = torch::randn({8, 8}, at::TensorOptions().requires_grad(true));
  nn::BlockRunner runner;
  runner.set_checkpointing(true);
  std::vector<at::Tensor> masks;  // every dropout mask the block drew
  auto block = [&](const at::Tensor& h) {
    const auto y = torch::dropout(torch::matmul(h, weight), 0.5, /*train=*/true);
    masks.push_back((y != 0).detach().clone());
    return y;
  };
  const auto x = torch::randn({4, 8});
  runner.run(0, x, block).sum().backward();
  ASSERT_EQ(masks.size(), 2u);  // forward, then the recomputation
  EXPECT_TRUE(torch::equal(masks[0], masks[1]));
  // The gradient is the one of the forward's mask: dropout keeps 1/(1-p) = 2 where it kept.
  const auto expected = torch::matmul(x.t(), masks[0].to(at::kFloat) * 2.0);
  EXPECT_TRUE(torch::allclose(weight.grad(), expected, 1e-5, 1e-6));
  // And the generator moved on as the forward left it (the recomputation put it back).
  torch::manual_seed(5);
  torch::randn({8, 8}), torch::randn({4, 8}), torch::dropout(torch::ones({4, 8}), 0.5, true);
  const auto after_plain = torch::rand({1}).item<double>();
  masks.clear();
  torch::manual_seed(5);
  const auto w2 = torch::randn({8, 8}).requires_grad_(true);
  const auto x2 = torch::randn({4, 8});
  runner.run(0, x2, [&](const at::Tensor& h) { return torch::dropout(torch::matmul(h, w2), 0.5, true); })
      .sum()
      .backward();
  EXPECT_EQ(torch::rand({1}).item<double>(), after_plain);
}
