#include "dataset_index.h"

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "meridian/core/error.h"

namespace fs = std::filesystem;

namespace meridian::data {

bool is_index_path(const std::string& path) { return fs::path(path).extension() == ".json"; }

DatasetIndex read_index(const std::string& path) {
  std::ifstream f(path);
  if (!f) throw DataError(path, "file", fs::exists(path) ? "cannot be read" : "does not exist");
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(f);
  } catch (const nlohmann::json::exception& e) {
    throw DataError(path, "file", std::string("not JSON (") + e.what() + ")");
  }
  const auto field = [&](const nlohmann::json& obj, const std::string& name, const std::string& where,
                         nlohmann::json::value_t type) -> const nlohmann::json& {
    const auto it = obj.find(name);
    const bool number_ok = type == nlohmann::json::value_t::number_integer && it != obj.end() &&
                           it->type() == nlohmann::json::value_t::number_unsigned;
    if (it == obj.end() || (it->type() != type && !number_ok))
      throw DataError(path, "field '" + where + name + "'", it == obj.end() ? "missing" : "has the wrong type");
    return *it;
  };
  using T = nlohmann::json::value_t;
  if (!j.is_object()) throw DataError(path, "file", "expected a JSON object");
  const std::string format = field(j, "format", "", T::string).get<std::string>();
  if (format != kIndexFormatName)
    throw DataError(path, "field 'format'",
                    "expected \"" + std::string(kIndexFormatName) + "\", got \"" + format + "\"");
  const int64_t version = field(j, "format_version", "", T::number_integer).get<int64_t>();
  if (version != kIndexFormatVersion)
    throw DataError(path, "field 'format_version'",
                    "this meridian reads version " + std::to_string(kIndexFormatVersion) + ", the file has " +
                        std::to_string(version));
  DatasetIndex index;
  index.kind = field(j, "kind", "", T::string).get<std::string>();
  index.complete = field(j, "complete", "", T::boolean).get<bool>();
  const auto& parts = field(j, "parts", "", T::array);
  for (size_t i = 0; i < parts.size(); ++i) {
    const std::string where = "parts[" + std::to_string(i) + "].";
    if (!parts[i].is_object()) throw DataError(path, "field 'parts[" + std::to_string(i) + "]'", "expected an object");
    IndexPart p;
    p.file = field(parts[i], "file", where, T::string).get<std::string>();
    p.count = field(parts[i], "count", where, T::number_integer).get<int64_t>();
    p.source = field(parts[i], "source", where, T::string).get<std::string>();
    p.source_count = field(parts[i], "source_count", where, T::number_integer).get<int64_t>();
    p.first_input = field(parts[i], "first_input", where, T::number_integer).get<int64_t>();
    p.last_input = field(parts[i], "last_input", where, T::number_integer).get<int64_t>();
    if (p.file.empty() || p.file.find('/') != std::string::npos)
      throw DataError(path, "field '" + where + "file'", "must be a file name next to the index, got '" + p.file + "'");
    if (p.count < 0 || p.first_input < 0 || p.last_input < p.first_input)
      throw DataError(path, "field '" + where + "count'", "negative count or an input range that goes backwards");
    index.parts.push_back(std::move(p));
  }
  return index;
}

void write_index(const std::string& path, const DatasetIndex& index) {
  nlohmann::json parts = nlohmann::json::array();
  for (const auto& p : index.parts)
    parts.push_back({{"file", p.file},
                     {"count", p.count},
                     {"source", p.source},
                     {"source_count", p.source_count},
                     {"first_input", p.first_input},
                     {"last_input", p.last_input}});
  const nlohmann::json j = {{"format", kIndexFormatName},
                            {"format_version", kIndexFormatVersion},
                            {"kind", index.kind},
                            {"complete", index.complete},
                            {"parts", parts}};
  const std::string tmp = path + ".tmp";
  {
    std::ofstream f(tmp, std::ios::trunc);
    f << j.dump(1) << "\n";
    f.flush();
    if (!f) throw SystemError(tmp + ": cannot write the dataset index");
  }
  fs::rename(tmp, path);
}

std::string part_path(const std::string& index_path, const std::string& file) {
  return (fs::path(index_path).parent_path() / file).string();
}

std::string part_file_name(const std::string& index_path, int64_t k) {
  char digits[32];
  std::snprintf(digits, sizeof(digits), "-%05lld.h5", (long long)k);
  return fs::path(index_path).stem().string() + digits;
}

}  // namespace meridian::data
