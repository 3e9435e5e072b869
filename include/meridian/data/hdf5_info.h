// What HDF5 library this build uses. Not collective.
#pragma once

#include <string>

namespace meridian::data {

// "HDF5 1.10.8 (parallel)" — the library linked at run time.
std::string hdf5_version();
// True when the HDF5 build has the MPI-IO driver (meridian requires it; CMake checks at configure time).
bool hdf5_is_parallel();

}  // namespace meridian::data
