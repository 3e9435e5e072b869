#include "meridian/core/config_schema.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <set>

namespace meridian {

namespace {

// The shortest "%g" text that reads back as `v` (whole numbers below 1e15 without an exponent).
std::string number_text(double v) {
  char buf[64];
  if (v == std::floor(v) && std::fabs(v) < 1e15) {
    std::snprintf(buf, sizeof buf, "%.0f", v);
    return buf;
  }
  for (int precision = 1; precision <= 17; ++precision) {
    std::snprintf(buf, sizeof buf, "%.*g", precision, v);
    if (std::strtod(buf, nullptr) == v) break;
  }
  return buf;
}

std::string section_of(const std::string& key) { return key.substr(0, key.find('.')); }

std::string joined(const std::vector<std::string>& items, const std::string& last = ", ") {
  std::string s;
  for (size_t i = 0; i < items.size(); ++i) s += (i == 0 ? "" : i + 1 == items.size() ? last : ", ") + items[i];
  return s;
}

std::string range_text(const ConfigKey& k) {
  auto bound = [](double v) { return std::isinf(v) ? std::string(v > 0 ? "inf" : "-inf") : number_text(v); };
  if (k.min && k.max)
    return std::string(" in ") + (k.min_exclusive ? "(" : "[") + bound(*k.min) + ", " + bound(*k.max) +
           (k.max_exclusive ? ")" : "]");
  if (k.min) return std::string(k.min_exclusive ? " > " : " >= ") + bound(*k.min);
  if (k.max) return std::string(k.max_exclusive ? " < " : " <= ") + bound(*k.max);
  return "";
}

// The value of `node` as shown in messages.
std::string shown(const YAML::Node& node) {
  if (node.IsScalar()) return "'" + node.Scalar() + "'";
  return node.IsMap() ? "a map" : "a list";
}

}  // namespace

size_t edit_distance(const std::string& a, const std::string& b) {
  const size_t n = a.size(), m = b.size();
  std::vector<std::vector<size_t>> d(n + 1, std::vector<size_t>(m + 1));
  for (size_t i = 0; i <= n; ++i) d[i][0] = i;
  for (size_t j = 0; j <= m; ++j) d[0][j] = j;
  for (size_t i = 1; i <= n; ++i)
    for (size_t j = 1; j <= m; ++j) {
      d[i][j] = std::min({d[i - 1][j] + 1, d[i][j - 1] + 1, d[i - 1][j - 1] + (a[i - 1] == b[j - 1] ? 0 : 1)});
      if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1])
        d[i][j] = std::min(d[i][j], d[i - 2][j - 2] + 1);
    }
  return d[n][m];
}

std::string ConfigKey::type_text() const {
  switch (type) {
    case ConfigType::Integer:
      return "integer" + range_text(*this);
    case ConfigType::Number:
      return "number" + range_text(*this);
    case ConfigType::Boolean:
      return "true or false";
    case ConfigType::String:
      return "string";
    case ConfigType::Choice:
      return joined(choices, " or ");
    case ConfigType::StringList:
      return "list of strings";
  }
  return "";
}

std::string ConfigKey::default_text() const {
  if (!default_value.empty()) return default_value;
  if (!default_note.empty()) return "(" + default_note + ")";
  return "(none)";
}

ConfigKey& ConfigSchema::declare(const std::string& key, ConfigType type, std::string fallback,
                                 const std::string& description) {
  MERIDIAN_CHECK(find(key) == nullptr, "config key '" + key + "' is declared twice");
  ConfigKey k;
  k.key = key;
  k.type = type;
  k.default_value = std::move(fallback);
  k.description = description;
  keys_.push_back(std::move(k));
  return keys_.back();
}

ConfigKey& ConfigSchema::integer(const std::string& key, std::optional<long long> fallback,
                                 const std::string& description) {
  return declare(key, ConfigType::Integer, fallback ? std::to_string(*fallback) : "", description);
}

ConfigKey& ConfigSchema::number(const std::string& key, std::optional<double> fallback,
                                const std::string& description) {
  return declare(key, ConfigType::Number, fallback ? number_text(*fallback) : "", description);
}

ConfigKey& ConfigSchema::boolean(const std::string& key, std::optional<bool> fallback, const std::string& description) {
  return declare(key, ConfigType::Boolean, fallback ? (*fallback ? "true" : "false") : "", description);
}

ConfigKey& ConfigSchema::string(const std::string& key, std::optional<std::string> fallback,
                                const std::string& description) {
  return declare(key, ConfigType::String, fallback ? (fallback->empty() ? "''" : yaml_quoted(*fallback)) : "",
                 description);
}

ConfigKey& ConfigSchema::choice(const std::string& key, std::vector<std::string> choices,
                                std::optional<std::string> fallback, const std::string& description) {
  ConfigKey& k = declare(key, ConfigType::Choice, fallback.value_or(""), description);
  k.choices = std::move(choices);
  return k;
}

ConfigKey& ConfigSchema::strings(const std::string& key, std::optional<std::vector<std::string>> fallback,
                                 const std::string& description) {
  std::string text;
  if (fallback) {
    std::vector<std::string> quoted;
    for (const auto& s : *fallback) quoted.push_back(yaml_quoted(s));
    text = "[" + joined(quoted) + "]";
  }
  return declare(key, ConfigType::StringList, text, description);
}

void ConfigSchema::add(const ConfigSchema& other) {
  for (const auto& k : other.keys_) {
    MERIDIAN_CHECK(find(k.key) == nullptr, "config key '" + k.key + "' is declared twice");
    keys_.push_back(k);
  }
}

