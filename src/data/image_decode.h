// Private to data/: decoding the image files prep reads into 8-bit RGB (OpenCV's decoders; libtiff
// for TIFFs of more than 4 bands, which OpenCV refuses; 16-bit and float imagery stretched).
#pragma once

#include <opencv2/core.hpp>
#include <string>
#include <vector>

namespace meridian::data {

// An input prep skips (and reports) rather than fails on: unreadable image, bad label file.
struct SkipImage {
  std::string reason;
};

// `name` (relative to `dir`) as RGB CV_8UC3; `bands`: the 1-based bands to use as R, G, B (empty:
// automatic: gray is repeated, alpha dropped). JPEG, PNG, TIFF, BMP, WebP and PNM, told by their first
// bytes; a header that declares more pixels than the file could hold is refused before decoding
// (over 64 MiB decoded and 2048 times the file's size). Any failure is a SkipImage whose reason
// starts with the name.
cv::Mat load_rgb(const std::string& dir, const std::string& name, const std::vector<int>& bands);

// The same for an image file's bytes (a tar member): `name` prefixes the reason of a SkipImage.
cv::Mat decode_rgb(const std::string& bytes, const std::string& name);

}  // namespace meridian::data
