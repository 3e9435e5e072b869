#include "meridian/data/format.h"

#include <cctype>
#include <filesystem>
#include <functional>

#include "dataset_index.h"
#include "h5.h"
#include "meridian/core/error.h"
#include "meridian/core/hash.h"
#include "meridian/data/tokenizer.h"

namespace meridian::data {

namespace {
h5::Id open_dataset(hid_t file, const std::string& path, const std::string& name) {
  if (!h5::exists(file, name)) throw DataError(path, name, "missing dataset");
  return h5::dataset_id(MERIDIAN_H5_CHECK(H5Dopen2(file, name.c_str(), H5P_DEFAULT)));
}

void expect_type(hid_t dset, const std::string& path, const std::string& name, H5T_class_t cls, size_t size,
                 const char* what) {
  h5::Id t = h5::type_id(MERIDIAN_H5_CHECK(H5Dget_type(dset)));
  if (H5Tget_class(t) != cls || (size && H5Tget_size(t) != size))
    throw DataError(path, name, std::string("expected ") + what);
}

// Strings are stored variable-length (as prep writes them, and h5py does for str); fixed-length ones
// would fail inside HDF5 when read.
void expect_strings(hid_t file, const std::string& path, const std::string& name) {
  h5::Id dset = open_dataset(file, path, name);
  h5::Id t = h5::type_id(MERIDIAN_H5_CHECK(H5Dget_type(dset)));
  if (H5Tget_class(t) != H5T_STRING || H5Tis_variable_str(t) <= 0)
    throw DataError(path, name, "expected variable-length strings");
}

std::string shape_text(const std::vector<hsize_t>& d) {
  std::string s = "[";
  for (size_t i = 0; i < d.size(); ++i) s += (i ? ", " : "") + std::to_string(d[i]);
  return s + "]";
}
using ShapeCheck = std::function<void(const char*, std::vector<hsize_t>)>;

void validate_image_text(hid_t file, const std::string& path, const std::vector<hsize_t>& d, DatasetInfo& info,
                         const ShapeCheck& check_shape) {
  h5::Id tokens = open_dataset(file, path, "/tokens");
  expect_type(tokens, path, "/tokens", H5T_INTEGER, 4, "int32");
  const auto t = h5::dims(tokens);
  if (t.size() != 3 || t[0] != d[0] || t[1] < 1 || t[2] < 1)
    throw DataError(
        path, "/tokens",
        "expected [N, K, L] with N = " + std::to_string(d[0]) + ", K >= 1 and L >= 1, got " + shape_text(t));
  info.captions_per_sample = t[1], info.context_length = t[2];
  for (auto c : h5::chunk_dims(tokens)) info.token_chunk.push_back(c);

  check_shape("/token_lengths", {d[0], t[1]});
  check_shape("/labels", {d[0]});
  check_shape("/captions", {d[0], t[1]});
  expect_strings(file, path, "/captions");
}

// Boxes stored flat by image: `boxes` float32 [count, 4], `classes` [count], `offsets` int64
// [N + 1] from 0 to count, never decreasing (`count` names the count in messages: M, K). Returns it.
int64_t validate_ragged_boxes(hid_t file, const std::string& path, const std::vector<hsize_t>& d,
                              const ShapeCheck& check_shape, const std::string& boxes, const std::string& classes,
                              const std::string& offsets, const std::string& count) {
  h5::Id dset = open_dataset(file, path, boxes);
  expect_type(dset, path, boxes, H5T_FLOAT, 4, "float32");
  const auto b = h5::dims(dset);
  if (b.size() != 2 || b[1] != 4) throw DataError(path, boxes, "expected [" + count + ", 4], got " + shape_text(b));
  check_shape(classes.c_str(), {b[0]});
  check_shape(offsets.c_str(), {d[0] + 1});
  std::vector<int64_t> off(d[0] + 1);
  MERIDIAN_H5_CHECK(
      H5Dread(open_dataset(file, path, offsets), H5T_NATIVE_INT64, H5S_ALL, H5S_ALL, H5P_DEFAULT, off.data()));
  if (off.front() != 0 || off.back() != int64_t(b[0]))
    throw DataError(path, offsets, "must start at 0 and end at " + count + " = " + std::to_string(b[0]));
  for (size_t i = 1; i < off.size(); ++i)
    if (off[i] < off[i - 1]) throw DataError(path, offsets, "decreases at entry " + std::to_string(i));
  return int64_t(b[0]);
}

void validate_detection(hid_t file, const std::string& path, const std::vector<hsize_t>& d, DatasetInfo& info,
                        const ShapeCheck& check_shape) {
  info.box_count = validate_ragged_boxes(file, path, d, check_shape, "/boxes", "/box_classes", "/box_offsets", "M");
  // Written since 2026-12 (older files lack them: evaluation then takes the stored image as the original).
  if (h5::exists(file, "/image_sizes")) {
    expect_type(open_dataset(file, path, "/image_sizes"), path, "/image_sizes", H5T_INTEGER, 4, "int32");
    check_shape("/image_sizes", {d[0], 2});
    expect_type(open_dataset(file, path, "/image_ids"), path, "/image_ids", H5T_INTEGER, 8,
                "int64");  // written together
    check_shape("/image_ids", {d[0]});
    info.original_sizes = true;
  }
  if (h5::exists(file, "/box_areas")) {
    expect_type(open_dataset(file, path, "/box_areas"), path, "/box_areas", H5T_FLOAT, 4, "float32");
    check_shape("/box_areas", {hsize_t(info.box_count)});
    info.box_areas = true;
  }
  if (h5::exists(file, "/crowd_offsets")) {  // COCO's iscrowd regions, beside the boxes
    expect_type(open_dataset(file, path, "/crowd_classes"), path, "/crowd_classes", H5T_INTEGER, 4, "int32");
    info.crowd_count =
        validate_ragged_boxes(file, path, d, check_shape, "/crowd_boxes", "/crowd_classes", "/crowd_offsets", "K");
  }
}

// The model with the text rules of /tokenizer's attributes (prep --tokenizer DIR: a Hugging Face
// tokenizer's; absent in other datasets: the model's own pieces, no rules).
Tokenizer read_tokenizer(hid_t file, const std::string& path, std::string* model_bytes = nullptr) {
  h5::Id model = open_dataset(file, path, "/tokenizer/model");
  const auto bytes = h5::read_bytes(model);
  if (model_bytes) *model_bytes = bytes;
  Tokenizer tok = Tokenizer::from_bytes(bytes, path + ": /tokenizer/model");
  h5::Id group = h5::group_id(MERIDIAN_H5_CHECK(H5Gopen2(file, "/tokenizer", H5P_DEFAULT)));
  TextRules rules;
  rules.lower_case = h5::read_attr_int(group, "lower_case").value_or(0) != 0;
  rules.strip_punctuation = h5::read_attr_int(group, "strip_punctuation").value_or(0) != 0;
  rules.pad_id = int(h5::read_attr_int(group, "pad_id").value_or(-1));
  rules.eos_id = int(h5::read_attr_int(group, "eos_id").value_or(-1));
  rules.add_bos = h5::read_attr_int(group, "add_bos").value_or(1) != 0;  // absent before 2026-12-04: always
  // Absent before 2026-12-06: kModel.
  const int64_t prefix = h5::read_attr_int(group, "prefix").value_or(0);
  if (prefix < 0 || prefix > int64_t(TextRules::Prefix::kNever))
    throw DataError(path, "/tokenizer attribute 'prefix'", std::to_string(prefix) + " is not 0, 1, 2 or 3");
  rules.prefix = TextRules::Prefix(prefix);
  for (const auto& [id, name] : {std::pair{rules.pad_id, "pad_id"}, std::pair{rules.eos_id, "eos_id"}})
    if (id < -1 || id >= tok.vocab_size())
      throw DataError(path, std::string("/tokenizer attribute '") + name + "'",
                      std::to_string(id) + " is not a piece of the tokenizer's " + std::to_string(tok.vocab_size()));
  return tok.with_rules(rules);
}

Tokenizer stored_tokenizer(hid_t file, const std::string& path, DatasetInfo& info) {
  std::string bytes;
  Tokenizer tok = read_tokenizer(file, path, &bytes);
  info.tokenizer_hash = fnv1a(bytes.data(), bytes.size());
  info.vocab_size = tok.vocab_size();
  info.pad_id = tok.pad_id();
  info.eos_id = tok.eos_id();
  return tok;
}

void validate_text(hid_t file, const std::string& path, DatasetInfo& info) {
  h5::Id tokens = open_dataset(file, path, "/tokens");
  expect_type(tokens, path, "/tokens", H5T_INTEGER, 4, "int32");
  const auto t = h5::dims(tokens);
  if (t.size() != 1) throw DataError(path, "/tokens", "expected [T], got " + shape_text(t));
  info.token_count = int64_t(t[0]);
  h5::Id mask = open_dataset(file, path, "/loss_mask");
  expect_type(mask, path, "/loss_mask", H5T_INTEGER, 1, "uint8");
  if (h5::dims(mask) != t) throw DataError(path, "/loss_mask", "expected shape " + shape_text(t) + " like /tokens");
  h5::Id offsets = open_dataset(file, path, "/doc_offsets");
  if (h5::dims(offsets) != std::vector<hsize_t>{hsize_t(info.count + 1)})
    throw DataError(path, "/doc_offsets", "expected [count + 1] = [" + std::to_string(info.count + 1) + "]");
  std::vector<int64_t> off(info.count + 1);
  MERIDIAN_H5_CHECK(H5Dread(offsets, H5T_NATIVE_INT64, H5S_ALL, H5S_ALL, H5P_DEFAULT, off.data()));
  if (off.front() != 0 || off.back() != info.token_count)
    throw DataError(path, "/doc_offsets", "must start at 0 and end at T = " + std::to_string(info.token_count));
  for (size_t i = 1; i < off.size(); ++i)
    if (off[i] < off[i - 1]) throw DataError(path, "/doc_offsets", "decreases at entry " + std::to_string(i));
  stored_tokenizer(file, path, info);
}

DatasetInfo validate_file(const std::string& path);

// An index and its parts (dataset_index.h): every part valid, all alike; the summary of all.
DatasetInfo validate_index(const std::string& path) {
  const DatasetIndex index = read_index(path);
  if (!index.complete)
    throw DataError(path, "field 'complete'",
                    "false: prep has not finished this dataset (interrupted? run the same prep with --resume)");
  if (index.parts.empty()) throw DataError(path, "field 'parts'", "empty");
  DatasetInfo all;
  for (size_t i = 0; i < index.parts.size(); ++i) {
    const std::string part = part_path(path, index.parts[i].file);
    DatasetInfo p = validate_file(part);
    const std::string where = "field 'parts[" + std::to_string(i) + "]'";
    if (p.count != index.parts[i].count)
      throw DataError(
          path, where,
          "lists " + std::to_string(index.parts[i].count) + " rows, " + part + " has " + std::to_string(p.count));
    if (p.kind != index.kind)
      throw DataError(path, where, part + " is '" + p.kind + "', the index '" + index.kind + "'");
    if (i == 0) {
      if (p.kind != "image_text" && p.kind != "detection")
        throw DataError(path, "field 'kind'",
                        "datasets of many files hold images (image_text or detection), not '" + p.kind + "'");
      all = p;
      all.path = path;
      all.count = 0, all.encoded_bytes = 0, all.box_count = 0, all.file_bytes = std::filesystem::file_size(path);
      all.crowd_count = p.crowd_count < 0 ? -1 : 0;
      all.parts.clear();
    } else {
      const auto differs = [&](bool d, const std::string& what) {
        if (d) throw DataError(part, what, "differs from the first part's (" + all.parts[0].path + ")");
      };
      differs(p.image_encoding != all.image_encoding, "attribute 'image_encoding'");
      differs(p.height != all.height || p.width != all.width, "image size");
      differs(p.captions_per_sample != all.captions_per_sample || p.context_length != all.context_length,
              "/tokens shape [N, K, L]");
      differs(p.tokenizer_hash != all.tokenizer_hash, "/tokenizer/model");
      differs(p.class_names != all.class_names, "/class_names");
      differs(p.class_ids != all.class_ids, "/class_ids");
      differs(p.original_sizes != all.original_sizes, "/image_sizes (present in one part only)");
      differs(p.box_areas != all.box_areas || (p.crowd_count < 0) != (all.crowd_count < 0),
              "/box_areas or /crowd_boxes (present in one part only)");
    }
    all.count += p.count, all.encoded_bytes += p.encoded_bytes, all.box_count += p.box_count;
    if (p.crowd_count > 0) all.crowd_count += p.crowd_count;
    all.file_bytes += p.file_bytes;
    all.parts.push_back({part, p.count});
  }
  return all;
}

}  // namespace

DatasetInfo validate_dataset(const std::string& path) {
  if (is_index_path(path)) return validate_index(path);
  return validate_file(path);
}

namespace {
DatasetInfo validate_file(const std::string& path) {
  const auto locked = h5::lock();
  if (!std::filesystem::exists(path)) throw DataError(path, "file", "does not exist");
  h5::QuietErrors quiet;
  if (H5Fis_hdf5(path.c_str()) <= 0) throw DataError(path, "file", "not an HDF5 file");
  h5::Id file = h5::file_id(H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT));
  if (!file.valid()) throw DataError(path, "file", "cannot be opened as HDF5 (truncated or corrupt?)");

