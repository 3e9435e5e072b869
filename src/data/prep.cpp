#include "meridian/data/prep.h"

#include <spdlog/spdlog.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <opencv2/core.hpp>
#include <opencv2/imgcodecs.hpp>
#include <opencv2/imgproc.hpp>
#include <tiffio.h>
#include <set>
#include <sstream>

#include "collective_writer.h"
#include "meridian/data/format.h"
#include "meridian/comm/runtime.h"
#include "meridian/core/error.h"
#include "meridian/core/hash.h"
#include "meridian/data/synthetic.h"
#include "meridian/data/tokenizer.h"

namespace fs = std::filesystem;

namespace meridian::data {

namespace {

using Clock = std::chrono::steady_clock;

// One row to be: decoded on the rank that owns it.
struct Decoded {
  cv::Mat image;  // size x size x 3, uint8, RGB
  std::string name;
  std::vector<std::string> captions;            // image_text
  int32_t label = -1;
  std::vector<std::array<float, 4>> boxes;      // detection: x_min, y_min, x_max, y_max in stored pixels
  std::vector<int32_t> box_classes;
};

struct SkipImage {
  std::string reason;
};

// ---------- image decoding ----------

// `img` holds the file's bands; OpenCV's own decoders give 3 and 4 bands as BGR(A), so
// `opencv_order` puts them back in file order first.
cv::Mat to_rgb8(cv::Mat img, const std::vector<int>& bands, bool opencv_order = true) {
  if (opencv_order && img.channels() == 3) cv::cvtColor(img, img, cv::COLOR_BGR2RGB);
  if (opencv_order && img.channels() == 4) cv::cvtColor(img, img, cv::COLOR_BGRA2RGBA);
  if (img.depth() != CV_8U) {
    // 16-bit and float imagery: linear stretch of [0, max over all bands] to [0, 255].
    double lo = 0, hi = 0;
    cv::minMaxLoc(img.reshape(1), &lo, &hi);
    if (!(hi > 0)) hi = 1;
    img.convertTo(img, CV_8U, 255.0 / hi);
  }
  std::vector<cv::Mat> planes;
  cv::split(img, planes);
  std::vector<cv::Mat> rgb;
  if (!bands.empty()) {
    for (int b : bands) {
      if (b < 1 || b > int(planes.size()))
        throw SkipImage{"--bands asks for band " + std::to_string(b) + " but the image has " +
                        std::to_string(planes.size())};
      rgb.push_back(planes[b - 1]);
    }
  } else if (planes.size() == 1) {
    rgb = {planes[0], planes[0], planes[0]};
  } else if (planes.size() == 3 || planes.size() == 4) {
    rgb = {planes[0], planes[1], planes[2]};  // RGB, alpha dropped
  } else {
    throw SkipImage{std::to_string(planes.size()) + " bands: choose three with --bands (e.g. --bands 3,2,1)"};
  }
  cv::Mat out;
  cv::merge(rgb, out);
  return out;
}

// Shorter side to `size`, then the central size x size square (no distortion).
cv::Mat resize_crop(const cv::Mat& img, int size) {
  const double scale = double(size) / std::min(img.cols, img.rows);
  const int w = std::max(size, int(std::lround(img.cols * scale)));
  const int h = std::max(size, int(std::lround(img.rows * scale)));
  cv::Mat resized;
  if (w != img.cols || h != img.rows)
    cv::resize(img, resized, cv::Size(w, h), 0, 0, scale < 1 ? cv::INTER_AREA : cv::INTER_LINEAR);
  else
    resized = img;
  return resized(cv::Rect((w - size) / 2, (h - size) / 2, size, size)).clone();
}

// Multi-band TIFF (more than 4 bands, which OpenCV 4.6 refuses), 8 or 16-bit unsigned, strips,
// interleaved or planar, read with libtiff; bands in file order.
int tiff_bands(const std::string& path) {
  TIFFSetWarningHandler(nullptr);
  TIFFSetErrorHandler(nullptr);
  TIFF* t = TIFFOpen(path.c_str(), "r");
  if (!t) return 0;
  uint16_t spp = 1;
  TIFFGetFieldDefaulted(t, TIFFTAG_SAMPLESPERPIXEL, &spp);
  TIFFClose(t);
  return spp;
}

cv::Mat read_tiff_bands(const std::string& path) {
  std::unique_ptr<TIFF, void (*)(TIFF*)> t(TIFFOpen(path.c_str(), "r"), TIFFClose);
  if (!t) throw SkipImage{"cannot open as TIFF"};
  uint32_t w = 0, h = 0;
  uint16_t spp = 1, bps = 8, planar = PLANARCONFIG_CONTIG, format = SAMPLEFORMAT_UINT;
  TIFFGetField(t.get(), TIFFTAG_IMAGEWIDTH, &w);
  TIFFGetField(t.get(), TIFFTAG_IMAGELENGTH, &h);
  TIFFGetFieldDefaulted(t.get(), TIFFTAG_SAMPLESPERPIXEL, &spp);
  TIFFGetFieldDefaulted(t.get(), TIFFTAG_BITSPERSAMPLE, &bps);
  TIFFGetFieldDefaulted(t.get(), TIFFTAG_PLANARCONFIG, &planar);
  TIFFGetFieldDefaulted(t.get(), TIFFTAG_SAMPLEFORMAT, &format);
  if (TIFFIsTiled(t.get())) throw SkipImage{"tiled multi-band TIFF is not supported (re-save with strips)"};
  if ((bps != 8 && bps != 16) || format != SAMPLEFORMAT_UINT)
    throw SkipImage{"multi-band TIFF with " + std::to_string(bps) + "-bit samples (8 or 16-bit unsigned supported)"};
  if (w == 0 || h == 0 || spp > CV_CN_MAX) throw SkipImage{"unsupported TIFF geometry"};
  const int depth = bps == 8 ? CV_8U : CV_16U;
  cv::Mat img(int(h), int(w), CV_MAKETYPE(depth, spp));
  if (planar == PLANARCONFIG_CONTIG) {
    for (uint32_t row = 0; row < h; ++row)
      if (TIFFReadScanline(t.get(), img.ptr(int(row)), row, 0) < 0) throw SkipImage{"corrupt TIFF strip"};
  } else {
    cv::Mat plane(int(h), int(w), depth);
    std::vector<cv::Mat> planes;
    for (uint16_t s = 0; s < spp; ++s) {
      for (uint32_t row = 0; row < h; ++row)
        if (TIFFReadScanline(t.get(), plane.ptr(int(row)), row, s) < 0) throw SkipImage{"corrupt TIFF strip"};
      planes.push_back(plane.clone());
    }
    cv::merge(planes, img);
  }
  return img;
}

cv::Mat read_rgb(const std::string& path, const std::vector<int>& bands) {
  if (!fs::exists(path)) throw SkipImage{"file not found"};
  std::string ext = fs::path(path).extension().string();
  std::transform(ext.begin(), ext.end(), ext.begin(), ::tolower);
  if ((ext == ".tif" || ext == ".tiff") && tiff_bands(path) > 4) return to_rgb8(read_tiff_bands(path), bands, false);
  cv::Mat img = cv::imread(path, cv::IMREAD_UNCHANGED);
  if (img.empty()) throw SkipImage{"cannot decode (unsupported or corrupt image)"};
  if (img.dims != 2 || img.cols < 1 || img.rows < 1) throw SkipImage{"not a 2-D image"};
  return to_rgb8(img, bands);
}

// `name` (relative to `dir`) as RGB; any failure is a SkipImage whose reason starts with the name.
cv::Mat load_rgb(const std::string& dir, const std::string& name, const std::vector<int>& bands) {
  try {
    return read_rgb((fs::path(dir) / name).string(), bands);
  } catch (const cv::Exception& ex) {
    throw SkipImage{name + ": " + ex.what()};
  } catch (SkipImage& s) {
    s.reason = name + ": " + s.reason;
    throw;
  }
}

void check_inputs(const std::string& images_dir, const std::vector<int>& bands) {
  if (images_dir.empty() || !fs::is_directory(images_dir))
    throw UserError("--images: '" + images_dir + "' is not a directory");
  if (!bands.empty() && bands.size() != 3) throw UserError("--bands: give exactly three band numbers, e.g. 3,2,1");
}

// Longer side to `size`, centred on a size x size canvas of gray 114 (YOLO's letterbox): nothing is
// cut, so every box survives. Box coordinates map as x' = x * scale + pad_x.
struct Letterbox {
  cv::Mat image;
  double scale = 1;
  int pad_x = 0, pad_y = 0;
};

Letterbox letterbox(const cv::Mat& rgb, int size) {
  Letterbox l;
  l.scale = double(size) / std::max(rgb.cols, rgb.rows);
  const int w = std::max(1, int(std::lround(rgb.cols * l.scale))), h = std::max(1, int(std::lround(rgb.rows * l.scale)));
  cv::Mat resized;
  cv::resize(rgb, resized, cv::Size(w, h), 0, 0, l.scale < 1 ? cv::INTER_AREA : cv::INTER_LINEAR);
  l.image = cv::Mat(size, size, CV_8UC3, cv::Scalar(114, 114, 114));
  l.pad_x = (size - w) / 2;
  l.pad_y = (size - h) / 2;
  resized.copyTo(l.image(cv::Rect(l.pad_x, l.pad_y, w, h)));
  return l;
}

// Source-pixel box (x_min, y_min, x_max, y_max) into the letterboxed image, clipped; false when
// nothing of it is left.
bool place_box(const Letterbox& l, int size, std::array<float, 4>& box) {
  for (int k = 0; k < 4; ++k) {
    const double offset = (k % 2 == 0) ? l.pad_x : l.pad_y;
    box[k] = float(std::clamp(box[k] * l.scale + offset, 0.0, double(size)));
  }
  return box[2] - box[0] > 1e-3f && box[3] - box[1] > 1e-3f;
}

// ---------- text inputs ----------

// The lines of a text input (captions, label and class-name files, JSONL) in order. A UTF-8
// byte-order mark at the start of the file (Windows editors write one) is dropped, so the first
// line reads like the others.
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
// `split` is.
std::string split_note(const std::string& split, const std::set<std::string>& seen) {
  if (split.empty()) return "";
  std::string list;
  for (const auto& s : seen)
    if (!s.empty()) list += (list.empty() ? "" : ", ") + s;
  return " with split '" + split + "' (" + (list.empty() ? "no entry names a split" : "the file's splits: " + list) +
         ")";
}

// ---------- captions index ----------

struct Entry {
  std::string image;
  std::vector<std::string> captions;
  std::string cls, split;
};

// RFC 4180 fields of one line (quotes, "" escapes; no newlines inside fields).
std::vector<std::string> csv_fields(const std::string& line, const std::string& file, int64_t lineno) {
  std::vector<std::string> out;
  std::string cur;
  bool quoted = false, was_quoted = false;
  for (size_t i = 0; i < line.size(); ++i) {
    const char c = line[i];
    if (quoted) {
      if (c == '"' && i + 1 < line.size() && line[i + 1] == '"') cur += '"', ++i;
      else if (c == '"') quoted = false;
      else cur += c;
    } else if (c == '"' && cur.empty() && !was_quoted) {
      quoted = was_quoted = true;
    } else if (c == ',') {
      out.push_back(cur), cur.clear(), was_quoted = false;
    } else if (c != '\r') {
      cur += c;
    }
  }
  if (quoted) throw DataError(file, "line " + std::to_string(lineno), "unterminated quoted field");
  out.push_back(cur);
  return out;
}

// Calls visit(entry) for every entry in file order. Malformed lines are errors naming file and line.
void read_index(const std::string& file, const std::function<void(Entry&&)>& visit) {
  TextLines in(file);
  if (!in) throw DataError(file, "captions file", "cannot open the file");
  const bool csv = fs::path(file).extension() == ".csv";
  if (!csv && fs::path(file).extension() != ".jsonl" && fs::path(file).extension() != ".json")
    throw DataError(file, "captions file", "expected a .jsonl or .csv file");
  std::string line;
  int64_t lineno = 0;
  if (csv) {
    std::map<std::string, size_t> col;
    Entry pending;
    while (in.next(line)) {
      ++lineno;
      if (line.empty() || line == "\r") continue;
      auto f = csv_fields(line, file, lineno);
      if (col.empty()) {
        for (size_t i = 0; i < f.size(); ++i) col[f[i]] = i;
        if (!col.count("image") || !col.count("caption"))
          throw DataError(file, "line 1", "the header must name the columns 'image' and 'caption'");
        continue;
      }
      if (f.size() != col.size())
        throw DataError(file, "line " + std::to_string(lineno),
                        "expected " + std::to_string(col.size()) + " fields, got " + std::to_string(f.size()));
      const auto get = [&](const char* name) { return col.count(name) ? f[col[name]] : std::string(); };
      if (get("image").empty()) throw DataError(file, "line " + std::to_string(lineno), "empty 'image'");
      // Rows of one image are consecutive; a new image starts a new entry.
      if (!pending.image.empty() && pending.image != get("image")) {
        if (pending.captions.empty())
          throw DataError(file, "line " + std::to_string(lineno - 1), "no caption for '" + pending.image + "'");
        visit(std::move(pending)), pending = Entry{};
      }
      pending.image = get("image");
      pending.cls = get("class");
      pending.split = get("split");
      if (!get("caption").empty()) pending.captions.push_back(get("caption"));
    }
    if (!pending.image.empty()) {
      if (pending.captions.empty())
        throw DataError(file, "line " + std::to_string(lineno), "no caption for '" + pending.image + "'");
      visit(std::move(pending));
    }
    return;
  }
  while (in.next(line)) {
    ++lineno;
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    const std::string where = "line " + std::to_string(lineno);
    nlohmann::json j;
    try {
      j = nlohmann::json::parse(line);
    } catch (const nlohmann::json::parse_error& e) {
      throw DataError(file, where, std::string("not valid JSON: ") + e.what());
    }
    if (!j.is_object() || !j.contains("image") || !j["image"].is_string())
      throw DataError(file, where, "expected an object with a string field 'image'");
    Entry e;
    e.image = j["image"].get<std::string>();
    if (j.contains("captions")) {
      if (!j["captions"].is_array()) throw DataError(file, where, "'captions' must be a list of strings");
      for (const auto& c : j["captions"]) {
        if (!c.is_string()) throw DataError(file, where, "'captions' must be a list of strings");
        e.captions.push_back(c.get<std::string>());
      }
    } else if (j.contains("caption") && j["caption"].is_string()) {
      e.captions.push_back(j["caption"].get<std::string>());
    }
    if (e.captions.empty()) throw DataError(file, where, "no captions ('captions' list or 'caption' string)");
    if (j.contains("class")) {
      if (!j["class"].is_string()) throw DataError(file, where, "'class' must be a string");
      e.cls = j["class"].get<std::string>();
    }
    if (j.contains("split")) {
      if (!j["split"].is_string()) throw DataError(file, where, "'split' must be a string");
      e.split = j["split"].get<std::string>();
    }
    visit(std::move(e));
  }
}

// ---------- the shared driver ----------

struct Job {
  std::string kind = "image_text";                   // or "detection"
  int64_t count = 0;                                 // rows to consider
  std::function<Decoded(int64_t index)> decode;      // called only for this rank's indices; may throw SkipImage
  std::vector<std::string> class_names;              // detection: empty = "0".."C-1" from the boxes
  std::function<std::vector<std::string>()> tokenizer_corpus;  // image_text, rank 0, when training
  std::string split;
  std::string inputs;    // where the entries come from, for messages: "<file>[ with split 's' (...)]"
  std::string no_boxes;  // detection: why a file without boxes may have come out, for the warning
  bool strict = false;
};

// The first non-empty error over all ranks (in rank order), the same string on every rank: an
// error found on some ranks becomes everyone's, with the same message.
std::string agree_error(const comm::Runtime& rt, const std::string& mine) {
  for (const auto& e : rt.allgather(mine))
    if (!e.empty()) return e;
  return {};
}

// Rank r owns the blocks b with b % size == r (blocks of `block` indices).
bool owns(int64_t index, int block, int rank, int size) { return (index / block) % size == rank; }

// The tokenizer every rank uses: given (a .model, or another dataset's), or trained on rank 0 from
// `corpus()` (called on rank 0 only); the model bytes are broadcast.
Tokenizer shared_tokenizer(const comm::Runtime& rt, const PrepCommon& o,
                           const std::function<std::vector<std::string>()>& corpus, bool keep_whitespace) {
  std::string bytes, error;
  if (rt.rank() == 0) {
    try {
      if (o.tokenizer.empty()) {
        bytes = Tokenizer::train(corpus(), o.vocab_size, keep_whitespace).model_bytes();
      } else if (fs::path(o.tokenizer).extension() == ".h5") {
        // Another dataset's tokenizer (e.g. the train split's, for the test split).
        const auto info = validate_dataset(o.tokenizer);
        if (info.kind == "detection") throw DataError(o.tokenizer, "--tokenizer", "a detection dataset has no tokenizer");
        const auto locked = h5::lock();
        h5::Id file = h5::file_id(MERIDIAN_H5_CHECK(H5Fopen(o.tokenizer.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT)));
        h5::Id model = h5::dataset_id(MERIDIAN_H5_CHECK(H5Dopen2(file, "/tokenizer/model", H5P_DEFAULT)));
        bytes = h5::read_bytes(model);
      } else {
        bytes = Tokenizer::from_file(o.tokenizer).model_bytes();
      }
    } catch (const UserError& e) {
      error = e.what();
    }
  }
  error = agree_error(rt, error);
  if (!error.empty()) throw UserError(error);
  uint64_t len = bytes.size();
  rt.broadcast_bytes(&len, sizeof(len), 0);
  bytes.resize(len);
  rt.broadcast_bytes(bytes.data(), len, 0);
  return Tokenizer::from_bytes(bytes, o.tokenizer.empty() ? "trained tokenizer" : o.tokenizer);
}

void check_options(const PrepCommon& o) {
  if (o.out.empty()) throw UserError("--out: required");
  if (o.size < 8 || o.size > 8192) throw UserError("--size: must be between 8 and 8192, got " + std::to_string(o.size));
  if (o.captions_per_image < 1) throw UserError("--captions-per-image: must be at least 1");
  if (o.context_length < 2) throw UserError("--context-length: must be at least 2");
  if (o.block < 1) throw UserError("--block: must be at least 1");
}

// The output is refused when it is a directory, exists (unless --overwrite) or its directory is
// missing or not writable; decided on rank 0, the same error on every rank.
void check_output(const comm::Runtime& rt, const PrepCommon& o) {
  std::string error;
  if (rt.rank() == 0) {
    const fs::path out(o.out);
    const fs::path dir = out.has_parent_path() ? out.parent_path() : fs::path(".");
    if (fs::is_directory(out)) error = o.out + ": is a directory; --out names the dataset file to write";
    else if (fs::exists(out) && !o.overwrite) error = o.out + ": exists (pass --overwrite to replace it)";
    else if (!fs::is_directory(dir)) error = o.out + ": directory " + dir.string() + " does not exist";
    else if (access(dir.c_str(), W_OK) != 0) error = o.out + ": directory " + dir.string() + " is not writable";
  }
  error = agree_error(rt, error);
  if (!error.empty()) throw UserError(error);
}

// Runs `write` (which builds `tmp` and renames it); on any failure rank 0 removes `tmp`, so nothing
// half-made is left behind.
template <typename Write>
void leaving_nothing_on_failure(const comm::Runtime& rt, const std::string& tmp, Write&& write) {
  try {
    write();
  } catch (...) {
    if (rt.rank() == 0) {
      std::error_code ec;
      fs::remove(tmp, ec);
    }
    throw;
  }
}

// One round's rows of this rank, ready to write.
struct RoundRows {
  std::vector<uint8_t> images;
  std::vector<int32_t> tokens, lengths, labels;
  std::vector<float> boxes;
  std::vector<int32_t> box_classes;
  std::vector<int64_t> box_counts;  // per row
  nlohmann::json strings = nlohmann::json::array();  // per row: [name, [captions...]]
  int64_t rows() const { return int64_t(box_counts.size()); }
};

// Every rank read the inputs itself: they must have seen the same ones (a node-local path or a
// directory still being filled would give ranks different files and a corrupt output).
void check_same_inputs(const comm::Runtime& rt, int64_t count, const std::vector<std::string>& class_names) {
  std::string mine = std::to_string(count);
  for (const auto& c : class_names) mine += "|" + c;
  const auto all = rt.allgather(mine);
  const auto hosts = rt.allgather(rt.host());
  for (int r = 1; r < rt.size(); ++r)
    if (all[r] != all[0])
      throw UserError("prep: rank " + std::to_string(r) + " on " + hosts[r] + " sees different inputs than rank 0 on " +
                      hosts[0] + " (" + all[r].substr(0, all[r].find('|')) + " vs " + all[0].substr(0, all[0].find('|')) +
                      " entries, or other classes): are the input paths the same files on every node?");
}

PrepReport run_job(const comm::Runtime& rt, const PrepCommon& o, const Job& job) {
  const auto start = Clock::now();
  const bool text = job.kind == "image_text";
  check_output(rt, o);
  check_same_inputs(rt, job.count, job.class_names);
  if (job.count == 0) throw UserError("prep: no input entries in " + job.inputs);

  std::unique_ptr<Tokenizer> tok;
  if (text) tok = std::make_unique<Tokenizer>(shared_tokenizer(rt, o, job.tokenizer_corpus, /*keep_whitespace=*/false));
  const int K = o.captions_per_image, L = o.context_length, S = o.size;
  const std::string tmp = o.out + ".tmp";
  // Any failure below leaves no output: the temporary file is removed (failures are agreed across
  // ranks before anyone throws, so the writer's collective calls stay matched).
  std::vector<std::string> all_skipped, skipped;
  int64_t base = 0, box_base = 0, max_class = -1;
  leaving_nothing_on_failure(rt, tmp, [&] {
    CollectiveWriter writer(rt, tmp);
    writer.create("/images", H5T_STD_U8LE, {hsize_t(S), hsize_t(S), 3}, job.count, 1);
    if (text) {
      // Token chunks of 8 rows: a random read stays within 8x of the bytes it needs.
      writer.create("/tokens", H5T_STD_I32LE, {hsize_t(K), hsize_t(L)}, job.count, 8);
      writer.create("/token_lengths", H5T_STD_I32LE, {hsize_t(K)}, job.count, 1024);
      writer.create("/labels", H5T_STD_I32LE, {}, job.count, 4096);
    } else {
      writer.create("/boxes", H5T_IEEE_F32LE, {4}, std::max<int64_t>(job.count * 4, 1024), 4096);
      writer.create("/box_classes", H5T_STD_I32LE, {}, std::max<int64_t>(job.count * 4, 1024), 4096);
      writer.create("/box_offsets", H5T_STD_I64LE, {}, job.count + 1, 4096);
    }

    const int64_t per_round = int64_t(o.block) * rt.size();
    const int64_t rounds = (job.count + per_round - 1) / per_round;
    nlohmann::json records = nlohmann::json::array();  // [row, name, [captions]] of this rank
    const bool tty = isatty(STDERR_FILENO);
    auto last_print = start;
    for (int64_t round = 0; round < rounds; ++round) {
      RoundRows r;
      const int64_t first = round * per_round + int64_t(rt.rank()) * o.block;
      const int64_t last = std::min(job.count, first + o.block);
      bool strict_failure = false;
      std::string fatal;
      for (int64_t i = first; i < last && fatal.empty(); ++i) {
        Decoded d;
        try {
          d = job.decode(i);
        } catch (const SkipImage& s) {
          skipped.push_back(s.reason);
          strict_failure = strict_failure || job.strict;
          continue;
        } catch (const UserError& e) {  // bad input found while decoding: fatal, agreed below
          fatal = e.what();
          continue;
        } catch (const std::exception& e) {  // anything else about this input: skipped and reported
          skipped.push_back("entry " + std::to_string(i) + ": " + e.what());
          strict_failure = strict_failure || job.strict;
          continue;
        }
        r.images.insert(r.images.end(), d.image.data, d.image.data + size_t(S) * S * 3);
        nlohmann::json caps = nlohmann::json::array();
        for (int k = 0; text && k < K; ++k) {
          const std::string& caption = d.captions[k % d.captions.size()];
          r.tokens.resize(r.tokens.size() + L);
          r.lengths.push_back(tok->encode(caption, L, r.tokens.data() + r.tokens.size() - L));
          caps.push_back(caption);
        }
        r.labels.push_back(d.label);
        for (size_t b = 0; b < d.boxes.size(); ++b) {
          r.boxes.insert(r.boxes.end(), d.boxes[b].begin(), d.boxes[b].end());
          r.box_classes.push_back(d.box_classes[b]);
          max_class = std::max<int64_t>(max_class, d.box_classes[b]);
        }
        r.box_counts.push_back(int64_t(d.boxes.size()));
        r.strings.push_back({d.name, caps});
      }
      // Every rank learns of any rank's failure in this round before anyone throws, so the writer's
      // collective calls stay matched.
      const std::string error = agree_error(rt, !fatal.empty() ? fatal : strict_failure ? "--strict: " + skipped.back() : "");
      if (!error.empty()) throw UserError(error);

      const int64_t mine = r.rows();
      const int64_t offset = base + rt.exclusive_prefix_sum(mine);
      writer.write("/images", offset, mine, H5T_NATIVE_UINT8, r.images.data());
      if (text) {
        writer.write("/tokens", offset, mine, H5T_NATIVE_INT32, r.tokens.data());
        writer.write("/token_lengths", offset, mine, H5T_NATIVE_INT32, r.lengths.data());
        writer.write("/labels", offset, mine, H5T_NATIVE_INT32, r.labels.data());
      } else {
        const int64_t my_boxes = int64_t(r.box_classes.size());
        const int64_t box_offset = box_base + rt.exclusive_prefix_sum(my_boxes);
        const int64_t round_boxes = rt.sum(my_boxes);
        writer.reserve("/boxes", box_base + round_boxes);
        writer.reserve("/box_classes", box_base + round_boxes);
        writer.write("/boxes", box_offset, my_boxes, H5T_NATIVE_FLOAT, r.boxes.data());
        writer.write("/box_classes", box_offset, my_boxes, H5T_NATIVE_INT32, r.box_classes.data());
        std::vector<int64_t> offsets;  // each row's first box
        int64_t at = box_offset;
        for (int64_t c : r.box_counts) offsets.push_back(at), at += c;
        writer.write("/box_offsets", offset, mine, H5T_NATIVE_INT64, offsets.data());
        box_base += round_boxes;
      }
      for (int64_t j = 0; j < mine; ++j) records.push_back({offset + j, r.strings[j][0], r.strings[j][1]});
      base += rt.sum(mine);
      if (rt.rank() == 0) {
        const auto now = Clock::now();
        const double elapsed = std::chrono::duration<double>(now - start).count();
        const int64_t done = std::min(job.count, (round + 1) * per_round);
        const double rate = done / std::max(elapsed, 1e-9);
        const bool final_round = round + 1 == rounds;
        if (tty || final_round || now - last_print > std::chrono::seconds(10)) {
          std::fprintf(stderr, "%s[prep] %lld/%lld inputs  %.1f images/s  ETA %.0f s%s", tty ? "\r" : "",
                       (long long)done, (long long)job.count, rate, (job.count - done) / std::max(rate, 1e-9),
                       tty && !final_round ? "" : "\n");
          last_print = now;
        }
      }
    }
    std::map<std::string, int64_t> final_rows{{"/images", base}};
    if (text) {
      final_rows.insert({{"/tokens", base}, {"/token_lengths", base}, {"/labels", base}});
    } else {
      final_rows.insert({{"/boxes", box_base}, {"/box_classes", box_base}, {"/box_offsets", base + 1}});
    }
    writer.close(final_rows);
    if (base == 0) {
      const int64_t total = rt.sum(int64_t(skipped.size()));
      const std::string example = agree_error(rt, skipped.empty() ? "" : skipped.front());  // the lowest rank's
      throw UserError("prep: no input could be read (" + std::to_string(total) + " skipped" +
                      (example.empty() ? "" : ", e.g. " + example) + ")");
    }
    max_class = rt.max(max_class);

    // Serial phase on rank 0: strings streamed from every rank, then the rest and the attributes.
    std::unique_ptr<Finisher> finisher;
    if (rt.rank() == 0) {
      finisher = std::make_unique<Finisher>(tmp);
      finisher->create_strings("/names", {hsize_t(base)});
      if (text) finisher->create_strings("/captions", {hsize_t(base), hsize_t(K)});
    }
    rt.stream_to_root(records.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace), [&](int, const std::string& data) {
      const auto j = nlohmann::json::parse(data);
      size_t i = 0;
      while (i < j.size()) {  // runs of consecutive rows: one write each
        size_t e = i + 1;
        while (e < j.size() && j[e][0].get<int64_t>() == j[e - 1][0].get<int64_t>() + 1) ++e;
        std::vector<std::string> names, caps;
        for (size_t q = i; q < e; ++q) {
          names.push_back(j[q][1].get<std::string>());
          for (const auto& c : j[q][2]) caps.push_back(c.get<std::string>());
        }
        const int64_t row = j[i][0].get<int64_t>(), n = int64_t(e - i);
        finisher->write_strings("/names", row, n, names);
        if (text) finisher->write_strings("/captions", row, n, caps);
        i = e;
      }
    });
    nlohmann::json skipped_json = skipped;
    rt.stream_to_root(skipped_json.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace), [&](int, const std::string& data) {
      for (const auto& s : nlohmann::json::parse(data)) all_skipped.push_back(s.get<std::string>());
    });
    if (rt.rank() == 0) {
      std::vector<std::string> classes = job.class_names;
      if (!text && classes.empty())
        for (int64_t c = 0; c <= max_class; ++c) classes.push_back(std::to_string(c));
      if (!classes.empty()) finisher->write_string_list("/class_names", classes);
      if (text) {
        finisher->write_tokenizer(*tok);
      } else {
        finisher->write_int64("/box_offsets", base, box_base);
      }
      finisher->finish(job.kind, job.split, base);
      finisher.reset();
      fs::rename(tmp, o.out);
    }
    rt.barrier();
  });

