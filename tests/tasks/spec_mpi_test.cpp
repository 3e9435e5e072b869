// Every task through its TaskSpec on tiny synthetic data, as the program uses it: the config
// validated and resolved (tasks::resolve_run), the train::Task made, a batch read, a forward whose loss is finite and
// whose backward reaches the parameters, an evaluation that reports every metric the spec names,
// the model summary counting the task's own model, and the commands the spec lacks refused with a
// message naming the tasks that have them.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cmath>
#include <filesystem>
#include <functional>
#include <map>

#include "meridian/comm/runtime.h"
#include "meridian/data/synthetic_prep.h"
#include "meridian/tasks/registry.h"
#include "meridian/tasks/run.h"
#include "meridian/train/settings.h"
#include "mpi_test_main.h"

using meridian::test::runtime;
namespace data = meridian::data;
namespace tasks = meridian::tasks;
namespace fs = std::filesystem;
using meridian::Config;

namespace {

// A directory every rank sees, removed after the last test.
const std::string& shared_dir() {
  static const std::string dir = meridian::test::shared_temp_dir("meridian_tasks_test");
  return dir;
}

// Each task's tiny dataset and config (the smallest the models take).
struct Case {
  std::function<void(const data::PrepSyntheticOptions&)> prep;
  int size, vocab;  // image size, the tokenizer's vocabulary at most
  std::string yaml;
};

const std::map<std::string, Case>& cases() {
  static const std::map<std::string, Case> c{
      {"siglip",
       {[](const data::PrepSyntheticOptions& o) { data::prep_synthetic_image_text(runtime(), o); }, 32, 300,
        "task: {name: siglip, prompts: ['a photo of {}.']}\n"
        "model: {image_size: 32, patch: 8, context_length: 16, vocab_size: 300, embed: 32,\n"
        "        vision: {width: 32, depth: 1, heads: 2, mlp_ratio: 2}, text: {width: 32, depth: 1, heads: 2, "
        "mlp_ratio: 2}}\n"
        "train: {batch: 4}\n"}},
      {"lm",
       {[](const data::PrepSyntheticOptions& o) { data::prep_synthetic_text(runtime(), o); }, 32, 512,
        "task: {name: lm}\n"
        "model: {vocab_size: 512, dim: 32, layers: 1, heads: 2, kv_heads: 1, hidden: 64, max_seq_len: 128}\n"
        "train: {batch: 2}\n"}},
      {"detect",
       {[](const data::PrepSyntheticOptions& o) { data::prep_synthetic_detection(runtime(), o); }, 64, 300,
        "task: {name: detect}\n"
        "model: {yaml: yolov8n.yaml, width: 0.125}\n"
        "data: {augment: false}\n"
        "optim: {name: adamw}\n"
        "train: {batch: 2}\n"}},
  };
  return c;
}

// The dataset of `task` (written once, collectively).
std::string dataset(const std::string& task) {
  static std::map<std::string, std::string> made;
  if (!made.count(task)) {
    data::PrepSyntheticOptions o;
    o.out = shared_dir() + "/" + task + ".h5";
    o.count = 24;
    o.size = cases().at(task).size;
    o.context_length = 16;
    o.vocab_size = cases().at(task).vocab;
    o.captions_per_image = 2;
    cases().at(task).prep(o);
    made[task] = o.out;
  }
  return made[task];
}

Config config_of(const std::string& task) {
  Config c = Config::parse(cases().at(task).yaml, task + " test config");
  c.set("data.train", dataset(task));
  c.set("data.eval", dataset(task));
  return c;
}

TEST(TaskSpec, EveryTaskHasATestCaseAndTheRequiredMembers) {
  ASSERT_EQ(tasks::task_specs().size(), cases().size());
  for (const tasks::TaskSpec* s : tasks::task_specs()) {
    SCOPED_TRACE(s->name);
    EXPECT_TRUE(cases().count(s->name));
    EXPECT_TRUE(s->declare && s->make && s->summarize) << "declare, make and summarize are required";
    EXPECT_FALSE(s->metrics.empty());
    EXPECT_EQ(s->hf_model_type == nullptr, s->init_config_keys == nullptr);
    EXPECT_EQ(&tasks::task_spec(Config::parse(std::string("task: {name: ") + s->name + "}", "t")), s);
  }
  EXPECT_EQ(&tasks::task_spec(Config()), tasks::task_specs().front());  // task.name's default
}

TEST(TaskSpec, UnknownTaskNamesTheKnownOnes) {
  try {
    tasks::task_spec(Config::parse("task: {name: segment}", "run.yaml"));
    FAIL() << "no error";
  } catch (const meridian::ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("task.name"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("siglip, lm or detect, got 'segment'"), std::string::npos) << e.what();
  }
}

TEST(TaskSpec, MissingCommandNamesTheTasksThatHaveIt) {
  const tasks::TaskSpec& siglip = tasks::task_spec(Config::parse("task: {name: siglip}", "t"));
  try {
    tasks::need(siglip, &tasks::TaskSpec::generate, "generate", "run/step_8.h5");
    FAIL() << "no error";
  } catch (const meridian::UserError& e) {
    EXPECT_STREQ(e.what(), "generate: run/step_8.h5 is of task siglip; generate supports task lm");
  }
  EXPECT_EQ(tasks::need(siglip, &tasks::TaskSpec::export_checkpoint, "export", "x"), siglip.export_checkpoint);
}

// Each task: the config resolved, a batch, a forward, a backward, an evaluation with the spec's
// metrics, and the summary of the model the task trains.
class EveryTask : public ::testing::TestWithParam<std::string> {};

TEST_P(EveryTask, TrainsAStepAndEvaluates) {
  const std::string name = GetParam();
  Config given = config_of(name);
  tasks::validate_config(given);
  const tasks::ResolvedRun run = tasks::resolve_run(runtime(), given, "", "");
  const Config& config = run.config;
  const tasks::TaskSpec& spec = tasks::task_spec(config);
  ASSERT_STREQ(spec.name, name.c_str());
  torch::manual_seed(0);
  auto task = spec.make(runtime(), config, run.trainer, dataset(name), run.start);
  EXPECT_EQ(task->batch_size(), config.get<int64_t>("train.batch"));
  EXPECT_GT(task->batches_per_epoch(), 0);

  // Two batches (the same count on every rank: the forward may be collective), gradients summed: a
  // text window can hold no response token, and then no loss.
  for (int micro = 0; micro < 2; ++micro) {
    task->next_batch();
    const at::Tensor loss = task->forward();
    ASSERT_EQ(loss.numel(), 1);
    EXPECT_TRUE(std::isfinite(loss.item<double>())) << loss.item<double>();
    loss.backward();
  }
  double grad = 0;
  for (const auto& p : task->model()->parameters())
    if (p.grad().defined()) grad += p.grad().abs().sum().item<double>();
  EXPECT_GT(grad, 0) << "the loss reaches no parameter";

  const auto metrics = task->evaluate();
  std::map<std::string, double> by_name(metrics.begin(), metrics.end());
  for (const auto& m : spec.metrics) {
    ASSERT_TRUE(by_name.count(m)) << name << "'s evaluation lacks " << m;
    EXPECT_TRUE(std::isfinite(by_name[m])) << m;
  }

  // The summary is of the model the task trains (the same parameter count; lm's vocabulary is
  // raised to the tokenizer's when the config's is smaller, so its config here is not).
  const auto summary = spec.summarize(config, 0);
  EXPECT_EQ(summary.task, name);
  int64_t trained = 0, rows = 0;
  for (const auto& p : task->model()->parameters()) trained += p.numel();
  for (const auto& l : summary.layers) rows += l.parameters;
  EXPECT_EQ(summary.parameters, trained);
  EXPECT_EQ(rows, summary.parameters);
  EXPECT_GT(summary.gflops, 0);
}

// The pass resolves detect's policy (optim.name auto, the dataset's classes) and --print-config's
// text says where each value came from.
TEST(ResolveRun, SaysWhereEachValueCameFrom) {
  Config given = config_of("detect");
  given.set("optim.name", "auto", "--set");
  given.set("optim.clip", "3", "--set");
  tasks::validate_config(given);
  const tasks::ResolvedRun run = tasks::resolve_run(runtime(), given, "", "");
  EXPECT_NE(run.config.get<std::string>("optim.name"), "auto");
  ASSERT_EQ(run.notes.size(), 1u);
  EXPECT_EQ(run.notes[0].rfind("optim.name auto: adamw", 0), 0u) << run.notes[0];
  EXPECT_EQ(run.trainer.clip, 3);
  const std::string text = tasks::annotated_config(run.config);
  const auto line_of = [&](const std::string& start) {
    const auto at = text.find("\n" + start);
    return at == std::string::npos ? std::string() : text.substr(at + 1, text.find('\n', at + 1) - at - 1);
  };
  EXPECT_EQ(line_of("  name: adamw"), "  name: adamw  # optim.name auto (Ultralytics' rule)") << text;
  EXPECT_EQ(line_of("  clip: 3"), "  clip: 3  # --set") << text;
  EXPECT_EQ(line_of("  num_classes:"), "  num_classes: 5  # " + dataset("detect")) << text;
  EXPECT_EQ(line_of("  batch: 2"), "  batch: 2  # detect test config line 5") << text;
  const std::string accumulate = std::to_string(std::max<int64_t>(1, std::llround(64.0 / (2 * runtime().size()))));
  EXPECT_EQ(line_of("  accumulate:"), "  accumulate: " + accumulate + "  # optim.name auto (Ultralytics' rule)")
      << text;
  EXPECT_EQ(line_of("  stop_at:"), "  stop_at: 0  # default") << text;
}

INSTANTIATE_TEST_SUITE_P(Tasks, EveryTask, ::testing::Values("siglip", "lm", "detect"),
                         [](const ::testing::TestParamInfo<std::string>& i) { return i.param; });

}  // namespace
