// A settings struct's config keys, each written once: a binding table of (key, field, range,
// meaning) that both declares the keys into a ConfigSchema (the default is a default-constructed
// struct's field) and fills a struct from a config. Choices map their YAML text to a field's value
// (an enum), so no reader parses them again.
//
//   const ConfigBinding<CheckpointSettings>& bindings() {
//     static const auto b = [] {
//       ConfigBinding<CheckpointSettings> b;
//       b.integer("checkpoint.keep_last", &CheckpointSettings::keep_last, "newest checkpoints kept").at_least(1);
//       b.choice("train.precision", &S::precision, {{"float32", Precision::Float32}, {"bf16", Precision::BFloat16}},
//                "forward precision");
//       return b;
//     }();
//     return b;
//   }
//   bindings().declare(schema);               // the keys, in table order
//   CheckpointSettings s = bindings().read(config);
//
// A key declared with defaults_to(note) has no fixed default: reading leaves the field as it was
// when the key is unset (the caller derives it). Not collective; the table is immutable once built.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "meridian/core/config.h"
#include "meridian/core/config_schema.h"
#include "meridian/core/error.h"

namespace meridian {

template <class T>
class ConfigBinding {
 public:
  ConfigKey& integer(const std::string& key, int64_t T::*field, const std::string& description) {
    readers_.push_back([key, field](const Config& c, T& t) { t.*field = c.get<int64_t>(key, t.*field); });
    return schema_.integer(key, T{}.*field, description);
  }
  ConfigKey& number(const std::string& key, double T::*field, const std::string& description) {
    readers_.push_back([key, field](const Config& c, T& t) { t.*field = c.get<double>(key, t.*field); });
    return schema_.number(key, T{}.*field, description);
  }
  ConfigKey& boolean(const std::string& key, bool T::*field, const std::string& description) {
    readers_.push_back([key, field](const Config& c, T& t) { t.*field = c.get<bool>(key, t.*field); });
    return schema_.boolean(key, T{}.*field, description);
  }
  ConfigKey& string(const std::string& key, std::string T::*field, const std::string& description) {
    readers_.push_back([key, field](const Config& c, T& t) { t.*field = c.get<std::string>(key, t.*field); });
    return schema_.string(key, T{}.*field, description);
  }
  // One of `values` (YAML text -> field value); the default is the first text whose value is a
  // default T's field.
  template <class V>
  ConfigKey& choice(const std::string& key, V T::*field, std::vector<std::pair<std::string, V>> values,
                    const std::string& description) {
    std::vector<std::string> texts;
    std::string fallback;
    for (const auto& [text, value] : values) {
      texts.push_back(text);
      if (fallback.empty() && value == T{}.*field) fallback = text;
    }
    readers_.push_back([key, field, values](const Config& c, T& t) {
      if (!c.has(key)) return;
      const std::string text = c.get<std::string>(key);
      for (const auto& [name, value] : values)
        if (name == text) return void(t.*field = value);
      throw ConfigError(c.source(key), key, "unexpected value '" + text + "'");  // the schema checks first
    });
    return schema_.choice(key, std::move(texts), fallback, description);
  }

  // The keys, in table order.
  void declare(ConfigSchema& schema) const { schema.add(schema_); }
  // `t` with every bound key `config` sets; unset keys keep t's values.
  T read(const Config& config, T t = T{}) const {
    for (const auto& r : readers_) r(config, t);
    return t;
  }

 private:
  ConfigSchema schema_;
  std::vector<std::function<void(const Config&, T&)>> readers_;
};

}  // namespace meridian
