#include "meridian/core/config.h"

#include <fstream>
#include <sstream>

namespace meridian {

namespace {
std::vector<std::string> split_key(const std::string& key) {
  std::vector<std::string> parts;
  std::stringstream ss(key);
  std::string part;
  while (std::getline(ss, part, '.')) parts.push_back(part);
  return parts;
}

void collect_leaves(const YAML::Node& node, const std::string& prefix, std::vector<std::string>& out) {
  if (!node.IsMap()) {
    out.push_back(prefix);
    return;
  }
  for (const auto& kv : node) {
    const std::string key = kv.first.as<std::string>();
    collect_leaves(kv.second, prefix.empty() ? key : prefix + "." + key, out);
  }
}

// YAML forbids a key twice in one map; yaml-cpp keeps both pairs and lookups see only the first. Keys
// other than scalars are refused too (what reads the config takes every key as a name).
// Throws ConfigError naming the origin, the dotted key (maps inside lists: the index in the path) and,
// for a file (`lines`), the lines of both occurrences.
void refuse_duplicate_keys(const YAML::Node& node, const std::string& prefix, const std::string& origin, bool lines) {
  const auto path = [&](const std::string& part) { return prefix.empty() ? part : prefix + "." + part; };
  if (node.IsSequence()) {
    for (size_t i = 0; i < node.size(); ++i) refuse_duplicate_keys(node[i], path(std::to_string(i)), origin, lines);
    return;
  }
  if (!node.IsMap()) return;
  std::map<std::string, int> first_line;
  for (const auto& kv : node) {
    const int line = kv.first.Mark().line + 1;
    if (!kv.first.IsScalar())  // `? [a, b]: 1`, `~: 1`: YAML allows any node as a key
      throw ConfigError(lines ? origin + " line " + std::to_string(line) : origin, path("<key>"),
                        "a key that is not a plain name (a list, a map or null); keys are names like lr");
    const std::string key = kv.first.Scalar();
    const auto [it, inserted] = first_line.emplace(key, line);
    if (!inserted) {
      if (!lines) throw ConfigError(origin, path(key), "duplicate key; a key may appear once in a map");
      throw ConfigError(
          origin + " line " + std::to_string(line), path(key),
          "duplicate key (first given at line " + std::to_string(it->second) + "); a key may appear once in a map");
    }
    refuse_duplicate_keys(kv.second, path(key), origin, lines);
  }
}
}  // namespace

Config Config::load_file(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw ConfigError(path, "<file>", "cannot open the file");
  std::stringstream buffer;
  buffer << in.rdbuf();
  return parse(buffer.str(), path);
}

Config Config::parse(const std::string& text, const std::string& origin) {
  YAML::Node root;
  try {
    root = YAML::Load(text);
  } catch (const YAML::ParserException& e) {
    throw ConfigError(origin, "<syntax>",
                      "invalid YAML at line " + std::to_string(e.mark.line + 1) + ", column " +
                          std::to_string(e.mark.column + 1) + ": " + e.msg);
  }
  if (root.IsNull()) root = YAML::Node(YAML::NodeType::Map);
  refuse_duplicate_keys(root, "", origin, true);
  if (!root.IsMap()) throw ConfigError(origin, "<root>", "expected a map of settings at the top level");
  return Config(root, origin);
}

YAML::Node Config::lookup(const std::string& key) const {
  // yaml-cpp nodes are handles: descend with const operator[] (which never inserts) and reset(),
  // since assignment would overwrite the referenced node.
  YAML::Node walk = root_;
  for (const auto& part : split_key(key)) {
    if (!walk.IsMap()) return YAML::Node(YAML::NodeType::Undefined);
    const YAML::Node& const_walk = walk;
    YAML::Node next = const_walk[part];
    if (!next.IsDefined()) return YAML::Node(YAML::NodeType::Undefined);
    walk.reset(next);
  }
  return walk;
}

YAML::Node Config::read(const std::string& key) const {
  MERIDIAN_CHECK(!readable_ || readable_->count(key),
                 "config key '" + key + "' is read but not declared in the config schema");
  return lookup(key);
}

std::string Config::source(const std::string& key) const {
  // The longest key given to set() that is `key` or a map above it decides.
  for (std::string k = key;;) {
    const auto it = set_from_.find(k);
    if (it != set_from_.end()) return it->second;
    const auto dot = k.rfind('.');
    if (dot == std::string::npos) break;
    k.resize(dot);
  }
  const YAML::Node node = lookup(key);
  if (node.IsDefined() && node.Mark().line >= 0) return origin_ + " line " + std::to_string(node.Mark().line + 1);
  return origin_;
}

void Config::set(const std::string& key, const std::string& yaml_value, const std::string& from) {
  const std::string origin = from.empty() ? origin_ : from;
  YAML::Node value;
  try {
    value = YAML::Load(yaml_value);
  } catch (const YAML::ParserException& e) {
    throw ConfigError(origin, key, "value '" + yaml_value + "' is not valid YAML: " + e.msg);
  }
  refuse_duplicate_keys(value, key, origin, false);
  const auto parts = split_key(key);
  if (parts.empty()) throw ConfigError(origin_, key, "empty key");
  YAML::Node walk = root_;
  for (size_t i = 0; i + 1 < parts.size(); ++i) {
    YAML::Node next = walk[parts[i]];
    if (!next.IsDefined() || next.IsNull()) next = YAML::Node(YAML::NodeType::Map);
    if (!next.IsMap()) throw ConfigError(origin, key, "'" + parts[i] + "' is not a map");
    walk[parts[i]] = next;
    walk.reset(walk[parts[i]]);
  }
  walk[parts.back()] = value;
  // Keys below `key` now come from the new value.
  for (auto it = set_from_.lower_bound(key + "."); it != set_from_.end() && it->first.rfind(key + ".", 0) == 0;)
    it = set_from_.erase(it);
  set_from_[key] = origin;
}

std::vector<std::string> Config::leaf_keys() const {
  std::vector<std::string> out;
  collect_leaves(root_, "", out);
  return out;
}

std::string Config::text(const std::string& key) const {
  const YAML::Node node = lookup(key);
  if (!node.IsDefined() || node.IsNull()) return "";
  YAML::Emitter emitter;
  emitter << YAML::Flow << node;
  return emitter.c_str();
}

Config Config::clone() const {
  Config c(YAML::Clone(root_), origin_);
  c.set_from_ = set_from_;
  c.readable_ = readable_;
  return c;
}

std::string Config::dump() const {
  YAML::Emitter emitter;
  emitter << root_;
  return emitter.c_str();
}

std::string yaml_quoted(const std::string& text) {
  std::string q = "'";
  for (char ch : text) q += ch == '\'' ? std::string("''") : std::string(1, ch);
  return q + "'";
}

}  // namespace meridian
