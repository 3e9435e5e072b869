// Private to comm/: MPI error checking. Our communicators use MPI_ERRORS_RETURN so that failures
// arrive here with rank, host, file:line, the call's text and MPI's own message.
#pragma once

#include <mpi.h>

#include <string>

#include "meridian/core/error.h"

namespace meridian::comm::detail {
inline std::string mpi_error_string(int code) {
  char text[MPI_MAX_ERROR_STRING];
  int len = 0;
  if (MPI_Error_string(code, text, &len) != MPI_SUCCESS) return "MPI error " + std::to_string(code);
  return std::string(text, len);
}
}  // namespace meridian::comm::detail

#define MERIDIAN_MPI_CHECK(call)                                                                           \
  do {                                                                                                     \
    const int meridian_mpi_rc_ = (call);                                                                   \
    if (meridian_mpi_rc_ != MPI_SUCCESS)                                                                   \
      ::meridian::detail::throw_check_failure(                                                             \
          "MPI", #call, ::meridian::comm::detail::mpi_error_string(meridian_mpi_rc_), __FILE__, __LINE__); \
  } while (0)
