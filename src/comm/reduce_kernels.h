// Private to comm/: element-wise sums the MPI backend does itself (the ring collectives and the
// bf16/fp16 MPI_Op), written as plain loops the compiler vectorises.
//
// bfloat16 is widened to float by a shift, summed in float and rounded to nearest even once, with
// integer operations only (c10::BFloat16's conversions branch on NaN per element, which keeps GCC
// from vectorising the loop: 1.9 GB/s against 3.4 GB/s for float32 at 16 MiB before this).
#pragma once

#include <c10/core/ScalarType.h>

#include <cstdint>

namespace meridian::comm::detail {

// dst[i] = dst[i] + src[i] for i < count. Float, double, bfloat16 and half (as c10 rounds them).
// Precondition: has_sum_kernel(type).
void sum_into(at::ScalarType type, void* dst, const void* src, int64_t count);
bool has_sum_kernel(at::ScalarType type);

// The bfloat16 kernel on its own (the MPI_Op for bf16 sums calls it).
void sum_into_bf16(uint16_t* dst, const uint16_t* src, int64_t count);

}  // namespace meridian::comm::detail
