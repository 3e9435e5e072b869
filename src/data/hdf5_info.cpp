#include "meridian/data/hdf5_info.h"

#include "h5_check.h"

namespace meridian::data {

std::string hdf5_version() {
  unsigned major = 0, minor = 0, release = 0;
  MERIDIAN_H5_CHECK(H5get_libversion(&major, &minor, &release));
  return "HDF5 " + std::to_string(major) + "." + std::to_string(minor) + "." + std::to_string(release) +
         (hdf5_is_parallel() ? " (parallel)" : " (serial)");
}

bool hdf5_is_parallel() {
#ifdef H5_HAVE_PARALLEL
  return true;
#else
  return false;
#endif
}

}  // namespace meridian::data