  PrepReport report;
  report.inputs = job.count;
  report.written = base;
  report.boxes = box_base;
  report.skipped = all_skipped;
  report.skipped_count = rt.sum(int64_t(skipped.size()));
  report.seconds = std::chrono::duration<double>(Clock::now() - start).count();
  if (!text && box_base == 0) {
    report.warnings.push_back("0 boxes: none of the " + std::to_string(base) + " images written has a box" +
                              (job.no_boxes.empty() ? "" : " (" + job.no_boxes + ")"));
    if (rt.rank() == 0) spdlog::warn("prep detection: {}", report.warnings.back());
  }
  return report;
}

}  // namespace

PrepReport prep_image_text(const comm::Runtime& rt, const PrepImageTextOptions& o) {
  check_options(o);
  check_inputs(o.images_dir, o.bands);
  if (o.captions_file.empty()) throw UserError("--captions: required");
  // Every rank reads the index (it is small next to the images) and keeps only its own entries;
  // class names come from all entries of every split, so labels agree between split files.
  std::set<std::string> classes, splits;
  std::map<int64_t, Entry> mine;
  std::vector<std::string> corpus;
  int64_t count = 0;
  const int block = o.block;
  read_index(o.captions_file, [&](Entry&& e) {
    if (!e.cls.empty()) classes.insert(e.cls);
    splits.insert(e.split);
    if (!o.split.empty() && e.split != o.split) return;
    if (rt.rank() == 0 && o.tokenizer.empty() && corpus.size() < 2000000)
      corpus.insert(corpus.end(), e.captions.begin(), e.captions.end());
    if (owns(count, block, rt.rank(), rt.size())) mine.emplace(count, std::move(e));
    ++count;
  });
  Job job;
  job.count = count;
  job.class_names.assign(classes.begin(), classes.end());
  job.split = o.split;
  job.inputs = o.captions_file + split_note(o.split, splits);
  job.strict = o.strict;
  job.tokenizer_corpus = [&] { return corpus; };
  job.decode = [&](int64_t i) {
    const Entry& e = mine.at(i);
    Decoded d;
    d.name = e.image;
    d.image = resize_crop(load_rgb(o.images_dir, e.image, o.bands), o.size);
    d.captions = e.captions;
    if (!e.cls.empty()) d.label = int32_t(std::lower_bound(job.class_names.begin(), job.class_names.end(), e.cls) -
                                          job.class_names.begin());
    return d;
  };
  return run_job(rt, o, job);
}

