#include "webdataset.h"

#include <archive.h>
#include <archive_entry.h>

#include <algorithm>
#include <nlohmann/json.hpp>

#include "image_decode.h"
#include "meridian/core/error.h"

namespace meridian::data {

std::vector<std::string> expand_shards(const std::string& pattern) {
  const size_t open = pattern.find('{');
  if (open == std::string::npos) return {pattern};
  const size_t close = pattern.find('}', open);
  const size_t dots = pattern.find("..", open);
  const auto bad = [&](const std::string& why) {
    return UserError("--webdataset: '" + pattern + "': " + why + " (expected e.g. shards/{00000..00099}.tar)");
  };
  if (close == std::string::npos || dots == std::string::npos || dots > close) throw bad("a brace without a range");
  const std::string lo = pattern.substr(open + 1, dots - open - 1), hi = pattern.substr(dots + 2, close - dots - 2);
  const auto digits = [](const std::string& s) {
    return !s.empty() && s.size() < 19 && std::all_of(s.begin(), s.end(), ::isdigit);
  };
  if (!digits(lo) || !digits(hi)) throw bad("the range must be two numbers");
  const int64_t a = std::stoll(lo), b = std::stoll(hi);
  if (b < a) throw bad("the range goes backwards");
  if (b - a >= 10000000) throw bad("more than 10 million shards");
  std::vector<std::string> out;
  for (int64_t i = a; i <= b; ++i) {
    std::string n = std::to_string(i);
    if (n.size() < lo.size()) n.insert(0, lo.size() - n.size(), '0');
    for (const auto& rest : expand_shards(pattern.substr(close + 1))) out.push_back(pattern.substr(0, open) + n + rest);
  }
  return out;
}

ShardReader::ShardReader(const std::string& path, bool text_only)
    : path_(path), a_(archive_read_new()), text_only_(text_only) {
  MERIDIAN_CHECK(a_, "libarchive: cannot allocate a reader");
  archive_read_support_format_tar(a_);
  archive_read_support_filter_all(a_);
  if (archive_read_open_filename(a_, path.c_str(), 1 << 20) != ARCHIVE_OK) {
    const std::string why = archive_error_string(a_) ? archive_error_string(a_) : "cannot open";
    archive_read_free(a_);
    a_ = nullptr;
    throw SkipImage{path + ": " + why};
  }
}

ShardReader::~ShardReader() {
  if (a_) archive_read_free(a_);
}

bool ShardReader::read_member(std::string& key, std::string& ext, std::string& data) {
  for (;;) {
    archive_entry* entry = nullptr;
    const int r = archive_read_next_header(a_, &entry);
    if (r == ARCHIVE_EOF) return false;
    if (r < ARCHIVE_WARN) {
      done_ = true;
      throw SkipImage{path_ + ": damaged archive after " + std::to_string(samples_) +
                      " samples, the rest of the shard is skipped: " +
                      (archive_error_string(a_) ? archive_error_string(a_) : "unknown error")};
    }
    if (archive_entry_filetype(entry) != AE_IFREG) continue;
    const std::string name = archive_entry_pathname(entry) ? archive_entry_pathname(entry) : "";
    const size_t slash = name.find_last_of('/');
    const size_t dot = name.find('.', slash == std::string::npos ? 0 : slash + 1);
    if (dot == std::string::npos || dot == 0 || name.compare(slash + 1, 1, ".") == 0) continue;  // no key.ext
    key = name.substr(0, dot);
    ext = name.substr(dot + 1);
    std::transform(ext.begin(), ext.end(), ext.begin(), [](unsigned char c) { return char(std::tolower(c)); });
    if (text_only_ && ext != "txt" && ext != "json") {
      data.clear();
      return true;
    }
    const int64_t size = archive_entry_size(entry);
    data.resize(size_t(std::max<int64_t>(size, 0)));
    int64_t got = 0;
    while (got < size) {
      const la_ssize_t n = archive_read_data(a_, data.data() + got, size_t(size - got));
      if (n <= 0) {
        done_ = true;
        throw SkipImage{path_ + ": member " + name + " is cut short after " + std::to_string(got) + " of " +
                        std::to_string(size) + " bytes (a truncated shard?); the rest of the shard is skipped"};
      }
      got += n;
    }
    return true;
  }
}

bool ShardReader::next(WdsSample& sample) {
  if (done_) return false;
  sample.key.clear();
  sample.members.clear();
  if (pending_) {
    sample.key = pending_key_;
    sample.members[pending_ext_] = std::move(pending_data_);
    pending_ = false;
  }
  std::string key, ext, data;
  while (read_member(key, ext, data)) {
    if (sample.key.empty()) sample.key = key;
    if (key != sample.key) {  // the first member of the next sample
      pending_ = true;
      pending_key_ = std::move(key), pending_ext_ = std::move(ext), pending_data_ = std::move(data);
      ++samples_;
      return true;
    }
    sample.members[ext] = std::move(data);
  }
  done_ = true;
  if (sample.key.empty()) return false;
  ++samples_;
  return true;
}

std::vector<std::string> sample_captions(const WdsSample& sample) {
  const auto trim = [](std::string s) {
    const auto space = [](unsigned char c) { return std::isspace(c) != 0; };
    s.erase(s.begin(), std::find_if_not(s.begin(), s.end(), space));
    s.erase(std::find_if_not(s.rbegin(), s.rend(), space).base(), s.end());
    return s;
  };
  if (const auto it = sample.members.find("txt"); it != sample.members.end()) {
    const std::string text = trim(it->second);
    if (!text.empty()) return {text};
  }
  if (const auto it = sample.members.find("json"); it != sample.members.end()) {
    const auto j = nlohmann::json::parse(it->second, nullptr, /*allow_exceptions=*/false);
    std::vector<std::string> out;
    if (j.is_object() && j.contains("caption") && j["caption"].is_string()) out.push_back(trim(j["caption"]));
    if (j.is_object() && j.contains("captions") && j["captions"].is_array())
      for (const auto& c : j["captions"])
        if (c.is_string()) out.push_back(trim(c.get<std::string>()));
    out.erase(std::remove(out.begin(), out.end(), std::string()), out.end());
    return out;
  }
  return {};
}

std::string image_member(const WdsSample& sample) {
  for (const char* ext : {"jpg", "jpeg", "png", "webp", "tif", "tiff", "bmp"})
    if (sample.members.count(ext)) return ext;
  return "";
}

}  // namespace meridian::data