  DatasetInfo info;
  info.path = path;
  info.file_bytes = std::filesystem::file_size(path);
  const auto format = h5::read_attr_string(file, "format");
  if (!format || *format != kFormatName)
    throw DataError(
        path, "attribute 'format'",
        "expected \"" + std::string(kFormatName) + "\"" + (format ? ", got \"" + *format + "\"" : " (missing)"));
  info.format_version = h5::read_attr_int(file, "format_version").value_or(0);
  if (info.format_version < 1 || info.format_version > kFormatVersion)
    throw DataError(path, "attribute 'format_version'",
                    "this meridian reads versions 1 to " + std::to_string(kFormatVersion) + ", the file has " +
                        std::to_string(info.format_version) +
                        (info.format_version > kFormatVersion ? " (written by a newer meridian)" : ""));
  if (h5::read_attr_int(file, "complete").value_or(0) != 1)
    throw DataError(path, "attribute 'complete'", "missing: the file was not finished (interrupted prep?)");
  info.kind = h5::read_attr_string(file, "kind").value_or("");
  info.created_by = h5::read_attr_string(file, "created_by").value_or("");
  info.split = h5::read_attr_string(file, "split").value_or("");
  if (info.kind != "image_text" && info.kind != "detection" && info.kind != "text")
    throw DataError(path, "attribute 'kind'", "expected 'image_text', 'detection' or 'text', got '" + info.kind + "'");
  info.count = h5::read_attr_int(file, "count").value_or(-1);
  info.parts = {{path, info.count}};
  if (info.kind == "text") {
    validate_text(file, path, info);
    return info;
  }

