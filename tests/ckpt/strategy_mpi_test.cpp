// Every train::Strategy through a checkpoint, and ZeRO's memory plan against the units it builds.
//  - Round trips (1 and 2 ranks): DDP + AdamW, DDP + SGD, ZeRO-1, -2 and -3 train a small Llama (its
//    layers are blocks: ZeRO-2/3 units) 3 steps, save, and a fresh trainer restores and trains 2
//    more; its final state (the strategy's own save: parameters and optimizer state, shards
//    included) equals a straight 5-step run's bit for bit. A checkpoint of another optimizer kind is
//    refused on every rank, naming both.
//  - Faults under the file layer (ckpt::Files, a test implementation here) in each of its
//    operations: a full disk or an I/O error while one rank writes, a failed file creation or fsync
//    on one rank, and a failed directory creation or rename, are a SystemError on every rank; `latest`
//    still names the previous checkpoint and neither the new file nor its .tmp is left. A failed
//    fsync of the directory or write of `latest` leaves the complete new file but `latest` unchanged;
//    a failed removal or listing by retention is an error once `latest` names the new checkpoint.
//    After each, --resume auto resumes every rank from the checkpoint `latest` names. A failed
//    listing, read of `latest` or move aside of a newer checkpoint while choosing where to resume is
//    a UserError on every rank. A short read on one rank and an I/O error on every rank while
//    resuming are errors on every rank naming the file and the tensor.
//  - The plan: tasks::lm_memory's closed form from a Llama config (no model built) equals
//    ShardedAdamW::memory_report() of the real model's units for stages 1-3; for SigLIP and the
//    detector, the units equal what the model's blocks hold, counted from the modules.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "meridian/ckpt/checkpoint.h"
#include "meridian/ckpt/files.h"
#include "meridian/comm/communicator.h"
#include "meridian/comm/runtime.h"
#include "meridian/core/config.h"
#include "meridian/core/error.h"
#include "meridian/core/files.h"
#include "meridian/models/llama.h"
#include "meridian/models/siglip.h"
#include "meridian/models/yolo.h"
#include "meridian/tasks/lm_task.h"
#include "meridian/train/trainer.h"
#include "mpi_test_main.h"

using meridian::test::runtime;
namespace ckpt = meridian::ckpt;
namespace comm = meridian::comm;
namespace models = meridian::models;
namespace nn = meridian::nn;
namespace train = meridian::train;
using meridian::Config;

namespace {

models::LlamaConfig tiny_llama() {
  models::LlamaConfig c;
  c.vocab_size = 97, c.dim = 32, c.layers = 3, c.heads = 4, c.kv_heads = 2, c.hidden = 48, c.max_seq_len = 16;
  return c;
}

// Next-token loss of a small Llama on random tokens, drawn from (rank, batch number): a resumed run
// sees the batches a straight one does once `batches` is set to the steps done.
class TinyLm : public train::Task {
 public:
  TinyLm() : model_(tiny_llama()) {}
  std::string name() const override { return "tiny-lm"; }
  std::shared_ptr<torch::nn::Module> model() override { return model_.ptr(); }
  int64_t batch_size() const override { return 2; }
  double flops_per_sample() const override { return 1; }
  void next_batch() override {
    auto gen = at::detail::createCPUGenerator(uint64_t(1000 * runtime().rank() + batches_++));
    tokens_ = at::randint(97, {2, 9}, gen, at::kLong);
  }
  at::Tensor forward() override {
    const auto logits = model_->forward(tokens_.narrow(1, 0, 8));
    return at::cross_entropy_loss(logits.reshape({-1, 97}), tokens_.narrow(1, 1, 8).reshape({-1}));
  }
  nn::BlockRunner* blocks() override { return &model_->blocks(); }
  train::DataPosition data_position() const override { return {0, batches_}; }
  int64_t batches_ = 0;

