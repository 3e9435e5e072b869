// Private to data/: webdataset tar shards as prep input (as img2dataset writes them): the members
// of one sample are consecutive in the tar and share a key, the member's path up to the first dot
// of its file name ("00042/000420017.jpg" and "00042/000420017.txt" are sample "00042/000420017",
// members "jpg" and "txt"). Read with libarchive, one member at a time: memory holds one sample.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

struct archive;  // libarchive's reader

namespace meridian::data {

// The shard files a pattern names: brace ranges expand as in webdataset ("shards/{00000..00099}.tar",
// zero-padded to the width written; several ranges multiply); a path without braces is itself.
// UserError for a malformed range; files are not checked here.
std::vector<std::string> expand_shards(const std::string& pattern);

struct WdsSample {
  std::string key;
  std::map<std::string, std::string> members;  // extension (lower case, without the dot) -> bytes
};

class ShardReader {
 public:
  // Opens `path` (tar, optionally compressed: libarchive detects the filter). A missing or
  // unreadable file throws SkipImage naming it. `text_only`: only txt and json members are read,
  // the others skipped unread (a tokenizer's sample of the captions).
  explicit ShardReader(const std::string& path, bool text_only = false);
  ~ShardReader();
  ShardReader(const ShardReader&) = delete;
  ShardReader& operator=(const ShardReader&) = delete;

  // The next sample; false at the end. A damaged archive (truncated, bad header) throws SkipImage
  // naming the shard and the samples read so far; the reader is at its end after that.
  bool next(WdsSample& sample);
  int64_t samples() const { return samples_; }

 private:
  bool read_member(std::string& key, std::string& ext, std::string& data);  // false at the end
  std::string path_;
  ::archive* a_ = nullptr;
  bool text_only_ = false, done_ = false, pending_ = false;
  std::string pending_key_, pending_ext_, pending_data_;
  int64_t samples_ = 0;
};

// The caption(s) of a sample: `txt` (the whole text, trimmed), else `json` with "caption" (a
// string) or "captions" (a list of strings). Empty when it has none.
std::vector<std::string> sample_captions(const WdsSample& sample);

// The image member's extension (jpg, jpeg, png, webp, tif, tiff, bmp; the first present), or empty.
std::string image_member(const WdsSample& sample);

}  // namespace meridian::data
