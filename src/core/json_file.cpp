#include "meridian/core/json_file.h"

#include <fstream>

#include "meridian/core/error.h"
#include "meridian/core/files.h"

namespace meridian {

nlohmann::json read_json_object(const std::string& path, const std::string& what) {
  std::ifstream in(path);
  if (!in) throw DataError(path, what, "cannot be read (missing or no permission)");
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(in);
  } catch (const nlohmann::json::exception& e) {
    throw DataError(path, what, std::string("is not valid JSON: ") + e.what());
  }
  if (!j.is_object()) throw DataError(path, what, "is not a JSON object");
  return j;
}

void write_json_file(const std::string& path, const nlohmann::json& value) {
  write_file_atomically(path, value.dump(2) + "\n");
}

}  // namespace meridian
