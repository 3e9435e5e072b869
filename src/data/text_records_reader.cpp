#include "text_records_reader.h"

#include <nlohmann/json.hpp>

#include "meridian/core/error.h"
#include "meridian/data/prep.h"
#include "text_lines.h"

namespace meridian::data {

std::string alpaca_prompt(const std::string& instruction, const std::string& input) {
  if (input.empty())
    return "Below is an instruction that describes a task. Write a response that appropriately completes the "
           "request.\n\n### Instruction:\n" +
           instruction + "\n\n### Response:\n";
  return "Below is an instruction that describes a task, paired with an input that provides further context. Write a "
         "response that appropriately completes the request.\n\n### Instruction:\n" +
         instruction + "\n\n### Input:\n" + input + "\n\n### Response:\n";
}

void read_text_records(const std::string& file, const std::string& split, std::set<std::string>& splits,
                       const std::function<void(TextRecord&&)>& visit) {
  TextLines in(file);
  if (!in) throw DataError(file, "file", "cannot open the file");
  for_each_json_line(in, file, [&](nlohmann::json& j, const std::string& where) {
    const auto str = [&](const char* key) -> std::string {
      if (!j.contains(key)) return {};
      if (!j[key].is_string()) throw DataError(file, where, std::string("'") + key + "' must be a string");
      return j[key].get<std::string>();
    };
    if (!j.is_object()) throw DataError(file, where, "expected an object");
    splits.insert(str("split"));
    if (!split.empty() && str("split") != split) return;
    TextRecord r;
    if (j.contains("instruction")) {
      if (!j.contains("output")) throw DataError(file, where, "an instruction record needs 'output'");
      r.prompt = alpaca_prompt(str("instruction"), str("input"));
      r.response = str("output");
    } else if (j.contains("text")) {
      r.response = str("text");
    } else {
      throw DataError(file, where, "expected {\"instruction\", \"input\"?, \"output\"} or {\"text\"}");
    }
    visit(std::move(r));
  });
}

}  // namespace meridian::data
