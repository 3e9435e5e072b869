// Private to data/: the JSONL documents of prep text.
#pragma once

#include <functional>
#include <set>
#include <string>

#include "meridian/data/prep.h"

namespace meridian::data {

// Calls visit(record) for every record of `file` (JSON Lines, or one JSON array such as Alpaca's
// alpaca_data.json) whose "split" is `split` (every record when empty), in file order:
// {"instruction", "input"?, "output"} (the prompt formatted with alpaca_prompt), {"messages":
// [{"role", "content"}, ...]} (chat_exchanges in `chat_template`) or {"text"}. `splits` receives
// every record's split ("" when it names none). Throws DataError naming the file and the line (JSON
// Lines) or record index (array) for a file that cannot be opened or a malformed record.
void read_text_records(const std::string& file, const std::string& split, const std::string& chat_template,
                       std::set<std::string>& splits, const std::function<void(TextRecord&&)>& visit);

}  // namespace meridian::data
