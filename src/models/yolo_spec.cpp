// Reading an Ultralytics model YAML (YoloSpec::parse) and resolving the `model:` section into a
// YoloConfig: which YAML (a file or a compiled-in one), its scale and multiples, the class count.
#include <yaml-cpp/yaml.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>

#include "meridian/core/config_binding.h"
#include "meridian/core/config_schema.h"
#include "meridian/core/error.h"
#include "meridian/models/yolo.h"
#include "meridian/yolo_yamls.h"  // kYoloYamls: jobs/configs/ultralytics/*.yaml, generated at configure time

namespace meridian::models {

namespace {

std::string scalar_text(const YAML::Node& n) { return n.IsScalar() ? n.Scalar() : YAML::Dump(n); }

YoloLayerSpec parse_row(const YAML::Node& row, const std::string& source, const std::string& field) {
  if (!row.IsSequence() || row.size() != 4 || !row[3].IsSequence())
    throw ConfigError(source, field, "expected [from, repeats, module, [args]], got " + YAML::Dump(row));
  YoloLayerSpec s;
  s.field = field;
  try {
    if (row[0].IsSequence()) {
      for (const auto& f : row[0]) s.from.push_back(f.as<int64_t>());
    } else {
      s.from.push_back(row[0].as<int64_t>());
    }
    s.repeats = row[1].as<int64_t>();
    s.module = row[2].as<std::string>();
  } catch (const YAML::Exception&) {
    throw ConfigError(source, field,
                      "expected [from (an index or a list), repeats, module, [args]], got " + YAML::Dump(row));
  }
  if (s.from.empty() || s.repeats < 1) throw ConfigError(source, field, "needs a `from` and repeats >= 1");
  for (const auto& a : row[3]) s.args.push_back(scalar_text(a));
  return s;
}

}  // namespace

YoloSpec YoloSpec::parse(const std::string& text, const std::string& source, const std::string& family) {
  YAML::Node root;
  try {
    root = YAML::Load(text);
  } catch (const YAML::Exception& e) {
    throw ConfigError(source, "yaml", std::string("not YAML: ") + e.what());
  }
  if (!root.IsMap()) throw ConfigError(source, "yaml", "expected a model description (nc, scales, backbone, head)");
  YoloSpec s;
  s.source = source;
  s.family = family;
  s.text = text;
  try {
    if (root["nc"]) s.nc = root["nc"].as<int64_t>();
    if (root["scale"]) s.scale = root["scale"].as<std::string>();
  } catch (const YAML::Exception&) {
    throw ConfigError(source, root["nc"] && !root["scale"] ? "nc" : "scale", "unexpected value");
  }
  if (s.nc < 1) throw ConfigError(source, "nc", "must be at least 1");
  if (const auto scales = root["scales"]) {
    if (!scales.IsMap()) throw ConfigError(source, "scales", "expected a map n: [depth, width, max_channels]");
    for (const auto& item : scales) {
      const std::string name = item.first.as<std::string>();
      std::array<double, 3> v{};
      bool ok = item.second.IsSequence() && item.second.size() == 3;
      for (size_t i = 0; ok && i < 3; ++i) {
        try {
          v[i] = item.second[i].as<double>();
        } catch (const YAML::Exception&) {
          ok = false;
        }
        ok = ok && v[i] > 0 && std::isfinite(v[i]);
      }
      if (!ok) throw ConfigError(source, "scales." + name, "expected [depth, width, max_channels] of positive numbers");
      s.scales.emplace_back(name, v);
    }
  }
  try {
    if (root["depth_multiple"]) s.multiples[0] = root["depth_multiple"].as<double>();
    if (root["width_multiple"]) s.multiples[1] = root["width_multiple"].as<double>();
  } catch (const YAML::Exception&) {
    throw ConfigError(source, "depth_multiple", "expected numbers for depth_multiple and width_multiple");
  }
  for (const char* part : {"backbone", "head"}) {
    const auto rows = root[part];
    if (!rows || !rows.IsSequence() || rows.size() == 0)
      throw ConfigError(source, part, "missing: a model YAML lists its `backbone` and `head` rows");
    for (size_t i = 0; i < rows.size(); ++i)
      s.layers.push_back(parse_row(rows[i], source, std::string(part) + "[" + std::to_string(i) + "]"));
  }
  return s;
}

const std::vector<std::string>& builtin_yolo_families() {
  static const std::vector<std::string> names = [] {
    std::vector<std::string> v;
    for (const auto& y : kYoloYamls) v.push_back(y.family);
    return v;
  }();
  return names;
}

namespace {

const char* builtin_text(const std::string& family) {
  for (const auto& y : kYoloYamls)
    if (family == y.family) return y.text;
  return nullptr;
}

std::string read_text(const std::string& path, const std::string& origin) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream buffer;
  buffer << in.rdbuf();
  if (!in) throw ConfigError(origin, "model.yaml", "cannot read " + path);
  return buffer.str();
}

// "dir/yolo11n.yaml" -> {"dir/yolo11.yaml", "n"}; {"", ""} when the name has no scale letter
// (Ultralytics' guess_model_scale and its unified path).
std::pair<std::string, std::string> split_scale(const std::string& path) {
  static const std::regex pattern(R"(^(.*yolo(?:e-)?v?\d+)([nslmx])((?:-[^/]*)?\.ya?ml)?$)");
  std::smatch m;
  if (!std::regex_match(path, m, pattern)) return {"", ""};
  return {m[1].str() + (m[3].matched ? m[3].str() : std::string()), m[2].str()};
}

std::string stem(const std::string& path) { return std::filesystem::path(path).stem().string(); }

// The YAML model.yaml names and the scale its name carries.
std::pair<YoloSpec, std::string> resolve_yaml(const std::string& given, const std::string& origin) {
  namespace fs = std::filesystem;
  std::error_code ec;                    // a name the system cannot look up (too long, a bad component) is no file
  if (fs::is_regular_file(given, ec)) {  // its family without a scale letter (export names the YAML after it)
    const auto [unified_name, letter] = split_scale(given);
    return {YoloSpec::parse(read_text(given, origin), given, stem(unified_name.empty() ? given : unified_name)),
            letter};
  }
  const auto [unified, letter] = split_scale(given);
  if (!unified.empty() && fs::is_regular_file(unified, ec))
    return {YoloSpec::parse(read_text(unified, origin), unified, stem(unified)), letter};
  for (const auto& [name, scale] : {std::pair{given, std::string()}, std::pair{unified, letter}}) {
    if (name.empty() || name.find('/') != std::string::npos) continue;
    const std::string family = stem(name);
    if (const char* text = builtin_text(family))
      return {YoloSpec::parse(text, "built-in " + family + ".yaml", family), scale};
  }
  std::string known;
  for (const auto& f : builtin_yolo_families()) known += (known.empty() ? "" : ", ") + f + ".yaml";
  throw ConfigError(
      origin, "model.yaml",
      "'" + given + "' is neither a file nor a built-in model YAML (" + known + ", with a scale letter: yolo11n.yaml)");
}

// Picks the scale (given, the name's letter, the YAML's scale:, else its first) and sets the multiples.
void apply_scale(YoloConfig& s, const std::string& given, const std::string& letter, const std::string& origin) {
  const auto& spec = s.spec;
  std::string scale = !given.empty() ? given : !letter.empty() ? letter : spec.scale;
  if (spec.scales.empty()) {
    if (!given.empty())
      throw ConfigError(origin, "model.scale",
                        spec.source + " has no scales (it gives depth_multiple and width_multiple)");
    s.scale.clear();
    s.depth = spec.multiples[0], s.width = spec.multiples[1], s.max_channels = int64_t(spec.multiples[2]);
    return;
  }
  if (scale.empty()) scale = spec.scales.front().first;
  std::string names;
  for (const auto& [name, v] : spec.scales) {
    names += (names.empty() ? "" : ", ") + name;
    if (name != scale) continue;
    s.scale = scale;
    s.depth = v[0], s.width = v[1], s.max_channels = int64_t(v[2]);
    return;
  }
  throw ConfigError(origin, "model.scale",
                    "'" + scale + "' is not one of " + spec.source + "'s scales (" + names + ")");
}

const ConfigBinding<YoloConfig>& yolo_bindings() {
  using S = YoloConfig;
  static const auto table = [] {
    ConfigBinding<S> b;
    b.string(
        "model.yaml", &S::yaml,
        "Ultralytics model YAML: a file, or built-in yolov8.yaml, yolo11.yaml, yolo12.yaml (yolo11n.yaml: scale n)");
    b.string("model.yaml_text", &S::yaml_text,
             "the model YAML's text, used instead of reading model.yaml (training records a file's here, so that "
             "eval, export and predict do not need the file)");
    b.string("model.scale", &S::scale, "scale of the model YAML (n, s, m, l, x)")
        .defaults_to("the letter in model.yaml's name, else the YAML's first scale");
    b.integer("model.num_classes", &S::num_classes, "object classes")
        .at_least(1)
        .defaults_to("the dataset's class count (else the YAML's nc)");
    b.number("model.depth", &S::depth, "block repeat multiple").above(0).defaults_to("the scale's");
    b.number("model.width", &S::width, "channel multiple").above(0).defaults_to("the scale's");
    b.integer("model.max_channels", &S::max_channels, "cap on a row's channels before model.width")
        .at_least(8)
        .defaults_to("the scale's");
    b.boolean("model.sync_bn", &S::sync_bn, "BatchNorm statistics over all ranks (small per-rank batches)");
    return b;
  }();
  return table;
}

}  // namespace

