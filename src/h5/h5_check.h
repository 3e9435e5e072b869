// Internal (data/, ckpt/): HDF5 error checking. HDF5 calls return a negative value on failure and push a
// message on their error stack; the macro reports rank, host, file:line, the call and that message.
#pragma once

#include <hdf5.h>

#include <string>

#include "meridian/core/error.h"

namespace meridian::h5::detail {
// The innermost message on HDF5's error stack (empty if none).
std::string h5_error_message();

// The call's result, or (negative) the error thrown. A function rather than a lambda in the macro, so
// that the call may name structured bindings (a lambda cannot capture them before C++20's clang 16).
template <typename T>
T checked(T rc, const char* call, const char* file, int line) {
  if (rc < 0) ::meridian::detail::throw_check_failure("HDF5", call, h5_error_message(), file, line);
  return rc;
}
}  // namespace meridian::h5::detail

#define MERIDIAN_H5_CHECK(call) ::meridian::h5::detail::checked((call), #call, __FILE__, __LINE__)
