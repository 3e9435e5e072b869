// The SigLIP model and its distributed sigmoid loss against single-process references.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include "meridian/comm/communicator.h"
#include "meridian/core/config.h"
#include "meridian/models/siglip.h"
#include "mpi_test_main.h"

using meridian::test::runtime;
namespace models = meridian::models;

namespace {
std::unique_ptr<meridian::comm::Communicator> g_comm;

class Siglip : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { g_comm = meridian::comm::make_communicator(runtime(), meridian::comm::Backend::MPI); }
  static void TearDownTestSuite() { g_comm.reset(); }
};

// The loss written out pair by pair, on one process: -(1 / (N b)) sum over all pairs.
torch::Tensor reference_loss(const torch::Tensor& images, const torch::Tensor& texts, const torch::Tensor& scale,
                             const torch::Tensor& bias) {
  const int64_t n = images.size(0);
  torch::Tensor total = torch::zeros({}, images.options());
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 0; j < n; ++j) {
      const double z = i == j ? 1.0 : -1.0;
      total = total - torch::log_sigmoid(z * ((images[i] * texts[j]).sum() * scale.exp() + bias)).squeeze();
    }
  return total / double(n);
}
}  // namespace

TEST_F(Siglip, DistributedLossAndGradientsEqualTheWholeBatchOnOneProcess) {
  const int n = runtime().size(), r = runtime().rank();
  const int64_t b = 3, e = 6;
  torch::manual_seed(5);
  const auto all_images = torch::nn::functional::normalize(torch::randn({n * b, e}, torch::kDouble),
                                                           torch::nn::functional::NormalizeFuncOptions().dim(1));
  const auto all_texts = torch::nn::functional::normalize(torch::randn({n * b, e}, torch::kDouble),
                                                          torch::nn::functional::NormalizeFuncOptions().dim(1));
  auto scale = torch::full({1}, std::log(10.0), torch::kDouble).set_requires_grad(true);
  auto bias = torch::full({1}, -2.0, torch::kDouble).set_requires_grad(true);
  auto images = all_images.narrow(0, r * b, b).clone().set_requires_grad(true);
  auto texts = all_texts.narrow(0, r * b, b).clone().set_requires_grad(true);
  const auto loss = models::siglip_loss(images, texts, scale, bias, g_comm.get());
  loss.backward();
  auto mean = loss.detach().reshape({1}).clone();
  g_comm->allreduce(mean, meridian::comm::ReduceOp::Avg);
  // Scale and bias gradients are summed over ranks here (DDP would average them: / N).
  auto scale_grad = scale.grad().clone(), bias_grad = bias.grad().clone();
  g_comm->allreduce(scale_grad);
  g_comm->allreduce(bias_grad);

  auto ref_images = all_images.clone().set_requires_grad(true), ref_texts = all_texts.clone().set_requires_grad(true);
  auto ref_scale = torch::full({1}, std::log(10.0), torch::kDouble).set_requires_grad(true);
  auto ref_bias = torch::full({1}, -2.0, torch::kDouble).set_requires_grad(true);
  const auto ref = reference_loss(ref_images, ref_texts, ref_scale, ref_bias);
  ref.backward();
  EXPECT_NEAR(mean.item<double>(), ref.item<double>(), 1e-12);
  // Gradients of sum_r loss_r = N x the whole-batch loss.
  EXPECT_TRUE(torch::allclose(images.grad(), n * ref_images.grad().narrow(0, r * b, b), 1e-10, 1e-12));
  EXPECT_TRUE(torch::allclose(texts.grad(), n * ref_texts.grad().narrow(0, r * b, b), 1e-10, 1e-12));
  EXPECT_NEAR(scale_grad.item<double>(), n * ref_scale.grad().item<double>(), 1e-10);
  EXPECT_NEAR(bias_grad.item<double>(), n * ref_bias.grad().item<double>(), 1e-10);
}

// CLIP's loss written out row by row: -log(exp(t s_ii) / sum_j exp(t s_ij)) averaged over images,
// the same over texts, and the two averaged.
torch::Tensor reference_clip_loss(const torch::Tensor& images, const torch::Tensor& texts, const torch::Tensor& scale) {
  const int64_t n = images.size(0);
  torch::Tensor total = torch::zeros({}, images.options());
  for (int64_t i = 0; i < n; ++i) {
    const auto by_image = (images[i].unsqueeze(0) * texts).sum(1) * scale.exp();  // [n]
    const auto by_text = (texts[i].unsqueeze(0) * images).sum(1) * scale.exp();
    total = total - (by_image[i] - by_image.exp().sum().log()) - (by_text[i] - by_text.exp().sum().log());
  }
  return total / double(2 * n);
}

TEST_F(Siglip, DistributedClipLossAndGradientsEqualTheWholeBatchOnOneProcess) {
  const int n = runtime().size(), r = runtime().rank();
  const int64_t b = 4, e = 5;
  torch::manual_seed(6);
  namespace F = torch::nn::functional;
  const auto all_images = F::normalize(torch::randn({n * b, e}, torch::kDouble), F::NormalizeFuncOptions().dim(1));
  const auto all_texts = F::normalize(torch::randn({n * b, e}, torch::kDouble), F::NormalizeFuncOptions().dim(1));
  auto scale = torch::full({1}, std::log(10.0), torch::kDouble).set_requires_grad(true);
  auto images = all_images.narrow(0, r * b, b).clone().set_requires_grad(true);
  auto texts = all_texts.narrow(0, r * b, b).clone().set_requires_grad(true);
  const auto loss = models::clip_loss(images, texts, scale, g_comm.get());
  loss.backward();
  auto mean = loss.detach().reshape({1}).clone();
  g_comm->allreduce(mean, meridian::comm::ReduceOp::Avg);
  auto scale_grad = scale.grad().clone();
  g_comm->allreduce(scale_grad);

  auto ref_images = all_images.clone().set_requires_grad(true), ref_texts = all_texts.clone().set_requires_grad(true);
  auto ref_scale = torch::full({1}, std::log(10.0), torch::kDouble).set_requires_grad(true);
  const auto ref = reference_clip_loss(ref_images, ref_texts, ref_scale);
  ref.backward();
  EXPECT_NEAR(mean.item<double>(), ref.item<double>(), 1e-12);
  EXPECT_TRUE(torch::allclose(images.grad(), n * ref_images.grad().narrow(0, r * b, b), 1e-10, 1e-12));
  EXPECT_TRUE(torch::allclose(texts.grad(), n * ref_texts.grad().narrow(0, r * b, b), 1e-10, 1e-12));
  EXPECT_NEAR(scale_grad.item<double>(), n * ref_scale.grad().item<double>(), 1e-10);
}

