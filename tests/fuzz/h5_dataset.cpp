// A dataset file (train, eval, inspect): validated, summarised as `meridian inspect` does, then every
// row read (images decoded, boxes, captions, the tokenizer) where the rows fit in 64 MB. Seeds are
// small valid datasets of each kind; the fuzzer mutates their bytes.
#include <numeric>

#include "fuzz.h"
#include "meridian/data/dataset_reader.h"
#include "meridian/data/format.h"
#include "meridian/data/tokenizer.h"

using namespace meridian;

MERIDIAN_FUZZ_TARGET(h5_dataset) {
  const std::string path = fuzz::write("data.h5", bytes);
  const data::DatasetInfo info = data::validate_dataset(path);
  data::summarize(info, 2);
  if (info.kind != "image_text" && info.kind != "detection") return;
  data::DatasetReader reader(info, data::IoDriver::POSIX);
  reader.fingerprint();
  const int64_t rows = std::min<int64_t>(info.count, 4);
  if (rows <= 0 || reader.image_bytes() * rows > (64u << 20)) return;
  std::vector<int64_t> ids(rows);
  std::iota(ids.begin(), ids.end(), 0);
  std::vector<uint8_t> images(reader.image_bytes() * rows);
  if (info.kind == "detection") {
    reader.read_rows(ids, images.data(), nullptr, nullptr, nullptr);
    reader.read_boxes(ids, true);
    return;
  }
  if (info.captions_per_sample * info.context_length > (16 << 20)) return;
  std::vector<int32_t> tokens(size_t(rows) * info.captions_per_sample * info.context_length);
  std::vector<int32_t> lengths(size_t(rows) * info.captions_per_sample), labels(rows);
  reader.read_rows(ids, images.data(), tokens.data(), lengths.data(), labels.data());
  for (int64_t r = 0; r < rows; ++r) reader.captions(r), reader.name(r);
  reader.tokenizer();
}
