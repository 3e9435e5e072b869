#include "meridian/core/json_file.h"

#include <cmath>
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

int64_t json_integer(const nlohmann::json& value, const std::string& path, const std::string& field) {
  if (value.is_number_integer() && !(value.is_number_unsigned() && value.get<uint64_t>() > uint64_t(INT64_MAX)))
    return value.get<int64_t>();
  if (value.is_number_float()) {
    const double d = value.get<double>();
    // [-2^63, 2^63): the doubles that convert to int64 exactly (2^63 itself does not).
    if (std::isfinite(d) && d == std::floor(d) && d >= -9223372036854775808.0 && d < 9223372036854775808.0)
      return int64_t(d);
  }
  throw DataError(path, field, "expected an integer, got " + value.dump());
}

void write_json_file(const std::string& path, const nlohmann::json& value) {
  write_file_atomically(path, value.dump(2) + "\n");
}

}  // namespace meridian
