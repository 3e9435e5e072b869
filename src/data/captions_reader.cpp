#include "captions_reader.h"

#include <cctype>
#include <exception>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <thread>

#include "channel.h"
#include "meridian/core/error.h"
#include "text_lines.h"

namespace fs = std::filesystem;

namespace meridian::data {

namespace {

// RFC 4180 fields of one line (quotes, "" escapes; no newlines inside fields).
std::vector<std::string> csv_fields(const std::string& line, const std::string& file, int64_t lineno) {
  std::vector<std::string> out;
  std::string cur;
  bool quoted = false, was_quoted = false;
  for (size_t i = 0; i < line.size(); ++i) {
    const char c = line[i];
    if (quoted) {
      if (c == '"' && i + 1 < line.size() && line[i + 1] == '"')
        cur += '"', ++i;
      else if (c == '"')
        quoted = false;
      else
        cur += c;
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

// A Karpathy-style caption file (dataset_ucm.json, dataset_rsicd.json, dataset_rsitmd.json, COCO's
// dataset_coco.json): {"images": [{"filename", "filepath"?, "split", "sentences": [{"raw"}, ...]}]}.
// Returns false when `file` is not one (then it is read as JSON Lines).
bool read_karpathy(const std::string& file, const std::function<void(CaptionEntry&&)>& visit) {
  std::ifstream in(file);
  char first = 0;
  while (in.get(first) && std::isspace(static_cast<unsigned char>(first))) {
  }
  if (first != '{') return false;
  in.seekg(0);
  const auto j = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object() || !j.contains("images")) return false;
  if (!j["images"].is_array()) throw DataError(file, "images", "expected a list of images (Karpathy format)");
  int64_t n = 0;
  for (const auto& im : j["images"]) {
    const std::string where = "images[" + std::to_string(n++) + "]";
    if (!im.is_object() || !im.contains("filename") || !im["filename"].is_string())
      throw DataError(file, where, "expected an object with a string 'filename'");
    CaptionEntry e;
    e.image = im["filename"].get<std::string>();
    if (im.contains("filepath") && im["filepath"].is_string() && !im["filepath"].get<std::string>().empty())
      e.image = (fs::path(im["filepath"].get<std::string>()) / e.image).string();
    if (im.contains("split")) {
      if (!im["split"].is_string()) throw DataError(file, where + ".split", "must be a string");
      e.split = im["split"].get<std::string>();
    }
    if (!im.contains("sentences") || !im["sentences"].is_array())
      throw DataError(file, where + ".sentences", "expected a list of {\"raw\": caption}");
    for (const auto& sentence : im["sentences"]) {
      if (!sentence.is_object() || !sentence.contains("raw") || !sentence["raw"].is_string())
        throw DataError(file, where + ".sentences", "expected a list of {\"raw\": caption}");
      e.captions.push_back(sentence["raw"].get<std::string>());
    }
    if (e.captions.empty()) throw DataError(file, where + ".sentences", "no caption");
    visit(std::move(e));
  }
  return true;
}

}  // namespace

void read_captions(const std::string& file, const std::function<void(CaptionEntry&&)>& visit) {
  TextLines in(file);
  if (!in) throw DataError(file, "captions file", "cannot open the file");
  const bool csv = fs::path(file).extension() == ".csv";
  if (!csv && fs::path(file).extension() != ".jsonl" && fs::path(file).extension() != ".json")
    throw DataError(file, "captions file", "expected a .jsonl or .csv file");
  if (fs::path(file).extension() == ".json" && read_karpathy(file, visit)) return;
  std::string line;
  int64_t lineno = 0;
  if (csv) {
    std::map<std::string, size_t> col;
    CaptionEntry pending;
    while (in.next(line)) {
      ++lineno;
      if (line.empty() || line == "\r") continue;
      auto f = csv_fields(line, file, lineno);
      if (col.empty()) {
        for (size_t i = 0; i < f.size(); ++i)
          if (!col.emplace(f[i], i).second)
            throw DataError(file, "line 1", "the header names the column '" + f[i] + "' twice");
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
        visit(std::move(pending)), pending = CaptionEntry{};
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
  for_each_json_line(in, file, [&](nlohmann::json& j, const std::string& where) {
    if (!j.is_object() || !j.contains("image") || !j["image"].is_string())
      throw DataError(file, where, "expected an object with a string field 'image'");
    CaptionEntry e;
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
  });
}

struct CaptionCursor::State {
  struct Item {
    int64_t index = -1;
    CaptionEntry entry;
  };
  std::string file;
  Channel<Item> ahead{4096};
  std::exception_ptr error;  // set by the reader before it closes the channel
  Item current;
  std::thread reader;
};

CaptionCursor::CaptionCursor(std::string file, std::string split) : s_(std::make_unique<State>()) {
  s_->file = std::move(file);
  s_->reader = std::thread([s = s_.get(), split = std::move(split)] {
    struct Stopped {};
    int64_t n = 0;
    try {
      read_captions(s->file, [&](CaptionEntry&& e) {
        if (!split.empty() && e.split != split) return;
        if (!s->ahead.push({n++, std::move(e)})) throw Stopped{};
      });
    } catch (const Stopped&) {
    } catch (...) {
      s->error = std::current_exception();
    }
    s->ahead.close();
  });
}

CaptionCursor::~CaptionCursor() {
  s_->ahead.close();
  s_->reader.join();
}

const CaptionEntry& CaptionCursor::at(int64_t i) {
  MERIDIAN_CHECK(i >= s_->current.index, "captions are read forward only");
  while (s_->current.index < i) {
    if (!s_->ahead.pop(s_->current)) {
      if (s_->error) std::rethrow_exception(s_->error);
      throw DataError(
          s_->file, "captions file",
          "has fewer entries than when prep counted them (entry " + std::to_string(i) + " is missing): did it change?");
    }
  }
  return s_->current.entry;
}

}  // namespace meridian::data
