// Internal (data/, ckpt/): HDF5 error checking. HDF5 calls return a negative value on failure and push a
// message on their error stack; the macro reports rank, host, file:line, the call and that message.
#pragma once

#include <hdf5.h>

#include <string>

#include "meridian/core/error.h"

namespace meridian::h5::detail {
// The innermost message on HDF5's error stack (empty if none).
std::string h5_error_message();
}  // namespace meridian::h5::detail

#define MERIDIAN_H5_CHECK(call)                                                                                    \
  ([&]() {                                                                                                         \
    const auto meridian_h5_rc_ = (call);                                                                           \
    if (meridian_h5_rc_ < 0)                                                                                       \
      ::meridian::detail::throw_check_failure("HDF5", #call, ::meridian::h5::detail::h5_error_message(), __FILE__, \
                                              __LINE__);                                                           \
    return meridian_h5_rc_;                                                                                        \
  }())
