#include "meridian/models/hf_checkpoint.h"

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <map>
#include <set>

#include "meridian/core/error.h"
#include "meridian/core/files.h"
#include "meridian/core/json_file.h"

namespace meridian::models {

namespace fs = std::filesystem;

namespace {

constexpr const char* kSingle = "model.safetensors";
constexpr const char* kIndex = "model.safetensors.index.json";

// The shards of an index, in the order their names first appear, and each tensor's shard.
LazyTensors read_sharded(const std::string& dir, const std::string& index_path, std::string& weights) {
  const auto index = read_json_object(index_path, "index");
  if (!index.contains("weight_map") || !index["weight_map"].is_object() || index["weight_map"].empty())
    throw DataError(index_path, "weight_map", "missing, empty or not an object of tensor name -> shard file");
  std::vector<std::string> shards;
  std::map<std::string, std::string> shard_of;
  for (const auto& [name, file] : index["weight_map"].items()) {
    if (!file.is_string()) throw DataError(index_path, "weight_map['" + name + "']", "is not a file name");
    const std::string f = file.get<std::string>();
    if (f.empty() || f.find('/') != std::string::npos || f == "." || f == "..")
      throw DataError(index_path, "weight_map['" + name + "']", "'" + f + "' is not a file name in the directory");
    if (std::find(shards.begin(), shards.end(), f) == shards.end()) {
      if (!fs::is_regular_file(fs::path(dir) / f))
        throw DataError(index_path, "weight_map['" + name + "']", "names " + f + ", which is not in " + dir);
      shards.push_back(f);
    }
    shard_of[name] = f;
  }
  LazyTensors all;
  std::set<std::string> seen;
  for (const auto& f : shards) {
    const std::string path = (fs::path(dir) / f).string();
    for (auto& tensor : open_safetensors(path)) {
      const std::string name = tensor.name;
      const auto it = shard_of.find(name);
      if (it == shard_of.end()) throw DataError(path, "tensor '" + name + "'", "is not listed in " + index_path);
      if (it->second != f) throw DataError(path, "tensor '" + name + "'", index_path + " puts it in " + it->second);
      if (!seen.insert(name).second) throw DataError(path, "tensor '" + name + "'", "appears twice");
      all.push_back(std::move(tensor));
    }
  }
  for (const auto& [name, f] : shard_of)
    if (!seen.count(name))
      throw DataError((fs::path(dir) / f).string(), "tensor '" + name + "'",
                      "missing: " + index_path + " lists it in this shard");
  weights = std::to_string(shards.size()) + " shard(s) of " + index_path;
  return all;
}

std::string shard_name(size_t k, size_t n) {
  char name[64];
  std::snprintf(name, sizeof name, "model-%05zu-of-%05zu.safetensors", k, n);
  return name;
}

}  // namespace

HfCheckpoint open_hf_checkpoint(const std::string& path) {
  HfCheckpoint c;
  c.path = path;
  if (!fs::exists(path)) throw DataError(path, "init", "does not exist (a model directory or a .safetensors file)");
  if (!fs::is_directory(path)) {
    c.tensors = open_safetensors(path);
    c.weights = path;
    return c;
  }
  c.config_path = (fs::path(path) / "config.json").string();
  c.config = read_hf_config(path);
  const std::string single = (fs::path(path) / kSingle).string(), index = (fs::path(path) / kIndex).string();
  if (fs::exists(index)) {
    c.tensors = read_sharded(path, index, c.weights);
  } else if (fs::exists(single)) {
    c.tensors = open_safetensors(single);
    c.weights = single;
  } else {
    throw DataError(path, "weights", std::string("neither ") + kSingle + " nor " + kIndex + " is in the directory");
  }
  return c;
}

nlohmann::json read_hf_config(const std::string& dir) {
  return read_json_object((fs::path(dir) / "config.json").string(), "config");
}

int write_hf_weights(const std::string& dir, const NamedTensors& tensors, int64_t max_shard_bytes) {
  if (fs::exists(dir) && !(fs::is_directory(dir) && fs::is_empty(dir)))
    throw UserError(dir + ": exists and is not an empty directory; choose another --out or remove it");
  fs::create_directories(dir);
  // Shards in the given order, a new one when the next tensor would pass the limit.
  std::vector<NamedTensors> shards(1);
  std::vector<int64_t> bytes(1, 0);
  int64_t total = 0;
  for (const auto& [name, t] : tensors) {
    const int64_t b = int64_t(t.numel()) * int64_t(t.element_size());
    if (!shards.back().empty() && bytes.back() + b > max_shard_bytes) shards.emplace_back(), bytes.push_back(0);
    shards.back().emplace_back(name, t);
    bytes.back() += b;
    total += b;
  }
  const std::map<std::string, std::string> metadata{{"format", "pt"}};
  if (shards.size() == 1) {
    save_safetensors((fs::path(dir) / kSingle).string(), shards[0], metadata);
    return 1;
  }
  nlohmann::ordered_json weight_map = nlohmann::ordered_json::object();
  for (size_t k = 0; k < shards.size(); ++k) {
    const std::string name = shard_name(k + 1, shards.size());
    save_safetensors((fs::path(dir) / name).string(), shards[k], metadata);
    for (const auto& [tensor, t] : shards[k]) weight_map[tensor] = name;
  }
  nlohmann::ordered_json index{{"metadata", {{"total_size", total}}}, {"weight_map", weight_map}};
  write_file_atomically((fs::path(dir) / kIndex).string(), index.dump(2) + "\n");
  return int(shards.size());
}

}  // namespace meridian::models
