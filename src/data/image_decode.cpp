#include "image_decode.h"

#include <tiffio.h>

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <memory>
#include <opencv2/imgcodecs.hpp>
#include <opencv2/imgproc.hpp>

namespace fs = std::filesystem;

namespace meridian::data {

namespace {

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

// ---- what an image's header declares, checked before anything is decoded

uint64_t be16(const std::string& b, size_t at) { return uint64_t(uint8_t(b[at])) << 8 | uint8_t(b[at + 1]); }
uint64_t le16(const std::string& b, size_t at) { return uint64_t(uint8_t(b[at + 1])) << 8 | uint8_t(b[at]); }
uint64_t be32(const std::string& b, size_t at) { return be16(b, at) << 16 | be16(b, at + 2); }
uint64_t le32(const std::string& b, size_t at) { return le16(b, at + 2) << 16 | le16(b, at); }
uint64_t le24(const std::string& b, size_t at) { return le16(b, at) | uint64_t(uint8_t(b[at + 2])) << 16; }
bool starts(const std::string& b, const char* magic, size_t at = 0) {
  return b.size() >= at + strlen(magic) && b.compare(at, strlen(magic), magic) == 0;
}

enum class Format { Unknown, Jpeg, Png, Tiff, Bmp, Webp, Pnm };

Format sniff(const std::string& b) {
  if (starts(b, "\xFF\xD8\xFF")) return Format::Jpeg;
  if (starts(b, "\x89PNG\r\n\x1A\n")) return Format::Png;
  if (starts(b, "II*") || (starts(b, "MM") && b.size() > 3 && b[2] == 0 && b[3] == 42)) return Format::Tiff;
  if (starts(b, "BM")) return Format::Bmp;
  if (starts(b, "RIFF") && starts(b, "WEBP", 8)) return Format::Webp;
  if (b.size() > 2 && b[0] == 'P' && b[1] >= '1' && b[1] <= '6' && std::isspace(uint8_t(b[2]))) return Format::Pnm;
  return Format::Unknown;
}

struct Size {
  uint64_t width = 0, height = 0;  // 0: not found in the header (the image is refused)
};

Size jpeg_size(const std::string& b) {  // the first start-of-frame marker's
  size_t at = 2;
  while (at + 9 < b.size()) {
    const uint8_t marker = uint8_t(b[at + 1]);
    if (uint8_t(b[at]) != 0xFF || marker == 0xFF || (marker >= 0xD0 && marker <= 0xD7) || marker == 0x01) {
      ++at;  // bytes between segments, fill bytes and markers without a length (libjpeg skips them too)
      continue;
    }
    if (marker >= 0xC0 && marker <= 0xCF && marker != 0xC4 && marker != 0xC8 && marker != 0xCC)
      return {be16(b, at + 7), be16(b, at + 5)};
    at += 2 + be16(b, at + 2);
  }
  return {};
}

Size webp_size(const std::string& b) {
  if (b.size() >= 30 && starts(b, "VP8 ", 12)) return {le16(b, 26) & 0x3FFF, le16(b, 28) & 0x3FFF};
  if (b.size() >= 25 && starts(b, "VP8L", 12)) {
    const uint64_t bits = le32(b, 21);
    return {(bits & 0x3FFF) + 1, ((bits >> 14) & 0x3FFF) + 1};
  }
  if (b.size() >= 30 && starts(b, "VP8X", 12)) return {le24(b, 24) + 1, le24(b, 27) + 1};
  return {};
}

Size pnm_size(const std::string& b) {  // "P6 <width> <height> ...", comments from '#' to the line's end
  uint64_t v[2] = {0, 0};
  size_t at = 2;
  for (uint64_t& x : v) {
    while (at < b.size() && (std::isspace(uint8_t(b[at])) || b[at] == '#'))
      if (b[at] == '#')
        at = std::min(b.find('\n', at), b.size());
      else
        ++at;
    if (at >= b.size() || !std::isdigit(uint8_t(b[at]))) return {};
    for (; at < b.size() && std::isdigit(uint8_t(b[at])) && x < (uint64_t(1) << 40); ++at) x = x * 10 + (b[at] - '0');
  }
  return {v[0], v[1]};
}

// TIFF from memory through libtiff's client interface.
struct TiffBytes {
  const std::string* bytes;
  toff_t at = 0;
};
tsize_t tiff_read(thandle_t h, tdata_t out, tsize_t n) {
  auto* t = static_cast<TiffBytes*>(h);
  const toff_t left = t->at < t->bytes->size() ? t->bytes->size() - t->at : 0;
  const tsize_t k = tsize_t(std::min<toff_t>(left, toff_t(std::max<tsize_t>(n, 0))));
  if (k > 0) std::memcpy(out, t->bytes->data() + t->at, size_t(k));
  t->at += toff_t(k);
  return k;
}
tsize_t tiff_write(thandle_t, tdata_t, tsize_t) { return -1; }
toff_t tiff_seek(thandle_t h, toff_t off, int whence) {
  auto* t = static_cast<TiffBytes*>(h);
  const toff_t base = whence == SEEK_CUR ? t->at : whence == SEEK_END ? t->bytes->size() : 0;
  t->at = base + off;
  return t->at;
}
int tiff_close(thandle_t) { return 0; }
toff_t tiff_size(thandle_t h) { return static_cast<TiffBytes*>(h)->bytes->size(); }
int tiff_map(thandle_t, tdata_t*, toff_t*) { return 0; }
void tiff_unmap(thandle_t, tdata_t, toff_t) {}

using TiffPtr = std::unique_ptr<TIFF, void (*)(TIFF*)>;
TiffPtr open_tiff(TiffBytes& source) {
  TIFFSetWarningHandler(nullptr);
  TIFFSetErrorHandler(nullptr);
  return TiffPtr(TIFFClientOpen("image", "rm", &source, tiff_read, tiff_write, tiff_seek, tiff_close, tiff_size,
                                tiff_map, tiff_unmap),
                 TIFFClose);
}

struct TiffLayout {
  uint32_t width = 0, height = 0;
  uint16_t bands = 1, bits = 8, planar = PLANARCONFIG_CONTIG, format = SAMPLEFORMAT_UINT;
};
TiffLayout tiff_layout(TIFF* t) {
  TiffLayout l;
  TIFFGetField(t, TIFFTAG_IMAGEWIDTH, &l.width);
  TIFFGetField(t, TIFFTAG_IMAGELENGTH, &l.height);
  TIFFGetFieldDefaulted(t, TIFFTAG_SAMPLESPERPIXEL, &l.bands);
  TIFFGetFieldDefaulted(t, TIFFTAG_BITSPERSAMPLE, &l.bits);
  TIFFGetFieldDefaulted(t, TIFFTAG_PLANARCONFIG, &l.planar);
  TIFFGetFieldDefaulted(t, TIFFTAG_SAMPLEFORMAT, &l.format);
  return l;
}

// A header that declares more pixels than the file's bytes can hold is refused before the decoder
// allocates them: decoded at more than 64 MiB and more than 2048 times the file's size. Deflate (PNG)
// compresses at most 1032:1, baseline JPEG about 500:1 at its most; a 20000 x 20000 aerial JPEG of 50
// MB decodes at 24:1. A 1 KB file that declares 30000 x 30000 pixels is a decompression bomb (Pillow's
// name for it), not an image.
void check_declared(uint64_t width, uint64_t height, uint64_t bytes_per_pixel, size_t file_bytes) {
  if (width > (uint64_t(1) << 31) || height > (uint64_t(1) << 31))
    throw SkipImage{"declares " + std::to_string(width) + " x " + std::to_string(height) + " pixels"};
  // In double: 2^31 x 2^31 pixels of a TIFF's up to 65535 bands of 16 bits overflow 64-bit integers.
  const double decoded = double(width) * double(height) * double(std::max<uint64_t>(bytes_per_pixel, 3));
  if (decoded > double(uint64_t(64) << 20) && decoded / 2048 > double(file_bytes))
    throw SkipImage{"declares " + std::to_string(width) + " x " + std::to_string(height) + " pixels (" +
                    std::to_string(uint64_t(decoded / (1 << 20))) + " MiB decoded) in " + std::to_string(file_bytes) +
                    " bytes: more than any image compresses (a decompression bomb, or a corrupt header)"};
}

// Multi-band TIFF (more than 4 bands, which OpenCV 4.6 refuses), 8 or 16-bit unsigned, strips,
// interleaved or planar, read with libtiff; bands in file order.
cv::Mat read_tiff_bands(TIFF* t, const TiffLayout& l) {
  if (TIFFIsTiled(t)) throw SkipImage{"tiled multi-band TIFF is not supported (re-save with strips)"};
  if ((l.bits != 8 && l.bits != 16) || l.format != SAMPLEFORMAT_UINT)
    throw SkipImage{"multi-band TIFF with " + std::to_string(l.bits) + "-bit samples (8 or 16-bit unsigned supported)"};
  if (l.width == 0 || l.height == 0 || l.width > INT32_MAX || l.height > INT32_MAX || l.bands > CV_CN_MAX)
    throw SkipImage{"unsupported TIFF geometry"};
  const int depth = l.bits == 8 ? CV_8U : CV_16U;
  const int h = int(l.height), w = int(l.width);
  cv::Mat img(h, w, CV_MAKETYPE(depth, l.bands));
  // A scanline as libtiff reads it must fit the row it is read into.
  const uint64_t row_bytes = uint64_t(w) * (l.planar == PLANARCONFIG_CONTIG ? l.bands : 1) * (l.bits / 8);
  if (uint64_t(TIFFScanlineSize64(t)) != row_bytes) throw SkipImage{"TIFF scanline size disagrees with its geometry"};
  if (l.planar == PLANARCONFIG_CONTIG) {
    for (int row = 0; row < h; ++row)
      if (TIFFReadScanline(t, img.ptr(row), uint32_t(row), 0) < 0) throw SkipImage{"corrupt TIFF strip"};
  } else {
    cv::Mat plane(h, w, depth);
    for (int s = 0; s < l.bands; ++s) {
      for (int row = 0; row < h; ++row)
        if (TIFFReadScanline(t, plane.ptr(row), uint32_t(row), uint16_t(s)) < 0) throw SkipImage{"corrupt TIFF strip"};
      const int from_to[] = {0, s};
      cv::mixChannels(&plane, 1, &img, 1, from_to, 1);
    }
  }
  return img;
}

// The image of `bytes` as RGB CV_8UC3 (`bands` as load_rgb's). Only JPEG, PNG, TIFF, BMP, WebP and
// PNM are decoded: OpenCV would also take OpenEXR, JPEG 2000, Radiance HDR and Sun raster by their
// signature whatever the file's name, decoders prep has no use for.
cv::Mat decode(const std::string& bytes, const std::vector<int>& bands) {
  const Format format = sniff(bytes);
  Size size;
  switch (format) {
    case Format::Unknown:
      throw SkipImage{"not a JPEG, PNG, TIFF, BMP, WebP or PNM image (by its first bytes)"};
    case Format::Jpeg:
      size = jpeg_size(bytes);
      break;
    case Format::Png:
      if (bytes.size() >= 24) size = {be32(bytes, 16), be32(bytes, 20)};
      break;
    case Format::Bmp:  // BITMAPINFOHEADER and later: 32-bit width and height (negative: top-down); OS/2's: 16-bit
      if (bytes.size() >= 26 && le32(bytes, 14) == 12)
        size = {le16(bytes, 18), le16(bytes, 20)};
      else if (bytes.size() >= 26)
        size = {le32(bytes, 18), uint64_t(std::abs(int64_t(int32_t(le32(bytes, 22)))))};
      break;
    case Format::Webp:
      size = webp_size(bytes);
      break;
    case Format::Pnm:
      size = pnm_size(bytes);
      break;
    case Format::Tiff: {
      TiffBytes source{&bytes};
      const TiffPtr t = open_tiff(source);
      if (!t) throw SkipImage{"cannot open as TIFF"};
      const TiffLayout l = tiff_layout(t.get());
      if (l.bands == 0) throw SkipImage{"TIFF with no samples per pixel"};
      check_declared(l.width, l.height, uint64_t(l.bands) * std::max(1, l.bits / 8), bytes.size());
      if (l.bands > 4) return to_rgb8(read_tiff_bands(t.get(), l), bands, false);
      size = {l.width, l.height};
      break;
    }
  }
  if (size.width == 0 || size.height == 0) throw SkipImage{"header cut short or malformed (no image size in it)"};
  check_declared(size.width, size.height, 8, bytes.size());  // at most 4 channels of 16 bits
  const cv::Mat raw(1, int(bytes.size()), CV_8UC1, const_cast<char*>(bytes.data()));
  cv::Mat img = cv::imdecode(raw, cv::IMREAD_UNCHANGED);
  if (img.empty()) throw SkipImage{"cannot decode (unsupported or corrupt image)"};
  if (img.dims != 2 || img.cols < 1 || img.rows < 1) throw SkipImage{"not a 2-D image"};
  return to_rgb8(img, bands);
}

// The bytes of the file `path` (an image: read whole, as the decoder would).
std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::error_code ec;
  if (!in || fs::is_directory(path, ec)) throw SkipImage{"file not found or unreadable"};
  std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (in.bad()) throw SkipImage{"read error"};
  return bytes;
}

// Runs `fn`, prefixing a SkipImage's reason with `name` and turning OpenCV's errors into one.
template <typename F>
cv::Mat named(const std::string& name, F&& fn) {
  try {
    return fn();
  } catch (const cv::Exception& ex) {
    throw SkipImage{name + ": " + ex.what()};
  } catch (SkipImage& s) {
    s.reason = name + ": " + s.reason;
    throw;
  }
}

}  // namespace

cv::Mat decode_rgb(const std::string& bytes, const std::string& name) {
  return named(name, [&] { return decode(bytes, {}); });
}

cv::Mat load_rgb(const std::string& dir, const std::string& name, const std::vector<int>& bands) {
  return named(name, [&] { return decode(read_file((fs::path(dir) / name).string()), bands); });
}

}  // namespace meridian::data