void YoloConfig::declare(ConfigSchema& schema) { yolo_bindings().declare(schema); }

YoloConfig YoloConfig::from_config(const Config& c) {
  const std::string& origin = c.origin();
  YoloConfig s = yolo_bindings().read(c);
  auto [spec, letter] = [&]() -> std::pair<YoloSpec, std::string> {
    if (s.yaml_text.empty()) return resolve_yaml(s.yaml, c.has("model.yaml") ? c.source("model.yaml") : origin);
    const auto [unified, scale_letter] = split_scale(s.yaml);
    return {YoloSpec::parse(s.yaml_text, "model.yaml_text (" + s.yaml + ")", stem(unified.empty() ? s.yaml : unified)),
            scale_letter};
  }();
  s.spec = std::move(spec);
  const YoloConfig given = s;
  apply_scale(s, c.has("model.scale") ? given.scale : "", letter,
              c.has("model.scale") ? c.source("model.scale") : origin);
  if (c.has("model.depth")) s.depth = given.depth;
  if (c.has("model.width")) s.width = given.width;
  if (c.has("model.max_channels")) s.max_channels = given.max_channels;
  if (!c.has("model.num_classes")) s.num_classes = s.spec.nc;
  const auto check = [&](bool ok, const char* key, const char* problem) {
    if (!ok) throw ConfigError(c.has(key) ? c.source(key) : origin, key, problem);
  };
  check(s.num_classes >= 1, "model.num_classes", "must be at least 1");
  check(s.depth > 0 && std::isfinite(s.depth), "model.depth", "must be a positive number");
  check(s.width > 0 && std::isfinite(s.width), "model.width", "must be a positive number");
  check(s.max_channels >= 8, "model.max_channels", "must be at least 8");
  return s;
}

YoloConfig YoloConfig::builtin(const std::string& family, const std::string& scale, int64_t num_classes) {
  YoloConfig s;
  s.yaml = family + ".yaml";
  auto [spec, letter] = resolve_yaml(s.yaml, "YoloConfig::builtin");
  s.spec = std::move(spec);
  apply_scale(s, scale, letter, "YoloConfig::builtin");
  s.num_classes = num_classes;
  return s;
}

}  // namespace meridian::models
