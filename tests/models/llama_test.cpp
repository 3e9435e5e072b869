// The Llama-style decoder against closed forms and references computed another way: parameter
// counts (the 7b preset against Llama-2-7B's published 6,738,415,616), causality, grouped-query
// attention against multi-head attention with repeated key/value weights, the rotary embedding's
// relative-position property, a safetensors round trip by name, and a model built shape-only.
#include "meridian/models/llama.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "meridian/core/config.h"
#include "meridian/models/generate.h"
#include "meridian/models/safetensors.h"

namespace models = meridian::models;

namespace {
models::LlamaConfig preset(const std::string& name) {
  return models::LlamaConfig::from_config(meridian::Config::load_file(MERIDIAN_SOURCE_DIR "/jobs/configs/" + name));
}
int64_t count(torch::nn::Module& m) {
  int64_t n = 0;
  for (const auto& p : m.parameters()) n += p.numel();
  return n;
}
}  // namespace

TEST(Llama, ParameterCounts) {
  EXPECT_EQ(preset("llama-7b.yaml").parameter_count(), 6738415616);  // Llama-2-7B
  const auto tiny = preset("lm-tiny.yaml");
  torch::manual_seed(0);
  models::Llama model(tiny);
  EXPECT_EQ(count(*model), tiny.parameter_count());
  // By hand: embedding 512*64; per layer q 64*64, k and v 64*32 each (2 of 4 heads), o 64*64,
  // MLP 3*64*172, norms 2*64; final norm 64; head tied.
  EXPECT_EQ(tiny.parameter_count(), 512 * 64 + 2 * (64 * 64 + 2 * 64 * 32 + 64 * 64 + 3 * 64 * 172 + 2 * 64) + 64);
  // HF names, so safetensors checkpoints load by name.
  const auto names = model->named_parameters().keys();
  EXPECT_NE(std::find(names.begin(), names.end(), "model.layers.1.self_attn.k_proj.weight"), names.end());
  EXPECT_NE(std::find(names.begin(), names.end(), "model.layers.0.mlp.gate_proj.weight"), names.end());
  EXPECT_NE(std::find(names.begin(), names.end(), "model.norm.weight"), names.end());
}

// Built without values: the same names and shapes, and no memory held. llama-1b's shapes (924M
// parameters, 3.4 GiB in float32) built shape-only grow this process's resident memory by less than
// 256 MiB (about one float32 layer, 190 MB, is built at a time; measured: 0 MiB).
namespace {
long resident_kib() {
  std::ifstream status("/proc/self/status");
  for (std::string line; std::getline(status, line);)
    if (line.rfind("VmRSS:", 0) == 0) return std::stol(line.substr(6));
  return -1;
}
}  // namespace

TEST(Llama, ShapeOnlyModelHoldsNoMemory) {
  const auto tiny = preset("lm-tiny.yaml");
  models::Llama full(tiny), bare(tiny, /*values=*/false);
  const auto a = full->named_parameters(), b = bare->named_parameters();
  ASSERT_EQ(a.keys(), b.keys());
  for (const auto& p : a) EXPECT_EQ(p.value().sizes(), b[p.key()].sizes()) << p.key();

  const long before = resident_kib();
  {
    models::Llama big(preset("llama-1b.yaml"), /*values=*/false);
    EXPECT_EQ(count(*big), preset("llama-1b.yaml").parameter_count());
    const long grown_mib = (resident_kib() - before) / 1024;
    std::printf("[ llama ] llama-1b built shape-only: resident memory grew by %ld MiB\n", grown_mib);
    EXPECT_LT(grown_mib, 256) << "a shape-only llama-1b holds " << grown_mib << " MiB";
    for (const auto& p : big->parameters()) ASSERT_TRUE(p.is_contiguous());
    EXPECT_EQ(big->parameters()[0].sum().item<float>(), 0.0f);  // reads give zeros
  }
}

