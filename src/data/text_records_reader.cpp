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

namespace {

// Python's str.strip(): ASCII whitespace off both ends.
std::string strip(const std::string& s) {
  const char* space = " \t\n\r\f\v";
  const size_t first = s.find_first_not_of(space);
  if (first == std::string::npos) return "";
  return s.substr(first, s.find_last_not_of(space) - first + 1);
}

}  // namespace

void check_chat_template(const std::string& name) {
  if (name != "llama-2" && name != "mistral")
    throw UserError("--chat-template: '" + name + "' is not known (llama-2 and mistral are built in)");
}

std::vector<TextExchange> chat_exchanges(const std::vector<ChatMessage>& messages, const std::string& chat_template) {
  check_chat_template(chat_template);
  const bool mistral = chat_template == "mistral";
  size_t first = 0;
  std::string system;
  if (!messages.empty() && messages[0].role == "system") {
    if (mistral) throw UserError("message 0 has role 'system': the mistral chat template has no system message");
    system = messages[0].content, first = 1;
  }
  std::vector<TextExchange> out;
  for (size_t i = first; i < messages.size(); ++i) {
    const bool user_turn = (i - first) % 2 == 0;
    const std::string& role = messages[i].role;
    if (role != (user_turn ? "user" : "assistant"))
      throw UserError("message " + std::to_string(i) + " has role '" + role + "', expected '" +
                      (user_turn ? "user" : "assistant") + "' (" +
                      (mistral ? "" : "an optional system message, then ") + "user and assistant alternating)");
    if (mistral) {
      if (user_turn)
        out.push_back({"[INST] " + messages[i].content + " [/INST]", "",
                       out.empty() ? TextExchange::Bos::kAlways : TextExchange::Bos::kNone});
      else
        out.back().response = messages[i].content;
      continue;
    }
    if (user_turn) {
      const std::string content = out.empty() && first == 1
                                      ? "<<SYS>>\n" + system + "\n<</SYS>>\n\n" + messages[i].content
                                      : messages[i].content;
      out.push_back({"[INST] " + strip(content) + " [/INST]", "", TextExchange::Bos::kAlways});
    } else {
      out.back().response = " " + strip(messages[i].content) + " ";
    }
  }
  if (out.empty() || (messages.size() - first) % 2 != 0)
    throw UserError("a chat must end with an assistant message (the one the loss is on)");
  return out;
}

namespace {

// One record (an object) of `file` at `where` -> its document; false when its split is not `split`.
bool parse_record(const nlohmann::json& j, const std::string& file, const std::string& where, const std::string& split,
                  const std::string& chat_template, std::set<std::string>& splits, TextRecord& r) {
  const auto str = [&](const nlohmann::json& o, const char* key, const std::string& at) -> std::string {
    if (!o.contains(key)) return {};
    if (!o[key].is_string()) throw DataError(file, at, std::string("'") + key + "' must be a string");
    return o[key].get<std::string>();
  };
  if (!j.is_object()) throw DataError(file, where, "expected an object");
  splits.insert(str(j, "split", where));
  if (!split.empty() && str(j, "split", where) != split) return false;
  if (j.contains("messages")) {
    if (!j["messages"].is_array()) throw DataError(file, where, "'messages' must be an array of {role, content}");
    std::vector<ChatMessage> messages;
    for (size_t m = 0; m < j["messages"].size(); ++m) {
      const auto& o = j["messages"][m];
      const std::string at = where + ": messages[" + std::to_string(m) + "]";
      if (!o.is_object() || !o.contains("role") || !o.contains("content"))
        throw DataError(file, at, "expected {\"role\", \"content\"}");
      messages.push_back({str(o, "role", at), str(o, "content", at)});
    }
    try {
      r.exchanges = chat_exchanges(messages, chat_template);
    } catch (const DataError&) {
      throw;
    } catch (const UserError& e) {
      throw DataError(file, where, e.what());
    }
  } else if (j.contains("instruction")) {
    if (!j.contains("output")) throw DataError(file, where, "an instruction record needs 'output'");
    r.exchanges = {{alpaca_prompt(str(j, "instruction", where), str(j, "input", where)), str(j, "output", where)}};
  } else if (j.contains("text")) {
    r.exchanges = {{"", str(j, "text", where)}};
  } else {
    throw DataError(file, where,
                    "expected {\"instruction\", \"input\"?, \"output\"}, {\"messages\": [{\"role\", \"content\"}]} or "
                    "{\"text\"}");
  }
  return true;
}

}  // namespace

void read_text_records(const std::string& file, const std::string& split, const std::string& chat_template,
                       std::set<std::string>& splits, const std::function<void(TextRecord&&)>& visit) {
  TextLines in(file);
  if (!in) throw DataError(file, "file", "cannot open the file");
  // A JSON array (Alpaca's alpaca_data.json) or JSON Lines: the first character that is not
  // whitespace tells.
  std::string first;
  while (in.next(first) && first.find_first_not_of(" \t\r") == std::string::npos) {
  }
  const size_t at = first.find_first_not_of(" \t\r");
  if (at != std::string::npos && first[at] == '[') {
    std::string text = first + "\n", line;
    while (in.next(line)) text += line + "\n";
    nlohmann::json array;
    try {
      array = nlohmann::json::parse(text);
    } catch (const nlohmann::json::exception& e) {  // parse_error, and out_of_range for 1e400
      throw DataError(file, "file", std::string("starts with '[' but is not a valid JSON array: ") + e.what());
    }
    for (size_t i = 0; i < array.size(); ++i) {
      TextRecord r;
      if (parse_record(array[i], file, "record " + std::to_string(i), split, chat_template, splits, r))
        visit(std::move(r));
    }
    return;
  }
  TextLines again(file);
  for_each_json_line(again, file, [&](nlohmann::json& j, const std::string& where) {
    TextRecord r;
    if (parse_record(j, file, where, split, chat_template, splits, r)) visit(std::move(r));
  });
}

}  // namespace meridian::data
