// A safetensors file: the header and its tensor table (dtype, shape, offsets against the file size),
// the metadata, every tensor read.
#include "meridian/models/safetensors.h"

#include "fuzz.h"

using namespace meridian;

MERIDIAN_FUZZ_TARGET(safetensors) {
  const std::string path = fuzz::write("model.safetensors", bytes);
  models::safetensors_metadata(path);
  for (const auto& t : models::open_safetensors(path)) t.read();  // each at most the file's size
  models::load_safetensors(path);
}