static void check_synthetic(const PrepSyntheticOptions& o) {
  check_options(o);
  if (o.count < 1) throw UserError("--count: must be at least 1");
  if (o.size < 32) throw UserError("--size: synthetic scenes need at least 32 pixels, got " + std::to_string(o.size));
}

PrepReport prep_synthetic_image_text(const comm::Runtime& rt, const PrepSyntheticOptions& o) {
  check_synthetic(o);
  Job job;
  job.count = o.count;
  job.class_names = synthetic_scene_classes();
  job.tokenizer_corpus = [&] {
    std::vector<std::string> corpus;
    for (int64_t i = 0; i < std::min<int64_t>(o.count, 2000); ++i)
      for (auto& c : make_synthetic_scene(o.seed, i, 32, o.captions_per_image).captions) corpus.push_back(c);
    return corpus;
  };
  job.decode = [&](int64_t i) {
    auto scene = make_synthetic_scene(o.seed, i, o.size, o.captions_per_image);
    Decoded d;
    d.image = scene.image;
    d.name = "synthetic/" + std::to_string(o.seed) + "/" + std::to_string(i);
    d.captions = std::move(scene.captions);
    d.label = scene.label;
    return d;
  };
  return run_job(rt, o, job);
}

namespace {

// Image files under `dir`, relative paths, sorted (the same list on every rank).
std::vector<std::string> list_images(const std::string& dir) {
  static const std::set<std::string> kExt{".jpg", ".jpeg", ".png", ".tif", ".tiff", ".bmp"};
  std::vector<std::string> out;
  for (const auto& e : fs::recursive_directory_iterator(dir)) {
    if (!e.is_regular_file()) continue;
    std::string ext = e.path().extension().string();
    std::transform(ext.begin(), ext.end(), ext.begin(), ::tolower);
    if (kExt.count(ext)) out.push_back(fs::relative(e.path(), dir).string());
  }
  std::sort(out.begin(), out.end());
  return out;
}

// A box as fractions of its image (centre cx, cy, size w, h) must lie in [0, 1], up to rounding:
// "cx = 1.3 is outside [0, 1]" for the first value that does not, else empty. A box whose centre
// is inside may still reach past the edge: place_box clips it.
std::string outside_unit(const std::array<double, 4>& v) {
  static const char* const kNames[] = {"cx", "cy", "w", "h"};
  for (int k = 0; k < 4; ++k)
    if (!(v[k] >= -1e-6 && v[k] <= 1 + 1e-6)) {
      std::ostringstream text;
      text << kNames[k] << " = " << v[k] << " is outside [0, 1]";
      return text.str();
    }
  return {};
}

// YOLO label file: "class cx cy w h" per line, normalised to the image; a missing file means no boxes.
// A malformed line, or values outside the image, skip the image (SkipImage naming file and line).
void read_yolo(const std::string& file, int width, int height, std::vector<std::array<float, 4>>& boxes,
               std::vector<int32_t>& classes) {
  TextLines in(file);
  if (!in) return;
  std::string line;
  int lineno = 0;
  while (in.next(line)) {
    ++lineno;
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    std::istringstream ss(line);
    double c = -1, cx, cy, w, h;
    std::string rest;
    const std::string where = file + ": line " + std::to_string(lineno) + ": ";
    if (!(ss >> c >> cx >> cy >> w >> h) || (ss >> rest) || c < 0 || c > 100000 || c != std::floor(c))
      throw SkipImage{where + "expected 'class cx cy w h' (class an integer 0..100000)"};
    const std::string outside = outside_unit({cx, cy, w, h});
    if (!outside.empty())
      throw SkipImage{where + outside + " (YOLO labels are normalised to the image" +
                      (std::max({cx, cy, w, h}) > 1 ? "; these look like pixels?)" : ")")};
    boxes.push_back({float((cx - w / 2) * width), float((cy - h / 2) * height), float((cx + w / 2) * width),
                     float((cy + h / 2) * height)});
    classes.push_back(int32_t(c));
  }
}

struct CocoImage {
  std::string file;
  std::vector<std::array<double, 4>> bboxes;  // as in the file: x, y, w, h in source pixels
  std::vector<size_t> annotations;            // each bbox's index in 'annotations', for messages
  std::vector<int32_t> classes;
};

// Box `b` of `im` as x_min, y_min, x_max, y_max on its width x height image. A box that is not on
// the image (a negative size, or its centre or size outside, the rule YOLO labels follow) skips the
// image: SkipImage naming the COCO file and the annotation.
std::array<float, 4> coco_box(const std::string& path, const CocoImage& im, size_t b, int width, int height) {
  const auto [x, y, w, h] = im.bboxes[b];
  std::ostringstream where;
  where << path << ": annotations[" << im.annotations[b] << "]: bbox [" << x << ", " << y << ", " << w << ", " << h
        << "]";
  if (w < 0 || h < 0) throw SkipImage{where.str() + " has a negative width or height"};
  const std::string outside = outside_unit({(x + w / 2) / width, (y + h / 2) / height, w / width, h / height});
  if (!outside.empty())
    throw SkipImage{where.str() + " is not on the " + std::to_string(width) + "x" + std::to_string(height) +
                    " image '" + im.file + "' (as a fraction of the image, " + outside + ")"};
  return {float(x), float(y), float(x + w), float(y + h)};
}

// Parses a COCO instances file: images in file order, categories sorted by id (class = position).
std::vector<CocoImage> read_coco(const std::string& path, std::vector<std::string>& class_names) {
  std::ifstream in(path);
  if (!in) throw DataError(path, "COCO file", "cannot open the file");
  nlohmann::json j;
  try {
    in >> j;
  } catch (const nlohmann::json::exception& e) {
    throw DataError(path, "COCO file", std::string("not valid JSON: ") + e.what());
  }
  for (const char* key : {"images", "annotations", "categories"})
    if (!j.contains(key) || !j[key].is_array()) throw DataError(path, key, "missing (expected a list)");
  std::string where = "categories";  // what is being read, for a value of the wrong type
  try {
    std::map<int64_t, std::string> categories;
    for (const auto& c : j["categories"]) {
      if (!c.contains("id") || !c.contains("name")) throw DataError(path, "categories", "each needs 'id' and 'name'");
      categories[c["id"].get<int64_t>()] = c["name"].get<std::string>();
    }
    std::map<int64_t, int32_t> class_of;
    for (const auto& [id, name] : categories) class_of[id] = int32_t(class_names.size()), class_names.push_back(name);
    std::vector<CocoImage> images;
    std::map<int64_t, size_t> index;
    where = "images";
    for (const auto& im : j["images"]) {
      if (!im.contains("id") || !im.contains("file_name"))
        throw DataError(path, "images", "each needs 'id' and 'file_name'");
      index[im["id"].get<int64_t>()] = images.size();
      images.push_back({im["file_name"].get<std::string>(), {}, {}, {}});
    }
    for (size_t n = 0; n < j["annotations"].size(); ++n) {
      const auto& a = j["annotations"][n];
      where = "annotations[" + std::to_string(n) + "]";
      if (!a.contains("image_id") || !a.contains("bbox") || !a.contains("category_id") || !a["bbox"].is_array() ||
          a["bbox"].size() != 4)
        throw DataError(path, where, "needs 'image_id', 'category_id' and 'bbox' [x, y, w, h]");
      if (a.value("iscrowd", 0) == 1) continue;  // crowd regions are not instances
      const auto im = index.find(a["image_id"].get<int64_t>());
      const auto cls = class_of.find(a["category_id"].get<int64_t>());
      if (im == index.end()) throw DataError(path, where, "image_id not in 'images'");
      if (cls == class_of.end()) throw DataError(path, where, "category_id not in 'categories'");
      const auto& b = a["bbox"];
      images[im->second].bboxes.push_back(
          {b[0].get<double>(), b[1].get<double>(), b[2].get<double>(), b[3].get<double>()});
      images[im->second].annotations.push_back(n);
      images[im->second].classes.push_back(cls->second);
    }
    return images;
  } catch (const nlohmann::json::type_error& e) {
    throw DataError(
        path, where,
        std::string("a value of the wrong type (ids are integers, names strings, bbox numbers): ") + e.what());
  }
}

}  // namespace

