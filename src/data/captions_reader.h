// Private to data/: the captions index of prep image-text, JSONL or CSV.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace meridian::data {

struct CaptionEntry {
  std::string image;                  // relative to the images directory
  std::vector<std::string> captions;  // at least one
  std::string cls, split;             // empty when not given
};

// Calls visit(entry) for every entry of `file` in file order: .jsonl/.json, one object per line
// ({"image", "captions": [...] or "caption", "class"?, "split"?}); a .json in the Karpathy format of
// remote-sensing caption sets (UCM-captions, RSICD, RSITMD: {"images": [{"filename", "filepath"?,
// "split", "sentences": [{"raw"}]}]}); or .csv with a header naming the columns image and caption
// (class and split optional; rows of one image consecutive, one caption each). Throws DataError
// naming the file and line (or image) for a malformed entry or another extension.
void read_captions(const std::string& file, const std::function<void(CaptionEntry&&)>& visit);

// The entries of `file` (of `split` when not empty), numbered from 0 in file order, read forward by
// a thread of its own a bounded number ahead: memory holds a few thousand entries whatever the
// file's size. at(i) must be called with increasing i (prep's rounds do).
class CaptionCursor {
 public:
  CaptionCursor(std::string file, std::string split);
  ~CaptionCursor();
  CaptionCursor(const CaptionCursor&) = delete;
  CaptionCursor& operator=(const CaptionCursor&) = delete;
  // Entry i; std::logic_error for a smaller i than the last one, the reader's error if it failed,
  // DataError if the file has fewer entries (it changed since it was counted).
  const CaptionEntry& at(int64_t i);

 private:
  struct State;
  std::unique_ptr<State> s_;
};

}  // namespace meridian::data
