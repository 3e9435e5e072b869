#include "meridian/nn/shape_only.h"

#include <malloc.h>
#include <sys/mman.h>

#include <cerrno>
#include <cstring>

#include "meridian/core/error.h"

namespace meridian::nn {

at::Tensor shape_only(at::IntArrayRef sizes, at::ScalarType dtype) {
  int64_t numel = 1;
  for (const int64_t s : sizes) numel *= s;
  if (numel == 0) return at::empty(sizes, at::TensorOptions().dtype(dtype));
  const size_t bytes = size_t(numel) * at::elementSize(dtype);
  void* data = mmap(nullptr, bytes, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (data == MAP_FAILED)
    throw SystemError("shape_only: mmap of " + std::to_string(bytes) + " bytes: " + std::strerror(errno));
  return at::from_blob(
      data, sizes, [bytes](void* p) { munmap(p, bytes); }, at::TensorOptions().dtype(dtype));
}

void drop_parameter_values(torch::nn::Module& module) {
  for (auto& p : module.parameters(/*recurse=*/true)) p.set_data(shape_only(p.sizes(), p.scalar_type()));
#ifdef __GLIBC__
  malloc_trim(0);  // the freed values' heap pages back to the system, not kept for the next block
#endif
}

}  // namespace meridian::nn
