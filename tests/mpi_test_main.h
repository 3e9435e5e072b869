// Shared by every *_mpi_test.cpp: the process's Runtime, created by tests/mpi_test_main.cpp.
#pragma once

#include "meridian/comm/runtime.h"

namespace meridian::test {
comm::Runtime& runtime();
}
