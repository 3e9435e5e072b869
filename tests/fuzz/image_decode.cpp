// Image files as prep reads them (from a directory, with band selection for multi-band TIFFs) and as
// it decodes tar members (from bytes). The first byte chooses the file name's extension and bands.
#include "../../src/data/image_decode.h"

#include "fuzz.h"

using namespace meridian;

MERIDIAN_FUZZ_TARGET(image_decode) {
  static const char* names[] = {"img.jpg", "img.png", "img.tif", "img.bmp", "img.webp", "img.ppm"};
  static const std::vector<int> bands[] = {{}, {1, 2, 3}, {4, 3, 2}, {1, 1, 1}};
  const size_t c = fuzz::take_choice(bytes, 24);
  const std::string name = names[c % 6];
  fuzz::write(name, bytes);
  try {
    data::load_rgb(fuzz::scratch(), name, bands[c / 6]);
  } catch (const data::SkipImage&) {
  }
  try {
    data::decode_rgb(bytes, name);
  } catch (const data::SkipImage&) {
  }
}