PrepReport prep_detection(const comm::Runtime& rt, const PrepDetectionOptions& o) {
  check_options(o);
  check_inputs(o.images_dir, o.bands);
  if (o.labels_dir.empty() == o.coco.empty()) throw UserError("prep detection: give either --labels DIR (YOLO) or --coco FILE");
  if (!o.labels_dir.empty() && !fs::is_directory(o.labels_dir))
    throw UserError("--labels: '" + o.labels_dir + "' is not a directory");
  Job job;
  job.kind = "detection";
  job.strict = o.strict;
  std::vector<CocoImage> coco;
  std::vector<std::string> files;
  if (!o.coco.empty()) {
    coco = read_coco(o.coco, job.class_names);
    job.count = int64_t(coco.size());
    job.inputs = o.coco + " (its 'images' list is empty)";
    job.no_boxes = "no annotation in " + o.coco + " but crowd regions is on one of these images";
  } else {
    files = list_images(o.images_dir);
    job.count = int64_t(files.size());
    job.inputs = o.images_dir + " (no .jpg, .jpeg, .png, .tif, .tiff or .bmp file under it)";
    if (!files.empty())
      job.no_boxes = "labels are read from <labels>/<image path>.txt, e.g. " +
                     (fs::path(o.labels_dir) / fs::path(files[0]).replace_extension(".txt")).string() +
                     "; a missing label file means no boxes";
    if (!o.class_names_file.empty()) {
      TextLines in(o.class_names_file);
      if (!in) throw DataError(o.class_names_file, "--class-names", "cannot open the file");
      std::string line;
      while (in.next(line))
        if (!line.empty() && line != "\r") job.class_names.push_back(line.back() == '\r' ? line.substr(0, line.size() - 1) : line);
    }
  }
  job.decode = [&](int64_t i) {
    Decoded d;
    d.name = coco.empty() ? files[i] : coco[i].file;
    const cv::Mat rgb = load_rgb(o.images_dir, d.name, o.bands);
    std::vector<std::array<float, 4>> boxes;
    std::vector<int32_t> classes;
    if (coco.empty()) {
      const fs::path label = fs::path(o.labels_dir) / fs::path(d.name).replace_extension(".txt");
      read_yolo(label.string(), rgb.cols, rgb.rows, boxes, classes);
    } else {
      for (size_t b = 0; b < coco[i].bboxes.size(); ++b)
        boxes.push_back(coco_box(o.coco, coco[i], b, rgb.cols, rgb.rows));
      classes = coco[i].classes;
    }
    if (!job.class_names.empty())
      for (int32_t c : classes)
        if (c >= int32_t(job.class_names.size()))
          throw SkipImage{d.name + ": class " + std::to_string(c) + " but only " + std::to_string(job.class_names.size()) +
                          " class names"};
    const Letterbox l = letterbox(rgb, o.size);
    d.image = l.image;
    for (size_t b = 0; b < boxes.size(); ++b)
      if (place_box(l, o.size, boxes[b])) d.boxes.push_back(boxes[b]), d.box_classes.push_back(classes[b]);
    return d;
  };
  return run_job(rt, o, job);
}

