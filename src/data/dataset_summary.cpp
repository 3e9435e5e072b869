// `inspect`'s summary of a dataset: class histogram and a few decoded examples, for any kind.
#include <algorithm>

#include "h5.h"
#include "meridian/core/error.h"
#include "meridian/data/dataset_reader.h"
#include "meridian/data/tokenizer.h"

namespace meridian::data {

namespace {
h5::Id open_read_only(const std::string& path) {
  return h5::file_id(MERIDIAN_H5_CHECK(H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT)));
}

// Elements [first, first + count) of a 1-D (or the rows of a 2-D) dataset.
template <typename T>
std::vector<T> read_range(hid_t file, const char* name, hid_t mem_type, int64_t first, int64_t count,
                          int64_t width = 1) {
  h5::Id dset = h5::dataset_id(MERIDIAN_H5_CHECK(H5Dopen2(file, name, H5P_DEFAULT)));
  std::vector<T> out(size_t(count * width));
  if (count == 0) return out;
  const auto d = h5::dims(dset);
  h5::Id space = h5::space_id(MERIDIAN_H5_CHECK(H5Dget_space(dset)));
  std::vector<hsize_t> off(d.size(), 0), cnt(d);
  off[0] = hsize_t(first);
  cnt[0] = hsize_t(count);
  MERIDIAN_H5_CHECK(H5Sselect_hyperslab(space, H5S_SELECT_SET, off.data(), nullptr, cnt.data(), nullptr));
  h5::Id mem = h5::space_id(MERIDIAN_H5_CHECK(H5Screate_simple(int(cnt.size()), cnt.data(), nullptr)));
  MERIDIAN_H5_CHECK(H5Dread(dset, mem_type, mem, space, H5P_DEFAULT, out.data()));
  return out;
}
}  // namespace

DatasetSummary summarize(const DatasetInfo& info, int examples) {
  const std::string& path = info.path;
  if (info.kind == "text") {
    const auto locked = h5::lock();
    h5::Id file = open_read_only(path);
    DatasetSummary s;
    int64_t supervised = 0;
    const int64_t step = 1 << 22;
    for (int64_t first = 0; first < info.token_count; first += step)
      for (uint8_t m :
           read_range<uint8_t>(file, "/loss_mask", H5T_NATIVE_UINT8, first, std::min(step, info.token_count - first)))
        supervised += m;
    s.supervised_fraction = info.token_count ? double(supervised) / info.token_count : 0;
    const Tokenizer tok = dataset_tokenizer(path);
    const auto off = read_range<int64_t>(file, "/doc_offsets", H5T_NATIVE_INT64, 0, info.count + 1);
    for (int e = 0; e < examples && e < info.count; ++e) {
      const int64_t doc = (info.count * e) / std::max(1, examples), n = off[doc + 1] - off[doc];
      const auto ids = read_range<int32_t>(file, "/tokens", H5T_NATIVE_INT32, off[doc], n);
      const auto mask = read_range<uint8_t>(file, "/loss_mask", H5T_NATIVE_UINT8, off[doc], n);
      std::vector<int32_t> prompt, response;
      for (int64_t i = 0; i < n; ++i)
        if (ids[i] != tok.bos_id()) (mask[i] ? response : prompt).push_back(ids[i]);
      s.examples.push_back({"document " + std::to_string(doc), tok.decode(prompt.data(), int(prompt.size())),
                            tok.decode(response.data(), int(response.size()))});
    }
    return s;
  }
  if (info.kind == "detection") {
    const auto locked = h5::lock();
    DatasetSummary s;
    s.class_counts.assign(info.class_names.size(), 0);
    for (const auto& part : info.parts) {
      h5::Id file = open_read_only(part.path);
      const int64_t boxes =
          int64_t(h5::dims(h5::dataset_id(MERIDIAN_H5_CHECK(H5Dopen2(file, "/box_classes", H5P_DEFAULT)))).at(0));
      const int64_t step = 1 << 20;
      for (int64_t first = 0; first < boxes; first += step) {
        for (int32_t c :
             read_range<int32_t>(file, "/box_classes", H5T_NATIVE_INT32, first, std::min(step, boxes - first)))
          if (c >= 0 && c < int32_t(s.class_counts.size())) ++s.class_counts[c];
      }
      const auto off = read_range<int64_t>(file, "/box_offsets", H5T_NATIVE_INT64, 0, part.count + 1);
      for (int64_t i = 0; i < part.count; ++i) s.unlabelled += off[i + 1] == off[i];
    }
    return s;
  }
  DatasetReader reader(info, IoDriver::POSIX);
  DatasetSummary s;
  s.class_counts.assign(info.class_names.size(), 0);
  std::vector<int32_t> labels;
  const int64_t step = 1 << 16;
  for (int64_t first = 0; first < info.count; first += step) {
    const int64_t n = std::min(step, info.count - first);
    std::vector<int64_t> rows(n);
    for (int64_t i = 0; i < n; ++i) rows[i] = first + i;
    labels.resize(n);
    reader.read_rows(rows, nullptr, nullptr, nullptr, labels.data());
    for (int32_t l : labels) {
      if (l >= 0 && l < int32_t(s.class_counts.size()))
        ++s.class_counts[l];
      else
        ++s.unlabelled;
    }
  }
  const Tokenizer tok = reader.tokenizer();
  const int K = int(info.captions_per_sample), L = int(info.context_length);
  for (int e = 0; e < examples && info.count > 0; ++e) {
    const int64_t row = (info.count * e) / std::max(1, examples);
    std::vector<int32_t> tokens(size_t(K) * L), lengths(K);
    reader.read_rows({row}, nullptr, tokens.data(), lengths.data(), nullptr);
    if (lengths[0] < 0 || lengths[0] > L)
      throw DataError(path, "/token_lengths",
                      "row " + std::to_string(row) + ": " + std::to_string(lengths[0]) +
                          " tokens, outside [0, L = " + std::to_string(L) + "]");
    s.examples.push_back({reader.name(row), reader.captions(row).at(0), tok.decode(tokens.data(), lengths[0])});
  }
  return s;
}

}  // namespace meridian::data
