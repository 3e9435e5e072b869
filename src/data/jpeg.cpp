#include "jpeg.h"

#include <turbojpeg.h>

#include <algorithm>
#include <cstring>
#include <fstream>
#include <iterator>

#include "meridian/core/error.h"

namespace meridian::data {

JpegCodec::JpegCodec() : compress_(tjInitCompress()), decompress_(tjInitDecompress()) {
  MERIDIAN_CHECK(compress_ && decompress_, "libjpeg-turbo: cannot create a handle");
}

JpegCodec::~JpegCodec() {
  if (compress_) tjDestroy(compress_);
  if (decompress_) tjDestroy(decompress_);
}

std::vector<uint8_t> JpegCodec::encode(const cv::Mat& rgb, int quality) {
  MERIDIAN_CHECK(rgb.type() == CV_8UC3 && rgb.isContinuous(), "encode: expected a continuous RGB image");
  unsigned char* buf = nullptr;
  unsigned long size = 0;
  const int rc = tjCompress2(compress_, rgb.data, rgb.cols, 0, rgb.rows, TJPF_RGB, &buf, &size, TJSAMP_420, quality, 0);
  if (rc != 0) {
    if (buf) tjFree(buf);
    MERIDIAN_CHECK(false, std::string("libjpeg-turbo: encoding failed: ") + tjGetErrorStr2(compress_));
  }
  std::vector<uint8_t> out(buf, buf + size);
  tjFree(buf);
  return out;
}

void JpegCodec::decode(const uint8_t* data, size_t size, int height, int width, uint8_t* out, const std::string& file,
                       int64_t row) {
  const std::string what = "/image_bytes row " + std::to_string(row);
  int w = 0, h = 0, subsampling = 0, colorspace = 0;
  if (size == 0 || tjDecompressHeader3(decompress_, data, (unsigned long)size, &w, &h, &subsampling, &colorspace) != 0)
    throw DataError(file, what, "not a JPEG (" + std::to_string(size) + " bytes): " + tjGetErrorStr2(decompress_));
  if (w != width || h != height)
    throw DataError(file, what,
                    "a " + std::to_string(w) + " x " + std::to_string(h) + " JPEG where the file says " +
                        std::to_string(width) + " x " + std::to_string(height));
  // Warnings (e.g. a truncated but decodable stream) are errors too: a sample must decode whole.
  if (tjDecompress2(decompress_, data, (unsigned long)size, out, width, 0, height, TJPF_RGB, TJFLAG_STOPONWARNING) != 0)
    throw DataError(file, what, std::string("JPEG decoding failed: ") + tjGetErrorStr2(decompress_));
}

std::vector<uint8_t> JpegCodec::same_file_bytes(const std::string& path, const cv::Mat& rgb) {
  std::string ext = path.substr(std::min(path.size(), path.find_last_of('.')));
  std::transform(ext.begin(), ext.end(), ext.begin(), [](unsigned char c) { return char(std::tolower(c)); });
  if (ext != ".jpg" && ext != ".jpeg") return {};
  std::ifstream f(path, std::ios::binary);
  if (!f) return {};
  return same_bytes({std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>()}, rgb);
}

std::vector<uint8_t> JpegCodec::same_bytes(std::vector<uint8_t> bytes, const cv::Mat& rgb) {
  int w = 0, h = 0, subsampling = 0, colorspace = 0;
  if (bytes.empty() ||
      tjDecompressHeader3(decompress_, bytes.data(), (unsigned long)bytes.size(), &w, &h, &subsampling, &colorspace) !=
          0 ||
      w != rgb.cols || h != rgb.rows)
    return {};
  std::vector<uint8_t> pixels(size_t(w) * h * 3);
  if (tjDecompress2(decompress_, bytes.data(), (unsigned long)bytes.size(), pixels.data(), w, 0, h, TJPF_RGB,
                    TJFLAG_STOPONWARNING) != 0)
    return {};
  const cv::Mat continuous = rgb.isContinuous() ? rgb : rgb.clone();
  if (std::memcmp(pixels.data(), continuous.data, pixels.size()) != 0) return {};
  return bytes;
}

}  // namespace meridian::data