PrepReport prep_synthetic_detection(const comm::Runtime& rt, const PrepSyntheticOptions& o) {
  check_synthetic(o);
  Job job;
  job.kind = "detection";
  job.count = o.count;
  job.class_names = synthetic_object_classes();
  job.decode = [&](int64_t i) {
    auto scene = make_synthetic_scene(o.seed, i, o.size, 1);
    Decoded d;
    d.image = scene.image;
    d.name = "synthetic/" + std::to_string(o.seed) + "/" + std::to_string(i);
    d.boxes = std::move(scene.boxes);
    d.box_classes.assign(scene.box_classes.begin(), scene.box_classes.end());
    return d;
  };
  return run_job(rt, o, job);
}

std::string alpaca_prompt(const std::string& instruction, const std::string& input) {
  if (input.empty())
    return "Below is an instruction that describes a task. Write a response that appropriately completes the "
           "request.\n\n### Instruction:\n" + instruction + "\n\n### Response:\n";
  return "Below is an instruction that describes a task, paired with an input that provides further context. Write a "
         "response that appropriately completes the request.\n\n### Instruction:\n" + instruction +
         "\n\n### Input:\n" + input + "\n\n### Response:\n";
}


namespace {

// One document: tokens = [bos] + ids(prompt) + ids(response) + [eos]; the loss covers the response
// and eos. Plain text has an empty prompt.
struct TextRecord {
  std::string prompt, response;
};

struct TextJob {
  int64_t count = 0;
  std::function<TextRecord(int64_t)> record;  // this rank's indices only
  std::function<std::vector<std::string>()> tokenizer_corpus;
  std::string split;
  std::string inputs;  // where the records come from, for messages: "<file>[ with split 's' (...)]"
};

PrepReport run_text_job(const comm::Runtime& rt, const PrepCommon& o, const TextJob& tj) {
  const auto start = Clock::now();
  check_output(rt, o);
  check_same_inputs(rt, tj.count, {});
  if (tj.count == 0) throw UserError("prep: no input records in " + tj.inputs);
  const Tokenizer tok = shared_tokenizer(rt, o, tj.tokenizer_corpus, /*keep_whitespace=*/true);
  const std::string tmp = o.out + ".tmp";
  int64_t base = 0, tok_base = 0;
  leaving_nothing_on_failure(rt, tmp, [&] {
    CollectiveWriter writer(rt, tmp);
    writer.create("/tokens", H5T_STD_I32LE, {}, std::max<int64_t>(tj.count * 64, 65536), 65536);
    writer.create("/loss_mask", H5T_STD_U8LE, {}, std::max<int64_t>(tj.count * 64, 65536), 65536);
    writer.create("/doc_offsets", H5T_STD_I64LE, {}, tj.count + 1, 4096);
    const int64_t per_round = int64_t(o.block) * rt.size();
    const int64_t rounds = (tj.count + per_round - 1) / per_round;
    for (int64_t round = 0; round < rounds; ++round) {
      std::vector<int32_t> tokens;
      std::vector<uint8_t> mask;
      std::vector<int64_t> starts;
      const int64_t first = round * per_round + int64_t(rt.rank()) * o.block;
      std::string failure;
      try {
        for (int64_t i = first; i < std::min(tj.count, first + o.block); ++i) {
          const TextRecord r = tj.record(i);
          starts.push_back(int64_t(tokens.size()));
          if (tok.bos_id() >= 0) tokens.push_back(tok.bos_id()), mask.push_back(0);
          for (int32_t id : tok.ids(r.prompt)) tokens.push_back(id), mask.push_back(0);
          for (int32_t id : tok.ids(r.response)) tokens.push_back(id), mask.push_back(1);
          if (tok.eos_id() >= 0) tokens.push_back(tok.eos_id()), mask.push_back(1);
        }
      } catch (const std::exception& e) {
        failure = std::string("prep text: ") + e.what();
      }
      failure = agree_error(rt, failure);  // every rank throws together, or none
      if (!failure.empty()) throw UserError(failure);
      const int64_t mine = int64_t(starts.size()), my_tokens = int64_t(tokens.size());
      const int64_t offset = base + rt.exclusive_prefix_sum(mine);
      const int64_t tok_offset = tok_base + rt.exclusive_prefix_sum(my_tokens);
      const int64_t round_tokens = rt.sum(my_tokens);
      writer.reserve("/tokens", tok_base + round_tokens);
      writer.reserve("/loss_mask", tok_base + round_tokens);
      writer.write("/tokens", tok_offset, my_tokens, H5T_NATIVE_INT32, tokens.data());
      writer.write("/loss_mask", tok_offset, my_tokens, H5T_NATIVE_UINT8, mask.data());
      for (auto& s0 : starts) s0 += tok_offset;
      writer.write("/doc_offsets", offset, mine, H5T_NATIVE_INT64, starts.data());
      base += rt.sum(mine);
      tok_base += round_tokens;
    }
    writer.close({{"/tokens", tok_base}, {"/loss_mask", tok_base}, {"/doc_offsets", base + 1}});
    if (rt.rank() == 0) {
      Finisher finisher(tmp);
      finisher.write_int64("/doc_offsets", base, tok_base);
      finisher.write_tokenizer(tok);
      finisher.finish("text", tj.split, base);
      fs::rename(tmp, o.out);
    }
    rt.barrier();
  });
  PrepReport report;
  report.inputs = tj.count;
  report.written = base;
  report.tokens = tok_base;
  report.seconds = std::chrono::duration<double>(Clock::now() - start).count();
  return report;
}

}  // namespace

