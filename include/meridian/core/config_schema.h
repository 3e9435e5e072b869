// The config's keys, each declared once: type, default, allowed range or values, one-line meaning.
//
//   ConfigSchema s;
//   s.integer("train.steps", 1000, "optimizer steps").at_least(1);
//   s.choice("optim.name", {"adamw", "sgd"}, "adamw", "optimizer");
//   s.check(config);   // ConfigError: unknown key (with the nearest known one), wrong type, out of range
//
// Each area declares the keys it reads next to the code that reads them (e.g.
// train::TrainerSettings::declare); tasks::config_schema() assembles the schema of a task. docs/config.md
// is generated from it (`meridian config`). Not collective.
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "meridian/core/config.h"

namespace meridian {

enum class ConfigType { Integer, Number, Boolean, String, Choice, StringList };

struct ConfigKey {
  std::string key;  // dotted, e.g. "train.batch"
  ConfigType type = ConfigType::String;
  std::string default_value;  // YAML text of the default; "" when none
  std::string default_note;   // when there is no fixed default: what decides the value ("model.heads")
  std::optional<double> min, max;
  bool min_exclusive = false, max_exclusive = false;
  std::vector<std::string> choices;  // ConfigType::Choice
  std::string description;

  // Range of Integer and Number keys (inclusive unless named otherwise).
  ConfigKey& at_least(double v) { return min = v, min_exclusive = false, *this; }
  ConfigKey& above(double v) { return min = v, min_exclusive = true, *this; }
  ConfigKey& at_most(double v) { return max = v, max_exclusive = false, *this; }
  ConfigKey& below(double v) { return max = v, max_exclusive = true, *this; }
  // No fixed default: `note` says what decides it (shown in docs/config.md and --print-config).
  ConfigKey& defaults_to(const std::string& note) { return default_value.clear(), default_note = note, *this; }

  std::string type_text() const;     // "integer", "number >= 0", "adamw | sgd", ...
  std::string default_text() const;  // the default, or the note in parentheses, or "(none)"
};

class ConfigSchema {
 public:
  // Declare a key; a std::nullopt default means the key has no fixed default (see defaults_to).
  // Declaring a key twice is a bug (SystemError).
  ConfigKey& integer(const std::string& key, std::optional<long long> fallback, const std::string& description);
  ConfigKey& number(const std::string& key, std::optional<double> fallback, const std::string& description);
  ConfigKey& boolean(const std::string& key, std::optional<bool> fallback, const std::string& description);
  ConfigKey& string(const std::string& key, std::optional<std::string> fallback, const std::string& description);
  ConfigKey& choice(const std::string& key, std::vector<std::string> choices, std::optional<std::string> fallback,
                    const std::string& description);
  ConfigKey& strings(const std::string& key, std::optional<std::vector<std::string>> fallback,
                     const std::string& description);

  // Appends `other`'s keys (a key in both is a bug).
  void add(const ConfigSchema& other);

  const ConfigKey* find(const std::string& key) const;
  const std::vector<ConfigKey>& keys() const { return keys_; }

  // Every leaf of `config` must be a declared key of the right type within its range; throws ConfigError
  // naming the first bad key, where it came from (file and line, or --set) and, for an unknown key, the
  // nearest declared one ("did you mean 'train.batch'?") or the section's keys. `explain_unknown` may
  // explain an unknown key instead (e.g. "it is a key of task detect"; "": no). Then restricts the config's reads
  // to the declared keys (Config::restrict_reads).
  void check(Config& config, const std::function<std::string(const std::string& key)>& explain_unknown = {}) const;

  // `config` with every missing key that has a fixed default set to it (what the run uses).
  Config with_defaults(const Config& config) const;

  // A Markdown table of the keys: key, type, default, meaning.
  std::string markdown_table() const;

 private:
  ConfigKey& declare(const std::string& key, ConfigType type, std::string fallback, const std::string& description);
  void check_value(const Config& config, const ConfigKey& spec) const;
  std::string unknown_key_message(const std::string& key) const;

  std::vector<ConfigKey> keys_;
};

// Levenshtein distance (with adjacent transpositions counted as one edit), for suggestions.
size_t edit_distance(const std::string& a, const std::string& b);

}  // namespace meridian
