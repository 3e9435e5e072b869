// Every train::Strategy through a checkpoint, and ZeRO's memory plan against the units it builds
// (faults under the file layer: files_mpi_test.cpp).
//  - Round trips (1 and 2 ranks): DDP + AdamW, DDP + SGD, ZeRO-1, -2 and -3 train a small Llama (its
//    layers are blocks: ZeRO-2/3 units) 3 steps, save, and a fresh trainer restores and trains 2
//    more; its final state (the strategy's own save: parameters and optimizer state, shards
//    included) equals a straight 5-step run's bit for bit. A checkpoint of another optimizer kind is
//    refused on every rank, naming both. Each rank's device generator (ranks/<r>/device_rng) is
//    where it was after a restore (a CPU stand-in without a GPU; the real one with).
//  - The plan: tasks::lm_memory's closed form from a Llama config (no model built) equals
//    ShardedAdamW::memory_report() of the real model's units for stages 1-3; for SigLIP and the
//    detector, the units equal what the model's blocks hold, counted from the modules.
#include <gtest/gtest.h>
#include <torch/cuda.h>
#include <torch/torch.h>

#include <cstdlib>
#include <filesystem>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "meridian/ckpt/checkpoint.h"
#include "meridian/comm/communicator.h"
#include "meridian/comm/runtime.h"
#include "meridian/core/config.h"
#include "meridian/core/error.h"
#include "meridian/models/llama.h"
#include "meridian/models/siglip.h"
#include "meridian/models/yolo.h"
#include "meridian/tasks/lm_task.h"
#include "meridian/train/trainer.h"
#include "mpi_test_main.h"
#include "tiny_run.h"

using meridian::test::runtime;
namespace ckpt = meridian::ckpt;
namespace comm = meridian::comm;
namespace models = meridian::models;
namespace nn = meridian::nn;
namespace train = meridian::train;
using meridian::Config;

namespace {

using meridian::test::make_run;
using meridian::test::temp_dir;
using meridian::test::tiny_llama;
using meridian::test::train_and_save;

// A strategy's save() kept in memory: tensors by name (shards by name and first element), attributes.
class MemoryWriter : public train::StateWriter {
 public:
  void replicated(const std::string& name, const at::Tensor& t) override { put(name, t); }
  void sharded(const std::string& name, int64_t, int64_t first, const at::Tensor& part, int64_t) override {
    put(name + "@" + std::to_string(first), part);
  }
  void per_rank(const std::string& name, const at::Tensor& mine) override { put("rank/" + name, mine); }
  void attribute(const std::string& name, int64_t value) override { text[name] = std::to_string(value); }
  void attribute(const std::string& name, const std::string& value) override { text[name] = value; }
  std::map<std::string, at::Tensor> tensors;
  std::map<std::string, std::string> text;

