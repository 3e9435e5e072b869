// Shared by every *_mpi_test.cpp: the process's Runtime, created by tests/mpi_test_main.cpp.
#pragma once

#include <string>

#include "meridian/comm/runtime.h"

namespace meridian::test {
comm::Runtime& runtime();

// Collective: a new, empty directory made by rank 0 under the system's temporary directory
// (PREFIX_XXXXXX) and named to every rank (under mpirun in these tests the ranks share one host).
// Every one is removed after the last test, once all ranks are past it; a test may remove its own
// earlier.
std::string shared_temp_dir(const std::string& prefix);
}  // namespace meridian::test