 private:
  models::Llama model_;
  at::Tensor tokens_;
};

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

std::string temp_dir() {
  // Rank 0 names it, every rank uses it (one host under mpirun in these tests).
  std::string dir;
  if (runtime().rank() == 0) {
    char pattern[] = "/tmp/meridian-strategy-XXXXXX";
    dir = mkdtemp(pattern);
  }
  return runtime().allgather(dir)[0];
}

struct Run {
  std::unique_ptr<TinyLm> task;
  std::unique_ptr<train::Trainer> trainer;
};

Run make_run(const std::string& optim, int64_t steps, int64_t stop_at, uint64_t seed) {
  const Config config =
      Config::parse("train: {steps: " + std::to_string(steps) + ", stop_at: " + std::to_string(stop_at) +
                        ", log_every: 100, health_every: 0}\noptim: {" + optim + ", lr: 0.01, warmup: 2, clip: 0.5}\n",
                    "strategy.yaml");
  train::seed(seed);
  Run r;
  r.task = std::make_unique<TinyLm>();
  r.trainer = std::make_unique<train::Trainer>(runtime(), *r.task, train::TrainerSettings::from_config(config),
                                               train::TrainerOptions{config, "", {}, ""});
  return r;
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

TEST(StrategyCheckpointKinds, AnotherOptimizersStateIsRefusedOnEveryRank) {
  const std::string dir = temp_dir();
  std::string path;
  {
    auto a = make_run("name: sgd, momentum: 0.9", 2, 0, 1);
    a.trainer->run();
    ckpt::CheckpointSettings cs;
    cs.dir = dir;
    path = ckpt::save(runtime(), *a.trainer, Config::parse("{}", "saved.yaml"), cs);
  }
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

// --- Faults under the file layer ---

// Fails one kind of operation, on one rank (-1: every rank), for one target: a dataset (writes and
// reads) or the end of a path (file operations); "": any.
class FaultyFiles : public ckpt::Files {
 public:
  enum Fault {
    FullDisk,
    WriteError,
    ShortRead,
    ReadError,
    Rename,
    Create,
    CreateDir,
    FileSync,
    DirSync,
    Latest,
    Remove,
    List,
    ReadLatest
  };
  FaultyFiles(Fault fault, int rank, std::string target) : fault_(fault), rank_(rank), target_(std::move(target)) {}
  void on_create(const std::string& path) override { fail_if(Create, path); }
  void on_write(const std::string&, const std::string& dataset) override {
    if ((fault_ == FullDisk || fault_ == WriteError) && here(dataset))
      throw meridian::SystemError(std::strerror(fault_ == FullDisk ? ENOSPC : EIO));
  }
  void on_read(const std::string&, const std::string& dataset, at::Tensor& data) override {
    if (fault_ == ReadError && here(dataset)) throw meridian::SystemError(std::strerror(EIO));
    if (fault_ == ShortRead && here(dataset)) {  // the second half never arrived: the buffer holds other bytes
      auto bytes = data.view(at::kByte).reshape({-1});
      bytes.narrow(0, bytes.numel() / 2, bytes.numel() - bytes.numel() / 2).fill_(0xA5);
    }
  }
  void create_dir(const std::string& dir) override {
    fail_if(CreateDir, dir, "cannot create the checkpoint directory '" + dir + "': ");
    Files::create_dir(dir);
  }
  void rename(const std::string& from, const std::string& to) override {
    fail_if(Rename, to, "cannot rename " + from + " to " + to + ": ");
    Files::rename(from, to);
  }
  void remove(const std::string& path) override {
    fail_if(Remove, path, "cannot remove " + path + ": ");
    Files::remove(path);
  }
  void sync_file(const std::string& path) override {
    fail_if(FileSync, path, "fsync failed: ");
    Files::sync_file(path);
  }
  void sync_dir(const std::string& dir) override {
    fail_if(DirSync, dir, "cannot fsync the directory '" + dir + "': ");
    Files::sync_dir(dir);
  }
  void write_small(const std::string& path, const std::string& contents) override {
    fail_if(Latest, path, "cannot write '" + path + ".tmp': ");
    Files::write_small(path, contents);
  }
  std::optional<std::string> read_small(const std::string& path) override {
    fail_if(ReadLatest, path, "cannot read " + path + ": ");
    return Files::read_small(path);
  }
  std::vector<std::string> list(const std::string& dir) override {
    fail_if(List, dir, "cannot list " + dir + ": ");
    return Files::list(dir);
  }

 private:
  bool here(const std::string& target) const {
    return (rank_ < 0 || rank_ == runtime().rank()) &&
           (target_.empty() || (target.size() >= target_.size() &&
                                target.compare(target.size() - target_.size(), target_.size(), target_) == 0));
  }
  void fail_if(Fault fault, const std::string& path, const std::string& what = "") const {
    if (fault_ == fault && here(path)) throw meridian::SystemError(what + std::strerror(EIO));
  }
  Fault fault_;
  int rank_;
  std::string target_;
};

// Installs a file layer for a scope.
struct Installed {
  explicit Installed(ckpt::Files* f) { ckpt::set_files(f); }
  ~Installed() { ckpt::set_files(nullptr); }
};

std::string latest(const std::string& dir) {
  std::ifstream in(dir + "/latest");
  std::string name;
  in >> name;
  return name;
}

// What a failed save leaves in the directory besides the previous checkpoint.
enum class Left {
  Nothing,   // neither step_3.h5 nor its .tmp; `latest` names step 2
  NewFile,   // step_3.h5 complete but `latest` still names step 2 (a resume moves step 3 aside)
  NewLatest  // step_3.h5 and `latest` naming it: only retention failed
};

// A good checkpoint at step 2, then a save at step 3 (keeping the newest only) under `fault`: an
// error on every rank, and a directory a run resumes from.
void expect_failed_save(FaultyFiles::Fault fault, int rank, const std::string& target, const std::string& reason,
                        Left left = Left::Nothing) {
  const std::string dir = temp_dir();
  auto a = make_run("zero: 2", 2, 0, 3);
  a.trainer->run();
  ckpt::CheckpointSettings cs;
  cs.dir = dir;
  cs.keep_last = 1;
  const Config saved = Config::parse("{}", "saved.yaml");
  ckpt::save(runtime(), *a.trainer, saved, cs);
  auto state = a.trainer->state();
  state.step = 3;
  a.trainer->set_state(state);
  {
    FaultyFiles faulty(fault, rank, target);
    Installed installed(&faulty);
    try {
      ckpt::save(runtime(), *a.trainer, saved, cs);
      ADD_FAILURE() << "the save under " << reason << " succeeded";
    } catch (const meridian::SystemError& e) {
      EXPECT_NE(std::string(e.what()).find(reason), std::string::npos) << e.what();
    }
  }
  runtime().barrier();  // rank 0 has removed the .tmp before it rethrew
  EXPECT_EQ(latest(dir), left == Left::NewLatest ? "step_00000003.h5" : "step_00000002.h5") << reason;
  EXPECT_EQ(std::filesystem::exists(dir + "/step_00000003.h5"), left != Left::Nothing) << reason;
  EXPECT_FALSE(std::filesystem::exists(dir + "/step_00000003.h5.tmp")) << reason;
  EXPECT_TRUE(std::filesystem::exists(dir + "/step_00000002.h5")) << reason;
  const auto point = ckpt::find_resumable(dir, nullptr);
  ASSERT_TRUE(point.has_value());
  EXPECT_EQ(point->step, left == Left::NewLatest ? 3 : 2) << reason;
  // The run resumes from there on every rank (a newer step 3 moved aside).
  const auto chosen = ckpt::choose_resume_point(runtime(), "auto", dir);
  ASSERT_TRUE(chosen.has_value());
  EXPECT_EQ(chosen->step, point->step) << reason;
  auto b = make_run("zero: 2", 4, 0, 5);
  ckpt::restore(runtime(), *b.trainer, *chosen);
  EXPECT_EQ(b.trainer->step(), point->step) << reason;
  runtime().barrier();
  if (runtime().rank() == 0) std::filesystem::remove_all(dir);
}

TEST(CheckpointFaults, FullDiskOnOneRankFailsTheSaveEverywhere) {
  expect_failed_save(FaultyFiles::FullDisk, runtime().size() - 1, "", std::strerror(ENOSPC));
}

TEST(CheckpointFaults, WriteErrorOnOneTensorFailsTheSaveEverywhere) {
  expect_failed_save(FaultyFiles::WriteError, 0, "model/model.norm.weight", std::strerror(EIO));
}

TEST(CheckpointFaults, FailedCreateOnOneRankFailsTheSaveEverywhere) {
  expect_failed_save(FaultyFiles::Create, runtime().size() - 1, "", "checkpoint write failed (create)");
}

TEST(CheckpointFaults, FailedDirectoryCreationFailsTheSaveEverywhere) {
  expect_failed_save(FaultyFiles::CreateDir, 0, "", "cannot create the checkpoint directory");
}

TEST(CheckpointFaults, FailedFsyncOnOneRankFailsTheSaveEverywhere) {
  expect_failed_save(FaultyFiles::FileSync, runtime().size() - 1, "", "checkpoint write failed (fsync)");
}

TEST(CheckpointFaults, FailedRenameLeavesLatestAndNoFile) {
  expect_failed_save(FaultyFiles::Rename, 0, "", "cannot rename");
}

TEST(CheckpointFaults, FailedDirectoryFsyncLeavesLatest) {
  expect_failed_save(FaultyFiles::DirSync, 0, "", "cannot fsync the directory", Left::NewFile);
}

TEST(CheckpointFaults, FailedWriteOfLatestLeavesLatest) {
  expect_failed_save(FaultyFiles::Latest, 0, "/latest", "cannot write", Left::NewFile);
}

TEST(CheckpointFaults, FailedRetentionRemovalIsAnErrorEverywhere) {
  expect_failed_save(FaultyFiles::Remove, 0, "step_00000002.h5", "retention failed: cannot remove", Left::NewLatest);
}

TEST(CheckpointFaults, FailedRetentionListingIsAnErrorEverywhere) {
  expect_failed_save(FaultyFiles::List, 0, "", "retention failed: cannot list", Left::NewLatest);
}

// A directory with checkpoints at steps 2 and 3 and `latest` naming step 2 (a save whose `latest`
// write failed), resumed with --resume auto under `fault`: a UserError on every rank naming
// --resume and the reason; nothing moved.
void expect_failed_choice(FaultyFiles::Fault fault, const std::string& target, const std::string& reason) {
  const std::string dir = temp_dir();
  auto a = make_run("name: adamw", 3, 0, 3);
  a.trainer->run();
  ckpt::CheckpointSettings cs;
  cs.dir = dir;
  const Config saved = Config::parse("{}", "saved.yaml");
  auto state = a.trainer->state();
  state.step = 2;
  a.trainer->set_state(state);
  ckpt::save(runtime(), *a.trainer, saved, cs);
  state.step = 3;
  a.trainer->set_state(state);
  ckpt::save(runtime(), *a.trainer, saved, cs);
  if (runtime().rank() == 0) meridian::write_file_atomically(dir + "/latest", "step_00000002.h5\n");
  runtime().barrier();
  {
    FaultyFiles faulty(fault, 0, target);
    Installed installed(&faulty);
    try {
      ckpt::choose_resume_point(runtime(), "auto", dir);
      ADD_FAILURE() << "the resume under " << reason << " succeeded";
    } catch (const meridian::UserError& e) {
      const std::string what = e.what();
      EXPECT_EQ(what.rfind("--resume auto: ", 0), 0u) << what;
      EXPECT_NE(what.find(reason), std::string::npos) << what;
    }
  }
  runtime().barrier();
  EXPECT_TRUE(std::filesystem::exists(dir + "/step_00000003.h5")) << reason;
  EXPECT_EQ(latest(dir), "step_00000002.h5") << reason;
  runtime().barrier();
  if (runtime().rank() == 0) std::filesystem::remove_all(dir);
}

TEST(CheckpointFaults, FailedListingOnResumeIsAnErrorEverywhere) {
  expect_failed_choice(FaultyFiles::List, "", "cannot list");
}

TEST(CheckpointFaults, FailedReadOfLatestOnResumeIsAnErrorEverywhere) {
  expect_failed_choice(FaultyFiles::ReadLatest, "/latest", "cannot read");
}

TEST(CheckpointFaults, FailedMoveAsideOnResumeIsAnErrorEverywhere) {
  expect_failed_choice(FaultyFiles::Rename, ".abandoned", "cannot rename");
}

// A good checkpoint, resumed under `fault`: an error on every rank naming the file and the tensor.
void expect_failed_restore(FaultyFiles::Fault fault, int rank, const std::string& dataset, const std::string& reason) {
  const std::string dir = temp_dir();
  std::string path;
  {
    auto a = make_run("name: adamw", 2, 0, 3);
    a.trainer->run();
    ckpt::CheckpointSettings cs;
    cs.dir = dir;
    path = ckpt::save(runtime(), *a.trainer, Config::parse("{}", "saved.yaml"), cs);
  }
  auto b = make_run("name: adamw", 4, 0, 4);
  {
    FaultyFiles faulty(fault, rank, dataset);
    Installed installed(&faulty);
    try {
      ckpt::restore(runtime(), *b.trainer, ckpt::read_resume_point(path, /*verify=*/false));
      ADD_FAILURE() << "the restore under " << reason << " succeeded";
    } catch (const meridian::UserError& e) {
      const std::string what = e.what();
      EXPECT_NE(what.find(reason), std::string::npos) << what;
      EXPECT_NE(what.find(path), std::string::npos) << what;
      EXPECT_NE(what.find(dataset), std::string::npos) << what;
    }
  }
  runtime().barrier();
  if (runtime().rank() == 0) std::filesystem::remove_all(dir);
}

TEST(CheckpointFaults, ShortReadOnOneRankIsCaughtEverywhere) {
  expect_failed_restore(FaultyFiles::ShortRead, runtime().size() - 1, "model/model.embed_tokens.weight",
                        "checksum mismatch");
}

TEST(CheckpointFaults, ReadErrorOnEveryRankIsCaught) {
  expect_failed_restore(FaultyFiles::ReadError, -1, "optim/model.norm.weight/step", std::strerror(EIO));
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