  std::vector<hsize_t> d;  // [N] and, for raw images, [N, H, W, 3]
  info.image_encoding = info.format_version == 1 ? "raw" : h5::read_attr_string(file, "image_encoding").value_or("");
  if (info.image_encoding == "raw") {
    h5::Id images = open_dataset(file, path, "/images");
    expect_type(images, path, "/images", H5T_INTEGER, 1, "uint8");
    d = h5::dims(images);
    if (d.size() != 4 || d[3] != 3)
      throw DataError(path, "/images", "expected shape [N, H, W, 3], got " + shape_text(d));
    if (int64_t(d[0]) != info.count)
      throw DataError(path, "/images",
                      shape_text(d) + " disagrees with attribute count = " + std::to_string(info.count));
    info.height = d[1], info.width = d[2], info.channels = d[3];
    for (auto c : h5::chunk_dims(images)) info.image_chunk.push_back(c);
  } else if (info.image_encoding == "jpeg") {
    info.height = h5::read_attr_int(file, "image_height").value_or(0);
    info.width = h5::read_attr_int(file, "image_width").value_or(0);
    info.channels = 3;
    if (info.height < 1 || info.width < 1)
      throw DataError(path, "attributes 'image_height', 'image_width'", "missing or not positive in a jpeg file");
    if (info.count < 0) throw DataError(path, "attribute 'count'", "missing or negative");
    d = {hsize_t(info.count)};
    h5::Id bytes = open_dataset(file, path, "/image_bytes");
    expect_type(bytes, path, "/image_bytes", H5T_INTEGER, 1, "uint8");
    const auto b = h5::dims(bytes);
    if (b.size() != 1) throw DataError(path, "/image_bytes", "expected [bytes], got " + shape_text(b));
    info.encoded_bytes = int64_t(b[0]);
    for (auto c : h5::chunk_dims(bytes)) info.image_chunk.push_back(c);
    h5::Id offsets = open_dataset(file, path, "/image_offsets");
    expect_type(offsets, path, "/image_offsets", H5T_INTEGER, 8, "int64");
    if (h5::dims(offsets) != std::vector<hsize_t>{d[0] + 1})
      throw DataError(path, "/image_offsets", "expected [count + 1] = [" + std::to_string(info.count + 1) + "]");
    // The two ends only (an image's own range is checked when it is read): 10M images would be 80 MB.
    int64_t ends[2] = {0, 0};
    for (int k = 0; k < 2; ++k) {
      h5::Id space = h5::space_id(MERIDIAN_H5_CHECK(H5Dget_space(offsets)));
      hsize_t at = k == 0 ? 0 : d[0], one = 1;
      MERIDIAN_H5_CHECK(H5Sselect_hyperslab(space, H5S_SELECT_SET, &at, nullptr, &one, nullptr));
      h5::Id mem = h5::space_id(MERIDIAN_H5_CHECK(H5Screate_simple(1, &one, nullptr)));
      MERIDIAN_H5_CHECK(H5Dread(offsets, H5T_NATIVE_INT64, mem, space, H5P_DEFAULT, &ends[k]));
    }
    if (ends[0] != 0 || ends[1] != info.encoded_bytes)
      throw DataError(path, "/image_offsets",
                      "must start at 0 and end at the size of /image_bytes = " + std::to_string(info.encoded_bytes));
  } else {
    throw DataError(path, "attribute 'image_encoding'", "expected 'raw' or 'jpeg', got '" + info.image_encoding + "'");
  }