TEST_F(Siglip, TinyPresetShapesParametersAndFlops) {
  const auto config = models::SiglipConfig::from_config(
      meridian::Config::load_file(MERIDIAN_SOURCE_DIR "/jobs/configs/siglip-tiny.yaml"));
  torch::manual_seed(0);
  models::Siglip model(config);
  // Closed form, Hugging Face's SiglipModel: per layer q, k, v, out (4 w^2 + 4 w), the MLP (2 w h + h + w)
  // and two layer norms (4 w); the vision tower adds patches, positions, the post-layernorm and the
  // pooling head (probe, in/out projections, layernorm, MLP); the text tower tokens, positions, the
  // final layer norm and its head.
  const int64_t w = 192, h = 768, blocks = 4 * (4 * w * w + 2 * w * h + 9 * w + h);
  const int64_t mlp = 2 * w * h + h + w;
  const int64_t vision = 3 * 16 * 16 * w + w + 64 * w + blocks + 2 * w + (w + 4 * w * w + 4 * w + 2 * w + mlp);
  const int64_t text = 8000 * w + 32 * w + blocks + 2 * w + w * 192 + 192;
  EXPECT_EQ(models::parameter_count(*model), vision + text + 2);
  EXPECT_EQ(config.parameter_count(), vision + text + 2);
  const auto images = model->encode_images(torch::randn({2, 3, 128, 128}));
  const auto texts = model->encode_text(torch::randint(4, 8000, {2, 32}));
  EXPECT_EQ(images.sizes(), (at::IntArrayRef{2, 192}));
  EXPECT_EQ(texts.sizes(), (at::IntArrayRef{2, 192}));
  EXPECT_TRUE(torch::allclose(images.norm(2, 1), torch::ones({2}), 1e-5, 1e-5));
  EXPECT_TRUE(torch::allclose(texts.norm(2, 1), torch::ones({2}), 1e-5, 1e-5));
  // No mask: every position, padding included, reaches the pooled last one.
  const auto tokens = torch::randint(4, 8000, {1, 32});
  auto changed = tokens.clone();
  changed.narrow(1, 10, 1).fill_(7);
  EXPECT_FALSE(torch::allclose(model->encode_text(tokens), model->encode_text(changed), 1e-5, 1e-6));
  // The names are transformers'.
  const auto names = model->named_parameters().keys();
  for (const std::string name :
       {"vision_model.embeddings.patch_embedding.weight", "vision_model.encoder.layers.3.self_attn.q_proj.bias",
        "vision_model.head.attention.in_proj_weight", "vision_model.head.probe", "vision_model.head.mlp.fc2.weight",
        "vision_model.post_layernorm.weight", "text_model.embeddings.token_embedding.weight",
        "text_model.encoder.layers.0.layer_norm2.bias", "text_model.final_layer_norm.bias", "text_model.head.weight",
        "logit_scale", "logit_bias"})
    EXPECT_NE(std::find(names.begin(), names.end(), name), names.end()) << name;
  // 2 x multiply-adds of the matmuls: about 0.26 GFLOP in the image tower (64 patches) and 0.12 in
  // the text tower (32 tokens); attention scores included.
  EXPECT_GT(config.flops_per_sample(), 3.5e8);
  EXPECT_LT(config.flops_per_sample(), 4.0e8);
}

TEST_F(Siglip, PublishedPresetsHaveThePublishedParameterCounts) {
  // Counted with transformers' SiglipModel itself (5.25, built on the meta device) for each
  // published config.json: google/siglip-base-patch16-224/256/384, large-patch16-256, so400m-patch14-384.
  const auto preset = [](const char* file, int64_t image_size = 0) {
    auto config = meridian::Config::load_file(std::string(MERIDIAN_SOURCE_DIR "/jobs/configs/") + file);
    if (image_size) config.set("model.image_size", std::to_string(image_size));
    return models::SiglipConfig::from_config(config).parameter_count();
  };
  EXPECT_EQ(preset("siglip-base.yaml", 224), 203155970);
  EXPECT_EQ(preset("siglip-base.yaml"), 203202050);
  EXPECT_EQ(preset("siglip-base.yaml", 384), 203447810);
  EXPECT_EQ(preset("siglip-large.yaml"), 652150786);
  EXPECT_EQ(preset("siglip-so400m.yaml"), 877960498);
}

TEST_F(Siglip, ConfigErrorsNameTheField) {
  const auto bad = meridian::Config::parse("model:\n  image_size: 10\n  patch: 16\n", "bad.yaml");
  try {
    models::SiglipConfig::from_config(bad);
    FAIL() << "no error";
  } catch (const meridian::ConfigError& e) {
    EXPECT_STREQ(e.what(), "bad.yaml: field 'model.patch': must be at most model.image_size (10)");
  }
}
