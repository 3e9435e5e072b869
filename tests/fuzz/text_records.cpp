// The documents of prep text: Alpaca records, chat records and plain text, as JSON Lines or one JSON
// array (the first byte chooses the file name and the chat template).
#include "../../src/data/text_records_reader.h"
#include "fuzz.h"

using namespace meridian;

MERIDIAN_FUZZ_TARGET(text_records) {
  static const char* names[] = {"records.jsonl", "alpaca_data.json"};
  static const char* templates[] = {"llama-2", "mistral", "none"};  // "none": refused for a chat record
  const size_t c = fuzz::take_choice(bytes, 6);
  const std::string path = fuzz::write(names[c % 2], bytes);
  std::set<std::string> splits;
  size_t n = 0;
  data::read_text_records(path, "", templates[c / 2], splits, [&](data::TextRecord&& r) { ++n; });
}
