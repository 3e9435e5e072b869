#include "image_decode.h"

#include <tiffio.h>

#include <algorithm>
#include <filesystem>
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

}  // namespace

cv::Mat decode_rgb(const std::string& bytes, const std::string& name) {
  try {
    const cv::Mat raw(1, int(bytes.size()), CV_8UC1, const_cast<char*>(bytes.data()));
    cv::Mat img = bytes.empty() ? cv::Mat() : cv::imdecode(raw, cv::IMREAD_UNCHANGED);
    if (img.empty()) throw SkipImage{"cannot decode (unsupported or corrupt image)"};
    if (img.dims != 2 || img.cols < 1 || img.rows < 1) throw SkipImage{"not a 2-D image"};
    return to_rgb8(img, {});
  } catch (const cv::Exception& ex) {
    throw SkipImage{name + ": " + ex.what()};
  } catch (SkipImage& s) {
    s.reason = name + ": " + s.reason;
    throw;
  }
}

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

}  // namespace meridian::data
