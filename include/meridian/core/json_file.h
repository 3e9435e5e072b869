// Small JSON files (Hugging Face config.json, tokenizer_config.json, preprocessor_config.json, indexes):
// read with errors that name the file, written whole. Not collective.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>

namespace meridian {

// The JSON object in `path`. DataError "<path>: <what>: ..." when the file cannot be read, is not
// valid JSON or holds something other than an object.
nlohmann::json read_json_object(const std::string& path, const std::string& what);

// `value` as an integer: a JSON integer in int64's range, or a number with an integral value inside it
// (1.0, as some writers store ids). DataError "<path>: <field>: expected an integer, got <value>"
// otherwise. nlohmann's get<int64_t>() of 1e300 is undefined behaviour (a float cast to an integer).
int64_t json_integer(const nlohmann::json& value, const std::string& path, const std::string& field);

// `value` as JSON (2-space indent, trailing newline), written atomically (write_file_atomically).
void write_json_file(const std::string& path, const nlohmann::json& value);

}  // namespace meridian
