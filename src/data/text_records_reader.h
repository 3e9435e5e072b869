// Private to data/: the JSONL documents of prep text.
#pragma once

#include <functional>
#include <set>
#include <string>

#include "meridian/data/prep.h"

namespace meridian::data {

// Calls visit(record) for every record of the JSONL `file` whose "split" is `split` (every record
// when empty), in file order: {"instruction", "input"?, "output"} (the prompt formatted with
// alpaca_prompt) or {"text"}. `splits` receives every record's split ("" when it names none).
// Throws DataError naming the file and line for a file that cannot be opened or a malformed record.
void read_text_records(const std::string& file, const std::string& split, std::set<std::string>& splits,
                       const std::function<void(TextRecord&&)>& visit);

}  // namespace meridian::data