  const auto check_shape = [&](const char* name, std::vector<hsize_t> want) {
    h5::Id ds = open_dataset(file, path, name);
    if (h5::dims(ds) != want)
      throw DataError(path, name, "expected shape " + shape_text(want) + ", got " + shape_text(h5::dims(ds)));
  };
  check_shape("/names", {d[0]});
  expect_strings(file, path, "/names");
  if (info.kind == "image_text") {
    validate_image_text(file, path, d, info, check_shape);
  } else {
    validate_detection(file, path, d, info, check_shape);
  }
  if (h5::exists(file, "/class_names")) {
    expect_strings(file, path, "/class_names");
    h5::Id cn = open_dataset(file, path, "/class_names");
    const auto n = h5::dims(cn);
    info.class_names = h5::read_strings(cn, 0, n.empty() ? 0 : n[0]);
  }
  if (h5::exists(file, "/class_ids")) {  // COCO's category ids of the classes
    h5::Id ids = open_dataset(file, path, "/class_ids");
    expect_type(ids, path, "/class_ids", H5T_INTEGER, 8, "int64");
    check_shape("/class_ids", {hsize_t(info.class_names.size())});
    info.class_ids.resize(info.class_names.size());
    if (!info.class_ids.empty())
      MERIDIAN_H5_CHECK(H5Dread(ids, H5T_NATIVE_INT64, H5S_ALL, H5S_ALL, H5P_DEFAULT, info.class_ids.data()));
  }
  if (info.kind == "image_text") {
    stored_tokenizer(file, path, info);
  } else if (!info.class_names.empty()) {
    // Every box class must name a class.
    h5::Id classes = open_dataset(file, path, "/box_classes");
    std::vector<int32_t> values(info.box_count);
    if (info.box_count)
      MERIDIAN_H5_CHECK(H5Dread(classes, H5T_NATIVE_INT32, H5S_ALL, H5S_ALL, H5P_DEFAULT, values.data()));
    for (size_t i = 0; i < values.size(); ++i)
      if (values[i] < 0 || values[i] >= int32_t(info.class_names.size()))
        throw DataError(path, "/box_classes",
                        "entry " + std::to_string(i) + " is " + std::to_string(values[i]) + ", outside the " +
                            std::to_string(info.class_names.size()) + " classes");
    if (info.crowd_count > 0) {  // and every crowd region's
      std::vector<int32_t> crowd(size_t(info.crowd_count));
      MERIDIAN_H5_CHECK(H5Dread(open_dataset(file, path, "/crowd_classes"), H5T_NATIVE_INT32, H5S_ALL, H5S_ALL,
                                H5P_DEFAULT, crowd.data()));
      for (size_t i = 0; i < crowd.size(); ++i)
        if (crowd[i] < 0 || crowd[i] >= int32_t(info.class_names.size()))
          throw DataError(path, "/crowd_classes",
                          "entry " + std::to_string(i) + " is " + std::to_string(crowd[i]) + ", outside the " +
                              std::to_string(info.class_names.size()) + " classes");
    }
  }
  return info;
}
}  // namespace

