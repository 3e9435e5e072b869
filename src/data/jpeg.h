// Private to data/: the JPEG column of a dataset (docs/formats.md, image_encoding = "jpeg"). prep
// encodes each stored image (or keeps the source file's bytes when they decode to exactly the
// stored pixels); the loaders decode with libjpeg-turbo straight into the batch buffer.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <opencv2/core.hpp>
#include <string>
#include <vector>

namespace meridian::data {

// One libjpeg-turbo handle: use it from one thread at a time (each decode thread owns one).
class JpegCodec {
 public:
  JpegCodec();
  ~JpegCodec();
  JpegCodec(const JpegCodec&) = delete;
  JpegCodec& operator=(const JpegCodec&) = delete;

  // `rgb` (CV_8UC3, RGB) as a baseline JPEG of `quality` (1-100), 4:2:0 chroma as most JPEG
  // writers (and FFCV, img2dataset) use.
  std::vector<uint8_t> encode(const cv::Mat& rgb, int quality);

  // Decodes `size` bytes into `out` (height x width x 3, RGB, row-major). The image must be exactly
  // height x width: anything else, or bytes that are not a whole JPEG, throws DataError naming
  // `file`, the row and what was wrong.
  void decode(const uint8_t* data, size_t size, int height, int width, uint8_t* out, const std::string& file,
              int64_t row);

  // The bytes of the JPEG file `path` when they decode to exactly `rgb` (same size, every pixel
  // equal: no EXIF rotation, no colour conversion that OpenCV applied), else empty. prep stores such
  // a file as it is instead of re-encoding it.
  std::vector<uint8_t> same_file_bytes(const std::string& path, const cv::Mat& rgb);
  // The same for a file's bytes already read (a tar member).
  std::vector<uint8_t> same_bytes(std::vector<uint8_t> bytes, const cv::Mat& rgb);

 private:
  void* compress_ = nullptr;
  void* decompress_ = nullptr;
};

}  // namespace meridian::data
