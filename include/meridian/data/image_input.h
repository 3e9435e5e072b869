// Image geometry shared by prep (writing datasets) and predict (running a detector on image files):
// the image files of a directory, the square crop of image-text datasets and the letterbox of
// detection datasets. OpenCV only; pure functions of their arguments.
#pragma once

#include <ATen/core/Tensor.h>

#include <array>
#include <opencv2/core.hpp>
#include <string>
#include <vector>

namespace meridian::data {

// Image files (.jpg, .jpeg, .png, .tif, .tiff, .bmp, .ppm, any case) under `dir`, recursively: paths
// relative to `dir`, sorted (the same list on every rank that sees the same directory). A directory
// that is `skip` (compared canonically; empty: none), e.g. a previous run's outputs, is not entered.
// Throws std::filesystem::filesystem_error when `dir` cannot be listed.
std::vector<std::string> list_images(const std::string& dir, const std::string& skip = "");

// What a command's --images names: one image file (`dir` its folder, `names` its file name) or a
// directory's images (list_images, `skip` not entered). UserError "<command>: --images <path> ..."
// for neither, an unlistable directory or one without images.
struct ImageInputs {
  std::string dir;
  std::vector<std::string> names;  // relative to dir, sorted
};
ImageInputs image_inputs(const std::string& path, const std::string& command, const std::string& skip = "");

// Shorter side to `size`, then the central size x size square (no distortion), as image-text
// datasets store images. `img` any type OpenCV resizes; the result is owned.
cv::Mat resize_crop(const cv::Mat& img, int size);

// Longer side to `size`, centred on a size x size canvas of gray 114 (YOLO's letterbox): nothing is
// cut, so every box survives. Box coordinates map as x' = x * scale + pad_x (and back as
// x = (x' - pad_x) / scale).
struct Letterbox {
  cv::Mat image;  // [size, size] CV_8UC3, continuous, owned
  double scale = 1;
  int pad_x = 0, pad_y = 0;
};
// `rgb` CV_8UC3 of any size; detection datasets (prep) and predict letterbox with it.
Letterbox letterbox(const cv::Mat& rgb, int size);
// The scale and padding letterbox() uses for a width x height image (no pixels).
Letterbox letterbox_geometry(int width, int height, int size);
// A box (x_min, y_min, x_max, y_max) in letterboxed pixels back in the original width x height
// image's pixels (place_box undone), clipped to it.
std::array<float, 4> unplace_box(const Letterbox& l, int width, int height, const std::array<float, 4>& box);

// Source-pixel box (x_min, y_min, x_max, y_max) into the letterboxed image `l` of `size` pixels,
// clipped to it; false when nothing of it is left.
bool place_box(const Letterbox& l, int size, std::array<float, 4>& box);

// How a model's image processor turns a file into pixels: Hugging Face's preprocessor_config.json
// fields (SiglipImageProcessor): size {height, width}, resample (PIL's codes: 0 nearest, 2 bilinear,
// 3 bicubic), rescale_factor, image_mean, image_std. Defaults: SigLIP's (bicubic, 1/255, 0.5, 0.5).
struct ImageProcessing {
  int height = 224, width = 224, resample = 3;
  double rescale = 1.0 / 255;
  std::array<double, 3> mean{0.5, 0.5, 0.5}, std{0.5, 0.5, 0.5};
  // From <dir>/preprocessor_config.json; DataError naming the file and field for a malformed or
  // unsupported value (do_resize, do_rescale or do_normalize false; a crop; another resample).
  static ImageProcessing from_hf_file(const std::string& path);
};

// The images `names` (relative to `dir`) as float32 [N, 3, height, width]: decoded as RGB, resized to
// height x width without a crop as SiglipImageProcessor does (torchvision's resize of the uint8 image
// with the resample filter, antialiased for bilinear and bicubic: the same ATen kernels), then
// (value * rescale - mean) / std per channel. DataError naming the file when one cannot be decoded.
at::Tensor model_pixels(const std::string& dir, const std::vector<std::string>& names, const ImageProcessing& p);

}  // namespace meridian::data