TEST(Llama, Causal) {
  torch::manual_seed(1);
  models::Llama model(preset("lm-tiny.yaml"));
  auto tokens = torch::randint(0, 512, {2, 12});
  auto changed = tokens.clone();
  changed.narrow(1, 7, 5).random_(0, 512);
  const auto a = model->forward(tokens), b = model->forward(changed);
  EXPECT_EQ(a.sizes(), (at::IntArrayRef{2, 12, 512}));
  EXPECT_TRUE(torch::allclose(a.narrow(1, 0, 7), b.narrow(1, 0, 7), 1e-5, 1e-6));  // positions before the change
  EXPECT_FALSE(torch::allclose(a.narrow(1, 7, 5), b.narrow(1, 7, 5), 1e-5, 1e-6));
}

// Incremental decoding with a KvCache (the prompt, then pieces of 1 and 3 tokens) gives the logits of
// one forward over the whole sequence; a cache beyond max_seq_len is refused.
TEST(Llama, KvCacheEqualsTheFullForward) {
  torch::manual_seed(2);
  auto config = preset("lm-tiny.yaml");
  config.max_seq_len = 16;
  models::Llama model(config);
  torch::NoGradGuard no_grad;
  const auto tokens = torch::randint(0, 512, {2, 14});
  const auto full = model->forward(tokens);
  models::KvCache cache;
  std::vector<torch::Tensor> parts;
  int64_t at = 0;
  for (int64_t n : {8, 1, 3, 1, 1}) {
    parts.push_back(model->forward(tokens.narrow(1, at, n), &cache));
    at += n;
    EXPECT_EQ(cache.length, at);
  }
  ASSERT_EQ(cache.keys.size(), 2u);
  EXPECT_EQ(cache.keys[0].sizes(), (at::IntArrayRef{2, 2, 14, 16}));  // [B, kv_heads, length, head_dim]
  const auto incremental = torch::cat(parts, 1);
  EXPECT_TRUE(torch::allclose(incremental, full, 1e-4, 1e-5)) << (incremental - full).abs().max().item<double>();
  EXPECT_THROW(model->forward(tokens.narrow(1, 0, 3), &cache), std::invalid_argument);  // 14 + 3 > 16
  cache.clear();
  EXPECT_TRUE(torch::allclose(model->forward(tokens.narrow(1, 0, 5), &cache), full.narrow(1, 0, 5), 1e-4, 1e-5));
}

TEST(Llama, GroupedQueryAttentionEqualsMultiHeadWithRepeatedKeyValueHeads) {
  auto gqa_config = preset("lm-tiny.yaml");  // 4 query heads, 2 key/value heads
  auto mha_config = gqa_config;
  mha_config.kv_heads = 4;
  torch::manual_seed(2);
  models::Llama gqa(gqa_config), mha(mha_config);
  torch::NoGradGuard no_grad;
  const auto mha_params = mha->named_parameters();
  const int64_t d = gqa_config.head_dim();
  for (const auto& item : gqa->named_parameters()) {
    auto target = mha_params[item.key()];
    const bool kv = item.key().find("k_proj") != std::string::npos || item.key().find("v_proj") != std::string::npos;
    if (kv)  // [KV*d, D] -> [H*d, D]: each key/value head repeated for its 2 query heads
      target.copy_(item.value().view({gqa_config.kv_heads, d, -1}).repeat_interleave(2, 0).reshape(target.sizes()));
    else
      target.copy_(item.value());
  }
  const auto tokens = torch::randint(0, 512, {2, 9});
  EXPECT_TRUE(torch::allclose(gqa->forward(tokens), mha->forward(tokens), 1e-5, 1e-6));
}

