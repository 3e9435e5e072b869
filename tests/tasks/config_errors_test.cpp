// A bad config names the key, where it came from and the nearest key: the file and --set checks of
// `meridian train` (Config::parse, tasks::apply_overrides, tasks::validate_config, the calls its
// resolved config makes), in one process. tests/cli/config_mpi_test.sh shows one file and one --set
// case end to end (exit 2 on every rank, no run directory written) and the checks between ranks.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "meridian/core/config.h"
#include "meridian/core/error.h"
#include "meridian/tasks/registry.h"

namespace meridian::tasks {
namespace {

// The message of the error that loading `yaml` (as file `origin`), applying `sets` and checking the
// result raise; "" when nothing was wrong.
std::string error_of(const std::string& yaml, const std::string& origin, const std::vector<std::string>& sets = {}) {
  try {
    Config config = Config::parse(yaml, origin);
    apply_overrides(config, sets);
    apply_init_config(config);
    validate_config(config);
  } catch (const UserError& e) {
    return e.what();
  }
  return "";
}

std::string demo_yaml() {
  std::ifstream in(std::string(MERIDIAN_SOURCE_DIR) + "/jobs/configs/demo.yaml");
  return std::string(std::istreambuf_iterator<char>(in), {});
}

#define EXPECT_MESSAGE(message, expected) EXPECT_NE((message).find(expected), std::string::npos) << (message)

TEST(ConfigErrors, AFileKeyNamesTheFileLineAndNearestKey) {
  EXPECT_MESSAGE(error_of("train:\n  steps: 5\n  bach: 16\n", "typo.yaml"),
                 "typo.yaml line 3: field 'train.bach': unknown key; did you mean 'train.batch'?");
  EXPECT_MESSAGE(error_of("optim: {lr: 1.0e-3}\ntrainer:\n  steps: 5\n", "section.yaml"),
                 "section.yaml line 3: field 'trainer.steps': unknown key; did you mean 'train.steps'?");
  EXPECT_MESSAGE(error_of("model:\n  vision: {widht: 8}\n", "nested.yaml"),
                 "nested.yaml line 2: field 'model.vision.widht': unknown key; did you mean 'model.vision.width'?");
  EXPECT_MESSAGE(error_of("train: {steps: 2, batch: 8,\n        batch: 4}\n", "duplicate.yaml"),
                 "duplicate.yaml line 2: field 'train.batch': duplicate key (first given at line 1)");
}

TEST(ConfigErrors, ASetKeyNamesSetAndNearestKey) {
  const std::string demo = demo_yaml();
  ASSERT_FALSE(demo.empty());
  ASSERT_EQ(error_of(demo, "demo.yaml"), "");
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"train.bach=16", "--set: field 'train.bach': unknown key; did you mean 'train.batch'?"},
      {"optim.lrr=1e-3", "--set: field 'optim.lrr': unknown key; did you mean 'optim.lr'?"},
      {"checkpoint.every_step=1",
       "--set: field 'checkpoint.every_step': unknown key; did you mean 'checkpoint.every_steps'?"},
      {"data.drop_last=false",
       "--set: field 'data.drop_last': unknown key (the keys of 'data': data.train, data.eval, data.augment, "
       "data.workers)"},
      {"optim.lr=abc", "--set: field 'optim.lr': expected a number > 0, got 'abc'"},
      {"task.conf=0.3", "--set: field 'task.conf': not a key of task siglip (task.name); it is a key of task detect"},
      {"task.name=segment", "--set: field 'task.name': expected one of siglip, lm or detect, got 'segment'"},
      {"optim.lr", "--set: expected key=value, got 'optim.lr'"},
  };
  for (const auto& [set, expected] : cases)
    EXPECT_MESSAGE(error_of(demo, "demo.yaml", {"train.steps=3", set}), expected);
}

TEST(ConfigErrors, EveryPresetPassesTheSchema) {
  int presets = 0;
  for (const auto& entry : std::filesystem::directory_iterator(std::string(MERIDIAN_SOURCE_DIR) + "/jobs/configs")) {
    if (entry.path().extension() != ".yaml") continue;
    ++presets;
    try {
      Config config = Config::load_file(entry.path().string());
      apply_init_config(config);
      validate_config(config);
    } catch (const UserError& e) {
      ADD_FAILURE() << entry.path() << ": " << e.what();
    }
  }
  EXPECT_GE(presets, 10);
}

}  // namespace
}  // namespace meridian::tasks
