// Private to data/: reading the text inputs of prep (captions, label and class-name files, JSONL).
#pragma once

#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <set>
#include <string>

#include "meridian/core/error.h"

namespace meridian::data {

// The lines of a text input in order. A UTF-8 byte-order mark at the start of the file (Windows
// editors write one) is dropped, so the first line reads like the others.
class TextLines {
 public:
  explicit TextLines(const std::string& file) : in_(file) {}
  explicit operator bool() const { return bool(in_); }
  // The next line without its '\n'; false at the end of the file.
  bool next(std::string& line) {
    if (!std::getline(in_, line)) return false;
    if (first_ && line.compare(0, 3, "\xEF\xBB\xBF") == 0) line.erase(0, 3);
    first_ = false;
    return true;
  }

 private:
  std::ifstream in_;
  bool first_ = true;
};

// " with split 's' (the file's splits: a, b)" for messages about entries of one split; empty when
// `split` is. `seen`: the splits named in the file ("" for entries without one).
inline std::string split_note(const std::string& split, const std::set<std::string>& seen) {
  if (split.empty()) return "";
  std::string list;
  for (const auto& s : seen)
    if (!s.empty()) list += (list.empty() ? "" : ", ") + s;
  return " with split '" + split + "' (" + (list.empty() ? "no entry names a split" : "the file's splits: " + list) +
         ")";
}

// Calls visit(value, "line N") for every line of the JSON Lines input `in` (read from `file`) that
// is not blank, parsed; a line that is not JSON throws DataError naming the file and the line.
inline void for_each_json_line(TextLines& in, const std::string& file,
                               const std::function<void(nlohmann::json&, const std::string&)>& visit) {
  std::string line;
  int64_t lineno = 0;
  while (in.next(line)) {
    ++lineno;
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    const std::string where = "line " + std::to_string(lineno);
    nlohmann::json j;
    try {
      j = nlohmann::json::parse(line);
    } catch (const nlohmann::json::exception& e) {  // parse_error, and out_of_range for 1e400
      throw DataError(file, where, std::string("not valid JSON: ") + e.what());
    }
    visit(j, where);
  }
}

}  // namespace meridian::data