Tokenizer dataset_tokenizer(const std::string& path) {
  const std::string first = validate_dataset(path).parts.at(0).path;  // an index's parts share one tokenizer
  const auto locked = h5::lock();
  h5::Id file = h5::file_id(MERIDIAN_H5_CHECK(H5Fopen(first.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT)));
  return read_tokenizer(file, first);
}

std::string class_words(const std::string& name) {
  std::vector<std::string> words(1);
  const auto upper = [](char c) { return std::isupper(static_cast<unsigned char>(c)) != 0; };
  const auto lower = [](char c) { return std::islower(static_cast<unsigned char>(c)) != 0; };
  for (size_t i = 0; i < name.size(); ++i) {
    const char c = name[i];
    if (c == '_' || c == '-' || c == ' ') {
      if (!words.back().empty()) words.emplace_back();
      continue;
    }
    const std::string& w = words.back();
    // A capital starts a word after a small letter or digit ("BareLand"), or ends a run of capitals
    // when a small letter follows it ("HTTPServer": "HTTP", "Server").
    const bool starts = upper(c) && !w.empty() && (!upper(w.back()) || (i + 1 < name.size() && lower(name[i + 1])));
    if (starts) words.emplace_back();
    words.back() += c;
  }
  std::string out;
  for (auto& w : words) {
    if (w.empty()) continue;
    bool capitals = w.size() > 1;
    for (char c : w) capitals = capitals && !lower(c);
    if (!capitals)
      for (char& c : w) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    out += (out.empty() ? "" : " ") + w;
  }
  return out;
}

}  // namespace meridian::data
