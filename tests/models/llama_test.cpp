// The Llama-style decoder against closed forms and references computed another way: parameter
// counts (the 7b preset against Llama-2-7B's published 6,738,415,616), causality, grouped-query
// attention against multi-head attention with repeated key/value weights, the rotary embedding's
// relative-position property, a safetensors round trip by name, and a model built shape-only.
#include "meridian/models/llama.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>
#include <string>
#include <vector>

#include "meridian/core/config.h"
#include "meridian/models/generate.h"
#include "meridian/models/safetensors.h"
#include "meridian/nn/autocast.h"
#include "relative_error.h"

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

// LlamaAttention (nn::attention inside) against today's product written out here: projections,
// rotary, the cached keys and values in front, each key/value head repeated for its query heads,
// scores with the causal mask at the queries' own positions, softmax in float32. Output and the
// gradients of x and of the four weights, in float32 and under bfloat16 autocast, with as many
// key/value heads as query heads and with half as many; a whole sequence, then a KV cache fed 5, 1,
// 3 and 1 tokens (each step's gradients with the cache held constant, as generation would have it).
// Relative error (Frobenius norm) below 1e-5 in float32, 1e-2 in bfloat16.
namespace {}  // namespace

TEST(Llama, AttentionEqualsTheExplicitProduct) {
  for (const int64_t kv_heads : {4, 2})
    for (const bool bf16 : {false, true}) {
      auto config = preset("lm-tiny.yaml");  // dim 64, 4 query heads of 16
      config.kv_heads = kv_heads;
      const int64_t h = config.heads, d = config.head_dim(), b = 2;
      torch::manual_seed(5);
      models::LlamaAttention attention(config);
      const auto params = attention->named_parameters();
      const std::vector<std::string> names{"q_proj.weight", "k_proj.weight", "v_proj.weight", "o_proj.weight"};
      std::vector<at::Tensor> weights;  // the reference's copies
      for (const auto& n : names) weights.push_back(params[n].detach().clone().requires_grad_());
      const auto [cos_all, sin_all] = models::rotary_tables(16, d, config.rope_theta, torch::TensorOptions());
      // The reference: [B, T, D] at positions offset .. offset + T - 1; cached: after the keys and values
      // of the earlier cached calls.
      at::Tensor past_k, past_v;
      auto reference = [&](const at::Tensor& x, int64_t offset, bool cached) {
        const int64_t t = x.size(1);
        const auto cos = cos_all.narrow(0, offset, t), sin = sin_all.narrow(0, offset, t);
        auto heads = [&](const at::Tensor& y, int64_t n) { return y.view({b, t, n, d}).transpose(1, 2); };
        const auto q = models::apply_rotary(heads(at::linear(x, weights[0]), h), cos, sin);
        auto k = models::apply_rotary(heads(at::linear(x, weights[1]), kv_heads), cos, sin);
        auto v = heads(at::linear(x, weights[2]), kv_heads);
        if (cached && past_k.defined()) k = at::cat({past_k, k}, 2), v = at::cat({past_v, v}, 2);
        if (cached) past_k = k.detach(), past_v = v.detach();
        k = k.repeat_interleave(h / kv_heads, 1), v = v.repeat_interleave(h / kv_heads, 1);
        auto scores = at::matmul(q, k.transpose(-2, -1)) / std::sqrt(double(d));
        const auto future = at::ones({t, offset + t}, at::kBool).triu(offset + 1);
        scores = scores.masked_fill(future, -std::numeric_limits<float>::infinity());
        const auto attn = at::matmul(at::softmax(scores, -1, at::kFloat).to(v.scalar_type()), v);
        return at::linear(attn.transpose(1, 2).reshape({b, t, h * d}), weights[3]);
      };
      at::Tensor keys, values;  // the module's cache
      int64_t offset = 0;
      const std::vector<std::pair<int64_t, bool>> steps{{9, false}, {5, true}, {1, true}, {3, true}, {1, true}};
      for (const auto& [t, cached] : steps) {
        const std::string what = "kv_heads " + std::to_string(kv_heads) + (bf16 ? " bf16" : " float32") + " offset " +
                                 std::to_string(offset) + " T " + std::to_string(t);
        const auto x0 = torch::randn({b, t, config.dim}), upstream = torch::randn({b, t, config.dim});
        auto x = x0.clone().requires_grad_(), x_ref = x0.clone().requires_grad_();
        at::Tensor mine, theirs;
        {
          meridian::nn::AutocastScope autocast(c10::DeviceType::CPU, bf16);
          mine = attention->forward(x, cos_all.narrow(0, offset, t), sin_all.narrow(0, offset, t),
                                    cached ? &keys : nullptr, cached ? &values : nullptr);
          theirs = reference(x_ref, offset, cached);
        }
        if (cached) keys = keys.detach(), values = values.detach(), offset += t;
        (mine.to(at::kFloat) * upstream).sum().backward();
        (theirs.to(at::kFloat) * upstream).sum().backward();
        const double tolerance = bf16 ? 1e-2 : 1e-5;
        EXPECT_LT(meridian::test::relative_error(mine, theirs), tolerance) << what;
        EXPECT_LT(meridian::test::relative_error(x.grad(), x_ref.grad()), tolerance) << what << " dx";
        for (size_t i = 0; i < names.size(); ++i) {
          EXPECT_LT(meridian::test::relative_error(params[names[i]].grad(), weights[i].grad()), tolerance)
              << what << " " << names[i];
          params[names[i]].mutable_grad() = at::Tensor();
          weights[i].mutable_grad() = at::Tensor();
        }
      }
    }
}
