// Typed access to a YAML configuration with errors that name the file and the field.
//
//   auto cfg = Config::load_file("jobs/configs/tiny.yaml");
//   int depth = cfg.get<int>("model.depth");            // ConfigError if missing or not an int
//   double lr = cfg.get<double>("optim.lr", 1e-3);       // default when missing; error if malformed
//
// Keys are dotted paths into nested maps. Which keys exist, their types, defaults and ranges are
// declared once in a ConfigSchema (core/config_schema.h); a config checked by one only reads declared
// keys. Not collective; cheap to copy.
#pragma once

#include <yaml-cpp/yaml.h>

#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "meridian/core/error.h"

namespace meridian {

class Config {
 public:
  Config() : root_(YAML::NodeType::Map), origin_("<empty>") {}

  // Throws ConfigError (field "<file>") when the file is missing or not valid YAML (with line/column).
  static Config load_file(const std::string& path);
  // `origin` names the text in messages (a file name, "--set", ...).
  static Config parse(const std::string& text, const std::string& origin);

  bool has(const std::string& key) const { return read(key).IsDefined(); }

  template <typename T>
  T get(const std::string& key) const {
    const YAML::Node node = read(key);
    if (!node.IsDefined() || node.IsNull())
      throw ConfigError(source(key), key, "missing (expected " + type_name<T>() + ")");
    return convert<T>(node, key);
  }

  template <typename T>
  T get(const std::string& key, const T& fallback) const {
    const YAML::Node node = read(key);
    if (!node.IsDefined() || node.IsNull()) return fallback;
    return convert<T>(node, key);
  }

  // Sets `key` (dotted) to a YAML scalar or flow value, e.g. set("optim.lr", "3e-4"). Creates maps on the way.
  // `from` names where the value came from in messages ("--set", "--data"); default: this config's origin.
  void set(const std::string& key, const std::string& yaml_value, const std::string& from = "");

  // Where the value at `key` came from, for messages: "--set" for a value set with `from` = "--set",
  // "<file> line N" for a value read from a file, else the origin.
  std::string source(const std::string& key) const;

  // After this, get() and has() of a key outside `keys` throw SystemError: a key read by the code but
  // not declared in the schema is a bug (the user could not set it). Called by ConfigSchema::check.
  void restrict_reads(std::shared_ptr<const std::set<std::string>> keys) { readable_ = std::move(keys); }

  // Keys (dotted) of every scalar/sequence leaf, in document order.
  std::vector<std::string> leaf_keys() const;

  // A deep copy (copies of a Config otherwise share their YAML tree: set() on one shows in the other).
  Config clone() const;

  std::string dump() const;  // YAML text
  // The value at `key` as one line of YAML (scalars as written, sequences and maps in flow style);
  // "" when missing. For comparing configs value by value.
  std::string text(const std::string& key) const;
  const std::string& origin() const { return origin_; }

 private:
  Config(YAML::Node root, std::string origin) : root_(std::move(root)), origin_(std::move(origin)) {}
  YAML::Node lookup(const std::string& key) const;
  YAML::Node read(const std::string& key) const;  // lookup, for keys the code may read (restrict_reads)

  template <typename T>
  static std::string type_name();

  template <typename T>
  T convert(const YAML::Node& node, const std::string& key) const {
    try {
      return node.as<T>();
    } catch (const YAML::Exception&) {
      std::string shown =
          node.IsScalar() ? "'" + node.Scalar() + "'" : "a " + std::string(node.IsMap() ? "map" : "sequence");
      throw ConfigError(source(key), key, "expected " + type_name<T>() + ", got " + shown);
    }
  }

  YAML::Node root_;
  std::string origin_;
  std::map<std::string, std::string> set_from_;            // key given to set() -> where its value came from
  std::shared_ptr<const std::set<std::string>> readable_;  // null: every key
};

template <>
inline std::string Config::type_name<int>() {
  return "an integer";
}
template <>
inline std::string Config::type_name<long>() {
  return "an integer";
}
template <>
inline std::string Config::type_name<long long>() {
  return "an integer";
}
template <>
inline std::string Config::type_name<double>() {
  return "a number";
}
template <>
inline std::string Config::type_name<float>() {
  return "a number";
}
template <>
inline std::string Config::type_name<bool>() {
  return "true or false";
}
template <>
inline std::string Config::type_name<std::string>() {
  return "a string";
}
template <>
inline std::string Config::type_name<std::vector<int>>() {
  return "a list of integers";
}
template <>
inline std::string Config::type_name<std::vector<double>>() {
  return "a list of numbers";
}
template <>
inline std::string Config::type_name<std::vector<std::string>>() {
  return "a list of strings";
}

// `text` as a single-quoted YAML scalar (for Config::set of arbitrary strings: paths, names).
std::string yaml_quoted(const std::string& text);

}  // namespace meridian