const ConfigKey* ConfigSchema::find(const std::string& key) const {
  for (const auto& k : keys_)
    if (k.key == key) return &k;
  return nullptr;
}

void ConfigSchema::check_value(const Config& config, const ConfigKey& spec) const {
  const std::string& key = spec.key;
  const YAML::Node node = YAML::Load(config.text(key));  // the value alone (flow YAML)
  if (node.IsNull()) return;                             // `key:` with no value: the default
  auto fail = [&](const std::string& expected) {
    throw ConfigError(config.source(key), key, "expected " + expected + ", got " + shown(node));
  };
  // The type as the docs show it, with an article: "an integer >= 1", "one of adamw or sgd".
  const std::string type = spec.type_text();
  const std::string expected = spec.type == ConfigType::Choice ? "one of " + type
                               : spec.type == ConfigType::Boolean
                                   ? type
                                   : (spec.type == ConfigType::Integer ? "an " : "a ") + type;
  if (spec.type == ConfigType::StringList) {
    if (!node.IsSequence()) fail(expected);
    for (const auto& item : node)
      if (!item.IsScalar()) fail(expected);
    return;
  }
  if (!node.IsScalar()) fail(expected);
  try {
    switch (spec.type) {
      case ConfigType::Boolean:
        node.as<bool>();
        return;
      case ConfigType::String:
        return;
      case ConfigType::Choice:
        if (std::find(spec.choices.begin(), spec.choices.end(), node.Scalar()) == spec.choices.end()) fail(expected);
        return;
      case ConfigType::Integer:
      case ConfigType::Number: {
        const double v = spec.type == ConfigType::Integer ? double(node.as<long long>()) : node.as<double>();
        if (!std::isfinite(v)) fail(expected);
        if (spec.min && (spec.min_exclusive ? !(v > *spec.min) : !(v >= *spec.min))) fail(expected);
        if (spec.max && (spec.max_exclusive ? !(v < *spec.max) : !(v <= *spec.max))) fail(expected);
        return;
      }
      case ConfigType::StringList:
        return;
    }
  } catch (const YAML::Exception&) {
    fail(expected);
  }
}

std::string ConfigSchema::unknown_key_message(const std::string& key) const {
  // The nearest declared key, if near enough to be a typo (of the key or of its section).
  const ConfigKey* best = nullptr;
  size_t best_distance = std::numeric_limits<size_t>::max();
  for (const auto& k : keys_) {
    const size_t d = edit_distance(key, k.key);
    if (d < best_distance) best = &k, best_distance = d;
  }
  const size_t tolerance = std::max<size_t>(2, key.size() / 5);
  if (best && best_distance <= tolerance) return "unknown key; did you mean '" + best->key + "'?";
  const std::string section = section_of(key);
  std::vector<std::string> in_section, sections;
  for (const auto& k : keys_) {
    if (section_of(k.key) == section) in_section.push_back(k.key);
    if (std::find(sections.begin(), sections.end(), section_of(k.key)) == sections.end())
      sections.push_back(section_of(k.key));
  }
  if (!in_section.empty()) return "unknown key (the keys of '" + section + "': " + joined(in_section) + ")";
  for (const auto& s : sections)
    if (edit_distance(section, s) <= 2) return "unknown section '" + section + "'; did you mean '" + s + "'?";
  return "unknown section '" + section + "' (sections: " + joined(sections) + ")";
}

void ConfigSchema::check(Config& config, const std::function<std::string(const std::string&)>& explain_unknown) const {
  for (const auto& leaf : config.leaf_keys()) {
    if (const ConfigKey* spec = find(leaf)) {
      check_value(config, *spec);
      continue;
    }
    // A map where a value is expected ("train.batch.x"), or a value (or nothing) where a map is.
    const ConfigKey* above = nullptr;
    for (const auto& k : keys_)
      if (leaf.rfind(k.key + ".", 0) == 0) above = &k;
    if (above)
      throw ConfigError(config.source(above->key), above->key, "expected " + above->type_text() + ", got a map");
    const bool is_section =
        std::any_of(keys_.begin(), keys_.end(), [&](const ConfigKey& k) { return k.key.rfind(leaf + ".", 0) == 0; });
    if (is_section) {
      if (config.text(leaf).empty()) continue;  // "checkpoint:" with nothing under it
      throw ConfigError(config.source(leaf), leaf, "expected a map of settings, got '" + config.text(leaf) + "'");
    }
    const std::string explained = explain_unknown ? explain_unknown(leaf) : "";
    throw ConfigError(config.source(leaf), leaf, explained.empty() ? unknown_key_message(leaf) : explained);
  }
  auto readable = std::make_shared<std::set<std::string>>();
  for (const auto& k : keys_) readable->insert(k.key);
  config.restrict_reads(readable);
}

Config ConfigSchema::with_defaults(const Config& config) const {
  Config out = config.clone();
  for (const auto& k : keys_)
    if (!k.default_value.empty() && out.text(k.key).empty()) out.set(k.key, k.default_value, "default");
  return out;
}

std::string ConfigSchema::markdown_table() const {
  auto cell = [](std::string s) {
    for (size_t i = s.find('|'); i != std::string::npos; i = s.find('|', i + 2)) s.replace(i, 1, "\\|");
    return s;
  };
  std::string out = "| key | type | default | meaning |\n|---|---|---|---|\n";
  for (const auto& k : keys_)
    out += "| `" + k.key + "` | " + cell(k.type_text()) + " | " + cell(k.default_text()) + " | " + cell(k.description) +
           " |\n";
  return out;
}

}  // namespace meridian
