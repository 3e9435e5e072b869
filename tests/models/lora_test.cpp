// LoRA on the Llama projections: an added adapter changes nothing until trained; only adapters
// require gradients; the merged weights (W + alpha/r B A), loaded into the same model without
// adapters, give the adapted model's logits; a target that matches nothing is refused.
#include "meridian/models/lora.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include "meridian/core/error.h"
#include "meridian/models/llama.h"

namespace models = meridian::models;

namespace {
models::LlamaConfig lora_tiny() {
  models::LlamaConfig c;
  c.vocab_size = 61, c.dim = 32, c.layers = 2, c.heads = 4, c.kv_heads = 2, c.hidden = 48, c.max_seq_len = 16;
  return c;
}
}  // namespace

TEST(Lora, AdaptersStartAsNoOpsAndAloneTrain) {
  torch::manual_seed(1);
  models::Llama model(lora_tiny());
  const auto tokens = torch::randint(61, {2, 12}, at::kLong);
  const auto before = model->forward(tokens).detach();
  models::LoraConfig lora;
  lora.rank = 4;
  lora.targets = {"q_proj", "v_proj", "down_proj"};
  EXPECT_EQ(models::apply_lora(*model, lora), 2 * 3);
  EXPECT_TRUE(torch::equal(model->forward(tokens).detach(), before));  // B = 0
  int64_t trained = 0;
  for (const auto& item : model->named_parameters()) {
    const bool adapter = item.key().find(".lora_") != std::string::npos;
    EXPECT_EQ(item.value().requires_grad(), adapter) << item.key();
    trained += adapter;
  }
  EXPECT_EQ(trained, 2 * 3 * 2);
  const auto names = model->named_parameters().keys();
  EXPECT_NE(std::find(names.begin(), names.end(), "model.layers.1.self_attn.q_proj.lora_A"), names.end());
  // A gradient reaches B (A's is zero while B is zero, as in PEFT).
  model->forward(tokens).sum().backward();
  EXPECT_GT(model->named_parameters()["model.layers.0.self_attn.q_proj.lora_B"].grad().abs().sum().item<double>(), 0);
}

TEST(Lora, MergedWeightsGiveTheAdaptedLogits) {
  torch::manual_seed(2);
  models::Llama adapted(lora_tiny());
  models::LoraConfig lora;
  lora.rank = 3;
  lora.alpha = 6;
  lora.targets = {"q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"};
  models::apply_lora(*adapted, lora);
  {
    torch::NoGradGuard no_grad;
    for (const auto& item : adapted->named_parameters())
      if (item.key().find(".lora_B") != std::string::npos) item.value().normal_(0, 0.05);  // a trained adapter
  }
  const auto tokens = torch::randint(61, {2, 16}, at::kLong);
  const auto expected = adapted->forward(tokens).detach();
  const auto merged = models::merged_weights(*adapted);
  for (const auto& [name, t] : merged) EXPECT_EQ(name.find("lora_"), std::string::npos) << name;
  // The merge by hand for one layer: W + (alpha / r) B A.
  auto params = adapted->named_parameters();
  const auto w = params["model.layers.0.mlp.up_proj.weight"], a = params["model.layers.0.mlp.up_proj.lora_A"],
             b = params["model.layers.0.mlp.up_proj.lora_B"];
  for (const auto& [name, t] : merged)
    if (name == "model.layers.0.mlp.up_proj.weight")
      EXPECT_TRUE(torch::allclose(t, w + torch::matmul(b, a) * 2.0, 1e-6, 1e-7));
  models::Llama plain(lora_tiny());
  models::load_into(*plain, merged);
  const auto got = plain->forward(tokens).detach();
  EXPECT_TRUE(torch::allclose(got, expected, 1e-4, 1e-5)) << (got - expected).abs().max().item<double>();
  EXPECT_FALSE(torch::allclose(got, models::Llama(lora_tiny())->forward(tokens).detach(), 1e-2, 1e-2));
}

TEST(Lora, UnknownTargetIsRefused) {
  models::Llama model(lora_tiny());
  models::LoraConfig lora;
  lora.rank = 2;
  lora.targets = {"q_proj", "qkv"};
  try {
    models::apply_lora(*model, lora);
    FAIL() << "no error";
  } catch (const meridian::UserError& e) {
    EXPECT_NE(std::string(e.what()).find("'qkv' matches no adaptable layer"), std::string::npos) << e.what();
  }
}