 private:
  void put(const std::string& name, const at::Tensor& t) {
    ASSERT_EQ(tensors.count(name), 0u) << name << " written twice";
    tensors[name] = t.detach().to(at::kCPU).clone();
  }
};

void expect_same(const MemoryWriter& a, const MemoryWriter& b, const std::string& what) {
  ASSERT_EQ(a.tensors.size(), b.tensors.size()) << what;
  for (const auto& [name, t] : a.tensors) {
    const auto it = b.tensors.find(name);
    ASSERT_NE(it, b.tensors.end()) << what << ": " << name << " missing";
    EXPECT_TRUE(t.sizes() == it->second.sizes() && t.dtype() == it->second.dtype() && at::equal(t, it->second))
        << what << ": " << name << " differs";
  }
  EXPECT_EQ(a.text, b.text) << what;
}

class StrategyCheckpoint : public ::testing::TestWithParam<std::string> {};

TEST_P(StrategyCheckpoint, ResumeEqualsStraightRunBitForBit) {
  const std::string optim = GetParam();
  const std::string dir = temp_dir();
  MemoryWriter straight, resumed;
  {
    auto s = make_run(optim, 5, 0, 7);
    s.trainer->run();
    s.trainer->strategy().save(straight);
  }
  std::string path;
  {
    auto a = make_run(optim, 5, 3, 7);
    ASSERT_TRUE(a.trainer->run().stopped);
    ckpt::CheckpointSettings cs;
    cs.dir = dir;
    path = ckpt::save(runtime(), *a.trainer, Config::parse("{}", "saved.yaml"), cs);
  }
  {
    auto b = make_run(optim, 5, 0, 99);  // other initial weights: the restore must replace them all
    ckpt::restore(runtime(), *b.trainer, ckpt::read_resume_point(path, /*verify=*/true));
    EXPECT_EQ(b.trainer->step(), 3);
    b.task->batches_ = 3;
    b.trainer->run();
    b.trainer->strategy().save(resumed);
  }
  expect_same(straight, resumed, optim);
  EXPECT_GT(straight.tensors.size(), 20u);  // parameters and optimizer state
  runtime().barrier();
  if (runtime().rank() == 0) std::filesystem::remove_all(dir);
}

INSTANTIATE_TEST_SUITE_P(EveryStrategy, StrategyCheckpoint,
                         ::testing::Values("name: adamw", "name: sgd, momentum: 0.9", "zero: 1", "zero: 2", "zero: 3"));

// ranks/<r>/device_rng: each rank's device generator is where it was after a restore. Where no GPU is
// present a CPU generator stands in for the GPU's (ckpt::set_device_generator_resolver); on a GPU
// machine the second case uses the real CUDA generator of cuda:0.
class DeviceRngCheckpoint : public ::testing::TestWithParam<bool> {};

TEST_P(DeviceRngCheckpoint, ResumesEachRanksDeviceGeneratorWhereItWas) {
  const bool real_gpu = GetParam();
  if (real_gpu && !torch::cuda::is_available()) GTEST_SKIP() << "no GPU on this machine";
  const c10::Device device = real_gpu ? c10::Device(c10::kCUDA, 0) : c10::Device(c10::kCPU);
  at::Generator gen =
      real_gpu ? ckpt::device_generator(device) : at::detail::createCPUGenerator(uint64_t(5 + runtime().rank()));
  ASSERT_TRUE(gen.defined());
  const auto previous = ckpt::set_device_generator_resolver([gen](const c10::Device&) { return gen; });
  const auto draw = [&] { return at::randn({16}, gen, at::TensorOptions().device(device)).cpu(); };
  const std::string dir = temp_dir();
  std::string path;
  {
    auto a = make_run("name: adamw", 5, 3, 7);
    ASSERT_TRUE(a.trainer->run().stopped);
    draw();  // the generator has moved on from its seed
    ckpt::CheckpointSettings cs;
    cs.dir = dir;
    path = ckpt::save(runtime(), *a.trainer, Config::parse("{}", "saved.yaml"), cs);
  }
  const at::Tensor expected = draw();
  const at::Tensor later = draw();  // the state moves on again before the restore
  EXPECT_FALSE(at::equal(expected, later));
  // This rank's own stream: the ranks' generators differ (the stand-ins' seeds; a GPU's per process).
  const auto all = runtime().allgather(std::to_string(expected[0].item<double>()));
  if (!real_gpu && runtime().size() > 1) EXPECT_NE(all[0], all[1]);
  {
    auto b = make_run("name: adamw", 5, 0, 99);
    ckpt::restore(runtime(), *b.trainer, ckpt::read_resume_point(path, /*verify=*/true));
  }
  EXPECT_TRUE(at::equal(draw(), expected));
  // A CPU run (no device generator) resumes from the same file: the device state is not its to restore.
  ckpt::set_device_generator_resolver({});
  {
    auto c = make_run("name: adamw", 5, 0, 99);
    EXPECT_NO_THROW(ckpt::restore(runtime(), *c.trainer, ckpt::read_resume_point(path, /*verify=*/true)));
  }
  ckpt::set_device_generator_resolver(previous);
  runtime().barrier();
  if (runtime().rank() == 0) std::filesystem::remove_all(dir);
}

INSTANTIATE_TEST_SUITE_P(StandInAndRealGpu, DeviceRngCheckpoint, ::testing::Values(false, true),
                         [](const auto& info) { return info.param ? "RealGpu" : "StandIn"; });

TEST(StrategyCheckpointKinds, AnotherOptimizersStateIsRefusedOnEveryRank) {
  const std::string dir = temp_dir();
  const std::string path = train_and_save("name: sgd, momentum: 0.9", 2, 1, dir);
  auto b = make_run("zero: 2", 2, 0, 1);
  try {
    ckpt::restore(runtime(), *b.trainer, ckpt::read_resume_point(path, false));
    ADD_FAILURE() << "an SGD checkpoint restored into ZeRO-2";
  } catch (const meridian::UserError& e) {
    EXPECT_NE(std::string(e.what()).find("holds sgd optimizer state"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("optim.name adamw"), std::string::npos) << e.what();
  }
  runtime().barrier();
  if (runtime().rank() == 0) std::filesystem::remove_all(dir);
}

// --- The memory plan ---

std::unique_ptr<comm::Communicator> make_comm() { return comm::make_communicator(runtime(), comm::Backend::MPI); }

std::vector<train::ParamGroup> two_groups(torch::nn::Module& m) {
  train::ParamGroup decaying{{}, 0.1, {}}, constant{{}, 0.0, {}};
  for (const auto& p : m.named_parameters()) {
    if (!p.value().requires_grad()) continue;  // frozen (the detector's DFL weights): not trained
    auto& g = p.value().dim() >= 2 ? decaying : constant;
    g.params.push_back(p.value());
    g.names.push_back(p.key());
  }
  return {decaying, constant};
}

void expect_report(const train::ZeroMemoryReport& plan, const train::ZeroMemoryReport& real, const std::string& what) {
  EXPECT_EQ(plan.numel, real.numel) << what;
  EXPECT_EQ(plan.shard_numel, real.shard_numel) << what;
  EXPECT_EQ(plan.largest_unit, real.largest_unit) << what;
  EXPECT_EQ(plan.outside_blocks, real.outside_blocks) << what;
  EXPECT_EQ(plan.parameter_bytes, real.parameter_bytes) << what;
  EXPECT_EQ(plan.gradient_bytes, real.gradient_bytes) << what;
  EXPECT_EQ(plan.optimizer_bytes, real.optimizer_bytes) << what;
  EXPECT_EQ(plan.buffer_bytes, real.buffer_bytes) << what;
}

TEST(MemoryPlan, LlamaClosedFormEqualsShardedAdamWsUnits) {
  auto comm = make_comm();
  for (const bool tied : {false, true})
    for (int stage = 1; stage <= 3; ++stage) {
      auto config = tiny_llama();
      config.tie_embeddings = tied;
      torch::manual_seed(1);
      models::Llama model(config);
      train::ShardedAdamW zero(
          two_groups(*model), {}, *comm,
          train::ZeroOptions{stage, train::kBucketNumel, &model->blocks(), model->parameters(), nullptr, at::kFloat});
      const std::string what = "stage " + std::to_string(stage) + (tied ? ", tied" : "");
      expect_report(meridian::tasks::lm_memory(config, stage, runtime().size()), zero.memory_report(), what);
      if (stage > 1) EXPECT_EQ(zero.memory_report().largest_unit, config.block_parameter_count()) << what;
    }
}

// Units of a model with (SigLIP) and without (the detector) blocks, against counts from the modules.
void expect_units_follow_modules(torch::nn::Module& model, nn::BlockRunner* blocks, int64_t closed_form,
                                 const std::string& what) {
  auto comm = make_comm();
  int64_t in_blocks = 0, largest_block = 0;
  std::vector<int64_t> block_numel;
  if (blocks)
    for (const auto& b : blocks->blocks()) {
      int64_t n = 0;
      for (const auto& p : b->parameters()) n += p.numel();
      block_numel.push_back(n), in_blocks += n, largest_block = std::max(largest_block, n);
    }
  ASSERT_LT(closed_form - in_blocks, train::kBucketNumel) << what << ": the rest is one unit";
  for (int stage = 2; stage <= 3; ++stage) {
    train::ShardedAdamW zero(
        two_groups(model), {}, *comm,
        train::ZeroOptions{stage, train::kBucketNumel, blocks, model.parameters(), nullptr, at::kFloat});
    const auto& units = zero.units();
    ASSERT_EQ(units.size(), block_numel.size() + 1) << what;
    for (size_t b = 0; b < block_numel.size(); ++b) {
      EXPECT_EQ(units[b].block, int(b)) << what;
      EXPECT_EQ(units[b].numel, block_numel[b]) << what << ", block " << b;
    }
    EXPECT_EQ(units.back().numel, closed_form - in_blocks) << what;
    const auto r = zero.memory_report();
    EXPECT_EQ(r.numel, closed_form) << what;
    EXPECT_EQ(r.largest_unit, std::max(largest_block, closed_form - in_blocks)) << what;
    EXPECT_EQ(r.outside_blocks, closed_form - in_blocks) << what;
  }
}

TEST(MemoryPlan, SiglipAndDetectorUnitsFollowTheirModules) {
  models::SiglipConfig sc;
  sc.image_size = 32, sc.patch = 8, sc.vocab_size = 50, sc.context_length = 8;
  sc.vision.width = sc.text.width = sc.embed = 32, sc.vision.heads = sc.text.heads = 2;
  sc.vision.depth = 2, sc.text.depth = 3;
  torch::manual_seed(1);
  models::Siglip siglip(sc);
  expect_units_follow_modules(*siglip, &siglip->blocks(), sc.parameter_count(), "siglip");
  models::Yolo yolo(models::YoloConfig::builtin("yolov8", "n", 80));
  // YOLOv8n's published count of parameters with gradients (3,157,200 less the DFL's fixed 16).
  expect_units_follow_modules(*yolo, nullptr, 3157184, "detector");
}

}  // namespace
