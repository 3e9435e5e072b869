#include "meridian/core/config_schema.h"

#include <gtest/gtest.h>

using meridian::Config;
using meridian::ConfigError;
using meridian::ConfigSchema;

namespace {

ConfigSchema schema() {
  ConfigSchema s;
  s.integer("train.batch", 32, "samples per rank").at_least(1);
  s.integer("train.steps", 100, "steps").at_least(1);
  s.number("optim.lr", 5e-4, "learning rate").above(0);
  s.number("optim.beta1", 0.9, "first moment").at_least(0).below(1);
  s.choice("optim.name", {"adamw", "sgd"}, "adamw", "optimizer");
  s.boolean("optim.zero", false, "ZeRO-1");
  s.string("data.eval", "", "evaluation set");
  s.strings("task.prompts", std::vector<std::string>{"a {}"}, "prompts");
  s.integer("model.vision.width", 192, "width").at_least(1);
  s.integer("model.kv_heads", std::nullopt, "kv heads").defaults_to("model.heads");
  return s;
}

// The ConfigError message of checking `config`, or "no error".
std::string check(Config config) {
  try {
    schema().check(config);
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "no error";
}

std::string check_yaml(const std::string& yaml) { return check(Config::parse(yaml, "run.yaml")); }

std::string check_set(const std::string& key, const std::string& value) {
  Config c = Config::parse("train: {steps: 5}\n", "run.yaml");
  c.set(key, value, "--set");
  return check(c);
}

}  // namespace

TEST(ConfigSchema, AcceptsDeclaredKeysAndNulls) {
  EXPECT_EQ(check_yaml("train: {batch: 8, steps: 3}\noptim: {lr: 1e-3, name: sgd, zero: true}\ndata: {eval: x.h5}\n"
                       "task: {prompts: [a, b]}\nmodel: {vision: {width: 8}, kv_heads: 2}\n"),
            "no error");
  EXPECT_EQ(check_yaml("train: {batch: 8}\noptim:\ndata: {eval: }\n"), "no error");  // empty section, null value
}

TEST(ConfigSchema, UnknownKeysNameTheSourceAndTheNearestKey) {
  EXPECT_EQ(check_yaml("train:\n  steps: 3\n  bach: 16\n"),
            "run.yaml line 3: field 'train.bach': unknown key; did you mean 'train.batch'?");
  EXPECT_EQ(check_set("optim.lrr", "1e-3"), "--set: field 'optim.lrr': unknown key; did you mean 'optim.lr'?");
  EXPECT_EQ(check_set("model.vision.widht", "8"),
            "--set: field 'model.vision.widht': unknown key; did you mean 'model.vision.width'?");
  EXPECT_EQ(check_set("data.drop_last", "false"),
            "--set: field 'data.drop_last': unknown key (the keys of 'data': data.eval)");
  EXPECT_EQ(check_yaml("trainer:\n  batch: 4\n"),
            "run.yaml line 2: field 'trainer.batch': unknown key; did you mean 'train.batch'?");
  EXPECT_EQ(check_yaml("trainr:\n  warmup: 4\n"),
            "run.yaml line 2: field 'trainr.warmup': unknown section 'trainr'; did you mean 'train'?");
  EXPECT_EQ(check_yaml("schedule: {warmup: 4}\n"),
            "run.yaml line 1: field 'schedule.warmup': unknown section 'schedule' (sections: train, optim, data, task, "
            "model)");
}

TEST(ConfigSchema, TypesRangesAndChoices) {
  EXPECT_EQ(check_set("optim.lr", "abc"), "--set: field 'optim.lr': expected a number > 0, got 'abc'");
  EXPECT_EQ(check_set("optim.lr", "0"), "--set: field 'optim.lr': expected a number > 0, got '0'");
  EXPECT_EQ(check_set("optim.beta1", "1"), "--set: field 'optim.beta1': expected a number in [0, 1), got '1'");
  EXPECT_EQ(check_set("train.batch", "2.5"), "--set: field 'train.batch': expected an integer >= 1, got '2.5'");
  EXPECT_EQ(check_set("train.batch", "0"), "--set: field 'train.batch': expected an integer >= 1, got '0'");
  EXPECT_EQ(check_set("optim.name", "lion"), "--set: field 'optim.name': expected one of adamw or sgd, got 'lion'");
  EXPECT_EQ(check_set("optim.zero", "maybe"), "--set: field 'optim.zero': expected true or false, got 'maybe'");
  EXPECT_EQ(check_set("task.prompts", "a"), "--set: field 'task.prompts': expected a list of strings, got 'a'");
  EXPECT_EQ(check_set("data.eval", "[a]"), "--set: field 'data.eval': expected a string, got a list");
  EXPECT_EQ(check_set("optim.lr", ".nan"), "--set: field 'optim.lr': expected a number > 0, got '.nan'");
  EXPECT_EQ(check_yaml("train: 5\n"), "run.yaml line 1: field 'train': expected a map of settings, got '5'");
  EXPECT_EQ(check_yaml("train: {batch: {x: 1}}\n"),
            "run.yaml line 1: field 'train.batch': expected integer >= 1, got a map");
}

TEST(ConfigSchema, ChecksRestrictReadsToDeclaredKeys) {
  Config c = Config::parse("train: {batch: 8}\n", "run.yaml");
  schema().check(c);
  EXPECT_EQ(c.get<int>("train.batch"), 8);
  EXPECT_EQ(c.get<int>("train.steps", 7), 7);
  EXPECT_THROW(c.get<int>("train.undeclared", 1), meridian::SystemError);
  EXPECT_THROW(c.has("optim.lrr"), meridian::SystemError);
}

TEST(ConfigSchema, DefaultsFilledWithoutTouchingTheOriginal) {
  Config c = Config::parse("train: {batch: 8}\n", "run.yaml");
  const Config full = schema().with_defaults(c);
  EXPECT_EQ(full.get<int>("train.batch"), 8);
  EXPECT_EQ(full.get<int>("train.steps"), 100);
  EXPECT_EQ(full.text("optim.lr"), "0.0005");
  EXPECT_EQ(full.text("task.prompts"), "[\"a {}\"]");
  EXPECT_FALSE(full.has("model.kv_heads"));  // no fixed default
  EXPECT_FALSE(c.has("train.steps"));        // a deep copy
  EXPECT_EQ(full.source("train.steps"), "default");
  EXPECT_EQ(full.source("train.batch"), "run.yaml line 1");
}

TEST(ConfigSchema, DocumentationAndDeclarations) {
  const std::string table = schema().markdown_table();
  EXPECT_NE(table.find("| `optim.beta1` | number in [0, 1) | 0.9 | first moment |"), std::string::npos) << table;
  EXPECT_NE(table.find("| `model.kv_heads` | integer | (model.heads) | kv heads |"), std::string::npos) << table;
  EXPECT_NE(table.find("| `optim.name` | adamw or sgd | adamw | optimizer |"), std::string::npos) << table;
  ConfigSchema s = schema();
  EXPECT_THROW(s.integer("train.batch", 1, "again"), meridian::SystemError);
  EXPECT_EQ(meridian::edit_distance("bach", "batch"), 1u);
  EXPECT_EQ(meridian::edit_distance("widht", "width"), 1u);
  EXPECT_EQ(meridian::edit_distance("", "abc"), 3u);
}
