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
#include <type_traits>
#include <utility>
#include <vector>

#include "meridian/core/config.h"
#include "meridian/core/config_schema.h"
#include "meridian/core/error.h"

namespace meridian {

template <class T>
class ConfigBinding {
 public:
  // `field`: a member pointer (&T::steps) or a callable giving a reference into a T (a nested
  // field: [](T& t) -> int64_t& { return t.vision.width; }).
  template <class Field>
  ConfigKey& integer(const std::string& key, Field field, const std::string& description) {
    return bind<int64_t>(key, field, schema_.integer(key, default_of(field), description));
  }
  template <class Field>
  ConfigKey& number(const std::string& key, Field field, const std::string& description) {
    return bind<double>(key, field, schema_.number(key, default_of(field), description));
  }
  template <class Field>
  ConfigKey& boolean(const std::string& key, Field field, const std::string& description) {
    return bind<bool>(key, field, schema_.boolean(key, default_of(field), description));
  }
  template <class Field>
  ConfigKey& string(const std::string& key, Field field, const std::string& description) {
    return bind<std::string>(key, field, schema_.string(key, default_of(field), description));
  }
  template <class Field>
  ConfigKey& strings(const std::string& key, Field field, const std::string& description) {
    return bind<std::vector<std::string>>(key, field, schema_.strings(key, default_of(field), description));
  }
  // One of `values` (YAML text -> field value); the default is the first text whose value is a
  // default T's field.
  template <class Field, class V = std::decay_t<std::invoke_result_t<Field, T&>>>
  ConfigKey& choice(const std::string& key, Field field, std::vector<std::pair<std::string, V>> values,
                    const std::string& description) {
    std::vector<std::string> texts;
    std::string fallback;
    const V d = default_of(field);
    for (const auto& [text, value] : values) {
      texts.push_back(text);
      if (fallback.empty() && value == d) fallback = text;
    }
    readers_.push_back([key, field, values](const Config& c, T& t) {
      if (!c.has(key)) return;
      const std::string text = c.get<std::string>(key);
      for (const auto& [name, value] : values)
        if (name == text) return void(std::invoke(field, t) = value);
      throw ConfigError(c.source(key), key, "unexpected value '" + text + "'");  // the schema checks first
    });
    return schema_.choice(key, std::move(texts), fallback, description);
  }
  // A key whose reading is not one field (e.g. a preset that sets several): `declare` declares it in
  // the schema it is given, `read` applies it when the config sets it.
  ConfigKey& custom(const std::function<ConfigKey&(ConfigSchema&)>& declare,
                    std::function<void(const Config&, T&)> read) {
    readers_.push_back(std::move(read));
    return declare(schema_);
  }

  // The keys, in table order.
  void declare(ConfigSchema& schema) const { schema.add(schema_); }
  // `t` with every bound key `config` sets, in table order; unset keys keep t's values.
  T read(const Config& config, T t = T{}) const {
    for (const auto& r : readers_) r(config, t);
    return t;
  }

 private:
  template <class Field>
  static auto default_of(Field field) {
    T d{};
    return std::decay_t<decltype(std::invoke(field, d))>(std::invoke(field, d));
  }
  template <class V, class Field>
  ConfigKey& bind(const std::string& key, Field field, ConfigKey& spec) {
    readers_.push_back([key, field](const Config& c, T& t) {
      auto& value = std::invoke(field, t);
      value = c.get<V>(key, V(value));
    });
    return spec;
  }
  ConfigSchema schema_;
  std::vector<std::function<void(const Config&, T&)>> readers_;
};

}  // namespace meridian
