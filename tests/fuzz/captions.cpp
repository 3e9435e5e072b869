// The captions index of prep image-text: JSON Lines, a Karpathy-format .json, or CSV (the first byte
// chooses which the file is named as).
#include "../../src/data/captions_reader.h"
#include "fuzz.h"

using namespace meridian;

MERIDIAN_FUZZ_TARGET(captions) {
  static const char* names[] = {"captions.jsonl", "dataset_rsicd.json", "captions.csv"};
  const std::string path = fuzz::write(names[fuzz::take_choice(bytes, 3)], bytes);
  size_t n = 0;
  data::read_captions(path, [&](data::CaptionEntry&& e) { n += e.captions.size(); });
}
