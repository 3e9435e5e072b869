#include "meridian/data/hdf5_info.h"

#include "h5_check.h"

namespace meridian::data {

namespace detail {
std::string h5_error_message() {
  std::string message;
  H5Ewalk2(H5E_DEFAULT, H5E_WALK_UPWARD,
           [](unsigned, const H5E_error2_t* err, void* out) -> herr_t {
             auto* m = static_cast<std::string*>(out);
             if (m->empty() && err && err->desc) *m = std::string(err->func_name ? err->func_name : "") + ": " + err->desc;
             return 0;
           },
           &message);
  return message.empty() ? "no message on the HDF5 error stack" : message;
}
}  // namespace detail

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