PrepReport prep_text(const comm::Runtime& rt, const PrepTextOptions& o) {
  check_options(o);
  if (o.jsonl.empty()) throw UserError("--jsonl: required");
  TextLines in(o.jsonl);
  if (!in) throw DataError(o.jsonl, "file", "cannot open the file");
  std::map<int64_t, TextRecord> mine;
  std::vector<std::string> corpus;
  TextJob tj;
  tj.split = o.split;
  std::set<std::string> splits;
  std::string line;
  int64_t lineno = 0;
  while (in.next(line)) {
    ++lineno;
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    const std::string where = "line " + std::to_string(lineno);
    nlohmann::json j;
    try {
      j = nlohmann::json::parse(line);
    } catch (const nlohmann::json::parse_error& e) {
      throw DataError(o.jsonl, where, std::string("not valid JSON: ") + e.what());
    }
    const auto str = [&](const char* key) -> std::string {
      if (!j.contains(key)) return {};
      if (!j[key].is_string()) throw DataError(o.jsonl, where, std::string("'") + key + "' must be a string");
      return j[key].get<std::string>();
    };
    if (!j.is_object()) throw DataError(o.jsonl, where, "expected an object");
    splits.insert(str("split"));
    if (!o.split.empty() && str("split") != o.split) continue;
    TextRecord r;
    if (j.contains("instruction")) {
      if (!j.contains("output")) throw DataError(o.jsonl, where, "an instruction record needs 'output'");
      r.prompt = alpaca_prompt(str("instruction"), str("input"));
      r.response = str("output");
    } else if (j.contains("text")) {
      r.response = str("text");
    } else {
      throw DataError(o.jsonl, where, "expected {\"instruction\", \"input\"?, \"output\"} or {\"text\"}");
    }
    if (rt.rank() == 0 && o.tokenizer.empty() && corpus.size() < 2000000) {
      if (!r.prompt.empty()) corpus.push_back(r.prompt);
      corpus.push_back(r.response);
    }
    if (owns(tj.count, o.block, rt.rank(), rt.size())) mine.emplace(tj.count, std::move(r));
    ++tj.count;
  }
  tj.inputs = o.jsonl + split_note(o.split, splits);
  tj.record = [&](int64_t i) { return mine.at(i); };
  tj.tokenizer_corpus = [&] { return corpus; };
  return run_text_job(rt, o, tj);
}