TEST(Llama, RotaryDotProductDependsOnlyOnTheOffset) {
  const int64_t d = 16;
  const auto [cos, sin] = models::rotary_tables(40, d, 10000, torch::TensorOptions());
  torch::manual_seed(3);
  const auto q = torch::randn({d}), k = torch::randn({d});
  auto rotated = [&](const torch::Tensor& x, int64_t pos) {
    return models::apply_rotary(x.view({1, d}), cos.narrow(0, pos, 1), sin.narrow(0, pos, 1)).view({d});
  };
  const double base = (rotated(q, 5) * rotated(k, 2)).sum().item<double>();
  const double shifted = (rotated(q, 35) * rotated(k, 32)).sum().item<double>();
  EXPECT_NEAR(base, shifted, 1e-4);
  EXPECT_NEAR((rotated(q, 7) * rotated(q, 7)).sum().item<double>(), (q * q).sum().item<double>(), 1e-4);  // a rotation
}

TEST(Llama, SafetensorsRoundTripByName) {
  torch::manual_seed(4);
  const auto config = preset("lm-tiny.yaml");
  models::Llama a(config), b(config);
  const std::string path = (std::filesystem::temp_directory_path() / "meridian_llama_test.safetensors").string();
  std::vector<std::pair<std::string, at::Tensor>> tensors;
  for (const auto& item : a->named_parameters()) tensors.emplace_back(item.key(), item.value());
  models::save_safetensors(path, tensors);
  models::load_into(*b, models::load_safetensors(path));
  std::filesystem::remove(path);
  const auto tokens = torch::randint(0, 512, {1, 10});
  EXPECT_TRUE(torch::equal(a->forward(tokens), b->forward(tokens)));
}

TEST(Llama, ConfigErrorsNameTheField) {
  try {
    models::LlamaConfig::from_config(meridian::Config::parse("model: {dim: 64, heads: 4, kv_heads: 3}", "bad.yaml"));
    FAIL() << "no error";
  } catch (const meridian::ConfigError& e) {
    EXPECT_STREQ(e.what(), "bad.yaml: field 'model.kv_heads': must be positive and divide model.heads (4)");
  }
}

// Greedy generation equals a step-by-step argmax over full forwards without a cache (the reference),
// also past max_seq_len, where each step sees the last max_seq_len tokens; it stops before eos; a
// tiny top-p keeps only the most likely token (greedy again); sampling is reproducible by seed.
TEST(Llama, GenerateEqualsArgmaxOfFullForwards) {
  torch::manual_seed(3);
  auto config = preset("lm-tiny.yaml");
  config.max_seq_len = 8;
  models::Llama model(config);
  model->eval();
  torch::NoGradGuard no_grad;
  const std::vector<int64_t> prompt{5, 17, 42, 7, 99};
  std::vector<int64_t> reference, ids = prompt;
  for (int i = 0; i < 9; ++i) {
    const std::vector<int64_t> window(ids.size() > 8 ? ids.end() - 8 : ids.begin(), ids.end());
    const int64_t next = model->forward(torch::tensor(window).unsqueeze(0))[0][-1].argmax().item<int64_t>();
    ids.push_back(next);
    reference.push_back(next);
  }
  models::SamplingOptions greedy;
  greedy.max_new_tokens = 9;
  EXPECT_EQ(models::generate(model, prompt, greedy), reference);
  models::SamplingOptions stop = greedy;
  stop.eos_id = reference[4];
  const auto first_eos = std::find(reference.begin(), reference.end(), reference[4]) - reference.begin();
  EXPECT_EQ(models::generate(model, prompt, stop),
            std::vector<int64_t>(reference.begin(), reference.begin() + first_eos));
  models::SamplingOptions nucleus = greedy;
  nucleus.top_p = 1e-12;
  EXPECT_EQ(models::generate(model, prompt, nucleus), reference);
  nucleus.top_p = 0.9;
  nucleus.temperature = 2.0;
  nucleus.seed = 11;
  const auto a = models::generate(model, prompt, nucleus), b = models::generate(model, prompt, nucleus);
  EXPECT_EQ(a, b);
  EXPECT_EQ(a.size(), 9u);
  EXPECT_THROW(models::generate(model, {}, greedy), std::invalid_argument);
}
