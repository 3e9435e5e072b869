// Private to data/: the captions index of prep image-text, JSONL or CSV.
#pragma once

#include <functional>
#include <string>
#include <vector>

namespace meridian::data {

struct CaptionEntry {
  std::string image;                  // relative to the images directory
  std::vector<std::string> captions;  // at least one
  std::string cls, split;             // empty when not given
};

// Calls visit(entry) for every entry of `file` in file order: .jsonl/.json, one object per line
// ({"image", "captions": [...] or "caption", "class"?, "split"?}), or .csv with a header naming the
// columns image and caption (class and split optional; rows of one image consecutive, one caption
// each). Throws DataError naming the file and line for a malformed line or another extension.
void read_captions(const std::string& file, const std::function<void(CaptionEntry&&)>& visit);

}  // namespace meridian::data
