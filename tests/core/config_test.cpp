#include "meridian/core/config.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>

using meridian::Config;
using meridian::ConfigError;

namespace {
const char* kText = R"(
model:
  depth: 4
  width: 192
  name: tiny
optim:
  lr: 3.0e-4
  betas: [0.9, 0.95]
log_every: 10
)";

std::string message_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "<no ConfigError>";
}
}  // namespace

TEST(Config, TypedDottedAccess) {
  const auto c = Config::parse(kText, "tiny.yaml");
  EXPECT_EQ(c.get<int>("model.depth"), 4);
  EXPECT_EQ(c.get<std::string>("model.name"), "tiny");
  EXPECT_DOUBLE_EQ(c.get<double>("optim.lr"), 3e-4);
  EXPECT_EQ(c.get<std::vector<double>>("optim.betas"), (std::vector<double>{0.9, 0.95}));
  EXPECT_EQ(c.get<int>("model.heads", 3), 3);
  EXPECT_TRUE(c.has("log_every"));
  EXPECT_FALSE(c.has("model.heads"));
  EXPECT_FALSE(c.has("log_every.x"));
}

TEST(Config, ErrorsNameFileFieldAndExpectation) {
  const auto c = Config::parse(kText, "tiny.yaml");
  EXPECT_EQ(message_of([&] { c.get<int>("model.heads"); }),
            "tiny.yaml: field 'model.heads': missing (expected an integer)");
  EXPECT_EQ(message_of([&] { c.get<int>("model.name"); }),
            "tiny.yaml line 5: field 'model.name': expected an integer, got 'tiny'");
  EXPECT_EQ(message_of([&] { c.get<double>("model", 1.0); }),
            "tiny.yaml line 3: field 'model': expected a number, got a map");
}

TEST(Config, SyntaxErrorsAndMissingFiles) {
  EXPECT_EQ(message_of([] {
              Config::parse("a: [1, 2\nb: 3\n", "bad.yaml");
            }).rfind("bad.yaml: field '<syntax>': invalid YAML at line", 0),
            0u);
  EXPECT_EQ(message_of([] { Config::parse("- 1\n- 2\n", "list.yaml"); }),
            "list.yaml: field '<root>': expected a map of settings at the top level");
  EXPECT_EQ(message_of([] { Config::load_file("/nonexistent/x.yaml"); }),
            "/nonexistent/x.yaml: field '<file>': cannot open the file");
}

// YAML forbids a key twice in a map; yaml-cpp would keep both and read the first.
TEST(Config, DuplicateKeysAreRefusedAtAnyDepth) {
  EXPECT_EQ(message_of([] { Config::parse("train: {steps: 2, batch: 8, batch: 4}\n", "dup.yaml"); }),
            "dup.yaml line 1: field 'train.batch': duplicate key (first given at line 1); a key may appear once "
            "in a map");
  EXPECT_EQ(message_of([] { Config::parse("model:\n  depth: 2\noptim:\n  lr: 1\nmodel:\n  depth: 3\n", "top.yaml"); }),
            "top.yaml line 5: field 'model': duplicate key (first given at line 1); a key may appear once in a map");
  EXPECT_EQ(message_of([] { Config::parse("a:\n  b:\n    - {x: 1}\n    - {y: 1,\n       y: 2}\n", "deep.yaml"); }),
            "deep.yaml line 5: field 'a.b.1.y': duplicate key (first given at line 4); a key may appear once in a map");
  Config c = Config::parse("train: {steps: 2}\n", "ok.yaml");
  EXPECT_EQ(message_of([&] { c.set("train", "{batch: 1, batch: 2}", "--set"); }),
            "--set: field 'train.batch': duplicate key; a key may appear once in a map");
  EXPECT_EQ(c.get<int>("train.steps"), 2);  // the refused --set changed nothing
}

TEST(Config, LoadSetAndLeafKeys) {
  const std::string path = ::testing::TempDir() + "/meridian_config_test.yaml";
  std::ofstream(path) << kText;
  auto c = Config::load_file(path);
  std::remove(path.c_str());
  EXPECT_EQ(c.origin(), path);
  c.set("optim.lr", "1e-3");
  c.set("train.steps", "100");
  EXPECT_DOUBLE_EQ(c.get<double>("optim.lr"), 1e-3);
  EXPECT_EQ(c.get<int>("train.steps"), 100);
  EXPECT_EQ(c.get<int>("model.depth"), 4);  // untouched
  const auto keys = c.leaf_keys();
  EXPECT_EQ(keys, (std::vector<std::string>{"model.depth", "model.width", "model.name", "optim.lr", "optim.betas",
                                            "log_every", "train.steps"}));
  // The dump parses back to the same values.
  const auto again = Config::parse(c.dump(), "dump");
  EXPECT_EQ(again.get<int>("train.steps"), 100);
  EXPECT_EQ(again.get<std::string>("model.name"), "tiny");
}