namespace {
// Deterministic instruction records: arithmetic, word reversal, counting letters.
TextRecord synthetic_text_record(uint64_t seed, int64_t index) {
  uint64_t s = splitmix64(seed ^ splitmix64(uint64_t(index)));
  const auto pick = [&](int n) { return int(next_unit(s) * n); };
  static const char* kWords[] = {"river", "forest", "harbor", "runway", "field", "bridge", "tower", "lake",
                                 "road",  "plane",  "ship",   "tank",   "roof",  "beach", "sand",  "crop"};
  TextRecord r;
  switch (pick(3)) {
    case 0: {
      const int a = pick(100), b = pick(100), op = pick(3);
      const char* sym[] = {"+", "-", "*"};
      const int v = op == 0 ? a + b : op == 1 ? a - b : a * b;
      r.prompt = alpaca_prompt("Compute the result.", std::to_string(a) + " " + sym[op] + " " + std::to_string(b));
      r.response = std::to_string(a) + " " + sym[op] + " " + std::to_string(b) + " = " + std::to_string(v);
      break;
    }
    case 1: {
      std::vector<std::string> words;
      for (int k = 0, n = 3 + pick(4); k < n; ++k) words.push_back(kWords[pick(16)]);
      std::string in, out;
      for (size_t k = 0; k < words.size(); ++k) in += (k ? " " : "") + words[k];
      for (size_t k = words.size(); k-- > 0;) out += words[k] + (k ? " " : "");
      r.prompt = alpaca_prompt("Reverse the order of the words.", in);
      r.response = out;
      break;
    }
    default: {
      const std::string w = kWords[pick(16)];
      const char letter = w[size_t(pick(int(w.size())))];
      const auto n = std::count(w.begin(), w.end(), letter);
      r.prompt = alpaca_prompt(std::string("How many times does the letter '") + letter + "' appear in the word?", w);
      r.response = std::string("The letter '") + letter + "' appears " + std::to_string(n) + (n == 1 ? " time" : " times") +
                   " in \"" + w + "\".";
    }
  }
  return r;
}
}  // namespace

PrepReport prep_synthetic_text(const comm::Runtime& rt, const PrepSyntheticOptions& o) {
  check_options(o);
  if (o.count < 1) throw UserError("--count: must be at least 1");
  TextJob tj;
  tj.count = o.count;
  tj.record = [&](int64_t i) { return synthetic_text_record(o.seed, i); };
  tj.tokenizer_corpus = [&] {
    std::vector<std::string> corpus;
    for (int64_t i = 0; i < std::min<int64_t>(o.count, 5000); ++i) {
      const auto r = synthetic_text_record(o.seed, i);
      corpus.push_back(r.prompt);
      corpus.push_back(r.response);
    }
    return corpus;
  };
  return run_text_job(rt, o, tj);
}

}  // namespace meridian::data
